"""The shortest time between two consecutive occurrences of a cron schedule in a zone, over all
time (pure, no I/O, no clock): what a job's ``spread`` must not exceed (:mod:`pgpulse.core.spread`).

Between two offset changes of the zone, an occurrence is its wall time read with one offset,
so the gaps there are the gaps between matching wall times, which the fields give directly:
within a day, from the times of day; across midnight, only when two consecutive days can both
match (a gap longer than a day matters to no spread). Only a pair of occurrences with an offset
change between them, or next to one, can be shorter: a fixed-time job's wall times inside a gap
fire together at its end, and an elapsed-time job fires in both passes of a repeated hour. So
the occurrences around each change of the zone are looked at: every change its time zone file
lists from 1970 on, and one year of each of the fourteen kinds its yearly rule repeats
(:func:`pgpulse.core.zones.zone_rules`; a schedule's matching days depend on the same kinds).

From 1970: the tz database vouches for its data from then on only, and the changes before
(local mean time giving way to a zone's standard time, a few minutes, in 1883 in New York)
would refuse a minute's spread of ``* * * * *`` for a day no job fires at its time.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import pairwise
from zoneinfo import ZoneInfo

from pgpulse.core.cron import Cron, last_at_or_before, next_after
from pgpulse.core.zones import OffsetChange, offset_changes, zone_rules

__all__ = ["longest_gap_at_changes", "shortest_gap"]

_DAY = 86400
_FROM = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
#: Occurrences looked at after each change (the pair across it, the pair from a gap's end on,
#: and one more), and before it (one pair).
_AFTER, _BEFORE = 4, 2
_Search = Callable[[Cron, ZoneInfo, datetime], datetime | None]


@lru_cache(maxsize=1024)
def shortest_gap(cron: Cron, zone: ZoneInfo) -> timedelta | None:
    """The shortest time between two consecutive occurrences of ``cron`` in ``zone``, if it is
    at most a day (the longest spread), else ``None``.

    Cost: bounded by the zone's data (a few occurrence searches per change its file lists,
    about two hundred in the busiest zones, and per change of fourteen reference years);
    cached per (schedule, zone).
    """
    gaps = [_steady_gap(cron)]
    for change in _changes(zone):
        gaps.extend(_gaps_around(cron, zone, change))
    found = min((g for g in gaps if g is not None), default=None)
    return found if found is not None and found <= timedelta(seconds=_DAY) else None


def longest_gap_at_changes(cron: Cron, zone: ZoneInfo, since: datetime) -> timedelta | None:
    """The longest time between two consecutive occurrences of ``cron`` next to an offset
    change of ``zone`` from ``since`` (aware) on, or ``None`` (no change, or no occurrence):
    a change lengthens a gap by the hour it repeats (a fixed-time job fires on the first pass
    only) or skips, which a sample of a few months of occurrences may not meet.

    Cost: bounded by the zone's data, as :func:`shortest_gap`.
    """
    gaps = [g for change in _changes(zone, since) for g in _gaps_around(cron, zone, change)]
    return max(gaps, default=None)


def _changes(zone: ZoneInfo, since: datetime = _FROM) -> Iterable[OffsetChange]:
    """Every change from ``since`` on, or one that stands for it (module docstring)."""
    rules = zone_rules(zone)
    if rules is None:  # no yearly rule to stand for its years: list them over two centuries
        return offset_changes(zone, since, max(since, _FROM) + timedelta(days=200 * 366))
    yearly = (change for changes in rules.yearly.values() for change in changes)
    return (*(c for c in rules.listed if c.at >= since), *yearly)


def _gaps_around(cron: Cron, zone: ZoneInfo, change: OffsetChange) -> list[timedelta]:
    """The gaps between the consecutive occurrences just before and after ``change``."""
    moments: list[datetime] = []
    moment = change.at - _SECOND
    for _ in range(_BEFORE):
        found = _or_none(last_at_or_before, cron, zone, moment)
        if found is None:
            break
        moments.insert(0, found)
        moment = found - _SECOND
    moment = moments[-1] if moments else change.at - _SECOND
    for _ in range(_AFTER):
        found = _or_none(next_after, cron, zone, moment)
        if found is None:
            break
        moments.append(moment := found)
    return [b - a for a, b in pairwise(moments)]


def _or_none(search: _Search, cron: Cron, zone: ZoneInfo, moment: datetime) -> datetime | None:
    """``search(cron, zone, moment)``, or ``None`` at the ends of the calendar."""
    try:
        return search(cron, zone, moment)
    except OverflowError:
        return None


def _steady_gap(cron: Cron) -> timedelta | None:
    """The shortest gap between matching wall times, one day apart at most (``None``: none)."""
    times = _shortest_within_day(cron)
    if _two_days_in_a_row(cron):
        first = cron.hours[0] * 3600 + cron.minutes[0] * 60 + cron.seconds[0]
        last = cron.hours[-1] * 3600 + cron.minutes[-1] * 60 + cron.seconds[-1]
        across = _DAY - last + first
        times = across if times is None else min(times, across)
    return None if times is None else timedelta(seconds=times)


def _shortest_within_day(cron: Cron) -> int | None:
    """The shortest step between two consecutive matching times of one day, in seconds."""
    steps: list[int] = []
    seconds, minutes, hours = cron.seconds, cron.minutes, cron.hours
    steps.extend(b - a for a, b in pairwise(seconds))
    turn = seconds[0] + 60 - seconds[-1]  # last second of a minute to the next minute's first
    steps.extend((b - a - 1) * 60 + turn for a, b in pairwise(minutes))
    first = minutes[0] * 60 + seconds[0]
    last = minutes[-1] * 60 + seconds[-1]
    steps.extend((b - a) * 3600 + first - last for a, b in pairwise(hours))
    return min(steps, default=None)


def _two_days_in_a_row(cron: Cron) -> bool:
    """Whether two consecutive calendar days can both match (in some year)."""
    for month in cron.months:
        following = month % 12 + 1
        lengths = (28, 29) if month == 2 else (_length(month),)
        for length in lengths:
            for first in range(7):
                days = cron.month_days[length, first]
                if any(day + 1 in days for day in days):
                    return True
                if following not in cron.months or length not in days:
                    continue
                next_first = (first + length) % 7
                next_lengths = (28, 29) if following == 2 else (_length(following),)
                if any(1 in cron.month_days[n, next_first] for n in next_lengths):
                    return True
    return False


def _length(month: int) -> int:
    """The length of ``month`` (not February)."""
    return calendar.monthrange(2001, month)[1]
