"""The history partitioned by day (migration 0023, pgpulse.db.history): the migration of a
populated database keeps every row and every key, the leader's prune makes the coming days'
partitions and drops the days the retention is past (a day still holding a run that must stay
is kept, its other rows deleted), and a job's own ``keep_runs`` forgets its runs sooner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from helpers import add, spec
from pgpulse.core.errors import InvalidInput
from pgpulse.core.jobs import JobSpec
from pgpulse.db.migrations import migrate
from pgpulse.db.store import Store

#: The schema before the history was partitioned.
BEFORE = 19
#: An instant at midnight UTC, the tests' day 0.
DAY0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def partitions(db: Any) -> list[str]:
    """The names of pgpulse_runs' partitions, sorted."""
    rows = db.execute(
        "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'pgpulse_runs'::regclass ORDER BY 1"
    )
    return [r["name"] for r in rows]


def runs(db: Any) -> list[str]:
    """Every run row, by value (JSON text), sorted."""
    rows = db.execute("SELECT to_jsonb(r)::text AS row FROM pgpulse_runs r")
    return sorted(r["row"] for r in rows)


def insert_runs(db: Any, rows: list[dict[str, Any]]) -> None:
    """Write run rows (each: job, at, kind, finished) as the recorder does, ids from the
    sequence."""
    for row in rows:
        db.execute(
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, node_id,"
            " fencing_token, started_at, finished_at, kind)"
            " VALUES (%(job)s, %(at)s, 1, CASE WHEN %(finished)s::timestamptz IS NULL"
            " THEN 'retrying' ELSE 'succeeded' END, 'n1', 1, %(at)s, %(finished)s, %(kind)s)",
            row,
        )


async def test_migrating_a_populated_database_keeps_every_row_and_every_key(
    empty_dsn: str,
) -> None:
    """A database at 0019 with 45 days of history (scheduled runs, triggers, backfills of old
    days, a retrying run, a run in the future) is migrated: every row is there by value, in
    the partition made of the old table; ids and occurrence keys stay unique, the id sequence
    goes on after them, and the one-run-per-occurrence key still refuses a second row."""
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn, target=BEFORE)
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as db:
        now = db.execute("SELECT now() AS t").fetchone()["t"]  # type: ignore[index]
        db.execute(
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, finished_at,"
            " kind, output)"
            " SELECT i %% 40 + 1, %(now)s - i * interval '17 minutes', 1,"
            "        CASE WHEN i %% 9 = 0 THEN 'failed' ELSE 'succeeded' END,"
            "        %(now)s - i * interval '17 minutes' + interval '3 s',"
            "        CASE WHEN i %% 11 = 0 THEN 'trigger' ELSE 'scheduled' END, 'out ' || i"
            " FROM generate_series(1, 3800) AS i",  # 45 days of it
            {"now": now},
        )
        insert_runs(
            db,
            [
                {"job": 41, "at": now - 400 * DAY, "kind": "backfill", "finished": now},
                {"job": 41, "at": now - 399 * DAY, "kind": "backfill", "finished": None},
                {"job": 42, "at": now + 3 * DAY, "kind": "scheduled", "finished": now},
            ],
        )
        before = runs(db)
        last_id = db.execute("SELECT max(id) AS id FROM pgpulse_runs").fetchone()["id"]  # type: ignore[index]
        async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
            assert await migrate(conn) != []
        assert runs(db) == before  # no row lost, none changed
        assert partitions(db) == ["pgpulse_runs_before", "pgpulse_runs_default"]
        keys = db.execute(
            "SELECT count(*) AS n, count(DISTINCT id) AS ids,"
            " count(DISTINCT (job_id, scheduled_for)) FILTER (WHERE kind = 'scheduled') AS occ,"
            " count(*) FILTER (WHERE kind = 'scheduled') AS scheduled,"
            " count(*) FILTER (WHERE tableoid = 'pgpulse_runs_before'::regclass) AS old"
            " FROM pgpulse_runs"
        ).fetchone()
        assert keys == {"n": 3803, "ids": 3803, "occ": keys["scheduled"], "scheduled": 3456,  # type: ignore[index]
                        "old": 3803}  # fmt: skip
        fresh = db.execute("SELECT nextval('pgpulse_runs_id_seq') AS id").fetchone()["id"]  # type: ignore[index]
        assert fresh == last_id + 1
        taken = db.execute(
            "SELECT job_id, scheduled_for FROM pgpulse_runs WHERE kind = 'scheduled' LIMIT 1"
        ).fetchone()
        with pytest.raises(psycopg.errors.UniqueViolation):
            db.execute(
                "INSERT INTO pgpulse_runs (job_id, scheduled_for, outcome)"
                " VALUES (%(job_id)s, %(scheduled_for)s, 'succeeded')",
                taken,
            )
        live = db.execute("SELECT count(*) AS n FROM pgpulse_runs_live").fetchone()
        assert live == {"n": 3803}


