"""The chaos check of a concurrency key's limit, on hand-made executions: within the limit it
passes, one execution too many at one instant fails it, and only executions that ended under
a current lease count."""

from __future__ import annotations

from datetime import datetime, timedelta

from helpers import utc
from pgpulse_tools.chaos import keys
from pgpulse_tools.chaos.checker import check
from pgpulse_tools.chaos.history import Execution, History

T0 = utc(2026, 1, 1, 12, 0, 0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def execution(n: int, start: float, end: float, *, lease_ok: bool = True) -> Execution:
    return Execution(
        n,
        n,
        at(start),
        1,
        n,
        f"node-{n % 2}",
        keys.KIND,
        at(start),
        at(end),
        "applied",
        True,
        lease_ok,
    )


def history(*executions: Execution) -> History:
    return History(
        executions=executions,
        run_events=(),
        runs=(),
        jobs=(),
        faults=(),
        settle_at=at(10),
        checked_at=at(20),
        lease=4.0,
        heartbeat=0.5,
    )


def test_two_at_once_under_a_limit_of_two_pass() -> None:
    # back to back (an end and a start at one instant) is not at once
    h = history(execution(1, 0, 1), execution(2, 0.5, 1.5), execution(3, 1, 2))
    assert keys.beyond_limit(h) == []
    assert keys.most_at_once(h).startswith("2 (limit 2;")
    assert check(h).figure("key beyond limit").value == "0"


def test_three_at_once_fail_the_check() -> None:
    h = history(execution(1, 0, 1), execution(2, 0.2, 1), execution(3, 0.4, 1))
    [found] = keys.beyond_limit(h)
    assert found.startswith("chaos-warehouse: 3 executions at once at 12:00:00.400 (limit 2)")
    assert not check(h).ok


def test_an_execution_that_lost_its_lease_is_not_counted() -> None:
    h = history(execution(1, 0, 1), execution(2, 0.2, 1), execution(3, 0.4, 1, lease_ok=False))
    assert keys.beyond_limit(h) == []
