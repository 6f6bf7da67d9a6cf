"""Job names: (tenant, name) is unique through pgpulse_job_names, which every way of creating a
job keeps whole, and which the claim and the end of an attempt never write."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from helpers import add, spec, until_waiting_on_a_lock
from pgpulse.db.store import Store

_INSERT = """
    INSERT INTO pgpulse_jobs (tenant, name, schedule, schedule_kind, handler, anchor_at,
                                scheduled_for, next_run_at)
    VALUES (%s, %s, '@hourly', 'cron', 'noop', now(), now(), now())
    RETURNING id"""


def _names(db: Any) -> list[tuple[str, str, int]]:
    return [
        (r["tenant"], r["name"], r["job_id"])
        for r in db.execute("SELECT * FROM pgpulse_job_names ORDER BY tenant, name").fetchall()
    ]


async def test_every_created_job_has_its_name_and_a_taken_name_changes_nothing(
    store: Store, db: Any
) -> None:
    [a] = await add(store, spec("a"))
    bulk = db.execute("""
        INSERT INTO pgpulse_jobs (tenant, name, schedule, schedule_kind, handler, anchor_at,
                                    scheduled_for, next_run_at)
        SELECT 't' || g, 'b', '@hourly', 'cron', 'noop', now(), now(), now()
        FROM generate_series(1, 2) g
        RETURNING id""").fetchall()
    b1, b2 = sorted(r["id"] for r in bulk)
    assert _names(db) == [("default", "a", a), ("t1", "b", b1), ("t2", "b", b2)]

    with pytest.raises(psycopg.errors.UniqueViolation) as raised:
        db.execute(_INSERT, ("default", "a"))
    assert raised.value.diag.constraint_name == "pgpulse_job_names_pkey"
    assert "(default, a)" in (raised.value.diag.message_detail or "")
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 3

    await store.delete_job("t1", "b")
    assert _names(db) == [("default", "a", a), ("t2", "b", b2)]
    db.execute("UPDATE pgpulse_jobs SET name = 'renamed' WHERE id = %s", (b2,))
    assert _names(db) == [("default", "a", a), ("t2", "renamed", b2)]
    assert (await store.get_job("t2", "renamed"))["id"] == b2


async def test_an_upsert_racing_the_creation_of_its_name_updates_that_job(
    store: Store, dsn: str, db: Any
) -> None:
    """Another session creates the job between this upsert's lookup and its insert: the insert
    of the name waits for the other session, fails, and the retry updates the other's job."""
    async with await psycopg.AsyncConnection.connect(dsn) as other:
        cur = await other.execute(_INSERT, ("default", "raced"))
        row = await cur.fetchone()
        assert row is not None
        first_id = row[0]
        upsert = asyncio.create_task(
            store.upsert_jobs([spec("raced", "*/5 * * * *")], extra_handlers={"noop"})
        )
        # its insert of the name waits for the other's
        await until_waiting_on_a_lock(db, "the upsert")
        assert not upsert.done()
        await other.commit()
        assert await asyncio.wait_for(upsert, 10) == [(first_id, False)]
    rows = db.execute("SELECT id, schedule FROM pgpulse_jobs WHERE name = 'raced'").fetchall()
    assert [(r["id"], r["schedule"]) for r in rows] == [(first_id, "*/5 * * * *")]


async def test_an_upsert_whose_job_is_deleted_under_it_creates_the_job_again(
    store: Store, dsn: str, db: Any
) -> None:
    """Another session deletes the job after this upsert found its name: the update finds no
    row, and the retry creates the job anew."""
    [old_id] = await add(store, spec("gone"))
    async with await psycopg.AsyncConnection.connect(dsn) as other:
        await other.execute("DELETE FROM pgpulse_jobs WHERE id = %s", (old_id,))
        upsert = asyncio.create_task(
            store.upsert_jobs([spec("gone", "*/5 * * * *")], extra_handlers={"noop"})
        )
        # its update waits for the deleted row's lock
        await until_waiting_on_a_lock(db, "the upsert")
        assert not upsert.done()
        await other.commit()
        [(new_id, created)] = await asyncio.wait_for(upsert, 10)
    assert created and new_id != old_id
    rows = db.execute("SELECT id, schedule FROM pgpulse_jobs WHERE name = 'gone'").fetchall()
    assert [(r["id"], r["schedule"]) for r in rows] == [(new_id, "*/5 * * * *")]
    assert _names(db) == [("default", "gone", new_id)]


async def test_a_firing_writes_no_name_index(db: Any) -> None:
    """The job row is updated twice per firing and never HOT; each index on it is written both
    times. Its indexes are the primary key and the claim's and the sweeper's partial indexes,
    the leader's index of pauses that end (partial on paused rows: a firing, idle to running
    to idle, never matches its predicate, so never writes an entry in it), and the deadline
    alerts', the chains', the concurrency keys' and the priorities' (partial on the jobs with a
    deadline, upstreams, a key, a priority: a job without writes no entry in them)."""
    rows = db.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'pgpulse_jobs' ORDER BY indexname"
    ).fetchall()
    assert [r["indexname"] for r in rows] == [
        "pgpulse_jobs_after",
        "pgpulse_jobs_deadline",
        "pgpulse_jobs_due",
        "pgpulse_jobs_due_priority",
        "pgpulse_jobs_key",
        "pgpulse_jobs_key_running",
        "pgpulse_jobs_leases",
        "pgpulse_jobs_pause_ends",
        "pgpulse_jobs_pkey",
    ]
