"""Fire planning: which occurrence a job runs next, what is skipped, and when a retry comes.

Pure functions of (schedule, policy, instants) with no I/O and no clock reads — the engine passes
the database's clock in (docs/design.md, invariant 1). The rules are docs/design.md's "Policies":

* ``skip``: occurrences older than ``misfire_grace`` are recorded as skipped; the job moves on to
  the first occurrence that is not (a late one within the grace still runs).
* ``backfill``: every missed occurrence runs, oldest first; ``backfill_limit`` N keeps the newest
  N and records the older ones as skipped.
* ``coalesce``: several missed occurrences run once, as the newest of them; the others are
  recorded as skipped, and the schedule resumes from there.

Interval schedules are planned with exact ``timedelta`` arithmetic (integer microseconds) on
the grid ``anchor + k * interval``, so a sub-second anchor is kept through any downtime (a 60 s
job anchored at :50.357 is still at :50.357 after it; docs/design.md, invariant 7) and the counts of
missed occurrences are exact whatever the anchor's microseconds.

Retries use exponential backoff with jitter ("full jitter" halved: the delay is uniform in
[base * 2**(n-1) / 2, base * 2**(n-1)]), capped at :data:`MAX_RETRY_DELAY` seconds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from pgpulse.core.schedule import Schedule

#: Longest retry delay, seconds.
MAX_RETRY_DELAY = 3600.0
_MICROSECOND = timedelta(microseconds=1)


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
    """Where a job goes next, and the occurrences it skips on the way.

    The skipped occurrences are consecutive occurrences of the schedule, so a count and the
    first and last of them describe them all: the store writes them as one history row however
    many there are (a summary), and no decision lists them.

    Attributes:
        scheduled_for: the occurrence the job holds next (aware UTC; may be <= now when it is
            due at once, e.g. a backfill).
        skipped_count: how many occurrences are skipped (0: none).
        skipped_first: the oldest skipped occurrence (``None`` when none is skipped).
        skipped_last: the newest skipped occurrence (the same as ``skipped_first`` for one).
        complete: the schedule has no occurrence after ``scheduled_for`` (a one-off ``@at``
            whose instant ran or was skipped): the job is ``completed``, holding
            ``scheduled_for``.
    """

    scheduled_for: datetime
    skipped_count: int = 0
    skipped_first: datetime | None = None
    skipped_last: datetime | None = None
    complete: bool = False


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
        (docs/design.md, invariant 7) — but for an ``@after`` schedule, whose next occurrence
        is by definition ``now`` (the run's end) plus its delay.

        A one-off schedule has none after its instant: the advance holds ``after``,
        ``complete``.

    Raises:
        InvalidSchedule: a recurring schedule has no occurrence after ``after`` (see
            :meth:`Schedule.next_after`).
    """
    if schedule.delay is not None:  # @after: from the end of this occurrence's run, now
        return Advance(now + schedule.delay)
    following = schedule.next_after_or_none(after, anchor=anchor)
    if following is None:
        return Advance(after, complete=True)
    return hold(schedule, policy, following, now=now, anchor=anchor)


def hold(
    schedule: Schedule,
    policy: CatchUpPolicy,
    first: datetime,
    *,
    now: datetime,
    anchor: datetime | None = None,
) -> Advance:
    """Apply the catch-up policy to a job whose earliest pending occurrence is ``first``.

    The due occurrences are ``first`` and the schedule's occurrences in (first, now]. They are
    counted, never listed, and only the few that matter are found (the newest, or the
    ``backfill_limit``-th newest), so the cost does not grow with the span missed (docs/design.md,
    invariant 8). The count (:meth:`Schedule.count_between`) is calendar arithmetic, and in a
    zone with daylight saving a difference of two running sums over the zone's offset changes
    (tables made once per schedule and zone), not a step per change in the span. The search for
    the N-th newest (:meth:`Schedule.newest_at_or_before`) counts over windows back from
    ``now`` that grow until they hold N occurrences: its cost depends on N and on how dense
    the schedule is, not on how long ago ``first`` was.

    Args:
        schedule: the job's parsed schedule.
        policy: the job's catch-up policy.
        first: the earliest occurrence not yet run (it may be a triggered, off-schedule one).
        now: the database's current instant (an occurrence is due when ``<= now``, to the
            microsecond).
        anchor: the anchor of an interval schedule, kept to the microsecond (``None``: the
            grid through ``first``).

    Returns:
        The occurrence to hold (``first`` itself when nothing is skipped) and the skipped ones.

    Raises:
        InvalidSchedule: the schedule has no occurrence after the newest due one.
    """
    if first > now or (policy.mode == "backfill" and policy.backfill_limit is None):
        return Advance(first)
    if schedule.delay is not None:
        # @after holds one occurrence at a time: late, it runs (backfill, coalesce: there is no
        # other to run), or under skip past its grace it is missed and the next one is the
        # delay from now, as a run that ended now would place it
        if policy.mode != "skip" or first >= now - timedelta(0, policy.misfire_grace):
            return Advance(first)
        return Advance(now + schedule.delay, 1, first, first)
    anchor = first if anchor is None else anchor
    # Almost always only `first` is due: its successor (cached, and asked again when the run
    # ends) settles that without counting.
    following = schedule.next_after_or_none(first, anchor=anchor)
    if following is None:  # a one-off schedule: `first` is its only occurrence
        if policy.mode != "skip" or first >= now - timedelta(0, policy.misfire_grace):
            return Advance(first)
        return Advance(first, 1, first, first, complete=True)
    due = 1 if following > now else 2 + schedule.count_between(following, now, anchor=anchor)
    if policy.mode == "skip":
        newest = _newest_due(schedule, 1, first, due, now, anchor)
        if newest >= now - timedelta(0, policy.misfire_grace):  # (days, seconds)
            return _skip_older(schedule, first, newest, due - 1, anchor)
        # Even the newest due occurrence is past its grace: skip them all and hold the first
        # future one, so a job late by many periods never runs a stale occurrence.
        after = following if due == 1 else schedule.next_after(newest, anchor=anchor)
        return Advance(after, due, first, newest)
    keep = 1 if policy.mode == "coalesce" else policy.backfill_limit
    assert keep is not None
    if due <= keep:
        return Advance(first)
    held = _newest_due(schedule, keep, first, due, now, anchor)
    return _skip_older(schedule, first, held, due - keep, anchor)