async def test_the_prune_makes_partitions_ahead_and_drops_the_days_past_the_retention(
    store: Store, dsn: str
) -> None:
    """The first prune makes today's partition and the next three days', moving into them the
    rows the default partition held; ten days on, with a retention of five, the old days are
    dropped whole, but for the one that holds a backfill's run that finished yesterday: its
    other rows are deleted, that run stays."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as db:
        insert_runs(db, [{"job": 1, "at": DAY0 + 2 * DAY + timedelta(hours=5), "kind": "scheduled",
                          "finished": DAY0 + 2 * DAY + timedelta(hours=5, seconds=1)}])  # fmt: skip
        assert await store.prune(keep_runs=5 * 86400.0, now=DAY0 + timedelta(hours=1)) == (0, 0)
        assert partitions(db) == [
            "pgpulse_runs_20260301", "pgpulse_runs_20260302", "pgpulse_runs_20260303",
            "pgpulse_runs_20260304", "pgpulse_runs_default",
        ]  # fmt: skip
        moved = db.execute("SELECT tableoid::regclass::text AS t FROM pgpulse_runs").fetchone()
        assert moved == {"t": "pgpulse_runs_20260303"}  # the row the default partition held
        rows = [
            {"job": j, "at": DAY0 + d * DAY + timedelta(hours=h), "kind": "scheduled",
             "finished": DAY0 + d * DAY + timedelta(hours=h, seconds=2)}
            for d in range(4) for h in range(0, 24, 6) for j in (1, 2)
        ]  # fmt: skip
        late = {"job": 3, "at": DAY0 + DAY, "kind": "backfill", "finished": DAY0 + 9 * DAY}
        insert_runs(db, [*rows, late])
        assert len(runs(db)) == 34
        pruned = await store.prune(keep_runs=5 * 86400.0, now=DAY0 + 10 * DAY)
        assert pruned == (33, 0)
        assert partitions(db) == [
            "pgpulse_runs_20260302",  # kept for the late run
            "pgpulse_runs_20260311", "pgpulse_runs_20260312", "pgpulse_runs_20260313",
            "pgpulse_runs_20260314", "pgpulse_runs_default",
        ]  # fmt: skip
        left = db.execute("SELECT job_id, kind, finished_at FROM pgpulse_runs").fetchall()
        assert left == [{"job_id": 3, "kind": "backfill", "finished_at": DAY0 + 9 * DAY}]
        # once that run is past the retention too, its day goes
        assert await store.prune(keep_runs=5 * 86400.0, now=DAY0 + 15 * DAY) == (1, 0)
        assert "pgpulse_runs_20260302" not in partitions(db)
        assert runs(db) == []


async def test_a_jobs_keep_runs_forgets_its_runs_sooner(store: Store, dsn: str) -> None:
    """``keep_runs`` "3" keeps a job's newest three runs, "2d" its runs finished in the last
    two days; a run still retrying stays; a job without it keeps the global retention."""
    by_count, by_days, plain = await add(
        store,
        spec("by-count", keep_runs="3"),
        spec("by-days", keep_runs=" 2d "),
        spec("plain"),
    )
    now = DAY0 + 6 * DAY
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as db:
        stored = db.execute("SELECT name, keep_runs FROM pgpulse_jobs ORDER BY name").fetchall()
        assert [r["keep_runs"] for r in stored] == ["3", "2d", None]
        insert_runs(
            db,
            [
                {
                    "job": job,
                    "at": DAY0 + d * DAY,
                    "kind": "scheduled",
                    "finished": None if (job, d) == (by_count, 0) else DAY0 + d * DAY,
                }
                for job in (by_count, by_days, plain)
                for d in range(6)
            ],
        )
        assert await store.prune(keep_runs=30 * 86400.0, now=now) == (2 + 4, 0)
        kept = db.execute(
            "SELECT job_id, extract(day FROM scheduled_for - %s)::int AS day FROM pgpulse_runs"
            " ORDER BY job_id, scheduled_for",
            (DAY0,),
        ).fetchall()
        days = {job: [r["day"] for r in kept if r["job_id"] == job] for job in (1, 2, 3)}
        assert days == {
            by_count: [0, 3, 4, 5],  # the newest three, and the run still retrying
            by_days: [4, 5],  # finished less than two days before now (day 6)
            plain: [0, 1, 2, 3, 4, 5],
        }


@pytest.mark.parametrize(
    ("given", "kept"),
    [("30d", "30d"), (" 1000 ", "1000"), (1000, "1000"), ("3650d", "3650d"), (None, None)],
)
def test_keep_runs_is_days_or_a_count(given: object, kept: str | None) -> None:
    assert (
        JobSpec.create(name="j", schedule="@daily", handler="h", keep_runs=given).keep_runs == kept
    )


@pytest.mark.parametrize("given", ["30x", "0", "0d", "3651d", "1000001", "-5", "", "d", 2.5, True])
def test_a_bad_keep_runs_is_one_line_naming_the_field(given: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        JobSpec.create(name="j", schedule="@daily", handler="h", keep_runs=given)
    assert str(raised.value) == (
        "keep_runs must be a number of days from 1d to 3650d or a number of runs from 1 to "
        f"1,000,000, got {given!r}"
    )
    assert raised.value.field == "keep_runs"
