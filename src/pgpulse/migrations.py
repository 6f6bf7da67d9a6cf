"""Schema migrations: numbered SQL files applied in order, once, under an advisory lock.

Two nodes starting at once both call :func:`migrate`; the transaction-scoped advisory lock makes
the second wait for the first and then find nothing left to apply, so migrating is idempotent.

Release 0.2.0 starts the numbering again from one baseline (``0001_baseline``): a database
migrated by the pre-release 0.1.0 (whose version 1 was ``initial``) is refused with a clear
error rather than taken for up to date.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from pgpulse.database import describe
from pgpulse.errors import PreReleaseSchema, SchemaMissing
from pgpulse.sql import migration_files

log = logging.getLogger(__name__)

#: Advisory lock key serialising migrations ("PMIG").
MIGRATION_LOCK_KEY = 0x504D4947

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS pgpulse_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def migrate(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    """Apply every pending migration in one transaction.

    Args:
        conn: an open connection in autocommit mode or idle outside a transaction.

    Returns:
        The versions applied by this call, ascending (empty when already up to date).

    Raises:
        psycopg.Error: a migration failed; the transaction is rolled back and nothing changes.
        PreReleaseSchema: the database was migrated by Pulse 0.1.0; nothing changes.
    """
    applied_now: list[int] = []
    files = migration_files()
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
        done = set(names)
        for version, name, sql in files:
            if version in done:
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


async def require_schema(conn: psycopg.AsyncConnection[Any]) -> None:
    """Refuse a database whose schema is older than this Pulse's migrations (or absent), and
    write nothing: what a command that does not migrate checks first.

    Raises:
        SchemaMissing: one line naming the database (never a password), the version found and
            what to run (``pgpulse migrate``, or start a node: nodes migrate at start).
    """
    found = await schema_version(conn)
    latest = migration_files()[-1][0]
    if found >= latest:
        return
    where = describe(conn.info)
    has = "has no Pulse schema" if found == 0 else f"has Pulse schema {found}, not {latest}"
    raise SchemaMissing(
        f"{where} {has}: run `pgpulse migrate`, or start a node (nodes migrate at start)",
        field="database",
        value=found,
    )
