"""Catch-up after downtime: every node down for 112 minutes of a `* * * * *` job.

The job is created at 00:00:30; the nodes come back at 01:52:30, so the occurrences 00:01 ...
01:52 (112 of them) were missed. Each policy must produce exact counts, in order.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from helpers import ALL_SHARDS, add, spec, utc
from pgpulse.dispatch import Dispatcher, plan_finish
from pgpulse.handlers import RunContext
from pgpulse.store import Store

T0 = utc(2026, 1, 1, 0, 0, 30)
BACK = T0 + timedelta(minutes=112)  # 01:52:30
MISSED = [utc(2026, 1, 1, 0, 1) + timedelta(minutes=i) for i in range(112)]


async def drain(store: Store, now: Any, seen: list[RunContext]) -> None:
    """Play a node at the fixed instant ``now`` until nothing is due: claim, decide, run, and
    write each outcome, all at ``now``."""

    async def noop(ctx: RunContext) -> None:
        seen.append(ctx)

    dispatcher = Dispatcher({"noop": noop}, "node-a", {})
    for _ in range(1000):
        batch = await store.claim_due("node-a", ALL_SHARDS, 10, lease=30, now=now)
        if not batch:
            return
        outcomes = [
            dispatcher.decide(job) or plan_finish(job, await dispatcher.run(job), now)
            for job in batch
        ]
        assert await store.finish_runs(outcomes, now=now) == {job.key for job in batch}
    raise AssertionError("never drained")


def outcomes(db: Any) -> dict[str, list[Any]]:
    rows = db.execute("SELECT scheduled_for, outcome FROM pgpulse_runs ORDER BY id").fetchall()
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
    job = db.execute("SELECT status, scheduled_for FROM pgpulse_jobs").fetchone()
    assert job == {"status": "idle", "scheduled_for": utc(2026, 1, 1, 1, 53)}  # on schedule


async def test_backfill_limit_keeps_the_newest_and_records_the_rest(store: Store, db: Any) -> None:
    await add(store, spec("rollup", catch_up="backfill", backfill_limit=10), now=T0)
    seen: list[RunContext] = []
    await drain(store, BACK, seen)
    assert [ctx.scheduled_for for ctx in seen] == MISSED[-10:]
    result = outcomes(db)
    assert result["succeeded"] == MISSED[-10:]
    assert sorted(result["skipped"]) == MISSED[:102]
    assert db.execute("SELECT count(*) AS n FROM pgpulse_runs").fetchone()["n"] == 112


@pytest.mark.parametrize(
    ("grace", "late_runs"),
    [
        pytest.param(0, [], id="no_grace_no_late_run"),
        pytest.param(60, MISSED[-1:], id="grace_60s_runs_the_one_30s_late"),
    ],
)
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
    job = db.execute("SELECT scheduled_for, next_run_at FROM pgpulse_jobs").fetchone()
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
    await add(
        store, spec("tick", schedule="@every 60s", catch_up="skip", misfire_grace=0), now=anchor
    )
    seen: list[RunContext] = []
    await drain(store, anchor + timedelta(hours=2, seconds=5), seen)
    assert seen == []
    job = db.execute("SELECT scheduled_for FROM pgpulse_jobs").fetchone()
    assert job["scheduled_for"] == utc(2026, 1, 1, 2, 1, 50)  # still at :50
    skipped = outcomes(db)["skipped"]
    assert len(skipped) == 120 and all(t.second == 50 for t in skipped)


# A job created at db-now 00:00:50.357123 keeps that instant to the microsecond: its occurrences
# are 00:01:50.357123, 00:02:50.357123, ... through any downtime and under every policy.
SUB = utc(2026, 1, 1, 0, 0, 50) + timedelta(microseconds=357_123)


def sub(k: int) -> Any:
    """The k-th occurrence of a 60 s job anchored at SUB."""
    return SUB + timedelta(minutes=k)


async def test_interval_keeps_a_sub_second_anchor_after_downtime(store: Store, db: Any) -> None:
    await add(store, spec("tick", schedule="@every 60s", catch_up="skip", misfire_grace=0), now=SUB)
    job = db.execute("SELECT anchor_at, scheduled_for, next_run_at FROM pgpulse_jobs").fetchone()
    assert job == {"anchor_at": SUB, "scheduled_for": sub(1), "next_run_at": sub(1)}
    seen: list[RunContext] = []
    await drain(store, SUB + timedelta(hours=2, seconds=5), seen)
    assert seen == []
    job = db.execute("SELECT scheduled_for, next_run_at FROM pgpulse_jobs").fetchone()
    assert job == {"scheduled_for": sub(121), "next_run_at": sub(121)}  # still at :50.357123
    assert sorted(outcomes(db)["skipped"]) == [sub(k) for k in range(1, 121)]


async def test_backfill_on_a_sub_second_grid_is_due_to_the_microsecond(
    store: Store, db: Any
) -> None:
    await add(store, spec("rollup", schedule="@every 60s", catch_up="backfill"), now=SUB)
    seen: list[RunContext] = []
    await drain(store, sub(10) - timedelta(microseconds=1), seen)  # sub(10) is not yet due
    assert [ctx.scheduled_for for ctx in seen] == [sub(k) for k in range(1, 10)]
    await drain(store, sub(10), seen)  # now it is (due means scheduled_for <= now)
    assert [ctx.scheduled_for for ctx in seen] == [sub(k) for k in range(1, 11)]
    assert outcomes(db) == {"succeeded": [sub(k) for k in range(1, 11)]}
    job = db.execute("SELECT scheduled_for FROM pgpulse_jobs").fetchone()
    assert job["scheduled_for"] == sub(11)


async def test_backfill_limit_and_coalesce_keep_a_sub_second_anchor(store: Store, db: Any) -> None:
    await add(
        store,
        spec("limited", schedule="@every 60s", catch_up="backfill", backfill_limit=3),
        spec("report", schedule="@every 60s", catch_up="coalesce"),
        now=SUB,
    )
    seen: list[RunContext] = []
    await drain(store, sub(112) + timedelta(seconds=30), seen)
    ran = {
        name: [c.scheduled_for for c in seen if c.job_name == name]
        for name in ("limited", "report")
    }
    assert ran == {"limited": [sub(110), sub(111), sub(112)], "report": [sub(112)]}
    rows = db.execute(
        "SELECT j.name, r.scheduled_for FROM pgpulse_runs r JOIN pgpulse_jobs j "
        "ON j.id = r.job_id WHERE r.outcome = 'skipped' ORDER BY 1, 2"
    ).fetchall()
    skipped = {
        name: [r["scheduled_for"] for r in rows if r["name"] == name]
        for name in ("limited", "report")
    }
    assert skipped == {
        "limited": [sub(k) for k in range(1, 110)],
        "report": [sub(k) for k in range(1, 112)],
    }
    held = db.execute("SELECT scheduled_for FROM pgpulse_jobs ORDER BY name").fetchall()
    assert [r["scheduled_for"] for r in held] == [sub(113), sub(113)]


@pytest.mark.parametrize(
    ("resumed_at", "expected"),
    [
        pytest.param(sub(5) + timedelta(milliseconds=200), sub(6), id="between_two_occurrences"),
        pytest.param(sub(5), sub(6), id="on_an_occurrence_is_strictly_later"),
        pytest.param(sub(5) - timedelta(microseconds=1), sub(5), id="one_microsecond_before"),
    ],
)
async def test_resume_continues_on_the_sub_second_grid(
    store: Store, db: Any, resumed_at: Any, expected: Any
) -> None:
    await add(store, spec("tick", schedule="@every 60s"), now=SUB)
    await store.pause_job("default", "tick")
    await store.resume_job("default", "tick", now=resumed_at)
    job = db.execute("SELECT status, scheduled_for, next_run_at FROM pgpulse_jobs").fetchone()
    assert job == {"status": "idle", "scheduled_for": expected, "next_run_at": expected}
