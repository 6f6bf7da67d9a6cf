"""Cron day fields: the days of a month that a day-of-month or day-of-week field matches, with
the Quartz/croniter extensions (pure, no I/O).

A field is a union of terms. Day-of-month terms: plain days (``1,15``, ``1-7``, ``*/2``), ``L``
(the last day), ``L-n`` (``n`` = 0-30 days before it), ``nW`` (the weekday nearest day ``n``,
never crossing into another month; none in a month without day ``n``), ``LW`` and ``L-nW`` (the
weekday nearest that day). Day-of-week terms: plain weekdays (``1-5``, ``fri``), ``n#k`` (the
``k``-th weekday ``n`` of the month, ``k`` = 1-5; none in a month without a fifth one) and ``nL``
(the last weekday ``n`` of the month). The rules of ``L``, ``W`` and ``#`` are Quartz's
(``CronExpression``: ``W`` moves Saturday to Friday and Sunday to Monday, except that the 1st
on a Saturday moves to Monday the 3rd and a last day on a Sunday to Friday, two days before).

The two fields are combined by Vixie cron's rule as Debian ships it (docs/design.md, invariant 7),
applied to the sets of days each field matches in the month, extensions included: when either
field starts with ``*`` or ``?`` (a "star" field) a day must be in both sets, otherwise in
either. So ``0 0 ? * 5#2`` is the second Friday of every month and ``0 0 15W * 5`` is the weekday
nearest the 15th and every Friday (Quartz refuses the latter; croniter drops its Friday side).

A month's matching days depend only on its length and the weekday of its 1st: the 28 kinds of
month are evaluated once per expression (see :attr:`pgpulse.core.cron.Cron.month_days`), so no
operation on a schedule evaluates a term per occurrence.

Weekdays are cron's (0 = Sunday ... 6 = Saturday); ``first`` arguments are Python's weekday of
the month's 1st (0 = Monday), as :func:`calendar.monthrange` gives it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DayField",
    "DayTerm",
    "LastDay",
    "LastWeekday",
    "MonthDays",
    "NearestWeekday",
    "NthWeekday",
    "Weekdays",
    "matching_days",
]

_SATURDAY, _SUNDAY = 6, 0


def weekday_of(day: int, first: int) -> int:
    """Cron weekday (0 = Sunday) of ``day`` in a month whose 1st is Python weekday ``first``."""
    return (first + day) % 7


@dataclass(frozen=True, slots=True)
class MonthDays:
    """Plain days of the month (1-31); a day past the month's end never matches."""

    values: frozenset[int]

    def days(self, length: int, first: int) -> set[int]:
        """The matching days of a month of ``length`` days whose 1st is weekday ``first``."""
        return {d for d in self.values if d <= length}


@dataclass(frozen=True, slots=True)
class LastDay:
    """``L`` (``offset`` 0) or ``L-n``: ``offset`` days before the month's last day (none when
    that is before the 1st: ``L-30`` matches only the 1st of 31-day months)."""

    offset: int

    def days(self, length: int, first: int) -> set[int]:
        """As :meth:`MonthDays.days`."""
        day = length - self.offset
        return {day} if day >= 1 else set()


@dataclass(frozen=True, slots=True)
class NearestWeekday:
    """``nW`` (``day`` = n), ``LW`` or ``L-nW`` (``day`` None, ``offset`` n): the weekday
    (Monday-Friday) nearest that day, within its month (Quartz's rule, see the module docstring).
    ``nW`` matches nothing in a month without day ``n`` (``31W`` in April), as ``31`` does not."""

    day: int | None
    offset: int = 0

    def days(self, length: int, first: int) -> set[int]:
        """As :meth:`MonthDays.days`."""
        target = length - self.offset if self.day is None else self.day
        if not 1 <= target <= length:
            return set()
        weekday = weekday_of(target, first)
        if weekday == _SATURDAY:
            target = target - 1 if target > 1 else target + 2
        elif weekday == _SUNDAY:
            target = target + 1 if target < length else target - 2
        return {target}


@dataclass(frozen=True, slots=True)
class Weekdays:
    """Plain weekdays (cron numbering, 0-6)."""

    values: frozenset[int]

    def days(self, length: int, first: int) -> set[int]:
        """As :meth:`MonthDays.days`."""
        return {d for d in range(1, length + 1) if weekday_of(d, first) in self.values}


@dataclass(frozen=True, slots=True)
class NthWeekday:
    """``w#n``: the ``n``-th (1-5) weekday ``w`` of the month; none if the month has fewer."""

    weekday: int
    n: int

    def days(self, length: int, first: int) -> set[int]:
        """As :meth:`MonthDays.days`."""
        day = 1 + (self.weekday - weekday_of(1, first)) % 7 + 7 * (self.n - 1)
        return {day} if day <= length else set()


@dataclass(frozen=True, slots=True)
class LastWeekday:
    """``wL``: the last weekday ``w`` of the month."""

    weekday: int

    def days(self, length: int, first: int) -> set[int]:
        """As :meth:`MonthDays.days`."""
        return {length - (weekday_of(length, first) - self.weekday) % 7}


DayTerm = MonthDays | LastDay | NearestWeekday | Weekdays | NthWeekday | LastWeekday


@dataclass(frozen=True, slots=True)
class DayField:
    """A parsed day-of-month or day-of-week field.

    Attributes:
        text: the field as written.
        star: the field starts with ``*`` or ``?`` (Debian cron's ``DOM_STAR``/``DOW_STAR``,
            with ``?`` read as ``*``): it selects the AND rule, whatever its step.
        terms: the plain values first (one :class:`MonthDays` or :class:`Weekdays`, when the
            field has any), then each extension term in the order written.
        full: the plain values cover every day (``*``, ``?``, ``1-31``, ``0-6``).
    """

    text: str
    star: bool
    terms: tuple[DayTerm, ...]
    full: bool

    def days(self, length: int, first: int) -> set[int]:
        """The days this field alone matches in a month of ``length`` days (28-31) whose 1st is
        Python weekday ``first`` (0 = Monday)."""
        found: set[int] = set()
        for term in self.terms:
            found |= term.days(length, first)
        return found


def matching_days(dom: DayField, dow: DayField, length: int, first: int) -> tuple[int, ...]:
    """The days of a month (``length`` days, 1st on Python weekday ``first``) on which a cron
    expression with these day fields fires, ascending: Vixie's rule (either field a star: both
    must match; otherwise either) applied to each field's set of days."""
    by_dom, by_dow = dom.days(length, first), dow.days(length, first)
    chosen = by_dom & by_dow if dom.star or dow.star else by_dom | by_dow
    return tuple(sorted(chosen))
