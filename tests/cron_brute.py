"""A brute-force oracle for cron day fields: does one calendar date match a day-of-month and a
day-of-week field, extensions included?

Written apart from pgpulse.core.cron_days, and as plainly as possible: each term is checked on the
date itself with ``datetime.date`` arithmetic (no tables of month kinds, no weekday formulas):

* ``L-n``: the date is n days before the last day of its month.
* ``nW``: the date is the weekday (Monday-Friday) of its month closest to day n (Quartz's rule,
  restated: of the weekdays of the same month, the one at the least distance; there are no
  ties, as two weekdays at the same distance would be two days apart around a weekday).
* ``w#k``: the date is a weekday w and the k-th of them in its month (``(day - 1) // 7 + 1``).
* ``wL``: the date is a weekday w and a week later is in another month.

Then Vixie's rule: if either field starts with ``*`` or ``?``, both must match, else either.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from functools import cache

_NAMES = {n: i for i, n in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}


def _month_dates(day: date) -> list[date]:
    """Every date of ``day``'s month (cached per month: each term asks for it)."""
    return _dates_of(day.year, day.month)


@cache
def _dates_of(year: int, month: int) -> list[date]:
    first = date(year, month, 1)
    days = (first + timedelta(days=i) for i in range(31))
    return [d for d in days if d.month == month]


def _last_day(day: date) -> int:
    return _month_dates(day)[-1].day


def _cron_weekday(day: date) -> int:
    return (day.weekday() + 1) % 7  # Python's Monday = 0; cron's Sunday = 0


def _weekday_token(token: str) -> int:
    return _NAMES[token] if token in _NAMES else int(token) % 7


def _plain(item: str, day_value: int, low: int, high: int) -> bool:
    """A plain cron item (``*``, ``a``, ``a-b``, ``a/n``, ``a-b/n``) against a value."""
    base, _, step = item.partition("/")
    n = int(step) if step else 1
    if base in ("*", "?"):
        first, last = low, high
    elif "-" in base:
        a, _, b = base.partition("-")
        first, last = _value(a), (31 if b == "l" else _value(b))
    else:
        first = _value(base)
        last = high if step else first
    return first <= day_value <= last and (day_value - first) % n == 0


def _value(token: str) -> int:
    return _NAMES[token] if token in _NAMES else int(token)


def _dom_item(item: str, day: date) -> bool:
    item = item.lower()
    if match := re.fullmatch(r"l(?:-(\d+))?w", item):
        target = _last_day(day) - int(match[1] or 0)
        return target >= 1 and day == _nearest_weekday(day, target)
    if match := re.fullmatch(r"l(?:-(\d+))?", item):
        return day.day == _last_day(day) - int(match[1] or 0)
    if match := re.fullmatch(r"(\d+)w", item):
        target = int(match[1])
        return target <= _last_day(day) and day == _nearest_weekday(day, target)
    return _plain(item, day.day, 1, 31)


def _nearest_weekday(day: date, target: int) -> date:
    weekdays = [d for d in _month_dates(day) if d.weekday() < 5]
    return min(weekdays, key=lambda d: abs(d.day - target))


def _dow_item(item: str, day: date) -> bool:
    item = item.lower()
    if match := re.fullmatch(r"(\w+)#(\d)", item):
        k = (day.day - 1) // 7 + 1
        return _cron_weekday(day) == _weekday_token(match[1]) and k == int(match[2])
    if match := re.fullmatch(r"(\w+)l|l(\w+)", item):
        later = day + timedelta(days=7)
        return _cron_weekday(day) == _weekday_token(match[1] or match[2]) and (
            later.month != day.month
        )
    # cron's 7 is Sunday too: a value or range over 0-7, read modulo 7
    weekday = _cron_weekday(day)
    return _plain(item, weekday, 0, 7) or (weekday == 0 and _plain(item, 7, 0, 7))


def day_matches(dom: str, dow: str, day: date) -> bool:
    """Does ``day`` match the cron day fields ``dom`` and ``dow`` (docs/design.md, invariant 7)?"""
    by_dom = any(_dom_item(item, day) for item in dom.split(","))
    by_dow = any(_dow_item(item, day) for item in dow.split(","))
    if dom.startswith(("*", "?")) or dow.startswith(("*", "?")):
        return by_dom and by_dow
    return by_dom or by_dow


def matching_dates(dom: str, month: str, dow: str, start: date, end: date) -> list[date]:
    """Every date in [start, end] matching the day fields, in a month the month field lists."""
    found, day = [], start
    while day <= end:
        if any(_plain(m, day.month, 1, 12) for m in month.split(",")) and day_matches(
            dom, dow, day
        ):
            found.append(day)
        day += timedelta(days=1)
    return found
