"""A schema newer than the code: a migration whose header carries the marker
``-- pgpulse: nodes before this migration must stop`` is recorded as breaking older nodes, and a
node or command whose newest migration is older than such a recorded version refuses to run, in
one line, writing nothing; a newer schema without one is accepted (rolling deploys). "Newer" is
a row of ``pgpulse_migrations`` beyond this code's migrations, as a later release writes it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from helpers import pgpulse
from pgpulse import App
from pgpulse.core.errors import SchemaTooNew
from pgpulse.db.migrations import (
    BREAKS_OLDER_NODES,
    breaks_older_nodes,
    marked_versions,
    migrate,
    require_schema,
)
from pgpulse.sql import migration_files

LATEST = migration_files()[-1][0]


def test_the_marker_is_read_from_a_migrations_header_only() -> None:
    marked = f"-- Drop the old column.\n{BREAKS_OLDER_NODES}\n\nALTER TABLE t DROP COLUMN c;\n"
    assert breaks_older_nodes(marked)
    assert breaks_older_nodes(f"\n  {BREAKS_OLDER_NODES}   \nSELECT 1;")
    assert not breaks_older_nodes("-- Additive.\nALTER TABLE t ADD COLUMN c int;\n")
    # after the first statement it is a comment like any other
    assert not breaks_older_nodes(f"ALTER TABLE t ADD COLUMN c int;\n{BREAKS_OLDER_NODES}\n")
    # a misspelt directive is refused, not taken for a comment
    with pytest.raises(ValueError, match=r"0020_x\.sql: unknown directive '-- pgpulse: nodes"):
        breaks_older_nodes("-- pgpulse: nodes before this must stop\nSELECT 1;", "0020_x.sql")


def test_only_0023_of_this_release_breaks_older_nodes_and_none_before_0019_can() -> None:
    """0023 partitions the history: an older node's run writes name a key it no longer has."""
    assert marked_versions() == {23}
    files = migration_files()
    early = [(18, "drop", f"{BREAKS_OLDER_NODES}\nSELECT 1;")]
    with pytest.raises(ValueError, match=r"0018_drop\.sql cannot break older nodes"):
        marked_versions(early)
    assert marked_versions([*files, (LATEST + 1, "drop", f"{BREAKS_OLDER_NODES}\nSELECT 1;")]) == {
        23,
        LATEST + 1,
    }


async def test_the_runner_records_which_applied_migrations_break_older_nodes(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later release's marked migration, applied by the runner, is recorded as such."""
    later = [
        *migration_files(),
        (LATEST + 1, "drop_old", f"-- Drops what older nodes read.\n{BREAKS_OLDER_NODES}\n"),
        (LATEST + 2, "additive", "ALTER TABLE pgpulse_jobs ADD COLUMN later int;"),
    ]
    monkeypatch.setattr("pgpulse.db.migrations.migration_files", lambda: later)
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        assert await migrate(conn) == list(range(1, LATEST + 3))
        cur = await conn.execute(
            "SELECT version FROM pgpulse_migrations WHERE breaks_older_nodes ORDER BY version"
        )
        assert await cur.fetchall() == [(23,), (LATEST + 1,)]


def newer(db: Any, *rows: tuple[int, bool]) -> None:
    """Record migrations ``(version, breaks_older_nodes)`` as a later release's runner would."""
    for version, breaks in rows:
        db.execute(
            "INSERT INTO pgpulse_migrations (version, name, breaks_older_nodes) "
            "VALUES (%s, 'later', %s)",
            (version, breaks),
        )


def snapshot(db: Any) -> tuple[list[Any], int, list[Any]]:
    """What a refused node or command must not change."""
    migrations = db.execute("SELECT * FROM pgpulse_migrations ORDER BY version").fetchall()
    nodes = db.execute("SELECT count(*) AS n FROM pgpulse_nodes").fetchone()["n"]
    tables = db.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
    ).fetchall()
    return migrations, nodes, tables


def refusal(dsn: str, found: int, breaking: int) -> tuple[str, str]:
    """The end of the refusal's line, and its start (where the database is)."""
    dbname = conninfo.conninfo_to_dict(dsn)["dbname"]
    return (
        f"knows migrations up to {LATEST}; the database is at {found}, which needs a newer Pulse "
        f"(its migration {breaking} stops the nodes of older releases): upgrade this node"
    ), f"database '{dbname}' on "


async def test_a_marked_migration_beyond_this_code_is_refused_changing_nothing(
    dsn: str, db: Any
) -> None:
    newer(db, (LATEST + 1, False), (LATEST + 2, True), (LATEST + 3, False))
    before = snapshot(db)
    tail, where = refusal(dsn, LATEST + 3, LATEST + 2)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.raises(SchemaTooNew) as refused:
            await require_schema(conn)
        assert (refused.value.field, refused.value.value) == ("database", LATEST + 3)
        with pytest.raises(SchemaTooNew) as refused_again:
            await migrate(conn)
    for exc in (refused.value, refused_again.value):
        assert str(exc).startswith(where) and str(exc).endswith(tail), str(exc)
        assert "\n" not in str(exc)
    with pytest.raises(SchemaTooNew, match=tail.replace("(", r"\(").replace(")", r"\)")):
        async with App().running(dsn):
            pytest.fail("a node started on a schema that stops it")
    assert snapshot(db) == before


async def test_a_newer_schema_without_a_marked_migration_beyond_this_code_is_accepted(
    dsn: str, db: Any
) -> None:
    """Rolling deploys: a node of the previous release runs on the new, additive schema; a
    marked migration this code knows does not stop it either."""
    db.execute(
        "UPDATE pgpulse_migrations SET breaks_older_nodes = true WHERE version = %s", (LATEST,)
    )
    newer(db, (LATEST + 1, False), (LATEST + 2, False))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await require_schema(conn)
        assert await migrate(conn) == []
    async with App().running(dsn) as node:
        assert node.node_id
    done = pgpulse("job", "list", dsn=dsn)
    assert done.returncode == 0, done.stderr


def test_a_command_and_a_node_refuse_in_one_line_and_exit_2(dsn: str, db: Any) -> None:
    newer(db, (LATEST + 1, True))
    before = snapshot(db)
    # a password in the DSN (the test server trusts its clients: it is not checked) is never
    # shown
    secret = conninfo.make_conninfo(dsn, password="hunter2-not-shown")
    tail, where = refusal(dsn, LATEST + 1, LATEST + 1)
    for args in (["job", "list"], ["node", "run", "--node-id", "old-release"], ["migrate"]):
        done = pgpulse(*args, dsn=secret, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        [line] = done.stderr.splitlines()
        assert line.startswith(f"error: {where}") and line.endswith(tail), line
        assert "hunter2" not in done.stderr and done.stdout == ""
    assert snapshot(db) == before
