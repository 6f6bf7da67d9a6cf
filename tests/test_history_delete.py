"""A job's history goes with the job: deleting jobs, by Pulse or by hand, one or many in a
statement, deletes their pgpulse_runs rows, through a trigger instead of a foreign key, which no
firing checks."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from helpers import ALL_SHARDS, add, spec, until_waiting_on_a_lock, utc
from pgpulse.core.model import Outcome
from pgpulse.core.planner import Advance
from pgpulse.db.store import Store

T0 = utc(2026, 1, 1)


async def _fire(store: Store, count: int) -> None:
    """Claim ``count`` due jobs (asserting that many were due) and end each attempt
    ``succeeded``: one history row each."""
    now = utc(2026, 1, 1, 0, 1)
    claimed = await store.claim_due("node-a", ALL_SHARDS, count, lease=30, now=now)
    assert len(claimed) == count
    done = [Outcome(job, "succeeded", advance=Advance(utc(2026, 1, 1, 0, 2))) for job in claimed]
    assert len(await store.finish_runs(done, now=now, node="node-a")) == count


def _history(db: Any) -> list[tuple[str, str]]:
    """(job name, outcome) of every pgpulse_runs row, joined by the row's job_id."""
    rows = db.execute(
        "SELECT coalesce(j.name, '<orphan>') AS name, r.outcome FROM pgpulse_runs r "
        "LEFT JOIN pgpulse_jobs j ON j.id = r.job_id ORDER BY 1"
    ).fetchall()
    return [(r["name"], r["outcome"]) for r in rows]


async def test_deleting_jobs_deletes_their_history_and_only_theirs(store: Store, db: Any) -> None:
    await add(store, spec("a"), spec("b"), spec("c"), spec("d"), now=T0)
    await _fire(store, 4)
    assert _history(db) == [
        ("a", "succeeded"),
        ("b", "succeeded"),
        ("c", "succeeded"),
        ("d", "succeeded"),
    ]

    await store.delete_job("default", "b")
    assert _history(db) == [("a", "succeeded"), ("c", "succeeded"), ("d", "succeeded")]

    deleted = db.execute("DELETE FROM pgpulse_jobs WHERE name IN ('a', 'd')").rowcount
    assert deleted == 2
    assert _history(db) == [("c", "succeeded")]


async def test_a_delete_that_waits_for_a_history_write_deletes_that_row_too(
    store: Store, dsn: str, db: Any
) -> None:
    """A session writes history for a job it has locked (as the step does); a delete of the job
    waits for it, then deletes the row it wrote: no orphan, which the foreign key prevented."""
    [job_id] = await add(store, spec("busy"), now=T0)
    async with await psycopg.AsyncConnection.connect(dsn) as writer:
        await writer.execute("UPDATE pgpulse_jobs SET updated_at = now() WHERE id = %s", (job_id,))
        await writer.execute(
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, outcome) "
            "VALUES (%s, %s, 'succeeded')",
            (job_id, utc(2026, 1, 1, 0, 1)),
        )
        delete = asyncio.create_task(store.delete_job("default", "busy"))
        await until_waiting_on_a_lock(db, "the delete")  # waits for the writer's row lock
        assert not delete.done()
        await writer.commit()
        await asyncio.wait_for(delete, 10)
    assert _history(db) == []
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0


async def test_truncating_jobs_truncates_history(store: Store, db: Any) -> None:
    await add(store, spec("a"), spec("b"), now=T0)
    await _fire(store, 2)
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        db.execute("TRUNCATE pgpulse_jobs")  # pgpulse_job_names refers to it: CASCADE is needed
    assert len(_history(db)) == 2
    db.execute("TRUNCATE pgpulse_jobs CASCADE")
    assert _history(db) == []


async def test_a_firing_checks_no_foreign_key(db: Any) -> None:
    rows = db.execute(
        "SELECT conname FROM pg_constraint "
        "WHERE contype = 'f' AND conrelid = 'pgpulse_runs'::regclass"
    ).fetchall()
    assert rows == []
