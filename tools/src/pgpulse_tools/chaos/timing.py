"""Timing figures of a chaos run: scheduling lag and recovery time (pure; seconds).

* **lag** — start minus max(scheduled_for, the end of the job's previous run), for first
  attempts of occurrences due once every node was up; split into outside fault windows and
  within them (a window lasts from a fault's start to its end plus a lease, two heartbeats and
  a second). A run that waits for its job's previous run is not late: the job never overlaps.
* **recovery** — from a node's kill, pause or partition to the next claim of each job it held
  then (by any node: a killed node comes back under the same id).
* **failover** — from a primary's death (its SIGKILL, or the start of its clean stop) to the
  first claim any node made on the new primary; a failover is *survived* when that claim came
  before the next failover (or the check).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from pgpulse_tools.chaos.history import CLOSING_OUTCOMES, History, RunEvent

#: Faults after which a node's held jobs must be recovered by others.
DEATH_LIKE = frozenset({"kill", "pause", "partition"})
#: pgpulse_runs outcomes that end a run for good (a holder that wrote one was not lost).
FINAL_OUTCOMES = frozenset({"succeeded", "failed", "skipped", "fenced"})
#: Faults that move a replicated cluster's primary.
PRIMARY_MOVES = frozenset({"failover", "switchover"})


def _ts(at: datetime) -> str:
    return at.strftime("%H:%M:%S.%f")[:-3]


def _windows(history: History) -> list[tuple[datetime, datetime]]:
    tail = timedelta(seconds=history.lease + 2 * history.heartbeat + 1)
    return sorted((f.started_at, f.ended_at + tail) for f in history.faults)


def lags(history: History) -> tuple[list[float], list[float]]:
    """Scheduling lag of first attempts in seconds: (outside fault windows, inside them)."""
    closes: dict[int, list[datetime]] = defaultdict(list)
    for event in history.run_events:
        if event.outcome in CLOSING_OUTCOMES and event.token is not None:
            closes[event.job_id].append(event.at)
    for instants in closes.values():
        instants.sort()
    windows = _windows(history)
    steady: list[float] = []
    faulty: list[float] = []
    for execution in history.executions:
        if (
            execution.extra
            or execution.attempt != 1
            or (history.started_at is not None and execution.scheduled_for < history.started_at)
        ):
            continue  # retries wait on purpose; before every node was up is start-up; a
            # backfill's occurrence is late on purpose, a trigger's beside the schedule
        instants = closes.get(execution.job_id, [])
        i = bisect.bisect_right(instants, execution.started_at)
        base = max(execution.scheduled_for, instants[i - 1]) if i else execution.scheduled_for
        lag = (execution.started_at - base).total_seconds()
        inside = any(a <= execution.started_at <= b for a, b in windows)
        (faulty if inside else steady).append(lag)
    return steady, faulty


def recoveries(history: History) -> tuple[list[float], list[str]]:
    """Seconds from each kill, pause or partition to the next claim of each job the node held
    then; and notes: the held jobs never claimed again, then the three slowest recoveries."""
    by_job: dict[int, list[RunEvent]] = defaultdict(list)
    for event in sorted(history.run_events, key=lambda e: (e.at, e.id)):
        by_job[event.job_id].append(event)
    instants = {job_id: [e.at for e in events] for job_id, events in by_job.items()}
    times: list[float] = []
    never: list[str] = []
    slowest: list[tuple[float, str]] = []
    for fault in history.faults:
        if fault.kind not in DEATH_LIKE:
            continue
        for job_id, events in by_job.items():
            split = bisect.bisect_left(instants[job_id], fault.started_at)
            claim = next((e for e in reversed(events[:split]) if e.outcome == "running"), None)
            if claim is None or claim.node_id != fault.target:
                continue
            if any(
                e.token == claim.token and e.outcome in CLOSING_OUTCOMES for e in events[:split]
            ):
                continue  # its claim had ended before the fault
            later = events[split:]
            reclaim = next((e for e in later if e.outcome == "running"), None)
            if any(e.token == claim.token and e.outcome in FINAL_OUTCOMES for e in later):
                continue  # the holder finished it after all (a short partition or pause)
            if reclaim is None:
                never.append(
                    f"job {job_id} held by {fault.target} at its {fault.kind} "
                    f"({_ts(fault.started_at)}) was never claimed again"
                )
                continue
            seconds = (reclaim.at - fault.started_at).total_seconds()
            times.append(seconds)
            slowest.append(
                (
                    seconds,
                    f"{seconds:.1f}s: job {job_id} after {fault.detail} at "
                    f"{_ts(fault.started_at)}, claimed again by "
                    f"{reclaim.node_id}",
                )
            )
    slowest.sort(reverse=True)
    return times, never + [text for _, text in slowest[:3]]


def failovers(history: History) -> tuple[list[float], list[str], list[str]]:
    """Seconds from each primary's death to the first claim on the new primary; the failovers
    never followed by a claim before the next one (or the check); and, per failover, a note."""
    moves = sorted(
        (f for f in history.faults if f.kind in PRIMARY_MOVES and f.died_at is not None),
        key=lambda f: f.died_at or f.started_at,
    )
    claims = sorted(e.at for e in history.run_events if e.outcome == "running")
    times: list[float] = []
    missed: list[str] = []
    notes: list[str] = []
    for i, move in enumerate(moves):
        died = move.died_at
        assert died is not None
        until = moves[i + 1].died_at if i + 1 < len(moves) else history.checked_at
        j = bisect.bisect_right(claims, died)
        if j < len(claims) and until is not None and claims[j] < until:
            seconds = (claims[j] - died).total_seconds()
            times.append(seconds)
            notes.append(f"{seconds:.3f}s: {move.kind} at {_ts(died)}: {move.detail}")
        else:
            missed.append(f"{move.kind} at {_ts(died)}: no claim afterwards ({move.detail})")
    return times, missed, notes


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.4999)))
    return ordered[rank - 1]


def spread(values: Sequence[float], qs: Sequence[float]) -> str:
    """``values`` (seconds) as ``p50 0.012s / ... / max 1.234s / n=42``."""
    if not values:
        return "n=0"
    parts = [f"p{q:g} {percentile(values, q):.3f}s" for q in qs]
    return " / ".join([*parts, f"max {max(values):.3f}s", f"n={len(values)}"])
