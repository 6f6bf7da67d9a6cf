"""Catch-up after downtime: every node down for 112 minutes of a `* * * * *` job.

The job is created at 00:00:30; the nodes come back at 01:52:30, so the occurrences 00:01 ...
01:52 (112 of them) were missed. Each policy must produce exact counts, in order.
"""

from __future__ import annotations

import math
import threading
from datetime import timedelta
from typing import Any

import pytest

from helpers import ALL_SHARDS, add, run_claim, spec, utc
from pgpulse.core import planner
from pgpulse.core.zones import load_zone
from pgpulse.db.store import Store
from pgpulse.node import dispatch
from pgpulse.node.handlers import NodeHandlers, RunContext

T0 = utc(2026, 1, 1, 0, 0, 30)
BACK = T0 + timedelta(minutes=112)  # 01:52:30
MISSED = [utc(2026, 1, 1, 0, 1) + timedelta(minutes=i) for i in range(112)]


async def drain(store: Store, now: Any, seen: list[RunContext]) -> None:
    """Play a node at the fixed instant ``now`` until nothing is due: claim, decide, run, and
    write each outcome, all at ``now``."""

    async def noop(ctx: RunContext) -> None:
        seen.append(ctx)

    handlers = NodeHandlers({"noop": noop}, "node-a", {})
    for _ in range(1000):
        batch = await store.claim_due("node-a", ALL_SHARDS, 10, lease=30, now=now)
        if not batch:
            return
        outcomes = [await run_claim(job, handlers, now) for job in batch]
        assert await store.finish_runs(outcomes, now=now, node="node-a") == {
            job.key for job in batch
        }
    raise AssertionError("never drained")


async def outcomes(store: Store) -> dict[str, list[Any]]:
    """The history by outcome, in the order written: each run's occurrence, and each skipped
    summary as (first occurrence, last occurrence, how many)."""
    result: dict[str, list[Any]] = {}
    for row in sorted(await store.list_runs(limit=100_000), key=lambda r: r["id"]):
        value = row["scheduled_for"]
        if row["outcome"] == "skipped":
            value = (value, row["last_scheduled_for"], row["occurrences"])
        result.setdefault(row["outcome"], []).append(value)
    return result


async def test_backfill_runs_every_missed_occurrence_in_order(store: Store, db: Any) -> None:
    await add(store, spec("rollup", catch_up="backfill"), now=T0)
    seen: list[RunContext] = []
    await drain(store, BACK, seen)
    assert [ctx.scheduled_for for ctx in seen] == MISSED  # 112 runs, ascending, distinct
    assert await outcomes(store) == {"succeeded": MISSED}
    job = db.execute("SELECT status, scheduled_for FROM pgpulse_jobs").fetchone()
    assert job == {"status": "idle", "scheduled_for": utc(2026, 1, 1, 1, 53)}  # on schedule


async def test_backfill_limit_keeps_the_newest_and_records_the_rest(store: Store, db: Any) -> None:
    await add(store, spec("rollup", catch_up="backfill", backfill_limit=10), now=T0)
    seen: list[RunContext] = []
    await drain(store, BACK, seen)
    assert [ctx.scheduled_for for ctx in seen] == MISSED[-10:]
    assert (
        await outcomes(store)
        == {
            "skipped": [(MISSED[0], MISSED[101], 102)],  # one summary row
            "succeeded": MISSED[-10:],
        }
    )


