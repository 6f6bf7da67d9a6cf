"""Migrations: contiguous numbering, idempotence, and two nodes migrating at once."""

from __future__ import annotations

import asyncio
import re
from importlib import resources

import psycopg
import pytest

from pgpulse.core.errors import PreReleaseSchema
from pgpulse.db.migrations import migrate, schema_version
from pgpulse.sql import QUERIES, RAW_QUERIES, fill_fragments, load_queries, migration_files
from pgpulse_tools.schema import SCHEMA_FILE, migrated_schema


def test_migration_numbering_is_contiguous_from_one() -> None:
    versions = [version for version, _, _ in migration_files()]
    assert versions == list(range(1, len(versions) + 1))
    assert versions[0] == 1


def test_every_named_query_is_loaded() -> None:
    for name in ("finish_jobs", "claim_jobs", "renew", "hand_back_jobs", "upsert_job", "heartbeat"):
        assert QUERIES[name].lstrip().upper().startswith(("WITH", "SELECT", "UPDATE", "INSERT"))


@pytest.mark.parametrize(
    "filename",
    [
        "queries.sql",
        "occurrences.sql",
        "limits.sql",
        "alerts.sql",
        "web.sql",
        "shards.sql",
        "why.sql",
    ],
)
def test_every_statement_is_at_most_80_lines_and_fits_the_drivers_cache(filename: str) -> None:
    """A reviewer reads a statement in a sitting: at most 80 lines of SQL (comments aside).
    And the driver converts its ``%(name)s`` placeholders once, not at every execute: psycopg
    caches that for a statement of at most 4,096 bytes as sent (comments and indentation are
    not sent: pgpulse.sql.split_named_blocks). No statement is rewritten by a regular
    expression on its way out: a claim's shard is an explicit marker
    (pgpulse.sql.at_shard_count)."""
    # as sent: fragments and shard markers filled (pgpulse.sql.fill_fragments)
    queries = {name: QUERIES.get(name, q) for name, q in load_queries(filename).items()}
    text = resources.files("pgpulse.sql").joinpath(filename).read_text()
    lines = {
        name: sum(
            1 for line in body.splitlines() if line.strip() and not line.strip().startswith("--")
        )
        for name, body in zip(
            re.split(r"^-- name: (\w+)\s*$", text, flags=re.M)[1::2],
            re.split(r"^-- name: (\w+)\s*$", text, flags=re.M)[2::2],
            strict=True,
        )
    }
    assert {name: n for name, n in lines.items() if n > 80} == {}
    assert {name: len(q.encode()) for name, q in queries.items() if len(q.encode()) > 4096} == {}


def test_every_run_row_written_over_follows_the_one_rule() -> None:
    """The run row's rule (an attempt written over an earlier one: pgpulse.sql's fragment
    ``attempt_written_over``) is written once: every statement that upserts a run row names it,
    and none spells out its own."""
    written = {**load_queries("queries.sql"), **load_queries("occurrences.sql")}
    upserting = {
        name: statement
        for name, statement in written.items()
        if re.search(r"INSERT INTO pgpulse_runs AS r\b.*?ON CONFLICT.*?DO UPDATE", statement, re.S)
    }
    assert len(upserting) == 9
    assert [n for n, s in upserting.items() if "{attempt_written_over}" not in s] == []
    assert [n for n, s in written.items() if "earlier_attempts = CASE" in s] == []
    assert all("earlier_attempts = CASE" in s for n, s in RAW_QUERIES.items() if n in upserting)


def test_a_statement_naming_an_unknown_marker_is_refused() -> None:
    with pytest.raises(ValueError, match=r"statement 'x' names an unknown marker \{epoc\}"):
        fill_fragments("x", "SELECT {epoc}", {"epoch": "1"})
    assert fill_fragments("x", "SELECT {epoch} + {epoch}", {"epoch": "1"}) == "SELECT 1 + 1"


async def test_migrating_twice_is_a_no_op(empty_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        assert await schema_version(conn) == 0
        first = await migrate(conn)
        second = await migrate(conn)
        assert first == [v for v, _, _ in migration_files()]
        assert second == []
        assert await schema_version(conn) == len(first)


async def test_two_nodes_migrating_at_once_do_not_race(empty_dsn: str) -> None:
    conns = [await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in conns))
    finally:
        for conn in conns:
            await conn.close()
    applied = [r for r in results if r]
    assert len(applied) == 1, results  # exactly one connection applied the schema
    async with await psycopg.AsyncConnection.connect(empty_dsn) as conn:
        cur = await conn.execute("SELECT count(*) FROM pgpulse_migrations")
        row = await cur.fetchone()
        assert row is not None and row[0] == len(migration_files())


async def test_the_migrations_produce_exactly_the_committed_schema(server_dsn: str) -> None:
    """``src/pgpulse/sql/schema.sql`` is what the migrations make, on this server (regenerate it
    with ``python -m pgpulse_tools.schema`` after adding a migration)."""
    committed = SCHEMA_FILE.read_text(encoding="utf-8")
    body = committed[committed.index("\nCREATE ") + 1 :]
    assert await migrated_schema(server_dsn) == body
    assert "CREATE TABLE public.pgpulse_jobs (" in body and "pgpulse_runs_live" in body


def test_every_object_of_the_schema_is_named_pgpulse() -> None:
    """A user's database has tables of its own: every table, view, index, function, trigger and
    sequence Pulse creates is called pgpulse_*."""
    schema = SCHEMA_FILE.read_text(encoding="utf-8")
    kinds = r"TABLE|VIEW|INDEX|FUNCTION|TRIGGER|SEQUENCE|UNIQUE INDEX|DOMAIN"
    names = re.findall(rf"^CREATE (?:{kinds}) (?:public\.)?(\w+)", schema, re.MULTILINE)
    names += re.findall(r"SEQUENCE NAME public\.(\w+)", schema)
    assert len(names) >= 15, names
    assert [n for n in names if not n.startswith("pgpulse_")] == []


async def test_a_pre_release_schema_is_refused_and_left_as_it_was(empty_dsn: str) -> None:
    """A database migrated by Pulse 0.1.0 (its version 1 was 'initial') is not taken for up to
    date: migrate refuses it, naming what it found, and changes nothing."""
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE pgpulse_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        await conn.execute(
            "INSERT INTO pgpulse_migrations (version, name) "
            "VALUES (1, 'initial'), (2, 'api_tokens')"
        )
        with pytest.raises(PreReleaseSchema, match=r"pre-release schema.*'initial'") as refused:
            await migrate(conn)
        assert refused.value.field == "database" and refused.value.value == "initial"
        cur = await conn.execute("SELECT to_regclass('pgpulse_jobs') IS NULL")
        assert await cur.fetchone() == (True,)
