"""Cron arithmetic: a cron expression's matching wall times, and its occurrences in a time zone
— the first after an instant, the last at or before one, how many lie between two — under
Debian cron's daylight-saving rules (pure, no I/O, no clock; docs/design.md, invariant 7).

* An elapsed-time job (minute or hour field starting with ``*``) fires at every instant whose
  wall time matches: never inside a skipped hour, in both passes of a repeated hour.
* A fixed-time job fires once per matching wall time: inside a skipped hour at the first instant
  after the gap (wall times sharing a gap fire once), inside a repeated hour on the first pass.

The days a month matches (day-of-month and day-of-week, with L, W and # and Vixie's rule that
combines them, :mod:`pgpulse.core.cron_days`) depend only on the month's length and the weekday of
its 1st, so they are read from a table of 28 entries made once per expression.

No operation here walks the occurrences it skips: :meth:`Cron.count_walls` counts matching wall
times by calendar arithmetic (whole 400-year cycles, years, months, days, then the times of one
day), and a count in a zone adds or removes the wall times of each offset change in the range,
as the difference of two running sums over the zone's changes (:class:`_Corrections`: the
changes its file lists, then its yearly rule by 400-year cycles and kinds of year), so its
cost does not grow with the range either. The newest occurrence at or before an instant is
found by searching wall times backwards, as the next one is found forwards.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from pgpulse.core.cron_days import DayField
from pgpulse.core.zones import (
    OffsetChange,
    fixed_instant,
    instant_at,
    offset_changes,
    offsets,
    transition,
    wall_at,
    year_kind,
    zone_rules,
)

__all__ = ["HORIZON_YEARS", "Cron", "count_between", "last_at_or_before", "next_after"]

# The Gregorian calendar repeats every 400 years (146 097 days, a whole number of weeks), so a
# schedule with no occurrence in 400 years has none at all. ~10 years would be too short: Feb 29
# that is a Sunday (``0 0 29 2 */7``) can be 28 to 40 years apart.
HORIZON_YEARS = 400
_SECOND = timedelta(seconds=1)
#: Ranges up to this long are counted over their listed offset changes (a few at most).
_LISTED_SPAN = timedelta(days=400)

Time = tuple[int, int, int]


@dataclass(frozen=True, slots=True, eq=False)
class Cron:
    """A parsed cron expression: each field precomputed as a sorted tuple (hashed by identity:
    :func:`pgpulse.core.schedule.parse_schedule` makes one per expression and zone)."""

    texts: tuple[str, ...]  # the six field texts, seconds first ("0" when not given)
    has_seconds: bool
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    dom: DayField  # day-of-month, extensions included (pgpulse.core.cron_days)
    months: frozenset[int]
    dow: DayField  # day-of-week, 0-6, Sunday = 0
    day_or: bool  # neither day field starts with '*' or '?': a day matching either fires
    elapsed: bool  # minute or hour field starts with '*': follows elapsed time across DST
    # The matching days of a month depend only on its length and the weekday of its 1st, also
    # with L, W and # (pgpulse.core.cron_days): (days in month, Python weekday of the 1st) -> sorted
    # matching days. Every search and count below reads the days of a month from here.
    month_days: dict[tuple[int, int], tuple[int, ...]]

    def next_wall(self, start: datetime, last_year: int) -> datetime | None:
        """Return the first naive wall time >= ``start`` matching every field, or None.

        Whole non-matching months and days are skipped; gives up after the end of ``last_year``.
        """
        year, month, day = start.year, start.month, start.day
        first_time: Time = (self.hours[0], self.minutes[0], self.seconds[0])
        time = self._time_at_or_after(start.hour, start.minute, start.second)
        while year <= last_year:
            if month in self.months:
                first_weekday, length = calendar.monthrange(year, month)
                days = self.month_days[length, first_weekday]
                for d in days[bisect_left(days, day) :]:
                    found = time if d == day else first_time
                    if found is not None:
                        return datetime(year, month, d, *found)
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
            day, time = 1, first_time
        return None

    def prev_wall(self, end: datetime, first_year: int) -> datetime | None:
        """Return the last naive wall time <= ``end`` matching every field, or None.

        The mirror of :meth:`next_wall`; gives up before the start of ``first_year``.
        """
        year, month, day = end.year, end.month, end.day
        last_time: Time = (self.hours[-1], self.minutes[-1], self.seconds[-1])
        time = self._time_at_or_before(end.hour, end.minute, end.second)
        while year >= first_year:
            if month in self.months:
                first_weekday, length = calendar.monthrange(year, month)
                days = self.month_days[length, first_weekday]
                for d in reversed(days[: bisect_right(days, day)]):
                    found = time if d == day else last_time
                    if found is not None:
                        return datetime(year, month, d, *found)
            year, month = (year - 1, 12) if month == 1 else (year, month - 1)
            day, time = 31, last_time
        return None

    def count_walls(self, low: datetime, high: datetime) -> int:
        """How many matching naive wall times ``w`` have ``low < w <= high`` (whole seconds;
        0 when ``high <= low``). Calendar arithmetic: the cost does not depend on the range."""
        return max(self._walls_through(high) - self._walls_through(low), 0)

    def _walls_through(self, wall: datetime) -> int:
        """Matching wall times from 0001-01-01 00:00:00 through ``wall`` (included)."""
        cycles, year_in_cycle = divmod(wall.year - 1, 400)
        cycle_total, before_year = _cycle_table(self)
        first_weekday, length = calendar.monthrange(wall.year, wall.month)
        days = self.month_days[length, first_weekday] if wall.month in self.months else ()
        matching_days = (
            cycles * cycle_total
            + before_year[year_in_cycle]
            + self._days_before_month(wall.year, wall.month)
            + bisect_left(days, wall.day)
        )
        per_day = len(self.hours) * len(self.minutes) * len(self.seconds)
        index = bisect_left(days, wall.day)
        today = index < len(days) and days[index] == wall.day
        times = self._times_through(wall.hour, wall.minute, wall.second) if today else 0
        return matching_days * per_day + times

    def _days_before_month(self, year: int, month: int) -> int:
        total = 0
        for m in range(1, month):
            if m in self.months:
                first_weekday, length = calendar.monthrange(year, m)
                total += len(self.month_days[length, first_weekday])
        return total

    def _times_through(self, hour: int, minute: int, second: int) -> int:
        """How many matching times of day are <= hour:minute:second."""
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect_left(hours, hour)
        count = i * len(minutes) * len(seconds)
        if i < len(hours) and hours[i] == hour:
            j = bisect_left(minutes, minute)
            count += j * len(seconds)
            if j < len(minutes) and minutes[j] == minute:
                count += bisect_right(seconds, second)
        return count

    def _time_at_or_after(self, hour: int, minute: int, second: int) -> Time | None:
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect_left(hours, hour)
        if i < len(hours) and hours[i] == hour:
            j = bisect_left(minutes, minute)
            if j < len(minutes) and minutes[j] == minute:
                k = bisect_left(seconds, second)
                if k < len(seconds):
                    return hour, minute, seconds[k]
                j += 1
            if j < len(minutes):
                return hour, minutes[j], seconds[0]
            i += 1
        return (hours[i], minutes[0], seconds[0]) if i < len(hours) else None

    def _time_at_or_before(self, hour: int, minute: int, second: int) -> Time | None:
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect_right(hours, hour) - 1
        if i >= 0 and hours[i] == hour:
            j = bisect_right(minutes, minute) - 1
            if j >= 0 and minutes[j] == minute:
                k = bisect_right(seconds, second) - 1
                if k >= 0:
                    return hour, minute, seconds[k]
                j -= 1
            if j >= 0:
                return hour, minutes[j], seconds[-1]
            i -= 1
        return (hours[i], minutes[-1], seconds[-1]) if i >= 0 else None


@lru_cache(maxsize=4096)
def _cycle_table(cron: Cron) -> tuple[int, tuple[int, ...]]:
    """Matching days of ``cron`` in one 400-year cycle, and before each year of it (years 1-400;
    a year's count depends only on whether it is a leap year and the weekday of its 1 January)."""
    by_kind: dict[tuple[bool, int], int] = {}
    before = [0]
    for year in range(1, 401):
        kind = (calendar.isleap(year), calendar.weekday(year, 1, 1))
        if kind not in by_kind:
            by_kind[kind] = cron._days_before_month(year, 13)
        before.append(before[-1] + by_kind[kind])
    return before[-1], tuple(before)


# --- occurrences in a zone -------------------------------------------------------------------
# Instants are aware UTC datetimes on whole seconds; wall times are naive local ones.


@lru_cache(maxsize=16384)
def next_after(cron: Cron, zone: ZoneInfo, start: datetime) -> datetime | None:
    """The first occurrence of ``cron`` in ``zone`` strictly after ``start`` (UTC, whole
    second) within :data:`HORIZON_YEARS` years, or ``None``.

    Cached (a search costs 6-8 us): the planner asks for the same next occurrence when it
    claims a run and when it finishes it, and jobs that share a schedule share occurrences.
    """
    last_year = min(start.year + HORIZON_YEARS, 9999)
    return (_next_elapsed if cron.elapsed else _next_fixed)(cron, zone, start, last_year)


def last_at_or_before(cron: Cron, zone: ZoneInfo, end: datetime) -> datetime | None:
    """The last occurrence of ``cron`` in ``zone`` at or before ``end`` (UTC, whole second)
    within :data:`HORIZON_YEARS` years, or ``None`` (the mirror of :func:`next_after`)."""
    first_year = max(end.year - HORIZON_YEARS - 1, 1)
    return (_last_elapsed if cron.elapsed else _last_fixed)(cron, zone, end, first_year)


def count_between(cron: Cron, zone: ZoneInfo, start: datetime, end: datetime) -> int:
    """How many occurrences of ``cron`` in ``zone`` lie in (start, end] (UTC, whole seconds).

    Cost: calendar arithmetic and two running sums over the zone's offset changes
    (:class:`_Corrections`, made once per schedule and zone), whatever the range.
    """
    if end <= start:
        return 0
    # A short range (a claim a little late) lists its few changes; a long one reads the table,
    # whose first making per schedule and zone (milliseconds) a short count need not pay.
    table = None if end - start <= _LISTED_SPAN else _corrections(cron, zone)
    if table is None:  # or a zone whose changes have no yearly rule: list those of the range
        if cron.elapsed:
            return _count_elapsed(cron, zone, start, end)
        return _count_fixed(cron, zone, start, end)
    between = table.through(end) - table.through(start)
    if cron.elapsed:
        # Signed: in an overlap the end's wall time can be before the start's.
        low = cron._walls_through(wall_at(start, _offset_of(zone, start)))
        return cron._walls_through(wall_at(end, _offset_of(zone, end))) - low + between
    return cron.count_walls(_fixed_bound(zone, start), _fixed_bound(zone, end)) + between


def _fixed_bound(zone: ZoneInfo, moment: datetime) -> datetime:
    """The last wall time whose fixed-time occurrence is at or before ``moment``.

    Normally ``moment``'s own wall time. In the second pass of a repeated hour, every wall time
    of that hour has fired already (on the first pass): the bound is the hour's last second.
    """
    local = moment.astimezone(zone)
    wall = local.replace(tzinfo=None)
    if not local.fold:
        return wall
    first, second = offsets(zone, wall)
    change = transition(zone, moment - (first - second), moment)
    return wall_at(change, first) - _SECOND


def _next_fixed(cron: Cron, zone: ZoneInfo, after: datetime, last_year: int) -> datetime | None:
    """Fixed-time job: each matching wall time once, at its first pass or just after its gap.
    The result is later than ``after``, whose bound is before the wall time found."""
    wall = cron.next_wall(_fixed_bound(zone, after) + _SECOND, last_year)
    return None if wall is None else fixed_instant(zone, wall)


def _last_fixed(cron: Cron, zone: ZoneInfo, end: datetime, first_year: int) -> datetime | None:
    wall = cron.prev_wall(_fixed_bound(zone, end), first_year)
    return None if wall is None else fixed_instant(zone, wall)


def _count_fixed(cron: Cron, zone: ZoneInfo, start: datetime, end: datetime) -> int:
    """Matching wall times between the bounds of ``start`` and ``end``, less the duplicates of
    each gap in between: every matching wall time of a gap, and its end, fire at one instant."""
    total = cron.count_walls(_fixed_bound(zone, start), _fixed_bound(zone, end))
    for change in offset_changes(zone, start, end):
        if change.after > change.before:  # gap: wall times [at + before, at + after] fire at `at`
            low = wall_at(change.at, change.before) - _SECOND
            total -= max(cron.count_walls(low, wall_at(change.at, change.after)) - 1, 0)
    return total


def _next_elapsed(cron: Cron, zone: ZoneInfo, after: datetime, last_year: int) -> datetime | None:
    """Elapsed-time job: every instant whose wall time matches (none in gaps, both passes)."""
    local = after.astimezone(zone)
    now_wall = local.replace(tzinfo=None, fold=0)
    wall = cron.next_wall(now_wall + _SECOND, last_year)
    first, second = offsets(zone, now_wall)
    if first > second and not local.fold:
        # In a repeated hour's first pass: its rest comes first, then its whole second pass,
        # and only then the wall times after it.
        change = transition(zone, after, after + (first - second))
        end = wall_at(change, first)
        if wall is not None and wall < end:
            return instant_at(wall, first)
        again = cron.next_wall(wall_at(change, second), last_year)
        if again is not None and again < end:
            return instant_at(again, second)
    while wall is not None:
        first, second = offsets(zone, wall)
        if first == second:
            return instant_at(wall, first)
        if first > second:  # repeated: the first pass, unless `after` is already past it
            early = instant_at(wall, first)
            return early if early > after else instant_at(wall, second)
        change = transition(zone, instant_at(wall, second), instant_at(wall, first))
        wall = cron.next_wall(wall_at(change, second), last_year)  # resume after the gap
    return None


def _last_elapsed(cron: Cron, zone: ZoneInfo, end: datetime, first_year: int) -> datetime | None:
    """The mirror of :func:`_next_elapsed`."""
    local = end.astimezone(zone)
    now_wall = local.replace(tzinfo=None, fold=0)
    wall = cron.prev_wall(now_wall, first_year)
    first, second = offsets(zone, now_wall)
    if first > second and local.fold:
        # In a repeated hour's second pass: its start comes first, then its whole first pass,
        # and only then the wall times before it.
        change = transition(zone, end - (first - second), end)
        start = wall_at(change, second)
        if wall is not None and wall >= start:
            return instant_at(wall, second)
        again = cron.prev_wall(wall_at(change, first) - _SECOND, first_year)
        if again is not None and again >= start:
            return instant_at(again, first)
    while wall is not None:
        first, second = offsets(zone, wall)
        if first == second:
            return instant_at(wall, first)
        if first > second:  # repeated: the second pass, unless `end` is before it
            late = instant_at(wall, second)
            return late if late <= end else instant_at(wall, first)
        change = transition(zone, instant_at(wall, second), instant_at(wall, first))
        wall = cron.prev_wall(wall_at(change, first) - _SECOND, first_year)  # before the gap
    return None


def _count_elapsed(cron: Cron, zone: ZoneInfo, start: datetime, end: datetime) -> int:
    """Between two offset changes the wall time is the instant shifted by one offset: count the
    matching wall times of each such stretch of (start, end]."""
    total, low = 0, start
    for change in offset_changes(zone, start, end):
        high = change.at - _SECOND  # the stretch (low, high] has the offset before the change
        total += cron.count_walls(wall_at(low, change.before), wall_at(high, change.before))
        low = high
    offset = end.astimezone(zone).utcoffset()
    assert offset is not None
    return total + cron.count_walls(wall_at(low, offset), wall_at(end, offset))


def _offset_of(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _correction(cron: Cron, change: OffsetChange) -> int:
    """What one offset change adds to the count of occurrences over the matching wall times
    between the two ends' wall times (the sum over a range's changes makes the count exact).

    Fixed-time job: a gap's matching wall times, and its end, fire once, at the change
    (:func:`_count_fixed`). Elapsed-time job: a gap's wall times never fire, an overlap's fire
    twice (:func:`_count_elapsed`, its stretches telescoped).
    """
    if cron.elapsed:
        last = change.at - _SECOND
        return cron.count_walls(wall_at(last, change.after), wall_at(last, change.before)) - (
            cron.count_walls(wall_at(last, change.before), wall_at(last, change.after))
        )
    if change.after <= change.before:
        return 0
    low = wall_at(change.at, change.before) - _SECOND
    return -max(cron.count_walls(low, wall_at(change.at, change.after)) - 1, 0)


@dataclass(frozen=True, slots=True)
class _Corrections:
    """The running sum of :func:`_correction` over a zone's changes (:func:`zones.zone_rules`):
    over the listed changes, then over whole 400-year cycles, years and the changes of one year
    under the yearly rule, so its cost does not depend on how far apart two instants are."""

    listed_at: tuple[datetime, ...]
    listed_sums: tuple[int, ...]  # listed_sums[i]: the sum over the first i listed changes
    rule_year: int
    cycle_sums: tuple[int, ...]  # cycle_sums[i]: over the rule's years rule_year .. +i-1
    yearly: dict[tuple[bool, int], tuple[tuple[timedelta, int], ...]]  # (since 1 Jan, value)

    def through(self, instant: datetime) -> int:
        """The sum over every change at or before ``instant`` (aware UTC)."""
        if instant.year < self.rule_year:
            return self.listed_sums[bisect_right(self.listed_at, instant)]
        cycles, years = divmod(instant.year - self.rule_year, 400)
        new_year = datetime(instant.year, 1, 1, tzinfo=UTC)
        this_year = self.yearly[year_kind(instant.year)]
        return (
            self.listed_sums[-1]
            + cycles * self.cycle_sums[-1]
            + self.cycle_sums[years]
            + sum(value for since, value in this_year if new_year + since <= instant)
        )


@lru_cache(maxsize=1024)
def _corrections(cron: Cron, zone: ZoneInfo) -> _Corrections | None:
    """``cron``'s corrections in ``zone`` (once per pair: a count per listed change, about
    two hundred in the busiest zones, and per change of fourteen reference years)."""
    rules = zone_rules(zone)
    if rules is None:
        return None
    sums = [0]
    for change in rules.listed:
        sums.append(sums[-1] + _correction(cron, change))
    yearly = {
        kind: tuple(
            (c.at - datetime(rules.reference[kind], 1, 1, tzinfo=UTC), _correction(cron, c))
            for c in changes
        )
        for kind, changes in rules.yearly.items()
    }
    cycle = [0]
    for year in range(rules.rule_year, rules.rule_year + 400):
        cycle.append(cycle[-1] + sum(value for _, value in yearly[year_kind(year)]))
    return _Corrections(
        tuple(c.at for c in rules.listed), tuple(sums), rules.rule_year, tuple(cycle), yearly
    )


def utc_second(moment: datetime) -> datetime:
    """``moment`` in UTC, truncated to its whole second (cron works in whole seconds)."""
    return moment.astimezone(UTC).replace(microsecond=0)
