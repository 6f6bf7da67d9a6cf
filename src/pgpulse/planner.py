"""Fire planning: which occurrence a job runs next, what is skipped, and when a retry comes.

Pure functions of (schedule, policy, instants) with no I/O and no clock reads — the engine passes
the database's clock in (design.md, invariant 1). The rules are design.md's "Policies":

* ``skip``: occurrences older than ``misfire_grace`` are recorded as skipped; the job moves on to
  the first occurrence that is not (a late one within the grace still runs).
* ``backfill``: every missed occurrence runs, oldest first; ``backfill_limit`` N keeps the newest
  N and records the older ones as skipped.
* ``coalesce``: several missed occurrences run once, as the newest of them; the others are
  recorded as skipped, and the schedule resumes from there.

Interval schedules are planned with exact ``timedelta`` arithmetic (integer microseconds) on
the grid ``anchor + k * interval``, so a sub-second anchor is kept through any downtime (a 60 s
job anchored at :50.357 is still at :50.357 after it; design.md, invariant 7) and the counts of
missed occurrences are exact whatever the anchor's microseconds.

Retries use exponential backoff with jitter ("full jitter" halved: the delay is uniform in
[base * 2**(n-1) / 2, base * 2**(n-1)]), capped at :data:`MAX_RETRY_DELAY` seconds.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from pgpulse.schedule import Schedule

#: At most this many skipped occurrences are written as ``pgpulse_runs`` rows per catch-up decision;
#: the rest are counted (``Advance.skipped_count``) so a week of a one-second job cannot flood
#: the history table.
MAX_SKIPPED_RECORDS = 1000
#: Longest retry delay, seconds.
MAX_RETRY_DELAY = 3600.0
_CHUNK = 512


@dataclass(frozen=True, slots=True)
class CatchUpPolicy:
    """A job's catch-up settings.

    Attributes:
        mode: ``skip``, ``backfill`` or ``coalesce``.
        misfire_grace: seconds an occurrence may be late and still run under ``skip``.
        backfill_limit: with ``backfill``, how many of the newest missed occurrences run
            (``None``: all of them).
    """

    mode: Literal["skip", "backfill", "coalesce"]
    misfire_grace: float = 60.0
    backfill_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Advance:
    """Where a job goes next.

    Attributes:
        scheduled_for: the occurrence the job holds next (aware UTC; may be <= now when it is
            due at once, e.g. a backfill).
        skipped: occurrences to record as skipped, oldest first (at most
            :data:`MAX_SKIPPED_RECORDS`).
        skipped_count: how many occurrences were skipped in all (>= ``len(skipped)``).
    """

    scheduled_for: datetime
    skipped: tuple[datetime, ...] = ()
    skipped_count: int = 0


def advance(
    schedule: Schedule,
    policy: CatchUpPolicy,
    *,
    after: datetime,
    now: datetime,
    anchor: datetime | None = None,
) -> Advance:
    """Return the job's next occurrence after ``after``, with the catch-up policy applied.

    Args:
        schedule: the job's parsed schedule.
        policy: the job's catch-up policy.
        after: occurrences strictly later than this instant are candidates (normally the
            ``scheduled_for`` that just finished).
        now: the database's current instant (aware; microseconds count).
        anchor: the anchor of an interval schedule, kept to the microsecond (ignored for cron).

    Returns:
        An :class:`Advance`. The next occurrence is computed from ``after``, never from when a
        run finished, so schedules do not drift and an interval job keeps its exact anchor
        (design.md, invariant 7).
    """
    return hold(schedule, policy, schedule.next_after(after, anchor=anchor), now=now, anchor=anchor)


def hold(
    schedule: Schedule,
    policy: CatchUpPolicy,
    first: datetime,
    *,
    now: datetime,
    anchor: datetime | None = None,
) -> Advance:
    """Apply the catch-up policy to a job whose earliest pending occurrence is ``first``.

    Args:
        schedule: the job's parsed schedule.
        policy: the job's catch-up policy.
        first: the earliest occurrence not yet run (it may be a triggered, off-schedule one).
        now: the database's current instant (an occurrence is due when ``<= now``, to the
            microsecond).
        anchor: the anchor of an interval schedule, kept to the microsecond.

    Returns:
        The occurrence to hold (``first`` itself when nothing is skipped) and the skipped ones.
    """
    if first > now or (policy.mode == "backfill" and policy.backfill_limit is None):
        return Advance(first)
    if policy.mode == "skip":
        return _advance_skip(schedule, policy.misfire_grace, first, now, anchor)
    keep = 1 if policy.mode == "coalesce" else policy.backfill_limit
    assert keep is not None
    return _advance_keep_newest(schedule, keep, first, now, anchor)


def _advance_skip(
    schedule: Schedule, grace: float, first: datetime, now: datetime, anchor: datetime | None
) -> Advance:
    """Hold the newest due occurrence if it is within the grace; skip every older one.

    If even the newest due occurrence is older than ``now - grace``, it is skipped too and the
    job holds its first future occurrence. So a job late by many periods never runs a burst of
    stale occurrences, and never holds an occurrence that is already past its grace.
    """
    newest = _advance_keep_newest(schedule, 1, first, now, anchor)
    if newest.scheduled_for >= now - timedelta(0, grace):  # (days, seconds), once per run
        return newest
    skipped = newest.skipped
    if len(skipped) < MAX_SKIPPED_RECORDS:
        skipped = (*skipped, newest.scheduled_for)
    return Advance(
        schedule.next_after(newest.scheduled_for, anchor=anchor), skipped, newest.skipped_count + 1
    )


def _advance_keep_newest(
    schedule: Schedule, keep: int, first: datetime, now: datetime, anchor: datetime | None
) -> Advance:
    """Hold the oldest of the newest ``keep`` due occurrences; skip the older ones.

    ``first`` is due (``first <= now``). Interval schedules are counted arithmetically (O(1) in
    the length of the downtime, exact to the microsecond); cron schedules are walked in chunks.
    """
    if schedule.kind == "interval":
        return _keep_newest_interval(schedule, keep, first, now, anchor)
    newest: deque[datetime] = deque([first], maxlen=keep)
    skipped: list[datetime] = []
    count = 0
    cursor = first
    while True:
        batch = schedule.occurrences_between(cursor, now, anchor=anchor, limit=_CHUNK)
        for occurrence in batch:
            if len(newest) == keep:
                count += 1
                if len(skipped) < MAX_SKIPPED_RECORDS:
                    skipped.append(newest[0])
            newest.append(occurrence)
        if len(batch) < _CHUNK:
            break
        cursor = batch[-1]
    return Advance(newest[0], tuple(skipped), count)


def _keep_newest_interval(
    schedule: Schedule, keep: int, first: datetime, now: datetime, anchor: datetime | None
) -> Advance:
    """Interval case of :func:`_advance_keep_newest`: the due occurrences are ``first`` and the
    grid points ``grid_first + k * step`` (k >= 0) that are ``<= now``, counted in O(1).

    ``first`` may be off the grid (a triggered occurrence). The grid is the anchor's own, to the
    microsecond (``anchor=None``: the grid through ``first``, as :meth:`Schedule.next_after`).
    ``timedelta // timedelta`` floors exact integer microseconds, so the count has no rounding.
    """
    step = schedule.interval
    assert step is not None
    grid_first = schedule.next_after(first, anchor=anchor)  # first may be off the grid (trigger)
    on_grid = 0 if grid_first > now else (now - grid_first) // step + 1
    due = 1 + on_grid
    if due <= keep:
        return Advance(first)

    def occurrence(i: int) -> datetime:  # i-th due occurrence, 0 = first
        return first if i == 0 else grid_first + (i - 1) * step

    count = due - keep
    skipped = tuple(occurrence(i) for i in range(min(count, MAX_SKIPPED_RECORDS)))
    return Advance(occurrence(count), skipped, count)


ClaimAction = Literal["run", "skip", "exhausted"]


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    """What to do with a job this node just claimed.

    Attributes:
        action: ``run`` the claimed occurrence; ``skip`` it (misfire: record it and the other
            skipped occurrences, hold ``advance.scheduled_for``); or ``exhausted``: the attempt
            counter passed ``max_attempts`` (earlier attempts lost their leases), so the run
            ends ``fenced`` and the job moves on.
        advance: where the job goes when the action is not ``run``.
    """

    action: ClaimAction
    advance: Advance | None = None


#: The decision of almost every claim (immutable, so shared).
_RUN = ClaimDecision("run")


def plan_claim(
    schedule: Schedule,
    policy: CatchUpPolicy,
    *,
    scheduled_for: datetime,
    attempt: int,
    max_attempts: int,
    now: datetime,
    anchor: datetime | None = None,
) -> ClaimDecision:
    """Decide whether a freshly claimed occurrence runs.

    Args:
        schedule: the job's parsed schedule.
        policy: the job's catch-up policy.
        scheduled_for: the claimed occurrence (aware).
        attempt: the attempt number the claim just took (1 = first attempt).
        max_attempts: the job's attempt limit.
        now: the database's instant of the claim.
        anchor: interval anchor, kept to the microsecond (ignored for cron).

    Returns:
        A :class:`ClaimDecision`. Retries (``attempt > 1``) are never misfires: an occurrence
        that started on time finishes its attempts.
    """
    if attempt > max_attempts:
        return ClaimDecision(
            "exhausted", advance(schedule, policy, after=scheduled_for, now=now, anchor=anchor)
        )
    if attempt > 1:
        return _RUN
    plan = hold(schedule, policy, scheduled_for, now=now, anchor=anchor)
    if plan.scheduled_for == scheduled_for:
        return _RUN
    return ClaimDecision("skip", plan)


def retry_delay(attempt: int, base: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before attempt ``attempt + 1`` after attempt ``attempt`` failed.

    Args:
        attempt: the attempt that just failed (1-based).
        base: the job's ``retry_backoff`` in seconds.
        rng: a random source (tests pass a seeded one).

    Returns:
        A delay uniform in [d/2, d] with d = min(base * 2**(attempt-1), MAX_RETRY_DELAY):
        exponential backoff with jitter, so retries of many jobs failing together spread out.
    """
    ceiling = min(base * 2.0 ** max(attempt - 1, 0), MAX_RETRY_DELAY)
    return (rng or random).uniform(ceiling / 2, ceiling)


def first_occurrence(schedule: Schedule, *, now: datetime, anchor: datetime) -> datetime:
    """The occurrence a job holds when it starts (again) at ``now``: created, given a new
    schedule or time zone (``anchor`` is ``now``: an interval job's grid starts there), or resumed
    after a pause (``anchor`` is the job's own, so an interval job stays on its grid).

    It is the first occurrence strictly after ``now``: starting a job never makes an occurrence
    due at once (``trigger`` does that), and pausing means "not these" (the occurrences that fell
    inside the pause never run).

    Args:
        schedule: the job's parsed schedule.
        now: the database's instant (aware).
        anchor: the interval anchor (ignored for cron).
    """
    return schedule.next_after(now, anchor=anchor)
