"""A job's limits: its active window, ``max_runs``, exclusion calendars, auto-pause, and how a
resume treats the occurrences inside a pause (pure: no I/O, no clock).

The rules (README, "Run control"):

* **Window.** No occurrence before ``not_before`` or after ``not_after``. A job holds the first
  occurrence at or after ``not_before``; when the next occurrence would be after ``not_after``
  the job is ``completed``. Occurrences outside the window are not missed: none is recorded.
* **max_runs N.** An occurrence that ran (succeeded, failed or fenced) counts; a skipped one
  does not. After the N-th the job is ``completed``.
* **Calendars.** An occurrence whose local date (in the job's zone) a calendar excludes does not
  run: it and the job's other occurrences of that local date are recorded as one skipped row
  with the reason ``calendar NAME``, and the job holds its next occurrence after that date.
* **Auto-pause.** After ``auto_pause_after`` consecutive failed runs the job is ``paused``, its
  reason recorded; a succeeded run resets the count.
* **Resume modes.** ``skip``: the occurrences inside the pause do not run (recorded as skipped
  when the leader resumes a pause that reached its ``--until``); ``once``: they run once, as the
  newest of them; ``backfill``: each of them runs, oldest first. Occurrences after the resume
  follow the job's own ``catch_up``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, time, timedelta
from typing import Literal

from pgpulse.core.calendars import ExclusionCalendar, is_calendar_name
from pgpulse.core.errors import InvalidInput
from pgpulse.core.planner import Advance, CatchUpPolicy, hold
from pgpulse.core.schedule import Schedule
from pgpulse.core.zones import check_instant_range, load_zone

_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str, field: str) -> float:
    """Seconds of ``text``: ``2h``, ``90m``, ``1h30m``, ``2d``, ``45s`` or plain seconds (as
    ``alert silence --for`` and ``job pause --until`` take them).

    Raises:
        InvalidInput: ``field`` names the option; nothing else matches.
    """
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise InvalidInput(
            f"{field}: {text!r} is not a duration (2h, 90m, 1h30m, 2d, 45s or seconds)",
            field=field,
            value=text,
        )
    days, hours, minutes, seconds = (float(g or 0) for g in match.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def pause_until(value: str, timezone: str, now: datetime) -> datetime:
    """A pause's end: ``value`` as a duration from ``now`` (the database's clock: ``2h``,
    ``90m``, ``1d``; plain digits count as seconds) when it reads as one, else as an instant
    (:func:`parse_instant`, in ``timezone`` without an offset).

    Raises:
        InvalidInput: ``field`` is ``until``: neither, or out of Pulse's instants.
    """
    match = _DURATION.fullmatch(value.strip())
    if match is not None and any(match.groups()):
        seconds = parse_duration(value, "until")
        try:
            later = now + timedelta(seconds=seconds)
        except OverflowError:  # past datetime's range: the range check's own refusal
            later = now.replace(year=9999, month=12, day=31)
        return check_instant_range("until", later, value)
    try:
        datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInput(
            f"until {value!r} is neither a duration (2h, 90m, 1d) nor an instant: write "
            "2026-12-24T18:00:00 (in the job's zone) or add an offset (2026-12-24T18:00:00+01:00)",
            field="until",
            value=value,
        ) from None
    return parse_instant("until", value, timezone)


ResumeMode = Literal["skip", "once", "backfill"]
RESUME_MODES: tuple[ResumeMode, ...] = ("skip", "once", "backfill")

#: Upper bounds: beyond them a value is a mistake (and would overflow an integer column).
MAX_RUNS_LIMIT = 1_000_000_000
AUTO_PAUSE_LIMIT = 1_000_000
_MICROSECOND = timedelta(microseconds=1)


def parse_instant(field_name: str, value: object, timezone: str) -> datetime:
    """An instant given as an aware ``datetime`` or ISO 8601 text (``2026-12-24T18:00:00``,
    with or without an offset; without one it is read in ``timezone``), as aware UTC.

    Raises:
        InvalidInput: ``field`` is ``field_name``: not an instant, or outside
            :data:`~pgpulse.core.zones.EARLIEST_INSTANT` -
            :data:`~pgpulse.core.zones.LATEST_INSTANT`.
    """
    instant: datetime | None = None
    if isinstance(value, datetime):
        instant = value
    elif isinstance(value, str):
        try:
            instant = datetime.fromisoformat(value.strip())
        except ValueError:
            instant = None
    if instant is None:
        raise InvalidInput(
            f"{field_name} {value!r} is not an instant: write 2026-12-24T18:00:00 (in the job's "
            "zone) or add an offset (2026-12-24T18:00:00+01:00)",
            field=field_name,
            value=value,
        )
    if instant.tzinfo is None or instant.utcoffset() is None:
        instant = instant.replace(tzinfo=load_zone(timezone))
    return check_instant_range(field_name, instant, value)


def check_window(
    not_before: object, not_after: object, timezone: str
) -> tuple[datetime | None, datetime | None]:
    """Validate an active window (either end may be ``None``: open).

    Returns:
        (not_before, not_after) as aware UTC instants or ``None``.

    Raises:
        InvalidInput: an end is not an instant (:func:`parse_instant`), or ``not_after`` is
            before ``not_before`` (``field="not_after"``: a window that ends before it starts).
    """
    start = None if not_before is None else parse_instant("not_before", not_before, timezone)
    end = None if not_after is None else parse_instant("not_after", not_after, timezone)
    if start is not None and end is not None and end < start:
        raise InvalidInput(
            f"not_after {end.isoformat()} is before not_before {start.isoformat()}: the window "
            "would end before it starts",
            field="not_after",
            value=end.isoformat(),
        )
    return start, end


def check_calendars(names: Iterable[str]) -> tuple[str, ...]:
    """Calendar names as a job lists them: each a valid name (as
    :meth:`ExclusionCalendar.create` requires), duplicates dropped, sorted. Whether each exists
    is the store's check (it needs the table).

    Raises:
        InvalidInput: ``field="calendars"``: a name that is not valid, or a bare string (which
            would be read as its letters).
    """
    if isinstance(names, str):
        raise InvalidInput(
            f"calendars must be a list of names, got the text {names!r}",
            field="calendars",
            value=names,
        )
    checked = set()
    for name in names:
        if not is_calendar_name(name):
            raise InvalidInput(
                f"calendar name {name!r} is not valid: 1-64 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit",
                field="calendars",
                value=name,
            )
        checked.add(name)
    return tuple(sorted(checked))


def first_in_window(
    schedule: Schedule, *, now: datetime, anchor: datetime, not_before: datetime | None
) -> datetime | None:
    """The occurrence a job holds when it starts at ``now``: the first strictly after ``now``,
    and at or after ``not_before`` (an interval job's grid then starts at ``not_before``).
    ``None``: a one-off schedule whose instant is not after ``now`` (the store decides).

    Returns:
        An aware UTC instant, or ``None``.
    """
    if not_before is not None and not_before > now:
        grid = not_before if schedule.kind == "interval" else anchor
        return schedule.next_after_or_none(not_before - _MICROSECOND, anchor=grid)
    return schedule.next_after_or_none(now, anchor=anchor)


def within_window(
    advance: Advance,
    schedule: Schedule,
    not_after: datetime | None,
    *,
    anchor: datetime | None = None,
) -> Advance:
    """``advance`` with the occurrences it skips after ``not_after`` left out: they are outside
    the window, not missed, and nothing is recorded for them (README, "not_after"). A skip
    that reaches past the window's end stops at its last occurrence in the window and holds the
    first one after it, so the job completes (:func:`completes`). Cost: one schedule step and
    one count, whatever the outage.

    Args:
        advance: the catch-up policy's decision.
        schedule: the job's schedule.
        not_after: the window's end (aware), or ``None``.
        anchor: the interval anchor.
    """
    last = advance.skipped_last
    if not_after is None or last is None or last <= not_after:
        return advance
    first = advance.skipped_first
    assert first is not None
    if first > not_after:  # nothing skipped was inside the window
        return Advance(first)
    inside = schedule.last_at_or_before(not_after, anchor=anchor)
    assert inside is not None and inside >= first
    following = schedule.next_after(inside, anchor=anchor)
    return Advance(
        following, 1 + schedule.count_between(first, inside, anchor=anchor), first, inside
    )


def completes(advance: Advance, *, not_after: datetime | None, runs_left: int | None) -> bool:
    """Whether a job whose run or skip moved it to ``advance`` is now ``completed``: its
    schedule ended (a one-off), its next occurrence is after ``not_after``, or ``runs_left``
    (runs still allowed after this write; ``None``: no limit) is 0."""
    if advance.complete or runs_left == 0:
        return True
    return not_after is not None and advance.scheduled_for > not_after


def calendar_skip(
    schedule: Schedule,
    calendars: Iterable[ExclusionCalendar],
    occurrence: datetime,
    *,
    anchor: datetime | None = None,
) -> tuple[Advance, str] | None:
    """What a claim of ``occurrence`` does when a calendar excludes its local date: skip it and
    the job's other occurrences of that local date (one summary), holding the next one after.

    Args:
        schedule: the job's schedule (its zone gives the local date).
        calendars: the job's calendars.
        occurrence: the claimed occurrence (aware).
        anchor: the interval anchor, as for the planner.

    Returns:
        ``None`` when no calendar excludes the date; else the :class:`Advance` (its first
        skipped occurrence is ``occurrence`` itself) and the reason, ``calendar NAME`` (the
        first calendar, by name, that excludes it). Cost: a few schedule steps, whatever the
        schedule's frequency.
    """
    zone = load_zone(schedule.timezone)
    day = occurrence.astimezone(zone).date()
    excluding = next((c for c in sorted(calendars, key=lambda c: c.name) if c.excludes(day)), None)
    if excluding is None:
        return None
    midnight = datetime.combine(day + timedelta(days=1), time(0), zone)
    day_end = midnight.astimezone(load_zone("UTC")) - _MICROSECOND
    last = schedule.last_at_or_before(day_end, anchor=anchor)
    if last is None or last <= occurrence:
        last = occurrence
    count = 1 + schedule.count_between(occurrence, last, anchor=anchor)
    following = schedule.next_after_or_none(last, anchor=anchor)
    if following is None:
        return Advance(occurrence, 1, occurrence, occurrence, complete=True), excluding.skip_reason
    return Advance(following, count, occurrence, last), excluding.skip_reason


#: How many excluded days :func:`first_to_run` steps over before it gives up (ten years of
#: daily occurrences): a calendar that excludes every date leaves nothing to run.
_MOST_SKIPPED_DAYS = 3660


def first_to_run(
    schedule: Schedule,
    calendars: Iterable[ExclusionCalendar],
    occurrence: datetime,
    *,
    anchor: datetime | None = None,
) -> tuple[datetime | None, str | None]:
    """The first occurrence, from ``occurrence`` on, that ``calendars`` let run, as the claims
    will find it (:func:`calendar_skip` applied until no calendar excludes the date).

    Args:
        schedule: the job's schedule.
        calendars: the job's calendars (none: ``occurrence`` itself).
        occurrence: the job's current occurrence (aware).
        anchor: the interval anchor.

    Returns:
        ``(run, reason)``: the occurrence that will run (``None`` if the schedule ends, or
        every date for ten years is excluded, first) and the reason of the first skip
        (``calendar NAME``), ``None`` when ``occurrence`` itself runs.
    """
    calendars = tuple(calendars)
    first_reason: str | None = None
    for _ in range(_MOST_SKIPPED_DAYS):
        skip = calendar_skip(schedule, calendars, occurrence, anchor=anchor)
        if skip is None:
            return occurrence, first_reason
        advance, reason = skip
        first_reason = first_reason or reason
        if advance.complete:
            return None, first_reason
        occurrence = advance.scheduled_for
    return None, first_reason


def resume_policy(
    policy: CatchUpPolicy,
    occurrence: datetime,
    now: datetime,
    *,
    mode: str | None,
    resumed_at: datetime | None,
) -> tuple[CatchUpPolicy, datetime]:
    """The catch-up policy and the instant to judge ``occurrence`` by: the resume's mode for an
    occurrence inside the pause (at or before ``resumed_at``), else the job's own ``policy``
    at ``now``.

    An occurrence inside the pause is judged at ``resumed_at``: ``skip`` skips every due one
    (no grace: they fell inside the pause), ``once`` coalesces them into the newest, and
    ``backfill`` runs each.
    """
    if mode is None or resumed_at is None or occurrence > resumed_at:
        return policy, now
    if mode == "backfill":
        return CatchUpPolicy("backfill"), now
    if mode == "once":
        return CatchUpPolicy("coalesce"), resumed_at
    return CatchUpPolicy("skip", 0.0), resumed_at


def resumed_run(
    schedule: Schedule,
    occurrence: datetime,
    *,
    mode: str | None,
    resumed_at: datetime,
    not_after: datetime | None = None,
    anchor: datetime | None = None,
) -> datetime | None:
    """The occurrence that runs first after a resume in ``mode`` at ``resumed_at`` left the job
    holding ``occurrence``: the claim's own decision (:func:`resume_policy` and the planner's
    :func:`~pgpulse.core.planner.hold`, as :mod:`pgpulse.node.dispatch` applies them), so what a
    resume says runs is what runs. ``once``: the newest occurrence inside the pause; ``backfill``:
    ``occurrence``, the oldest. ``None``: none runs (past the job's window).
    """
    policy, judged_at = resume_policy(
        CatchUpPolicy("skip", 0.0), occurrence, resumed_at, mode=mode, resumed_at=resumed_at
    )
    plan = within_window(
        hold(schedule, policy, occurrence, now=judged_at, anchor=anchor),
        schedule,
        not_after,
        anchor=anchor,
    )
    if plan.complete or (not_after is not None and plan.scheduled_for > not_after):
        return None
    return plan.scheduled_for


def resume_skip_reason(mode: str | None) -> str:
    """The reason recorded on occurrences a resume's ``mode`` did not run."""
    if mode == "once":
        return "paused: ran once, as a later occurrence"
    return "paused"
