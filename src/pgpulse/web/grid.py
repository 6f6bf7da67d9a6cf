"""A job's occurrence grid: one cell per occurrence of the last days, coloured by what became of
it (as Airflow's grid view shows DAG runs). Pure: the job row, its runs and the database's now
in, cells out; :mod:`pgpulse.web.pages` reads the runs and renders the cells.

A cell's state:

==============  ===========================================================================
``succeeded``   the run succeeded (``failed``, ``fenced``: it ended so)
``running``     an attempt runs now; ``retrying``: an attempt failed, the next one is due
``skipped``     the catch-up policy skipped it (one summary row may stand for many cells)
``late``        due, not started, more than ``late_after`` seconds after its occurrence
``due``         due, not started yet, within ``late_after``
``missed``      before the job's current occurrence and no run recorded: it will never run
``paused``      at or after the occurrence a paused job stopped at: it will not run (after
                the running one, for a job whose pause waits for its run's end)
==============  ===========================================================================

A run whose first attempt started more than ``late_after`` seconds after its occurrence keeps
its outcome's state and is flagged ``late`` (an outlined cell). The cells are the schedule's
occurrences in the window united with the runs recorded in it, so a triggered run (an extra
occurrence) and the runs of an edited schedule still show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pgpulse.core.errors import PulseError
from pgpulse.core.schedule import parse_schedule

#: Most cells a grid shows (the newest).
CELLS = 120
#: How far back a grid looks, seconds (7 days).
WINDOW = 7 * 86400.0
#: Seconds after its occurrence past which an unstarted occurrence is late.
LATE_AFTER = 60.0
_TINY = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Cell:
    """One occurrence of the grid.

    Attributes:
        at: the occurrence (aware UTC).
        state: what became of it (module docstring).
        run_id: the run that records it (``None``: no run, e.g. missed or due).
        late: its first attempt started more than ``late_after`` seconds after ``at``.
        detail: one line for people (the hover text).
    """

    at: datetime
    state: str
    run_id: int | None
    late: bool
    detail: str


def window(
    job: dict[str, Any], now: datetime, *, cells: int = CELLS, seconds: float = WINDOW
) -> datetime:
    """The instant after which the grid of ``job`` starts: ``seconds`` before ``now``, but no
    earlier than the ``cells``-th newest occurrence at or before ``now`` (a job firing every
    second shows its last two minutes, not a week), nor than the job's creation.

    Args:
        job: a job row (``schedule``, ``timezone``, ``anchor_at``, ``created_at``).
        now: the database's now (aware).
        cells, seconds: the most cells, the longest look back.
    """
    # strictly after the creation: an interval job's anchor (its creation) is on its grid but
    # is not one of its occurrences, the first is an interval later
    start: datetime = max(now - timedelta(seconds=seconds), job["created_at"])
    try:
        schedule = parse_schedule(job["schedule"], job["timezone"])
        oldest = schedule.newest_at_or_before(now, cells, anchor=job["anchor_at"])
    except (PulseError, OverflowError):
        return start
    return start if oldest is None else max(start, oldest - _TINY)


def _describe(at: datetime, state: str, run: dict[str, Any] | None, note: str) -> str:
    parts = [f"{at:%Y-%m-%d %H:%M:%S} UTC", state]
    if run is not None:
        if run["occurrences"] > 1:
            through = run["last_scheduled_for"]
            parts.append(f"{run['occurrences']:,} occurrences through {through:%Y-%m-%d %H:%M:%S}")
        if run["attempts"]:
            parts.append(
                f"attempt {run['attempts']}" + (f" on {run['node_id']}" if run["node_id"] else "")
            )
        if run["lag"] is not None:
            parts.append(f"lag {run['lag']:.3g} s")
        if run["duration"] is not None:
            parts.append(f"took {run['duration']:.3g} s")
        if run["error"]:
            parts.append(run["error"].strip().split("\n", 1)[0][:120])
    if note:
        parts.append(note)
    return " · ".join(parts)


def _pending(
    job: dict[str, Any], at: datetime, now: datetime, late_after: float
) -> tuple[str, str]:
    """State and note of an occurrence without a run."""
    if at < job["scheduled_for"]:
        return "missed", "no run recorded: the job moved past it"
    if job["status"] == "paused":
        return "paused", "the job is paused"
    if job.get("pause_requested") and at > job["scheduled_for"]:
        return "paused", "the job pauses when its run ends"
    if (now - at).total_seconds() > late_after:
        return "late", f"not started {(now - at).total_seconds():.0f} s after its occurrence"
    return "due", "not started yet"


def occurrence_grid(
    job: dict[str, Any],
    runs: Sequence[dict[str, Any]],
    *,
    after: datetime,
    now: datetime,
    cells: int = CELLS,
    late_after: float = LATE_AFTER,
) -> list[Cell]:
    """The cells of ``job``'s occurrences in ``(after, now]``, oldest first, at most ``cells``
    (the newest).

    Args:
        job: a job row (``schedule``, ``timezone``, ``anchor_at``, ``scheduled_for``,
            ``status``).
        runs: its runs in the window as :meth:`pgpulse.web.reads.Reads.grid_runs` gives them.
        after: the window's start (:func:`window`); now: the database's now.
        cells: the most cells; late_after: seconds (module docstring).
    """
    by_time = {r["scheduled_for"]: r for r in runs}
    summaries = [r for r in runs if r["occurrences"] > 1]
    try:
        schedule = parse_schedule(job["schedule"], job["timezone"])
        times = set(schedule.occurrences_between(after, now, anchor=job["anchor_at"], limit=cells))
    except (PulseError, OverflowError):
        times = set()
    times.update(t for t in by_time if after < t <= now)
    found: list[Cell] = []
    for at in sorted(times)[-cells:]:
        run = by_time.get(at)
        if run is None:
            run = next(
                (s for s in summaries if s["scheduled_for"] <= at <= s["last_scheduled_for"]), None
            )
        if run is not None:
            state = run["outcome"]
            late = run["lag"] is not None and run["lag"] > late_after
            note = "started late" if late else ""
            found.append(Cell(at, state, run["id"], late, _describe(at, state, run, note)))
        else:
            state, note = _pending(job, at, now, late_after)
            found.append(Cell(at, state, None, False, _describe(at, state, None, note)))
    return found


def legend(cells: Sequence[Cell]) -> dict[str, int]:
    """How many cells are in each state, in a fixed order (states with no cell left out)."""
    order = (
        "succeeded",
        "failed",
        "fenced",
        "skipped",
        "running",
        "retrying",
        "late",
        "due",
        "missed",
        "paused",
    )
    counts = {state: sum(1 for c in cells if c.state == state) for state in order}
    return {state: n for state, n in counts.items() if n}
