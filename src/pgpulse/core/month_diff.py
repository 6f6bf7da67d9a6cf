"""What a change of definitions does to the next month (pure, no I/O, no clock).

``apply --dry-run`` and ``crontab import --sync --dry-run`` show, after their plan, for each job
the plan creates, updates or deletes, the occurrences it adds and removes over the next 30 days
(:func:`month_diff`: counted, with the first few), and, for a job with occurrences already due
(nodes down, a pause), what the change does to them (:class:`PendingEffect`).

An occurrence here is a logical one (``scheduled_for``): inside the job's window
(``not_before``, ``not_after``) and not on a date its calendars exclude. ``spread`` moves when
an occurrence fires, not which occurrences there are, so it changes nothing here.

The pending occurrences follow the store's rules (:func:`pgpulse.db.writes.start_of`,
:func:`pgpulse.core.planner.hold`): a changed schedule, time zone or window restarts the job at
its first occurrence after now, so the occurrences due are dropped, not run; a changed
``catch_up``, ``misfire_grace`` or ``backfill_limit`` keeps them, and the next claim applies the
new policy to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.errors import InvalidSchedule
from pgpulse.core.jobs import JobSpec
from pgpulse.core.planner import CatchUpPolicy, hold
from pgpulse.core.wording import plural

__all__ = [
    "MONTH",
    "MonthDiff",
    "Pending",
    "PendingEffect",
    "format_month_diff",
    "month_diff",
    "month_document",
]

#: The span compared.
MONTH = timedelta(days=30)
#: The most occurrences of one side listed (a schedule of every second has 2.6 million in a
#: month): past it, the comparison stops at the last instant both sides listed in full.
LIMIT = 20_000
#: Instants shown of each side.
SHOWN = 3
_MICROSECOND = timedelta(microseconds=1)
#: Fields whose change restarts a job's occurrences (:func:`pgpulse.db.writes.start_of`).
_RESTART = ("schedule", "timezone", "not_before", "not_after")
#: Fields whose change the catch-up of the pending occurrences reads.
_POLICY = ("catch_up", "misfire_grace", "backfill_limit")


@dataclass(frozen=True, slots=True)
class Pending:
    """Where a stored job stands (``lint.sql``: ``dry_run_jobs``).

    Attributes:
        scheduled_for: the occurrence it holds (aware UTC); due when at or before now.
        anchor: its interval anchor (aware UTC).
        status: ``idle``, ``running``, ``paused``, ``completed``...
    """

    scheduled_for: datetime
    anchor: datetime | None = None
    status: str = "idle"


@dataclass(frozen=True, slots=True)
class PendingEffect:
    """What a change does to the occurrences a job already has due.

    Attributes:
        due: how many occurrences are due (the held one and the schedule's after it, to now).
        first, last: the oldest and newest of them.
        runs_before, skipped_before: what the current definition does with them.
        runs_after, skipped_after: what the new one does (a restart: 0 run, none recorded).
        restart: the change restarts the job's occurrences (schedule, time zone or window).
        held_after: the occurrence the job holds after the change, when it restarts.
    """

    due: int
    first: datetime
    last: datetime
    runs_before: int
    skipped_before: int
    runs_after: int
    skipped_after: int
    restart: bool
    held_after: datetime | None = None


@dataclass(frozen=True, slots=True)
class MonthDiff:
    """The occurrences a change adds and removes from ``start`` to ``end``.

    Attributes:
        action: the plan's action (``create``, ``update``, ``delete``).
        tenant, name: the job.
        start, end: the span compared, (start, end]; ``end`` is before ``start + MONTH`` when a
            side has more than :data:`LIMIT` occurrences.
        added, removed: how many.
        first_added, first_removed: the first :data:`SHOWN` of each (aware UTC).
        pending: what it does to the occurrences already due, for a change of the catch-up
            policy or of what restarts the job (``None``: neither, or none due).
    """

    action: str
    tenant: str
    name: str
    start: datetime
    end: datetime
    added: int
    removed: int
    first_added: tuple[datetime, ...]
    first_removed: tuple[datetime, ...]
    pending: PendingEffect | None = None


def month_diff(
    action: str,
    old: JobSpec | None,
    new: JobSpec | None,
    *,
    now: datetime,
    pending: Pending | None = None,
    calendars: Mapping[tuple[str, str], ExclusionCalendar] | None = None,
    span: timedelta = MONTH,
) -> MonthDiff:
    """The occurrences in (now, now + span] that ``new`` has and ``old`` has not, and the
    reverse.

    Args:
        action: the plan's action for the job.
        old: the stored definition (``None``: a job created).
        new: the definition to write (``None``: a job deleted).
        now: the database's now (aware).
        pending: where the stored job stands (its held occurrence, anchor, status).
        calendars: the calendars of the jobs' tenants, by (tenant, name); an occurrence on a
            date one the job names excludes is none (a calendar not given excludes nothing).
        span: how far ahead (30 days).

    Raises:
        ValueError: neither ``old`` nor ``new``, or a naive ``now``.
    """
    spec = new or old
    if spec is None:
        raise ValueError("month_diff needs an old or a new definition")
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    known = calendars or {}
    stored_anchor = pending.anchor if pending is not None else None
    ended = pending is not None and pending.status == "completed"
    anchor = stored_anchor if _same_grid(old, new) else _fresh_anchor(new, now)
    if old is not None and new is not None and not ended and _same_occurrences(old, new):
        before = after = []  # a change of payload, policy or spread: the same occurrences
    else:
        before = [] if old is None or ended else _listed(old, now, now + span, stored_anchor, known)
        after = [] if new is None else _listed(new, now, now + span, anchor, known)
    end = now + span
    for side in (before, after):
        if len(side) > LIMIT:
            end = min(end, side[LIMIT - 1])
    old_set = {t for t in before if t <= end}
    new_set = {t for t in after if t <= end}
    added = sorted(new_set - old_set)
    removed = sorted(old_set - new_set)
    effect = None
    if old is not None and new is not None and pending is not None:
        effect = _pending_effect(old, new, pending, now, anchor)
    return MonthDiff(
        action,
        spec.tenant,
        spec.name,
        now,
        end,
        len(added),
        len(removed),
        tuple(added[:SHOWN]),
        tuple(removed[:SHOWN]),
        effect,
    )


def _same_grid(old: JobSpec | None, new: JobSpec | None) -> bool:
    """Whether the stored interval anchor stays (same schedule and zone)."""
    return (
        old is not None
        and new is not None
        and (old.schedule, old.timezone) == (new.schedule, new.timezone)
    )


def _same_occurrences(old: JobSpec, new: JobSpec) -> bool:
    """Whether two definitions have the same occurrences (what they are read from is the
    same): most updates, listed for nothing otherwise."""
    return all(getattr(old, f) == getattr(new, f) for f in (*_RESTART, "calendars"))


def _fresh_anchor(spec: JobSpec | None, now: datetime) -> datetime:
    """A new grid's anchor: now, or a later ``not_before`` (:func:`pgpulse.db.writes.start_of`)."""
    if spec is not None and spec.not_before is not None and spec.not_before > now:
        return spec.not_before
    return now


def _listed(
    spec: JobSpec,
    start: datetime,
    end: datetime,
    anchor: datetime | None,
    calendars: Mapping[tuple[str, str], ExclusionCalendar],
) -> list[datetime]:
    """``spec``'s occurrences in (start, end] within its window and off its calendars' dates,
    at most :data:`LIMIT` + 1 of the schedule's."""
    schedule = spec.parsed_schedule()
    low = start if spec.not_before is None else max(start, spec.not_before - _MICROSECOND)
    high = end if spec.not_after is None else min(end, spec.not_after)
    if high <= low:
        return []
    try:
        found = schedule.occurrences_between(low, high, anchor=anchor or start, limit=LIMIT + 1)
    except InvalidSchedule:  # no occurrence at all: nothing in the month
        return []
    excluding = [
        calendars[(spec.tenant, n)] for n in spec.calendars if (spec.tenant, n) in calendars
    ]
    if not excluding:
        return found
    return [t for t in found if not any(c.excludes_occurrence(t, spec.timezone) for c in excluding)]


def _policy(spec: JobSpec) -> CatchUpPolicy:
    return CatchUpPolicy(spec.catch_up, spec.misfire_grace, spec.backfill_limit)


def _pending_effect(
    old: JobSpec, new: JobSpec, pending: Pending, now: datetime, anchor: datetime | None
) -> PendingEffect | None:
    """What the change does to the occurrences due now, if it changes anything they read."""
    restart = any(getattr(old, f) != getattr(new, f) for f in _RESTART)
    policy = any(getattr(old, f) != getattr(new, f) for f in _POLICY)
    first = pending.scheduled_for
    if not (restart or policy) or first > now or pending.status not in ("idle", "paused"):
        return None
    schedule = old.parsed_schedule()
    grid = pending.anchor or first
    try:
        following = schedule.next_after_or_none(first, anchor=grid)
        due = (
            1
            if following is None or following > now
            else 2 + schedule.count_between(following, now, anchor=grid)
        )
        last = first if due == 1 else schedule.last_at_or_before(now, anchor=grid) or first
        held = hold(schedule, _policy(old), first, now=now, anchor=grid)
        if restart:
            fresh = new.parsed_schedule()
            start = max(now, new.not_before - _MICROSECOND) if new.not_before else now
            after_held = fresh.next_after_or_none(start, anchor=anchor or now)
            return PendingEffect(
                due,
                first,
                last,
                due - held.skipped_count,
                held.skipped_count,
                0,
                0,
                True,
                after_held,
            )
        changed = hold(schedule, _policy(new), first, now=now, anchor=grid)
    except InvalidSchedule:
        return None
    return PendingEffect(
        due,
        first,
        last,
        due - held.skipped_count,
        held.skipped_count,
        due - changed.skipped_count,
        changed.skipped_count,
        False,
    )


# -- output -----------------------------------------------------------------------------------

_MARKS = {"create": "+", "update": "~", "delete": "-"}


def _instant(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S}Z"


def format_month_diff(diff: MonthDiff) -> list[str]:
    """Lines a person reads: ``~ tenant/name: +N -M occurrences``, then the first added and
    removed instants, and what happens to the pending occurrences."""
    label = diff.name if diff.tenant == "default" else f"{diff.tenant}/{diff.name}"
    head = f"{_MARKS.get(diff.action, '~')} {label}: +{diff.added} -{diff.removed}"
    if diff.end < diff.start + MONTH:
        head += f" (to {_instant(diff.end)}: more than {LIMIT:,} occurrences)"
    lines = [head]
    for word, count, first in (
        ("added", diff.added, diff.first_added),
        ("removed", diff.removed, diff.first_removed),
    ):
        if count:
            more = ", ..." if count > len(first) else ""
            lines.append(f"    {word}: {', '.join(_instant(t) for t in first)}{more}")
    if diff.pending is not None:
        lines.append("    " + pending_text(diff.pending))
    return lines


def pending_text(effect: PendingEffect) -> str:
    """The pending occurrences' fate, in one line."""
    span = (
        _instant(effect.first)
        if effect.due == 1
        else f"{_instant(effect.first)} to {_instant(effect.last)}"
    )
    now = f"now {effect.runs_before} run, {effect.skipped_before} skipped"
    if effect.restart:
        held = "" if effect.held_after is None else f" at {_instant(effect.held_after)}"
        after = f"after the change none runs: the job restarts{held}"
    else:
        after = f"after the change {effect.runs_after} run, {effect.skipped_after} skipped"
    return f"pending: {plural(effect.due, 'occurrence')} due ({span}): {now}; {after}"


def month_document(diff: MonthDiff) -> dict[str, Any]:
    """A diff as JSON: ``from``, ``to``, ``added``, ``removed`` (counts), ``first_added``,
    ``first_removed`` (UTC ISO 8601) and ``pending`` (``null``, or its counts and whether the
    change restarts the job)."""
    effect = diff.pending
    return {
        "from": diff.start.astimezone(UTC).isoformat(),
        "to": diff.end.astimezone(UTC).isoformat(),
        "added": diff.added,
        "removed": diff.removed,
        "first_added": [t.astimezone(UTC).isoformat() for t in diff.first_added],
        "first_removed": [t.astimezone(UTC).isoformat() for t in diff.first_removed],
        "pending": None
        if effect is None
        else {
            "due": effect.due,
            "first": effect.first.astimezone(UTC).isoformat(),
            "last": effect.last.astimezone(UTC).isoformat(),
            "before": {"runs": effect.runs_before, "skipped": effect.skipped_before},
            "after": {"runs": effect.runs_after, "skipped": effect.skipped_after},
            "restart": effect.restart,
            "held_after": None
            if effect.held_after is None
            else effect.held_after.astimezone(UTC).isoformat(),
        },
    }
