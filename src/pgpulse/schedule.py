"""Schedule arithmetic: cron expressions, macros and ``@every`` intervals (pure, no I/O, no clock).

Every instant going in must be timezone-aware; every instant coming out is an aware UTC datetime.
Cron occurrences fall on whole seconds, as in Vixie cron. Interval occurrences are exactly
``anchor + k * interval`` with the anchor's full microsecond precision (PostgreSQL's timestamptz
and Python's datetime both hold microseconds): keeping the exact anchor spreads jobs created at
different instants over the second instead of aligning them all on whole seconds.

The cron rules are those of Vixie cron as Debian ships it (design.md, invariant 7):

* Day-of-month and day-of-week: if either field starts with ``*`` a day must match both,
  otherwise either (Debian cron, ``DOM_STAR``/``DOW_STAR`` in ``entry.c``).
* Daylight saving: a job whose minute or hour field starts with ``*`` follows elapsed time: it
  fires at every matching instant that exists, never inside a skipped hour, in both passes of a
  repeated hour. Any other job is a fixed-time job: a local time inside a skipped hour fires at the
  first instant after the gap, one inside a repeated hour on the first pass only (Debian cron's
  DST handling in ``cron.c``).
* ``a/n`` means ``a-max/n`` (a cronie extension); day-of-week 7 is Sunday, like 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo

from pgpulse import cron as cron_math
from pgpulse.cron import HORIZON_YEARS, Cron
from pgpulse.errors import InvalidSchedule
from pgpulse.zones import load_zone

__all__ = ["SCHEDULE_HELP", "Schedule", "parse_schedule"]

SCHEDULE_HELP = """\
Schedules follow Vixie/Debian cron and are read in the job's time zone.
  cron      'minute hour day-of-month month day-of-week', e.g. '30 4 * * mon-fri';
            six fields put seconds first: '*/15 * * * * *'.
            Each field: * 5 1-5 1,15 */10 1-30/10 5/10 (= 5-max/10); names jan-dec and sun-sat;
            day-of-week 0 and 7 are Sunday. When day-of-month and day-of-week both start
            with something other than '*', a day matching either one fires.
  macros    @yearly @annually @monthly @weekly @daily @midnight @hourly
  interval  @every 30s, @every 15m, @every 1h30m, @every 2d (units d h m s, at least 1s)"""

_SECOND = timedelta(seconds=1)
_MAX_INTERVAL = timedelta(days=3650)
_MONTH_NAMES = (
    "",
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# (field name, lowest value, highest value, names accepted for values)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {n[:3].lower(): i for i, n in enumerate(_MONTH_NAMES) if n}),
    ("day-of-week", 0, 7, {n[:3].lower(): i for i, n in enumerate(_DAY_NAMES)}),
)
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


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a job is due: a cron expression (or macro) read in a time zone, or an interval.

    Build one with :func:`parse_schedule`. All methods are pure. Cron schedules follow Vixie
    cron as Debian ships it, including its day-of-month/day-of-week and DST rules (see the
    module docstring); instants in and out are aware datetimes, out always in UTC.

    Attributes:
        expr: the expression as given, stripped.
        timezone: the IANA time zone name the cron fields are read in.
        kind: ``"cron"`` (cron expression or macro) or ``"interval"`` (``@every``).
        interval: the period of an ``@every`` schedule, else None.
    """

    expr: str
    timezone: str
    kind: Literal["cron", "interval"]
    interval: timedelta | None = None
    _zone: ZoneInfo = field(default=ZoneInfo("UTC"), repr=False, compare=False)
    _cron: Cron | None = field(default=None, repr=False, compare=False)

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
            InvalidSchedule: no occurrence within 400 years (a cron schedule that only matches
                wall times skipped by DST in its zone, e.g.), or none before the year 10000.
        """
        start = _utc(after, "after")
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
            The count. Intervals: O(1). Cron: calendar arithmetic, plus a correction for each
            change of the zone's UTC offset in the range (about two a year).

        Raises:
            ValueError: a naive instant.
        """
        low, high = _utc(start, "start"), _utc(end, "end")
        if high <= low:
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
        if newest is None or n == 1:
            return newest
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
            Aware UTC datetimes, each what repeated :meth:`next_after` calls would give.

        Raises:
            ValueError: a naive instant or a negative ``limit``.
        """
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        last = _utc(end, "end")
        grid = start if anchor is None else anchor
        found: list[datetime] = []
        current = start
        while len(found) < limit:
            current = self.next_after(current, anchor=grid)
            if current > last:
                break
            found.append(current)
        return found

    @property
    def _cron_fields(self) -> Cron:
        assert self._cron is not None  # parse_schedule sets exactly one of interval and _cron
        return self._cron

    def _none_after(self, start: datetime) -> InvalidSchedule:
        return InvalidSchedule(
            f"schedule {self.expr!r}: no occurrence within {HORIZON_YEARS} years after "
            f"{start.isoformat()} (nor before the year 10000) in time zone {self.timezone}",
            field="schedule",
            value=self.expr,
        )

    def describe(self) -> str:
        """Return a short English description, e.g. ``"at 04:30 on Friday (Europe/London)"``."""
        if self.interval is not None:
            return "every " + _describe_interval(self.interval)
        assert self._cron is not None
        parts = (_describe_time(self._cron), _describe_days(self._cron))
        return " ".join(p for p in parts if p) + f" ({self.timezone})"


@lru_cache(maxsize=4096)
def parse_schedule(expr: str, timezone: str = "UTC") -> Schedule:
    """Parse and validate a schedule (cached on ``(expr, timezone)``).

    Args:
        expr: a cron expression (5 fields, or 6 with seconds first), a macro (``@daily``...) or
            an interval (``@every 1h30m``); see :data:`SCHEDULE_HELP`. Cron semantics follow
            Vixie cron as Debian ships it; ``a/n`` follows cronie.
        timezone: an IANA time zone name the cron fields are read in.

    Returns:
        The :class:`Schedule`.

    Raises:
        InvalidSchedule: malformed, ``@reboot``, or can never fire (``0 0 30 2 *``); the message
            names the offending cron field; ``field="schedule"``, ``value=expr``.
        UnknownTimeZone: ``timezone`` is not an IANA name; ``field="timezone"``.
    """
    text = expr.strip()
    words = text.split()
    head = words[0].lower() if words else ""
    if head == "@every":
        interval = _parse_every(expr, words[1:])
        return Schedule(text, timezone, "interval", interval, load_zone(timezone))
    if head == "@reboot":
        raise _invalid(expr, "Pulse has no reboot event; use a one-off trigger instead")
    if head.startswith("@"):
        if head not in _MACROS or len(words) > 1:
            raise _invalid(expr, f"unknown macro {text!r} (known: {', '.join(_MACROS)}, @every)")
        words = _MACROS[head].split()
    cron = _parse_cron(expr, words)
    return Schedule(text, timezone, "cron", None, load_zone(timezone), cron)


def _invalid(expr: str, reason: str) -> InvalidSchedule:
    return InvalidSchedule(f"schedule {expr!r}: {reason}", field="schedule", value=expr)


def _parse_every(expr: str, args: list[str]) -> timedelta:
    duration = args[0] if len(args) == 1 else " ".join(args)
    match = _EVERY_RE.fullmatch(duration)
    if not duration or match is None:
        raise _invalid(
            expr,
            f"@every duration {duration!r} is not valid: use whole numbers "
            "with units d, h, m, s in that order (30s, 15m, 1h30m, 2d)",
        )
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    try:
        interval = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        raise _invalid(expr, f"@every duration {duration!r} is too long") from None
    if not _SECOND <= interval <= _MAX_INTERVAL:
        raise _invalid(expr, f"@every duration {duration!r} must be from 1s to 3650d")
    return interval


def _parse_cron(expr: str, words: list[str]) -> Cron:
    if len(words) not in (5, 6):
        raise _invalid(expr, f"expected 5 fields (or 6 with seconds first), got {len(words)}")
    texts = tuple(words) if len(words) == 6 else ("0", *words)
    sec, mins, hrs, doms, months, dows = (
        _parse_field(expr, index, text) for index, text in enumerate(texts)
    )
    dows = frozenset(d % 7 for d in dows)
    day_or = not (texts[3].startswith("*") or texts[5].startswith("*"))
    if not day_or and not any(d <= _MAX_DAYS[m] for m in months for d in doms):
        month_list = _join([_MONTH_NAMES[m] for m in sorted(months)], "or")
        raise _invalid(
            expr,
            f"day-of-month field: {texts[3]} never occurs in {month_list}, "
            "so the schedule can never fire",
        )

    def matches(day: int, weekday: int) -> bool:
        return (day in doms or weekday in dows) if day_or else (day in doms and weekday in dows)

    month_days = {  # cron weekday of day d when the 1st is Python weekday f: (f + d) % 7
        (length, first): tuple(d for d in range(1, length + 1) if matches(d, (first + d) % 7))
        for length in range(28, 32)
        for first in range(7)
    }
    return Cron(
        texts,
        len(words) == 6,
        tuple(sorted(sec)),
        tuple(sorted(mins)),
        tuple(sorted(hrs)),
        tuple(sorted(doms)),
        months,
        tuple(sorted(dows)),
        day_or,
        texts[1].startswith("*") or texts[2].startswith("*"),
        month_days,
    )


def _parse_field(expr: str, index: int, text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _field_error(expr, index, f"empty list item in {text!r}")
        base, slash, step_text = item.partition("/")
        if slash and not (step_text.isascii() and step_text.isdigit()):
            raise _field_error(expr, index, f"step {step_text!r} is not a number")
        step = int(step_text) if slash else 1
        if step == 0:
            raise _field_error(expr, index, f"step 0 in {item!r} is not allowed (minimum 1)")
        if base == "*":
            first, last = _FIELDS[index][1:3]
        elif "-" in base:
            start, _, stop = base.partition("-")
            first, last = _field_value(expr, index, start), _field_value(expr, index, stop)
            if first > last:
                raise _field_error(expr, index, f"range {base!r} is reversed (start after end)")
        else:
            first = _field_value(expr, index, base)
            last = _FIELDS[index][2] if slash else first  # cronie: 'a/n' means 'a-max/n'
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _field_value(expr: str, index: int, token: str) -> int:
    _, low, high, names = _FIELDS[index]
    if token.lower() in names:
        return names[token.lower()]
    if not (token.isascii() and token.isdigit()):
        kind = "a number or a name" if names else "a number"
        raise _field_error(expr, index, f"{token!r} is not {kind}")
    if not low <= int(token) <= high:
        raise _field_error(expr, index, f"{int(token)} is out of range {low}-{high}")
    return int(token)


def _field_error(expr: str, index: int, reason: str) -> InvalidSchedule:
    return _invalid(expr, f"{_FIELDS[index][0]} field: {reason}")


def _utc(moment: datetime, name: str) -> datetime:
    """``moment`` in UTC, microseconds kept; ValueError naming ``name`` if it is naive."""
    if moment.tzinfo is UTC:
        return moment
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got naive {moment!r}")
    return moment.astimezone(UTC)


# --- describe --------------------------------------------------------------------------------


def _join(items: Sequence[str], word: str = "and") -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _values(values: tuple[int, ...], names: Sequence[str] = ()) -> str:
    def label(v: int) -> str:
        return names[v] if names else str(v)

    step = values[1] - values[0] if len(values) >= 4 else 0
    if step > 1 and values == tuple(range(values[0], values[-1] + 1, step)):
        return f"{label(values[0])} through {label(values[-1])} in steps of {step}"
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    parts: list[str] = []
    for low, high in runs:
        if high - low >= 2:
            parts.append(f"{label(low)} through {label(high)}")
        else:
            parts.extend(label(v) for v in range(low, high + 1))
    return _join(parts)


def _describe_interval(interval: timedelta) -> str:
    rest = int(interval.total_seconds())
    parts: list[str] = []
    for unit, size in _EVERY_UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count > 1 else ''}")
    if len(parts) == 1 and parts[0].startswith("1 "):
        return parts[0][2:]  # "every hour", not "every 1 hour"
    return " ".join(parts)


def _describe_time(cron: Cron) -> str:
    secs, mins, hrs = cron.seconds, cron.minutes, cron.hours
    if len(secs) * len(mins) * len(hrs) <= 4:
        pattern = "{:02d}:{:02d}:{:02d}" if cron.has_seconds else "{:02d}:{:02d}"
        return "at " + _join([pattern.format(h, m, s) for h in hrs for m in mins for s in secs])
    pieces: list[str] = []
    units = (("second", secs, 60), ("minute", mins, 60), ("hour", hrs, 24))
    for unit, values, size in units[0 if cron.has_seconds else 1 :]:
        step = values[1] - values[0] if len(values) > 1 else 0
        if len(values) == size:
            if not pieces:
                pieces.append(f"every {unit}")
        elif step > 1 and size % step == 0 and values == tuple(range(0, size, step)):
            pieces.append(f"every {step} {unit}s")
        else:
            pieces.append(f"{'at ' if not pieces else ''}{unit} {_values(values)}")
    return " past ".join(pieces)


def _describe_days(cron: Cron) -> str:
    doms = "day-of-month " + _values(cron.doms)
    dows = _values(cron.dows, _DAY_NAMES)
    if cron.day_or:
        days = f"on {doms} or on {dows}"
    elif len(cron.doms) == 31:
        days = "" if len(cron.dows) == 7 else f"on {dows}"
    else:
        days = f"on {doms}" + ("" if len(cron.dows) == 7 else f" if it is a {dows}")
    months = sorted(cron.months)
    in_months = "" if len(months) == 12 else f"in {_values(tuple(months), _MONTH_NAMES)}"
    return " ".join(p for p in (days, in_months) if p)
