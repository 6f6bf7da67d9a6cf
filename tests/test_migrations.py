"""Migrations: contiguous numbering, idempotence, and two nodes migrating at once."""

from __future__ import annotations

import asyncio

import psycopg

from pgpulse.migrations import migrate, schema_version
from pgpulse.sql import QUERIES, migration_files


def test_migration_numbering_is_contiguous_from_one() -> None:
    versions = [version for version, _, _ in migration_files()]
    assert versions == list(range(1, len(versions) + 1))
    assert versions[0] == 1


def test_every_named_query_is_loaded() -> None:
    for name in ("finish_and_claim", "renew_leases", "release_runs", "upsert_job", "heartbeat"):
        assert QUERIES[name].lstrip().upper().startswith(("WITH", "SELECT", "UPDATE", "INSERT"))


def test_the_claim_loop_statement_stays_short_enough_for_the_drivers_cache() -> None:
    """psycopg caches its conversion of a statement of up to 4,096 characters; a longer one is
    parsed again at every execute (5 % of a busy node's CPU when the step statement grew past
    it). Comment lines are not sent."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    assert len(QUERIES["finish_and_claim"]) <= MAX_CACHED_STATEMENT_LENGTH == 4096
    assert "\n--" not in QUERIES["finish_and_claim"]


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


async def test_a_run_open_across_the_upgrade_to_version_4_keeps_its_row(empty_dsn: str) -> None:
    """Up to version 3 a claim opened the run's row as 'running'; version 4 writes history at
    the end of an attempt and keeps the run id on the job: a job running across the upgrade gets
    the id of the row its claim opened, and is shown once, as running."""
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn)
        await conn.execute("DELETE FROM pgpulse_migrations WHERE version = 4")
        await conn.execute("DROP VIEW job_runs_live")
        await conn.execute("ALTER TABLE scheduled_jobs DROP COLUMN run_id, DROP COLUMN claimed_at")
        await conn.execute("""
            INSERT INTO scheduled_jobs (tenant, name, schedule, schedule_kind, handler, anchor_at,
                                        scheduled_for, next_run_at, status, attempt,
                                        fencing_token, locked_by, lease_expires_at)
            VALUES ('t', 'busy', '@hourly', 'cron', 'noop', '2026-01-01 00:00+00',
                    '2026-01-01 12:00+00', '2026-01-01 12:00+00', 'running', 2, 7, 'old-node',
                    now() + interval '1 minute'),
                   ('t', 'calm', '@hourly', 'cron', 'noop', '2026-01-01 00:00+00',
                    '2026-01-01 13:00+00', '2026-01-01 13:00+00', 'idle', 0, 3, NULL, NULL)""")
        await conn.execute("""
            INSERT INTO job_runs (job_id, scheduled_for, attempts, outcome, node_id, fencing_token,
                                  started_at, finished_at)
            SELECT id, '2026-01-01 11:00+00'::timestamptz, 1, 'succeeded', 'old-node', 3,
                   '2026-01-01 11:00:01+00'::timestamptz, '2026-01-01 11:00:02+00'::timestamptz
            FROM scheduled_jobs WHERE name = 'calm'
            UNION ALL
            SELECT id, '2026-01-01 12:00+00', 2, 'running', 'old-node', 7,
                   '2026-01-01 12:00:05+00', NULL
            FROM scheduled_jobs WHERE name = 'busy'""")
        assert await migrate(conn) == [4]
        cur = await conn.execute(
            "SELECT j.name, j.run_id = r.id AS same, j.claimed_at::text FROM scheduled_jobs j "
            "LEFT JOIN job_runs r ON r.job_id = j.id AND r.scheduled_for = j.scheduled_for "
            "ORDER BY j.name"
        )
        assert await cur.fetchall() == [
            ("busy", True, "2026-01-01 12:00:05+00"),
            ("calm", None, None),
        ]
        cur = await conn.execute(
            "SELECT outcome, attempts, node_id, fencing_token "
            "FROM job_runs_live ORDER BY scheduled_for"
        )
        assert await cur.fetchall() == [
            ("succeeded", 1, "old-node", 3),
            ("running", 2, "old-node", 7),
        ]


async def test_version_7_keeps_history_rows_and_gives_no_job_a_grace_under_1s(
    empty_dsn: str,
) -> None:
    """Version 7 adds summary columns (existing rows stand for one occurrence each) and lifts
    misfire_grace below 1 s, with which no occurrence could ever run, to 1 s."""
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn)
        await conn.execute("DELETE FROM pgpulse_migrations WHERE version = 7")  # as of version 6
        await conn.execute(
            "ALTER TABLE job_runs DROP CONSTRAINT job_runs_occurrences, "
            "DROP COLUMN occurrences CASCADE, DROP COLUMN last_scheduled_for"
        )
        await conn.execute("""
            INSERT INTO scheduled_jobs (tenant, name, schedule, schedule_kind, handler, anchor_at,
                                        scheduled_for, next_run_at, misfire_grace)
            SELECT 't', n, '@hourly', 'cron', 'noop', now(), now(), now(), g
            FROM (VALUES ('zero', interval '0'), ('half', interval '0.5 s'),
                         ('minute', interval '60 s')) AS v(n, g)""")
        await conn.execute("""
            INSERT INTO job_runs (job_id, scheduled_for, attempts, outcome, finished_at)
            SELECT id, '2026-01-01 11:00+00', 0, 'skipped', now()
            FROM scheduled_jobs WHERE name = 'zero'""")
        assert await migrate(conn) == [7]
        cur = await conn.execute(
            "SELECT name, extract(epoch FROM misfire_grace)::float8 FROM scheduled_jobs "
            "ORDER BY name"
        )
        assert await cur.fetchall() == [("half", 1.0), ("minute", 60.0), ("zero", 1.0)]
        cur = await conn.execute("SELECT occurrences, last_scheduled_for FROM job_runs_live")
        assert await cur.fetchall() == [(1, None)]


async def test_interval_jobs_stored_before_version_3_keep_their_whole_second_grid(
    empty_dsn: str,
) -> None:
    """Up to version 2 interval jobs fired on their anchor truncated to whole seconds; version 3
    stores that grid, so upgrading neither moves a job nor adds a run a fraction later."""
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn)
        await conn.execute("DELETE FROM pgpulse_migrations WHERE version = 3")  # as of version 2
        await conn.execute("""
            INSERT INTO scheduled_jobs (tenant, name, schedule, schedule_kind, handler, anchor_at,
                                        scheduled_for, next_run_at)
            VALUES ('t', 'every', '@every 60s', 'interval', 'noop',
                    '2026-01-01 12:00:00.357+00', '2026-01-01 12:05:00+00',
                    '2026-01-01 12:05:00+00'),
                   ('t', 'cron', '* * * * *', 'cron', 'noop',
                    '2026-01-01 12:00:00.357+00', '2026-01-01 12:05:00+00',
                    '2026-01-01 12:05:00+00')""")
        assert await migrate(conn) == [3]
        cur = await conn.execute(
            "SELECT name, anchor_at::text, scheduled_for::text FROM scheduled_jobs ORDER BY name"
        )
        assert await cur.fetchall() == [
            ("cron", "2026-01-01 12:00:00.357+00", "2026-01-01 12:05:00+00"),  # unused by cron
            ("every", "2026-01-01 12:00:00+00", "2026-01-01 12:05:00+00"),
        ]
