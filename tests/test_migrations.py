"""Migrations: contiguous numbering, idempotence, and two nodes migrating at once."""

from __future__ import annotations

import asyncio
import re

import psycopg
import pytest

from pgpulse.errors import PreReleaseSchema
from pgpulse.migrations import migrate, schema_version
from pgpulse.sql import QUERIES, migration_files, positional
from pgpulse_tools.schema import SCHEMA_FILE, migrated_schema


def test_migration_numbering_is_contiguous_from_one() -> None:
    versions = [version for version, _, _ in migration_files()]
    assert versions == list(range(1, len(versions) + 1))
    assert versions[0] == 1


def test_every_named_query_is_loaded() -> None:
    for name in ("finish_and_claim", "renew", "hand_back_jobs", "upsert_job", "heartbeat"):
        assert QUERIES[name].lstrip().upper().startswith(("WITH", "SELECT", "UPDATE", "INSERT"))


def test_the_claim_step_is_sent_as_written_with_postgresqls_own_placeholders() -> None:
    """The claim loop's statement goes out through a raw cursor with ``$n`` placeholders, so the
    driver never parses it, however long it grows: psycopg parses a ``%(name)s`` statement's
    placeholders again at every execute once it is longer than its conversion cache takes,
    which cost a busy node 5 % of its CPU. Each name gets one number, in first-use order."""
    statement = QUERIES["finish_and_claim"]
    text, names = positional(statement)
    assert names == ("now", "outcomes", "route_handlers", "route_shards", "limit", "node", "lease")
    assert "%(" not in text and "%%" not in text
    assert sorted(set(re.findall(r"\$(\d+)", text)), key=int) == [
        str(i) for i in range(1, len(names) + 1)
    ]
    assert text.count("$1") == statement.count("%(now)s")  # every use of a name, one number
    assert positional("SELECT %(b)s, %(a)s, %(b)s, 100 %% 7") == (
        "SELECT $1, $2, $1, 100 % 7",
        ("b", "a"),
    )


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