def _newest_due(
    schedule: Schedule, n: int, first: datetime, due: int, now: datetime, anchor: datetime | None
) -> datetime:
    """The ``n``-th newest of the ``due`` due occurrences (``first`` is the oldest of them)."""
    if n >= due:
        return first
    found = schedule.newest_at_or_before(now, n, anchor=anchor)
    assert found is not None and found > first  # due - 1 >= n occurrences lie in (first, now]
    return found


def _skip_older(
    schedule: Schedule, first: datetime, held: datetime, count: int, anchor: datetime | None
) -> Advance:
    """Hold ``held`` and skip the ``count`` due occurrences before it, from ``first`` on."""
    if count == 0:
        return Advance(held)
    if count == 1:
        return Advance(held, 1, first, first)
    last = schedule.last_at_or_before(held - _MICROSECOND, anchor=anchor)
    assert last is not None and last > first
    return Advance(held, count, first, last)


ClaimAction = Literal["run", "skip", "exhausted", "interrupted"]

#: How many attempts of one run may end without an outcome (interruptions: handed back by a
#: stopping node, or reaped after its node lost the lease) before the run ends ``fenced`` and the
#: job moves on. Interruptions are not the handler's failures, which ``max_attempts`` bounds
#: (a deploy during a long run must not use up its attempts); this bound is there so
#: that a job whose handler kills its node still stops. One value for every job (README, "Retries
#: and interruptions").
MAX_INTERRUPTIONS = 10


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    """What to do with a job this node just claimed.

    Attributes:
        action: ``run`` the claimed occurrence; ``skip`` it (misfire: record it and the other
            skipped occurrences, hold ``advance.scheduled_for``); ``interrupted``: earlier
            attempts were interrupted :data:`MAX_INTERRUPTIONS` times, so the run ends
            ``fenced`` and the job moves on; or ``exhausted``: the failed attempts already
            reached ``max_attempts`` (only a run whose limit was lowered meanwhile), ended the
            same way.
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
    interruptions: int = 0,
) -> ClaimDecision:
    """Decide whether a freshly claimed occurrence runs.

    Args:
        schedule: the job's parsed schedule.
        policy: the job's catch-up policy.
        scheduled_for: the claimed occurrence (aware).
        attempt: the attempt number the claim just took (1 = first attempt).
        max_attempts: the job's limit of failed attempts.
        now: the database's instant of the claim.
        anchor: interval anchor, kept to the microsecond (ignored for cron).
        interruptions: how many of the ``attempt - 1`` earlier attempts were interrupted
            (ended without an outcome); the others failed.

    Returns:
        A :class:`ClaimDecision`. Retries (``attempt > 1``) are never misfires: an occurrence
        that started on time finishes its attempts.
    """
    if interruptions >= MAX_INTERRUPTIONS:
        return ClaimDecision(
            "interrupted", advance(schedule, policy, after=scheduled_for, now=now, anchor=anchor)
        )
    if attempt - 1 - interruptions >= max_attempts:
        return ClaimDecision(
            "exhausted", advance(schedule, policy, after=scheduled_for, now=now, anchor=anchor)
        )
    if attempt > 1:
        return _RUN
    plan = hold(schedule, policy, scheduled_for, now=now, anchor=anchor)
    if plan.scheduled_for == scheduled_for and not plan.skipped_count:
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
