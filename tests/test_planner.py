"""Fire planning (pure): catch-up policies, claim decisions, retry backoff — exact instants."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgpulse.planner import (
    MAX_RETRY_DELAY,
    MAX_SKIPPED_RECORDS,
    Advance,
    CatchUpPolicy,
    hold,
    plan_claim,
    retry_delay,
)
from pgpulse.schedule import parse_schedule

T = datetime(2026, 1, 1, tzinfo=UTC)
MINUTELY = parse_schedule("* * * * *")
EVERY_10S = parse_schedule("@every 10s")


def minutes(*ms: int) -> tuple[datetime, ...]:
    return tuple(T + timedelta(minutes=m) for m in ms)


def test_skip_holds_only_the_newest_due_occurrence_within_grace() -> None:
    # Due at 00:01..00:05, now 00:05:20, grace 60 s: only 00:05 may still run.
    plan = hold(MINUTELY, CatchUpPolicy("skip", 60), T + timedelta(minutes=1),
                now=T + timedelta(minutes=5, seconds=20))
    assert plan == Advance(T + timedelta(minutes=5), minutes(1, 2, 3, 4), 4)


def test_skip_past_grace_moves_to_the_next_future_occurrence() -> None:
    plan = hold(MINUTELY, CatchUpPolicy("skip", 10), T + timedelta(minutes=1),
                now=T + timedelta(minutes=5, seconds=20))
    assert plan == Advance(T + timedelta(minutes=6), minutes(1, 2, 3, 4, 5), 5)
    assert plan.scheduled_for > T + timedelta(minutes=5, seconds=20)  # never a past one


def test_on_time_occurrence_runs_under_every_policy() -> None:
    for mode in ("skip", "backfill", "coalesce"):
        policy = CatchUpPolicy(mode, 0)  # type: ignore[arg-type]
        decision = plan_claim(MINUTELY, policy, scheduled_for=T, attempt=1, max_attempts=3,
                              now=T + timedelta(milliseconds=5))
        assert decision.action == ("run" if mode != "skip" else "skip")
    on_time = plan_claim(MINUTELY, CatchUpPolicy("skip", 1), scheduled_for=T, attempt=1,
                         max_attempts=3, now=T + timedelta(milliseconds=5))
    assert on_time.action == "run"


def test_retries_are_never_misfires_and_exhaustion_moves_on() -> None:
    late = T + timedelta(hours=1)
    retry = plan_claim(MINUTELY, CatchUpPolicy("skip", 0), scheduled_for=T, attempt=2,
                       max_attempts=3, now=late)
    assert retry.action == "run"
    exhausted = plan_claim(MINUTELY, CatchUpPolicy("backfill"), scheduled_for=T, attempt=4,
                           max_attempts=3, now=T + timedelta(seconds=5))
    assert exhausted.action == "exhausted"
    assert exhausted.advance == Advance(T + timedelta(minutes=1))


def test_a_triggered_off_schedule_occurrence_runs() -> None:
    triggered = T + timedelta(seconds=17, microseconds=250)
    decision = plan_claim(EVERY_10S, CatchUpPolicy("coalesce"), scheduled_for=triggered,
                          attempt=1, max_attempts=1, now=triggered + timedelta(seconds=1),
                          anchor=T)
    assert decision.action == "run"


def test_skipped_records_are_capped_but_counted() -> None:
    plan = hold(parse_schedule("@every 1s"), CatchUpPolicy("skip", 0), T,
                now=T + timedelta(days=7), anchor=T)
    # now falls exactly on an occurrence: that newest one is not late at all, so it runs.
    assert plan.skipped_count == 7 * 86400
    assert len(plan.skipped) == MAX_SKIPPED_RECORDS
    assert plan.skipped[0] == T and plan.scheduled_for == T + timedelta(days=7)


def brute_force(schedule_expr: str, first: datetime, now: datetime, keep: int,
                anchor: datetime) -> tuple[datetime, int]:
    schedule = parse_schedule(schedule_expr)
    due = [first]
    while (nxt := schedule.next_after(due[-1], anchor=anchor)) <= now:
        due.append(nxt)
    kept = due[-keep:]
    return kept[0], len(due) - len(kept)


@settings(max_examples=300, deadline=None)
@given(
    seconds=st.integers(1, 600),
    offset=st.integers(0, 3600),
    late=st.integers(0, 20_000),
    keep=st.integers(1, 12),
    off_grid=st.booleans(),
)
def test_interval_arithmetic_matches_walking_the_schedule(
    seconds: int, offset: int, late: int, keep: int, off_grid: bool
) -> None:
    expr = f"@every {seconds}s"
    schedule = parse_schedule(expr)
    anchor = T
    first = schedule.next_after(T + timedelta(seconds=offset), anchor=anchor)
    if off_grid:  # a triggered occurrence between two grid points
        first -= timedelta(microseconds=1)
    now = first + timedelta(seconds=late)
    plan = hold(schedule, CatchUpPolicy("backfill", backfill_limit=keep), first, now=now,
                anchor=anchor)
    expected_hold, expected_skipped = brute_force(expr, first, now, keep, anchor)
    assert (plan.scheduled_for, plan.skipped_count) == (expected_hold, expected_skipped)


@pytest.mark.parametrize("attempt", [1, 2, 5, 30])
def test_retry_delay_is_exponential_with_jitter_and_capped(attempt: int) -> None:
    rng = random.Random(attempt)
    ceiling = min(2.0 ** (attempt - 1), MAX_RETRY_DELAY)
    delays = [retry_delay(attempt, 1.0, rng) for _ in range(200)]
    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert max(delays) - min(delays) > ceiling / 10  # jittered, not constant
