"""Schedule arithmetic: cron expressions, macros, ``@every`` intervals and one-off ``@at``
instants (pure, no I/O, no clock).

Every instant going in must be timezone-aware; every instant coming out is an aware UTC datetime.
Cron occurrences fall on whole seconds, as in Vixie cron. Interval occurrences are exactly
``anchor + k * interval`` with the anchor's full microsecond precision (PostgreSQL's timestamptz
and Python's datetime both hold microseconds): keeping the exact anchor spreads jobs created at
different instants over the second instead of aligning them all on whole seconds.

The cron rules are those of Vixie cron as Debian ships it (docs/design.md, invariant 7):

* Day-of-month and day-of-week: if either field starts with ``*`` (or ``?``, read as ``*``) a
  day must match both, otherwise either (Debian cron, ``DOM_STAR``/``DOW_STAR`` in ``entry.c``).
* Daylight saving: a job whose minute or hour field starts with ``*`` follows elapsed time: it
  fires at every matching instant that exists, never inside a skipped hour, in both passes of a
  repeated hour. Any other job is a fixed-time job: a local time inside a skipped hour fires at the
  first instant after the gap, one inside a repeated hour on the first pass only (Debian cron's
  DST handling in ``cron.c``).
* ``a/n`` means ``a-max/n`` (a cronie extension); day-of-week 7 is Sunday, like 0.
* Quartz's day extensions (:mod:`pgpulse.core.cron_days`): ``L`` (last day of the month), ``L-n``,
  ``nW`` (the weekday nearest day n, within the month), ``LW``, ``L-nW`` in day-of-month;
  ``n#k`` (the k-th weekday n, k = 1-5; a month without one does not fire) and ``nL`` (the last
  weekday n) in day-of-week. Each day field is evaluated to the set of days it matches in the
  month, extensions included, and the rule above combines the two sets: ``0 0 ? * 5#2`` is the
  second Friday of each month; ``0 0 15W * 5`` is the weekday nearest the 15th *and* every
  Friday. The DST rules are unchanged: they depend on the minute and hour fields only.

A one-off schedule, ``@at 2026-12-24T18:00:00`` (a wall time in the job's zone) or ``@at
2026-12-24T18:00:00+01:00`` (an instant), has one occurrence. A wall time inside a skipped hour
happens at the first instant after the gap, one inside a repeated hour on its first pass, as a
fixed-time cron job fires. Such a schedule is *finite*: :attr:`Schedule.final` is its instant and
:meth:`Schedule.next_after_or_none` says ``None`` after it (the job is complete), where recurring
schedules never end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo

from pgpulse.core import cron as cron_math
from pgpulse.core import cron_gaps
from pgpulse.core.cron import HORIZON_YEARS, Cron
from pgpulse.core.cron_syntax import describe_cron, invalid, parse_cron
from pgpulse.core.errors import InvalidSchedule, ScheduleEnded
from pgpulse.core.zones import INSTANT_RANGE, fixed_instant, in_instant_range, load_zone

__all__ = ["SCHEDULE_HELP", "Schedule", "parse_schedule"]

SCHEDULE_HELP = """\
Schedules follow Vixie/Debian cron and are read in the job's time zone.
  cron      'minute hour day-of-month month day-of-week', e.g. '30 4 * * mon-fri';
            six fields put seconds first: '*/15 * * * * *'.
            Each field: * 5 1-5 1,15 */10 1-30/10 5/10 (= 5-max/10); names jan-dec and sun-sat;
            day-of-week 0 and 7 are Sunday. When day-of-month and day-of-week both start
            with something other than '*' or '?', a day matching either one fires.
            Day-of-month also: L (last day), L-3, 15W (weekday nearest the 15th), LW, L-2W, ?;
            day-of-week also: 5#2 (second Friday), 5L (last Friday), ?.
  macros    @yearly @annually @monthly @weekly @daily @midnight @hourly
  interval  @every 30s, @every 15m, @every 1h30m, @every 2d (units d h m s, at least 1s)
  delay     @after 10m: the previous run's end plus 10 minutes (units as @every)
  chained   @after alone: no clock, only the runs of its upstreams (the job's `after`)
  one-off   @at 2026-12-24T18:00:00 (in the job's zone), @at 2026-12-24T18:00:00+01:00"""

_SECOND = timedelta(seconds=1)
_MAX_INTERVAL = timedelta(days=3650)
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_EVERY_RE = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
_EVERY_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))
_AT_RE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?",
    re.IGNORECASE,
)
_AT_FORM = "2026-12-24T18:00:00 (in the job's time zone) or 2026-12-24T18:00:00+01:00"


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a job is due: a cron expression (or macro) read in a time zone, or an interval.

    Build one with :func:`parse_schedule`. All methods are pure. Cron schedules follow Vixie
    cron as Debian ships it, including its day-of-month/day-of-week and DST rules (see the
    module docstring); instants in and out are aware datetimes, out always in UTC.

    Attributes:
        expr: the expression as given, stripped.
        timezone: the IANA time zone name the cron fields are read in.
        kind: ``"cron"`` (cron expression or macro), ``"interval"`` (``@every``), ``"once"``
            (``@at``) or ``"delay"`` (``@after``).
        interval: the period of an ``@every`` schedule, else None.
        at: the one occurrence of an ``@at`` schedule (aware UTC), else None.
        delay: an ``@after`` schedule's delay, else None. Its occurrences are not fixed: each
            is the previous run's end plus the delay (db-scheduler's FixedDelay, systemd's
            ``OnUnitInactiveSec``), which the planner places when a run ends
            (:mod:`pgpulse.core.planner`); :meth:`next_after` is ``after`` plus the delay (the
            first occurrence, from the job's creation), and it has no occurrence in the past to
            count, list or backfill.
    """

    expr: str
    timezone: str
    kind: Literal["cron", "interval", "once", "delay"]
    interval: timedelta | None = None
    _zone: ZoneInfo = field(default=ZoneInfo("UTC"), repr=False, compare=False)
    _cron: Cron | None = field(default=None, repr=False, compare=False)
    at: datetime | None = None
    delay: timedelta | None = None

    @property
    def cron(self) -> Cron | None:
        """The parsed fields of a cron schedule, macros expanded (its hours, minutes, seconds and
        whether it follows elapsed time across daylight saving), or None for ``@every``,
        ``@at`` and ``@after``: what a check of its wall times reads (:mod:`pgpulse.core.lint`,
        :mod:`pgpulse.core.why`)."""
        return self._cron

    @property
    def final(self) -> datetime | None:
        """The last occurrence of a finite schedule (an ``@at`` schedule's instant, aware UTC),
        or None for a recurring one (cron, macro, ``@every``), which never ends by design.

        The planner's signal that a job is complete: once its ``scheduled_for`` reaches
        ``final``, :meth:`next_after_or_none` returns None. A cron schedule that cannot fire
        again (past the year 9999, or only DST-skipped wall times) is an error, not an end:
        :meth:`next_after` raises for it.
        """
        return self.at

    def next_after_or_none(
        self, after: datetime, *, anchor: datetime | None = None
    ) -> datetime | None:
        """:meth:`next_after`, or None when a finite schedule has no occurrence after
        ``after`` (an ``@at`` schedule at or past its instant: the job is complete).

        Recurring schedules behave exactly as :meth:`next_after`, raising
        :class:`~pgpulse.core.errors.InvalidSchedule` when they cannot fire again.

        Raises:
            ValueError: ``after`` or ``anchor`` is naive.
            InvalidSchedule: a recurring schedule with no occurrence within 400 years.
        """
        if self.at is not None:
            return self.at if self.at > _utc(after, "after") else None
        return self.next_after(after, anchor=anchor)

    def next_after(self, after: datetime, *, anchor: datetime | None = None) -> datetime:
        """Return the first occurrence strictly later than ``after``.

        A cron schedule is read in its time zone and fires on whole seconds (as Vixie cron): an
        ``after`` with microseconds gives the next whole-second match strictly later. An
        elapsed-time job (minute or hour field starting with ``*``) skips wall times lost to DST
        and fires in both passes of a repeated hour; a fixed-time job fires once per matching
        wall time, just after the gap if that time is skipped, on the first pass if it is
        repeated (Debian cron).

        An interval schedule's occurrences are exactly ``anchor + k * interval`` for every
        integer k, to the microsecond: neither ``anchor`` nor ``after`` is truncated, so a job
        anchored at 12:00:00.357 fires at 12:01:00.357, 12:02:00.357... and jobs created at
        different instants stay spread out instead of falling due together on whole seconds.

        Args:
            after: an aware instant, any zone (typically the current ``scheduled_for``).
            anchor: interval schedules only: an aware instant on the schedule's grid (the job's
                ``anchor_at``), kept to the microsecond. None means ``after`` itself, so the
                result is exactly ``after + interval``. Ignored by cron schedules.

        Returns:
            An aware UTC datetime (``tzinfo=datetime.UTC``) strictly later than ``after``: for
            cron, on a whole second; for an interval, on the anchor's microsecond grid. O(1) for
            intervals.

        Raises:
            ValueError: ``after`` or ``anchor`` is naive.
            InvalidSchedule: no occurrence within 400 years or before the year 10000, or a cron
                schedule whose every matching wall time daylight saving skips in its zone (the
                message says which).
            ScheduleEnded: (an :class:`~pgpulse.core.errors.InvalidSchedule`) a one-off schedule
                at or past its instant; :meth:`next_after_or_none` says None instead.
        """
        start = _utc(after, "after")
        if self.at is not None:
            if self.at > start:
                return self.at
            raise ScheduleEnded(
                f"schedule {self.expr!r}: no occurrence after {start.isoformat()}: "
                f"a one-off schedule fires once, at {self.at.isoformat()}",
                field="schedule",
                value=self.expr,
            )
        if self.delay is not None:
            return start + self.delay
        found: datetime | None
        try:
            if self.interval is not None:
                # timedelta arithmetic is exact integer microseconds: `//` floors, so the result
                # is the first grid point strictly later than `after` (not `after` itself).
                grid = start if anchor is None else _utc(anchor, "anchor")
                return grid + ((start - grid) // self.interval + 1) * self.interval
            # Cron works in whole seconds: the next match after `after` is the next one after
            # its whole second (a match is never between the two).
            found = cron_math.next_after(
                self._cron_fields, self._zone, start.replace(microsecond=0)
            )
        except OverflowError:
            found = None
        if found is None:
            raise self._none_after(start)
        return found

    def last_at_or_before(
        self, moment: datetime, *, anchor: datetime | None = None
    ) -> datetime | None:
        """Return the newest occurrence at or before ``moment`` (the mirror of
        :meth:`next_after`, with the same DST rules), or ``None`` if there is none within 400
        years before it (or before the year 1).

        Args:
            moment: an aware instant, any zone.
            anchor: as for :meth:`next_after`; None means ``moment`` itself is on the grid.

        Raises:
            ValueError: ``moment`` or ``anchor`` is naive.
        """
        end = _utc(moment, "moment")
        if self.at is not None:
            return self.at if self.at <= end else None
        if self.delay is not None:  # no fixed occurrence to look back on
            return None
        try:
            if self.interval is not None:
                grid = end if anchor is None else _utc(anchor, "anchor")
                return grid + ((end - grid) // self.interval) * self.interval
            return cron_math.last_at_or_before(
                self._cron_fields, self._zone, end.replace(microsecond=0)
            )
        except OverflowError:
            return None

    def count_between(
        self, start: datetime, end: datetime, *, anchor: datetime | None = None
    ) -> int:
        """How many occurrences ``t`` have ``start < t <= end`` (what repeated :meth:`next_after`
        calls would give), counted without listing them.

        Args:
            start, end: aware instants, any zone; 0 when ``end <= start``.
            anchor: as for :meth:`next_after`; None means ``start``.

        Returns:
            The count. Intervals: O(1). Cron: calendar arithmetic, corrected for the zone's
            UTC offset changes in the range by running sums
            (:func:`pgpulse.core.cron.count_between`), whatever the range.

        Raises:
            ValueError: a naive instant.
        """
        low, high = _utc(start, "start"), _utc(end, "end")
        if high <= low:
            return 0
        if self.at is not None:
            return int(low < self.at <= high)
        if self.delay is not None:
            return 0
        if self.interval is not None:
            grid = low if anchor is None else _utc(anchor, "anchor")
            return (high - grid) // self.interval - (low - grid) // self.interval
        return cron_math.count_between(
            self._cron_fields, self._zone, low.replace(microsecond=0), high.replace(microsecond=0)
        )

    def newest_at_or_before(
        self, moment: datetime, n: int, *, anchor: datetime | None = None
    ) -> datetime | None:
        """Return the ``n``-th newest occurrence at or before ``moment`` (``n=1``: the newest,
        as :meth:`last_at_or_before`), or ``None`` if there are fewer within 400 years.

        Cron: found by counting (:meth:`count_between`) over a window that doubles back from
        ``moment``, then halving it: some 2 log2(window / n seconds) counts, each over at most
        twice the window, never a walk over the ``n`` occurrences.

        Raises:
            ValueError: a naive instant, or ``n < 1``.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        newest = self.last_at_or_before(moment, anchor=anchor)
        if newest is None or n == 1 or self.at is not None:
            return newest if n == 1 else None
        if self.interval is not None:
            try:
                return newest - (n - 1) * self.interval
            except OverflowError:
                return None
        end = _utc(moment, "moment").replace(microsecond=0)

        # count((end - s, end]) >= n exactly when s > end - (the n-th newest): find the least
        # such span s in whole seconds; the occurrence is then end - s + 1 s.
        def enough(seconds: int) -> bool:
            return self.count_between(end - timedelta(seconds=seconds), end) >= n

        low, high = 0, n
        limit = HORIZON_YEARS * 366 * 86400
        try:
            while not enough(high):
                if high > limit:
                    return None
                low, high = high, high * 2
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (low, middle) if enough(middle) else (middle, high)
        except OverflowError:  # the window reached before the year 1
            return None
        return end - timedelta(seconds=high) + _SECOND

    def occurrences_between(
        self, start: datetime, end: datetime, *, anchor: datetime | None = None, limit: int
    ) -> list[datetime]:
        """Return the occurrences ``t`` with ``start < t <= end``, ascending, at most ``limit``.

        Args:
            start, end: aware instants, any zone (not truncated: an interval occurrence at
                12:00:00.357 is within an ``end`` of 12:00:00.500).
            anchor: as for :meth:`next_after`; None means ``start``.
            limit: the most occurrences to return (the search stops there); must be >= 0.

        Returns:
            Aware UTC datetimes, each what repeated :meth:`next_after` calls would give (a
            one-off schedule's list ends at its instant; an ``@after`` schedule has none).

        Raises:
            ValueError: a naive instant or a negative ``limit``.
        """
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        if self.delay is not None:  # none is fixed ahead of the runs (the class docstring)
            return []
        last = _utc(end, "end")
        grid = start if anchor is None else anchor
        found: list[datetime] = []
        current = start
        while len(found) < limit:
            following = self.next_after_or_none(current, anchor=grid)
            if following is None or following > last:
                break
            found.append(current := following)
        return found

    def shortest_gap(self) -> timedelta | None:
        """The shortest time between two consecutive occurrences, over all time, if it is at
        most a day; else ``None`` (and always for a one-off schedule).

        A cron schedule's is found over every UTC offset its zone has or will have, so the
        short gaps a daylight-saving change makes count
        (:func:`pgpulse.core.cron_gaps.shortest_gap`: the cost is bounded by the zone's data,
        cached per schedule).
        """
        if self.interval is not None:
            return self.interval if self.interval <= timedelta(days=1) else None
        if self.delay is not None:  # at least the delay: a run's end comes after its start
            return self.delay if self.delay <= timedelta(days=1) else None
        if self.at is not None:
            return None
        return cron_gaps.shortest_gap(self._cron_fields, self._zone)

    def longest_gap_at_changes(self, since: datetime) -> timedelta | None:
        """A cron schedule's longest time between consecutive occurrences next to a UTC
        offset change of its zone from ``since`` (aware) on, or ``None`` (none, or not a cron
        schedule): :func:`pgpulse.core.cron_gaps.longest_gap_at_changes`."""
        if self._cron is None:
            return None
        return cron_gaps.longest_gap_at_changes(self._cron, self._zone, _utc(since, "since"))

    @property
    def _cron_fields(self) -> Cron:
        assert self._cron is not None  # parse_schedule sets one of interval, _cron and at
        return self._cron

    def _none_after(self, start: datetime) -> InvalidSchedule:
        """Why a recurring schedule has no occurrence after ``start``: the calendar's end, no
        matching date in 400 years, or every matching wall time skipped by daylight saving."""
        if self._cron is not None and self._cron.elapsed:
            last_year = min(start.year + HORIZON_YEARS, 9999)
            try:
                wall = start.astimezone(self._zone).replace(tzinfo=None, fold=0)
                matches = self._cron.next_wall(wall, last_year) is not None
            except OverflowError:
                matches = False
            if matches:  # its wall times exist on the calendar: DST skips every one of them
                return InvalidSchedule(
                    f"schedule {self.expr!r} never fires in time zone {self.timezone}: every "
                    "time it matches falls in a daylight-saving gap (wall times the clocks "
                    "skip); with a fixed minute and hour (no '*' in either) a time in a gap "
                    "fires just after it",
                    field="schedule",
                    value=self.expr,
                )
        return InvalidSchedule(
            f"schedule {self.expr!r}: no occurrence within {HORIZON_YEARS} years after "
            f"{start.isoformat()} (nor before the year 10000) in time zone {self.timezone}",
            field="schedule",
            value=self.expr,
        )

    def describe(self) -> str:
        """Return a short English description, e.g. ``"at 04:30 on Friday (Europe/London)"``,
        ``"at 10:15 on the last Friday of the month (UTC)"``, ``"once, at 2026-12-24
        18:00:00+01:00 (Europe/Berlin)"`` (a one-off instant in the job's zone, with its UTC
        offset: unambiguous in a repeated hour)."""
        if self.interval is not None:
            return "every " + _describe_interval(self.interval)
        if self.delay is not None:
            return _describe_interval(self.delay, count_one=True) + " after each run ends"
        if self.at == NEVER:
            return "only after its upstreams (after)"
        if self.at is not None:
            try:
                local = self.at.astimezone(self._zone).isoformat(sep=" ")
            except OverflowError:  # stored before @at was bounded: its wall time is past year 9999
                return f"once, at {self.at.isoformat(sep=' ')}"
            return f"once, at {local} ({self.timezone})"
        return f"{describe_cron(self._cron_fields)} ({self.timezone})"


#: Why ``@reboot`` is refused, and what to do instead: one wording for ``schedule next``, job
#: definitions and crontab import.
REBOOT_ADVICE = (
    "Pulse has no reboot event: start the command from your service manager at boot, or run "
    "a job once now with `pgpulse job trigger`"
)


#: The schedule of a job with no clock of its own: it runs only after its upstreams
#: (docs/chains.md). A one-off at the last instant Pulse takes, so it never comes due. With a
#: duration (``@after 10m``) it is a delay after each run's end instead (``kind="delay"``).
AFTER_SCHEDULE = "@after"
#: The instant of ``@after``: the last day of :data:`~pgpulse.core.zones.INSTANT_RANGE`.
NEVER = datetime(9999, 12, 30, tzinfo=UTC)


@lru_cache(maxsize=4096)
def parse_schedule(expr: str, timezone: str = "UTC") -> Schedule:
    """Parse and validate a schedule (cached on ``(expr, timezone)``).

    Args:
        expr: a cron expression (5 fields, or 6 with seconds first), a macro (``@daily``...), an
            interval (``@every 1h30m``) or a one-off instant (``@at 2026-12-24T18:00:00``); see
            :data:`SCHEDULE_HELP`. Cron semantics follow Vixie cron as Debian ships it, ``a/n``
            cronie, and the day extensions Quartz (module docstring).
        timezone: an IANA time zone name the cron fields (and an ``@at`` wall time) are read in.

    Returns:
        The :class:`Schedule`.

    Raises:
        InvalidSchedule: malformed, ``@reboot``, or can never fire (``0 0 30 2 *``); the message
            names the offending cron field and value; ``field="schedule"``, ``value=expr``.
        UnknownTimeZone: ``timezone`` is not an IANA name; ``field="timezone"``.
    """
    text = expr.strip()
    words = text.split()
    head = words[0].lower() if words else ""
    if head == "@every":
        interval = _parse_every(expr, words[1:])
        return Schedule(text, timezone, "interval", interval, load_zone(timezone))
    if head == AFTER_SCHEDULE and len(words) == 1:  # no clock: only after its upstreams
        return Schedule(text, timezone, "once", None, load_zone(timezone), at=NEVER)
    if head == AFTER_SCHEDULE:  # a delay after each run's end
        delay = _parse_every(expr, words[1:], head="@after")
        return Schedule(text, timezone, "delay", None, load_zone(timezone), delay=delay)
    if head == "@at":
        zone = load_zone(timezone)
        return Schedule(text, timezone, "once", None, zone, at=_parse_at(expr, words[1:], zone))
    if head == "@reboot":
        raise invalid(expr, REBOOT_ADVICE)
    if head == "@pulse6":  # a crontab line's marker (pgpulse.core.crontab), not a schedule's
        rest = " ".join(words[1:]) or "*/5 * * * * *"
        raise invalid(
            expr,
            f"@pulse6 marks a crontab line whose schedule has 6 fields; a schedule is the "
            f"fields alone: {rest!r}",
        )
    if head.startswith("@"):
        if head not in _MACROS or len(words) > 1:
            known = ", ".join(_MACROS)
            raise invalid(expr, f"unknown macro {text!r} (known: {known}, @every, @at, @after)")
        words = _MACROS[head].split()
    cron = parse_cron(expr, words)
    return Schedule(text, timezone, "cron", None, load_zone(timezone), cron)


def _parse_at(expr: str, args: list[str], zone: ZoneInfo) -> datetime:
    """The instant of ``@at DATE TIME``: ISO 8601 with ``T`` or a space, seconds and fractions
    optional; with ``Z`` or an offset it is that instant, else a wall time in ``zone`` (inside a
    skipped hour: the first instant after the gap; repeated: the first pass)."""
    moment = " ".join(args)
    if not _AT_RE.fullmatch(moment):
        raise invalid(expr, f"@at {moment!r} is not a date and time: write {_AT_FORM}")
    try:
        parsed = datetime.fromisoformat(moment.upper().replace(" ", "T"))
        instant = in_instant_range(parsed if parsed.tzinfo else fixed_instant(zone, parsed))
    except ValueError as exc:
        raise invalid(expr, f"@at {moment!r} is not a valid date and time ({exc})") from None
    except OverflowError:
        instant = None
    if instant is None:
        raise invalid(expr, f"@at {moment!r} is out of range: Pulse takes instants {INSTANT_RANGE}")
    return instant


def _parse_every(expr: str, args: list[str], *, head: str = "@every") -> timedelta:
    """The duration of ``@every`` or ``@after`` (``head``): 1 s to 3650 days."""
    duration = args[0] if len(args) == 1 else " ".join(args)
    match = _EVERY_RE.fullmatch(duration)
    if not duration or match is None:
        raise invalid(
            expr,
            f"{head} duration {duration!r} is not valid: use whole numbers "
            "with units d, h, m, s in that order (30s, 15m, 1h30m, 2d)",
        )
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    try:
        interval = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        raise invalid(expr, f"{head} duration {duration!r} is too long") from None
    if not _SECOND <= interval <= _MAX_INTERVAL:
        raise invalid(expr, f"{head} duration {duration!r} must be from 1s to 3650d")
    return interval


def _utc(moment: datetime, name: str) -> datetime:
    """``moment`` in UTC, microseconds kept; ValueError naming ``name`` if it is naive."""
    if moment.tzinfo is UTC:
        return moment
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got naive {moment!r}")
    return moment.astimezone(UTC)


def _describe_interval(interval: timedelta, *, count_one: bool = False) -> str:
    """``1 hour 30 minutes``; one unit of one is its unit alone (``every hour``) unless
    ``count_one`` (``1 hour after each run ends``)."""
    rest = int(interval.total_seconds())
    parts: list[str] = []
    for unit, size in _EVERY_UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count > 1 else ''}")
    if len(parts) == 1 and parts[0].startswith("1 ") and not count_one:
        return parts[0][2:]  # "every hour", not "every 1 hour"
    return " ".join(parts)