@pytest.mark.parametrize(
    ("grace", "late_runs"),
    [
        pytest.param(1, [], id="grace_1s_no_late_run"),
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
    result = await outcomes(store)
    skipped = 112 - len(late_runs)
    assert result["skipped"] == [(MISSED[0], MISSED[skipped - 1], skipped)]
    assert result.get("succeeded", []) == late_runs
    job = db.execute("SELECT scheduled_for, next_run_at FROM pgpulse_jobs").fetchone()
    assert job["scheduled_for"] == utc(2026, 1, 1, 1, 53)  # continues, not in the past
    assert job["next_run_at"] == utc(2026, 1, 1, 1, 53)


async def test_coalesce_runs_once_as_the_newest(store: Store, db: Any) -> None:
    await add(store, spec("report", catch_up="coalesce"), now=T0)
    seen: list[RunContext] = []
    await drain(store, BACK, seen)
    assert [ctx.scheduled_for for ctx in seen] == [MISSED[-1]]
    assert await outcomes(store) == {
        "skipped": [(MISSED[0], MISSED[-2], 111)],
        "succeeded": [MISSED[-1]],
    }


async def test_interval_keeps_its_anchor_after_downtime(store: Store, db: Any) -> None:
    anchor = utc(2026, 1, 1, 0, 0, 50)
    await add(
        store, spec("tick", schedule="@every 60s", catch_up="skip", misfire_grace=1), now=anchor
    )
    seen: list[RunContext] = []
    await drain(store, anchor + timedelta(hours=2, seconds=5), seen)
    assert seen == []
    job = db.execute("SELECT scheduled_for FROM pgpulse_jobs").fetchone()
    assert job["scheduled_for"] == utc(2026, 1, 1, 2, 1, 50)  # still at :50
    [(first, last, count)] = (await outcomes(store))["skipped"]
    assert (first, last, count) == (utc(2026, 1, 1, 0, 1, 50), utc(2026, 1, 1, 2, 0, 50), 120)


# A job created at db-now 00:00:50.357123 keeps that instant to the microsecond: its occurrences
# are 00:01:50.357123, 00:02:50.357123, ... through any downtime and under every policy.
SUB = utc(2026, 1, 1, 0, 0, 50) + timedelta(microseconds=357_123)


def sub(k: int) -> Any:
    """The k-th occurrence of a 60 s job anchored at SUB."""
    return SUB + timedelta(minutes=k)


async def test_interval_keeps_a_sub_second_anchor_after_downtime(store: Store, db: Any) -> None:
    await add(store, spec("tick", schedule="@every 60s", catch_up="skip", misfire_grace=1), now=SUB)
    job = db.execute("SELECT anchor_at, scheduled_for, next_run_at FROM pgpulse_jobs").fetchone()
    assert job == {"anchor_at": SUB, "scheduled_for": sub(1), "next_run_at": sub(1)}
    seen: list[RunContext] = []
    await drain(store, SUB + timedelta(hours=2, seconds=5), seen)
    assert seen == []
    job = db.execute("SELECT scheduled_for, next_run_at FROM pgpulse_jobs").fetchone()
    assert job == {"scheduled_for": sub(121), "next_run_at": sub(121)}  # still at :50.357123
    assert (await outcomes(store))["skipped"] == [(sub(1), sub(120), 120)]


async def test_backfill_on_a_sub_second_grid_is_due_to_the_microsecond(
    store: Store, db: Any
) -> None:
    await add(store, spec("rollup", schedule="@every 60s", catch_up="backfill"), now=SUB)
    seen: list[RunContext] = []
    await drain(store, sub(10) - timedelta(microseconds=1), seen)  # sub(10) is not yet due
    assert [ctx.scheduled_for for ctx in seen] == [sub(k) for k in range(1, 10)]
    await drain(store, sub(10), seen)  # now it is (due means scheduled_for <= now)
    assert [ctx.scheduled_for for ctx in seen] == [sub(k) for k in range(1, 11)]
    assert await outcomes(store) == {"succeeded": [sub(k) for k in range(1, 11)]}
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
    skipped = {
        name: [
            (r["scheduled_for"], r["last_scheduled_for"], r["occurrences"])
            for r in await store.list_runs(name=name)
            if r["outcome"] == "skipped"
        ]
        for name in ("limited", "report")
    }
    assert skipped == {"limited": [(sub(1), sub(109), 109)], "report": [(sub(1), sub(111), 111)]}
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


# --- years behind ----------------------------------------------------------------------------
# A job whose occurrence is 10 or 175 years behind is decided in one claim, and what it skipped
# is one summary row however many occurrences it stands for. (How long the decision takes is
# printed by tools/catch_up_bench.py; a test asserts outcomes, not time.)
NOW = utc(2026, 6, 15, 12, 0, 30) + timedelta(milliseconds=500)


def due_since(expr: str, zone: str, created: Any) -> int:
    """How many occurrences fall in (created, NOW], counted from the calendar, not the code:
    elapsed-time jobs at whole-hour offsets fire on UTC's grid; `30 2 * * *` once a local day."""
    period = {"* * * * *": 60, "* * * * * *": 1, "*/5 * * * *": 300}.get(expr)
    if period is not None:
        first = (math.floor(created.timestamp()) // period + 1) * period  # before 1970: < 0
        due: int = (math.floor(NOW.timestamp()) - first) // period + 1
        return due
    tz = load_zone(zone)
    days: int = (NOW.astimezone(tz).date() - created.astimezone(tz).date()).days
    return days


@pytest.mark.parametrize("years", [10, 175])
@pytest.mark.parametrize(
    ("expr", "zone"),
    [
        ("* * * * *", "UTC"),
        ("* * * * * *", "UTC"),
        ("*/5 * * * *", "UTC"),
        ("* * * * *", "America/New_York"),
        ("30 2 * * *", "Europe/Berlin"),
    ],
)
@pytest.mark.parametrize(
    ("policy", "runs"),
    [
        pytest.param({"catch_up": "skip"}, 1, id="skip"),
        pytest.param({"catch_up": "coalesce"}, 1, id="coalesce"),
        pytest.param({"catch_up": "backfill", "backfill_limit": 3}, 3, id="backfill_limit_3"),
    ],
)
async def test_years_behind_is_one_decision_and_one_summary_row(
    store: Store, expr: str, zone: str, years: int, policy: dict[str, Any], runs: int
) -> None:
    created = NOW - timedelta(days=round(365.2425 * years))
    await add(store, spec("late", schedule=expr, timezone=zone, **policy), now=created)
    due = due_since(expr, zone, created)
    seen: list[RunContext] = []
    await drain(store, NOW, seen)
    history = await outcomes(store)
    if expr == "30 2 * * *" and policy["catch_up"] == "skip":
        runs = 0  # its newest occurrence, at 02:30 local, is hours past the 60 s grace
    [(first, last, count)] = history["skipped"]
    assert count == due - runs
    assert history.get("succeeded", []) == [ctx.scheduled_for for ctx in seen]
    assert len(seen) == runs
    assert first < last < (seen[0].scheduled_for if seen else NOW)
    assert len(await store.list_runs(limit=100)) == 1 + runs  # the summary and the runs


async def test_backfill_years_behind_runs_the_oldest_first_one_at_a_time(store: Store) -> None:
    created = NOW - timedelta(days=round(365.2425 * 175))
    await add(store, spec("all", schedule="* * * * * *", catch_up="backfill"), now=created)
    seen: list[RunContext] = []

    async def noop(ctx: RunContext) -> None:
        seen.append(ctx)

    handlers = NodeHandlers({"noop": noop}, "node-a", {})
    for _ in range(3):
        [job] = await store.claim_due("node-a", ALL_SHARDS, 10, lease=30, now=NOW)
        outcome = await run_claim(job, handlers, NOW)
        assert await store.finish_runs([outcome], now=NOW, node="node-a") == {job.key}
    oldest = created.replace(microsecond=0) + timedelta(seconds=1)
    assert [c.scheduled_for for c in seen] == [oldest + timedelta(seconds=k) for k in range(3)]
    assert (await store.get_job("default", "all"))["scheduled_for"] == oldest + timedelta(seconds=3)


async def test_a_decision_far_behind_is_made_off_the_event_loop(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim decision of an occurrence years behind runs in a worker thread (its cost grows
    with the zone's offset changes in between); an on-time one is decided inline."""
    threads: list[str] = []
    decide = planner.plan_claim

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return decide(*args, **kwargs)

    monkeypatch.setattr(dispatch, "plan_claim", spy)
    created = NOW - timedelta(days=3650)
    await add(store, spec("late", timezone="America/New_York", catch_up="coalesce"), now=created)
    await drain(store, NOW, [])
    assert threads[0] != threading.main_thread().name  # the claim 10 years behind
    assert threads[1:] == [threading.main_thread().name]  # the newest occurrence, on time
