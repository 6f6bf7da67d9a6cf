"""How long one catch-up decision takes when a job is years behind (issue 15, item 1).

    .venv/bin/python tools/catch_up_bench.py [--budget 20] [--years 10,175]

For each schedule and each number of years behind, times :func:`pgpulse.core.planner.plan_claim` for
a freshly claimed first attempt whose occurrence is that far behind the claim's instant, under
``skip`` (grace 60 s), ``coalesce`` and ``backfill`` with ``backfill_limit`` 100, and prints the
decision time (best of a few calls, every cache of schedule arithmetic cleared before each: the
figure of a process's first decision) and how many
occurrences it skipped. Only the pure planner runs: no database.

A decision that would take longer than ``--budget`` seconds (the old code walked every missed
occurrence) is not run in full: it is timed over 1, 2, 4... days behind until one takes more
than an eighth of the budget, and that figure, scaled to the years asked for, is printed with
``~`` as an estimate. A benchmark prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from pgpulse.core import schedule as schedule_module
from pgpulse.core.planner import CatchUpPolicy, plan_claim
from pgpulse.core.schedule import parse_schedule

NOW = datetime(2026, 6, 15, 12, 0, 30, tzinfo=UTC)
CASES = [
    ("* * * * *", "UTC"),
    ("* * * * * *", "UTC"),
    ("*/5 * * * *", "UTC"),
    ("* * * * *", "America/New_York"),
    ("30 2 * * *", "Europe/Berlin"),
    ("@every 5m", "UTC"),
]
_CACHING = ("pgpulse.core.schedule", "pgpulse.core.cron", "pgpulse.core.zones")
POLICIES = {
    "skip": CatchUpPolicy("skip", 60.0),
    "coalesce": CatchUpPolicy("coalesce"),
    "backfill100": CatchUpPolicy("backfill", backfill_limit=100),
}


def _clear_caches() -> None:
    """Forget every cached search (next occurrences, calendar tables, zone offset changes), so
    each figure is that of a process's first decision for the job."""
    for module in (importlib.import_module(m) for m in _CACHING if importlib.util.find_spec(m)):
        for name in dir(module):
            cached = getattr(getattr(module, name), "cache_clear", None)
            if cached is not None and name not in ("parse_schedule", "zone_names", "load_zone"):
                cached()


def _decide(expr: str, zone: str, behind: timedelta, policy: CatchUpPolicy) -> tuple[float, Any]:
    sched = parse_schedule(expr, zone)
    first = sched.next_after(NOW - behind, anchor=NOW - behind)
    best, decision = float("inf"), None
    for _ in range(3):
        _clear_caches()
        start = time.perf_counter()
        decision = plan_claim(
            sched,
            policy,
            scheduled_for=first,
            attempt=1,
            max_attempts=3,
            now=NOW,
            anchor=NOW - behind,
        )
        best = min(best, time.perf_counter() - start)
        if best > 1.0:
            break
    return best, decision


def _skipped(decision: Any) -> str:
    advance = decision.advance
    return "0" if advance is None else f"{advance.skipped_count:,}"


def _cell(expr: str, zone: str, years: int, policy: CatchUpPolicy, budget: float) -> str:
    behind = timedelta(days=round(365.2425 * years))
    span = timedelta(days=1)
    while span < behind:  # doubling spans: a decision that grows with them is not run in full
        seconds, _ = _decide(expr, zone, span, policy)
        if seconds > budget / 8:
            return f"~{seconds * (behind / span):,.0f} s (est. from {span.days} days)"
        span *= 2
    seconds, decision = _decide(expr, zone, behind, policy)
    shown = f"{seconds * 1e3:,.2f} ms" if seconds < 10 else f"{seconds:,.1f} s"
    return f"{shown} ({decision.action}, {_skipped(decision)} skipped)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per decision")
    parser.add_argument("--years", default="10,175", help="years behind, comma-separated")
    args = parser.parse_args()
    print(f"pgpulse from {schedule_module.__file__}; claim instant {NOW.isoformat()}")
    for years in (int(y) for y in args.years.split(",")):
        print(f"\n{years} years behind")
        for expr, zone in CASES:
            for label, policy in POLICIES.items():
                cell = _cell(expr, zone, years, policy, args.budget)
                print(f"  {expr:<14} {zone:<17} {label:<12} {cell}", flush=True)


if __name__ == "__main__":
    main()
