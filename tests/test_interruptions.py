"""Interruptions are not failures: an attempt handed back by a stopping node or reaped
after its node lost the lease never uses up ``max_attempts``; one run may be interrupted
:data:`~pgpulse.core.planner.MAX_INTERRUPTIONS` times, then it ends ``fenced`` and the job moves on.
Both lifecycles: the job row (``pgpulse_jobs``) and an extra occurrence (``pgpulse_occurrences``).
The graceful stop of a real node process is in ``test_crash.py``."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from helpers import ALL_SHARDS, add, spec, utc
from pgpulse.core.model import AttemptResult, ClaimedJob
from pgpulse.core.planner import MAX_INTERRUPTIONS, plan_claim
from pgpulse.core.schedule import parse_schedule
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from pgpulse.node.dispatch import plan_finish
from pgpulse.node.handlers import RunContext
from test_engine import TRIGGERED_ONLY, running, wait_until
from test_occurrences import node

ROUTES = {"work": tuple(ALL_SHARDS)}


async def _interrupt(store: Store, db: Any, extra: bool, times: int) -> None:
    """Claim the one occurrence and interrupt its attempt ``times`` times, alternately handed
    back by a stopping node (its handler started) and reaped after its lease expired."""
    for i in range(times):
        node_id = f"n{i}"
        if extra:
            [job] = (
                await store.finish_and_claim_occurrences([], node_id, ROUTES, 5, lease=30)
            ).jobs
        else:
            [job] = await store.claim_due(node_id, ALL_SHARDS, 5, lease=30, handlers=["work"])
        assert job.attempt == i + 1 and job.interruptions == i
        if i % 2 == 0:
            assert await store.hand_back([job.key], started={job.key}, reason="stop") == (1, 1)
        else:
            table = "pgpulse_occurrences" if extra else "pgpulse_jobs"
            db.execute(f"UPDATE {table} SET lease_expires_at = now() - interval '1 s'")
            assert await store.reap_expired_leases() == 1


@pytest.mark.parametrize("extra", [False, True], ids=["job_row", "extra_occurrence"])
@pytest.mark.parametrize(
    ("times", "ends"),
    [(MAX_INTERRUPTIONS - 1, "succeeded"), (MAX_INTERRUPTIONS, "fenced")],
    ids=["below_the_bound_runs", "at_the_bound_fenced"],
)
async def test_interruptions_up_to_the_bound_then_fenced(
    store: Store, dsn: str, db: Any, extra: bool, times: int, ends: str
) -> None:
    """With max_attempts 1, nine interruptions still leave the handler its attempt (it runs as
    attempt 10 and succeeds); the tenth ends the run ``fenced`` without calling the handler,
    saying why. Every interrupted attempt stays in the run's history."""
    await add(store, spec("billing", schedule=TRIGGERED_ONLY, handler="work", max_attempts=1))
    if extra:
        await RunControl(store.pool).trigger("default", "billing", {"n": 1})
    else:
        await store.trigger_job("default", "billing")
    await _interrupt(store, db, extra, times)
    called: list[int] = []

    async def work(ctx: RunContext) -> str:
        called.append(ctx.attempt)
        return "ok"

    async with running(node(store, dsn, {"work": work})):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome <> 'retrying'"
            ).fetchone()["n"]
        )
    row = db.execute(
        "SELECT attempts, outcome, error, earlier_attempts FROM pgpulse_runs"
    ).fetchone()
    assert (row["attempts"], row["outcome"]) == (times + 1, ends)
    assert [a["attempt"] for a in row["earlier_attempts"]] == list(range(1, times + 1))
    assert {a["outcome"] for a in row["earlier_attempts"]} == {"retrying"}
    if ends == "succeeded":
        assert called == [times + 1]
    else:
        assert called == []
        assert row["error"] == (
            f"interrupted {MAX_INTERRUPTIONS} times: each attempt ended without an outcome "
            "(handed back at a stop, or its lease lost with its node)"
        )
    job = db.execute("SELECT status, attempt, interruptions FROM pgpulse_jobs").fetchone()
    assert job == {"status": "idle", "attempt": 0, "interruptions": 0}  # the next run: afresh
    assert db.execute("SELECT count(*) AS n FROM pgpulse_occurrences").fetchone()["n"] == 0


def _claimed(attempt: int, interruptions: int, max_attempts: int) -> ClaimedJob:
    at = utc(2026, 1, 1, 12, 0)
    return ClaimedJob(
        id=1, tenant="t", name="j", schedule="0 * * * *", timezone="UTC", handler="h",
        payload={}, catch_up="skip", backfill_limit=None, misfire_grace=60.0,
        max_attempts=max_attempts, retry_backoff=1.0, timeout=None, anchor_at=at,
        scheduled_for=at, attempt=attempt, fencing_token=7, run_id=1,
        db_now=at + timedelta(seconds=0.2), interruptions=interruptions,
    )  # fmt: skip


def test_max_attempts_counts_the_handlers_failures_only() -> None:
    """Attempt 5 after 3 interruptions and 1 failure: with max_attempts 3 a failure retries
    (its backoff is that of the second failure, not the fifth attempt); with max_attempts 2 it
    is the last failure. The claim of attempt 12 after 10 interruptions is fenced."""
    failed = AttemptResult(False, "boom")
    job = _claimed(attempt=5, interruptions=3, max_attempts=3)
    retry = plan_finish(job, failed, job.db_now, random.Random(1))
    assert retry.outcome == "retrying" and retry.retry_in is not None
    assert 1.0 <= retry.retry_in <= 2.0  # base 1 s, second failure: uniform in [1, 2]
    last = _claimed(attempt=5, interruptions=3, max_attempts=2)
    assert plan_finish(last, failed, last.db_now).outcome == "failed"
    hourly = parse_schedule("0 * * * *", "UTC")
    actions = [
        plan_claim(
            hourly,
            job.policy,
            scheduled_for=job.scheduled_for,
            attempt=attempt,
            max_attempts=1,
            now=job.db_now,
            interruptions=interruptions,
        ).action
        for attempt, interruptions in ((10, MAX_INTERRUPTIONS - 1), (12, MAX_INTERRUPTIONS))
    ]
    assert actions == ["run", "interrupted"]
