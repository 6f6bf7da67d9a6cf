"""Schema migrations: numbered SQL files applied in order, once, under an advisory lock.

Two nodes starting at once both call :func:`migrate`; the transaction-scoped advisory lock makes
the second wait for the first and then find nothing left to apply, so migrating is idempotent.

Release 0.2.0 starts the numbering again from one baseline (``0001_baseline``): a database
migrated by the pre-release 0.1.0 (whose version 1 was ``initial``) is refused with a clear
error rather than taken for up to date.

A schema newer than this code's migrations is accepted as long as every migration beyond them
is additive: during a rolling deploy the nodes of the previous release run beside the new ones
on the new schema. A migration that is not additive says so in its header, with the line
:data:`BREAKS_OLDER_NODES`; the runner records it (``pgpulse_migrations.breaks_older_nodes``,
migration 0019), and a node or command of any release from 0019 on refuses a database where
such a migration is beyond the newest it knows (:class:`~pgpulse.core.errors.SchemaTooNew`). The
releases before 0019 do not read the record: nothing stops them.
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from pgpulse.core.errors import PreReleaseSchema, SchemaMissing, SchemaTooNew
from pgpulse.db.database import describe
from pgpulse.sql import migration_files

log = logging.getLogger(__name__)

#: Advisory lock key serialising migrations ("PMIG").
MIGRATION_LOCK_KEY = 0x504D4947

#: The header line by which a migration says that nodes of older releases cannot run on the
#: schema it leaves (it drops, renames or changes the meaning of something they use): once it is
#: applied, every node and command that does not know it refuses to start.
BREAKS_OLDER_NODES = "-- pgpulse: nodes before this migration must stop"

#: The migration that adds ``pgpulse_migrations.breaks_older_nodes``: the first that can be
#: marked with :data:`BREAKS_OLDER_NODES` (the runner records the mark in that column).
FIRST_MARKABLE = 19

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS pgpulse_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


def breaks_older_nodes(sql: str, filename: str = "migration") -> bool:
    """Whether a migration's header (its comment lines before its first statement) carries the
    line :data:`BREAKS_OLDER_NODES`. A header line of another ``-- pgpulse:`` directive is
    refused, so that a misspelt marker is not silently taken for a comment.

    Raises:
        ValueError: a header line starts with ``-- pgpulse:`` and is not the marker.
    """
    for line in sql.splitlines():
        text = line.strip()
        if not text:
            continue
        if not text.startswith("--"):
            return False
        if text.startswith("-- pgpulse:"):
            if text == BREAKS_OLDER_NODES:
                return True
            raise ValueError(
                f"{filename}: unknown directive {text!r} (the one Pulse knows is "
                f"{BREAKS_OLDER_NODES!r})"
            )
    return False


def marked_versions(files: list[tuple[int, str, str]] | None = None) -> set[int]:
    """The versions of ``files`` (default: this Pulse's migrations) that break older nodes.

    Raises:
        ValueError: a header carries an unknown ``-- pgpulse:`` directive, or a migration
            before :data:`FIRST_MARKABLE` carries the marker (nothing could record it).
    """
    marked = set()
    for version, name, sql in migration_files() if files is None else files:
        if breaks_older_nodes(sql, f"{version:04d}_{name}.sql"):
            if version < FIRST_MARKABLE:
                raise ValueError(
                    f"{version:04d}_{name}.sql cannot break older nodes: only migrations from "
                    f"{FIRST_MARKABLE:04d} on are recorded as doing so"
                )
            marked.add(version)
    return marked


async def migrate(conn: psycopg.AsyncConnection[Any], *, target: int | None = None) -> list[int]:
    """Apply every pending migration in one transaction.

    A schema newer than this code's migrations is accepted, applying nothing, unless a
    migration beyond them breaks older nodes (:func:`refuse_newer_schema`).

    Args:
        conn: an open connection in autocommit mode or idle outside a transaction.
        target: apply the migrations up to this version only (an upgrade test's previous
            release); ``None``: all of them.

    Returns:
        The versions applied by this call, ascending (empty when already up to date).

    Raises:
        psycopg.Error: a migration failed; the transaction is rolled back and nothing changes.
        PreReleaseSchema: the database was migrated by Pulse 0.1.0; nothing changes.
        SchemaTooNew: the database is at a schema this Pulse cannot run on; nothing changes.
    """
    applied_now: list[int] = []
    files = migration_files()
    marked = marked_versions(files)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        await conn.execute(_CREATE_TABLE)
        cur = conn.cursor(row_factory=tuple_row)
        await cur.execute("SELECT version, name FROM pgpulse_migrations")
        names: dict[int, str] = dict(await cur.fetchall())
        if 1 in names and names[1] != files[0][1]:
            raise PreReleaseSchema(
                f"the database holds Pulse's pre-release schema (migration 1 is {names[1]!r}, "
                f"not {files[0][1]!r}); 0.2.0 starts from a new baseline: use a new database, "
                "or drop this one's pgpulse_* and scheduled_jobs/job_* tables",
                field="database",
                value=names[1],
            )
        if names and max(names) > files[-1][0]:
            await refuse_newer_schema(conn, max(names), files[-1][0])
        done = set(names)
        for version, name, sql in files:
            if version in done or (target is not None and version > target):
                continue
            log.info(
                "applying migration %04d_%s",
                version,
                name,
                extra={"action": "migration_applied", "version": version},
            )
            await conn.execute(sql)
            await conn.execute(
                "INSERT INTO pgpulse_migrations (version, name) VALUES (%s, %s)", (version, name)
            )
            if version in marked:
                await conn.execute(
                    "UPDATE pgpulse_migrations SET breaks_older_nodes = true WHERE version = %s",
                    (version,),
                )
            applied_now.append(version)
    return applied_now


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """Return the highest applied migration version, or 0 on a database Pulse never touched."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute("SELECT to_regclass('pgpulse_migrations') IS NOT NULL")
    row = await cur.fetchone()
    if not row or not row[0]:
        return 0
    await cur.execute("SELECT coalesce(max(version), 0) FROM pgpulse_migrations")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def breaking_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """The highest applied migration that breaks older nodes, or 0: none, or a schema before
    0019 (which has no record of it)."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(
        "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('pgpulse_migrations')"
        " AND attname = 'breaks_older_nodes' AND NOT attisdropped)"
    )
    row = await cur.fetchone()
    if not row or not row[0]:
        return 0
    await cur.execute(
        "SELECT coalesce(max(version) FILTER (WHERE breaks_older_nodes), 0) FROM pgpulse_migrations"
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def refuse_newer_schema(conn: psycopg.AsyncConnection[Any], found: int, latest: int) -> None:
    """Refuse a database at schema ``found`` when one of its migrations beyond ``latest`` (the
    newest this code knows) breaks older nodes. A schema merely newer, whose migrations beyond
    ``latest`` are all additive, is accepted: a rolling deploy runs the previous release's nodes
    on the new schema until they are replaced.

    Raises:
        SchemaTooNew: one line naming the database (never a password), the version found, the
            newest this code knows and what to do (upgrade this node); nothing is written.
    """
    if found <= latest:
        return
    breaking = await breaking_version(conn)
    if breaking <= latest:
        return
    __version__ = importlib.metadata.version("pgpulse")

    raise SchemaTooNew(
        f"{describe(conn.info)}: this node's release (pgpulse {__version__}) knows migrations "
        f"up to {latest}; the database is at {found}, which needs a newer Pulse (its migration "
        f"{breaking} stops the nodes of older releases): upgrade this node",
        field="database",
        value=found,
    )


async def require_schema(conn: psycopg.AsyncConnection[Any]) -> None:
    """Refuse a database whose schema is older than this Pulse's migrations (or absent), or
    newer with a migration that breaks older nodes, and write nothing: what a command that does
    not migrate checks first. A newer schema whose migrations beyond this code's are all
    additive is accepted (rolling deploys depend on it).

    Raises:
        SchemaMissing: one line naming the database (never a password), the version found and
            what to run (``pgpulse migrate``, or start a node: nodes migrate at start).
        SchemaTooNew: see :func:`refuse_newer_schema`.
    """
    found = await schema_version(conn)
    latest = migration_files()[-1][0]
    if found >= latest:
        await refuse_newer_schema(conn, found, latest)
        return
    where = describe(conn.info)
    has = "has no Pulse schema" if found == 0 else f"has Pulse schema {found}, not {latest}"
    raise SchemaMissing(
        f"{where} {has}: run `pgpulse migrate`, or start a node (nodes migrate at start)",
        field="database",
        value=found,
    )
