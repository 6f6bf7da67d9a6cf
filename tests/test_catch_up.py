"""Catch-up after downtime: every node down for 112 minutes of a `* * * * *` job.

The job is created at 00:00:30; the nodes come back at 01:52:30, so the occurrences 00:01 ...
01:52 (112 of them) were missed. Each policy must produce exact counts, in order.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from helpers import ALL_SHARDS, add, spec, utc
from pgpulse.dispatch import Dispatcher
from pgpulse.handlers import RunContext
from pgpulse.recorder import OutcomeRecorder
from pgpulse.store import Store

T0 = utc(2026, 1, 1, 0, 0, 30)
BACK = T0 + timedelta(minutes=112)  # 01:52:30
MISSED = [utc(2026, 1, 1, 0, 1) + timedelta(minutes=i) for i in range(112)]


async def drain(store: Store, now: Any, seen: list[RunContext]) -> None:
    """Play a node at the fixed instant ``now`` until nothing is due."""
    async def noop(ctx: RunContext) -> None:
        seen.append(ctx)

    dispatcher = Dispatcher(OutcomeRecorder(store), {"noop": noop}, "node-a", {},
                            clock=lambda job: job.db_now)
    for _ in range(1000):
        batch = await store.claim_due("node-a", ALL_SHARDS, 10, lease=30, now=now)
        if not batch:
            return
        for job in batch:
            await dispatcher.dispatch(job)
    raise AssertionError("never drained")


def outcomes(db: Any) -> dict[str, list[Any]]:
    rows = db.execute("SELECT scheduled_for, outcome FROM job_runs ORDER BY id").fetchall()
    result: dict[str, list[Any]] = {}
    for row in rows:
        result.setdefault(row["outcome"], []).append(row["scheduled_for"])
    return result


async def test_backfill_runs_every_missed_occurrence_in_order(store: Store, db: Any) -> None:
    await add(store, spec("rollup", catch_up="backfill"), now=T0)
    seen: list[RunContext] = []
    await drain(store, BACK, seen)
    assert [ctx.scheduled_for for ctx in seen] == MISSED  # 112 runs, ascending, distinct
    assert outcomes(db) == {"succeeded": MISSED}
    job = db.execute("SELECT status, scheduled_for FROM scheduled_jobs").fetchone()
    assert job == {"status": "idle", "scheduled_for": utc(2026, 1, 1, 1, 53)}  # on schedule


async def test_backfill_limit_keeps_the_newest_and_records_the_rest(store: Store, db: Any) -> None:
    await add(store, spec("rollup", catch_up="backfill", backfill_limit=10), now=T0)
    seen: list[RunContext] = []
    await drain(store, BACK, seen)
    assert [ctx.scheduled_for for ctx in seen] == MISSED[-10:]
    result = outcomes(db)
    assert result["succeeded"] == MISSED[-10:]
    assert sorted(result["skipped"]) == MISSED[:102]
    assert db.execute("SELECT count(*) AS n FROM job_runs").fetchone()["n"] == 112


@pytest.mark.parametrize(("grace", "late_runs"), [
    pytest.param(0, [], id="no_grace_no_late_run"),
    pytest.param(60, MISSED[-1:], id="grace_60s_runs_the_one_30s_late"),
])
async def test_skip_records_skips_and_runs_nothing_beyond_grace(
    store: Store, db: Any, grace: float, late_runs: list[Any]
) -> None:
    await add(store, spec("health", catch_up="skip", misfire_grace=grace), now=T0)
    seen: list[RunContext] = []
    await drain(store, BACK, seen)
    assert [ctx.scheduled_for for ctx in seen] == late_runs
    result = outcomes(db)
    assert sorted(result["skipped"]) == MISSED[: 112 - len(late_runs)]
    assert result.get("succeeded", []) == late_runs
    job = db.execute("SELECT scheduled_for, next_run_at FROM scheduled_jobs").fetchone()
    assert job["scheduled_for"] == utc(2026, 1, 1, 1, 53)  # continues, not in the past
    assert job["next_run_at"] == utc(2026, 1, 1, 1, 53)


async def test_coalesce_runs_once_as_the_newest(store: Store, db: Any) -> None:
    await add(store, spec("report", catch_up="coalesce"), now=T0)
    seen: list[RunContext] = []
    await drain(store, BACK, seen)
    assert [ctx.scheduled_for for ctx in seen] == [MISSED[-1]]
    result = outcomes(db)
    assert result["succeeded"] == [MISSED[-1]]
    assert sorted(result["skipped"]) == MISSED[:-1]


async def test_interval_keeps_its_anchor_after_downtime(store: Store, db: Any) -> None:
    anchor = utc(2026, 1, 1, 0, 0, 50)
    await add(store, spec("tick", schedule="@every 60s", catch_up="skip", misfire_grace=0),
              now=anchor)
    seen: list[RunContext] = []
    await drain(store, anchor + timedelta(hours=2, seconds=5), seen)
    assert seen == []
    job = db.execute("SELECT scheduled_for FROM scheduled_jobs").fetchone()
    assert job["scheduled_for"] == utc(2026, 1, 1, 2, 1, 50)  # still at :50
    skipped = outcomes(db)["skipped"]
    assert len(skipped) == 120 and all(t.second == 50 for t in skipped)
