"""Cron text: parsing an expression's fields into a :class:`~pgpulse.core.cron.Cron`, and describing
one in English (pure, no I/O).

Fields follow Vixie cron as Debian ships it: ``*``, lists, ranges, steps (``*/n``, ``a-b/n``),
month and day names, day-of-week 0 and 7 = Sunday; ``a/n`` means ``a-max/n`` (cronie). The day
fields also take the Quartz/croniter extensions of :mod:`pgpulse.core.cron_days` (``L``, ``L-n``,
``nW``, ``LW``, ``L-nW``, ``n#k``, ``nL`` or croniter's ``Ln``, and ``?`` for ``*``); a range
may end at ``L`` in the day-of-month field (``29-L`` is ``29-31``). ``L``, ``W``, ``#`` and
``?`` anywhere else are refused, naming the field and the value.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence

from pgpulse.core.cron import Cron
from pgpulse.core.cron_days import (
    DayField,
    DayTerm,
    LastDay,
    LastWeekday,
    MonthDays,
    NearestWeekday,
    NthWeekday,
    Weekdays,
    matching_days,
)
from pgpulse.core.errors import InvalidSchedule

__all__ = ["describe_cron", "invalid", "parse_cron"]

MONTH_NAMES = ("", *calendar.month_name[1:])
DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_DOM, _DOW = 3, 5
# (field name, lowest value, highest value, names accepted for values)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {n[:3].lower(): i for i, n in enumerate(MONTH_NAMES) if n}),
    ("day-of-week", 0, 7, {n[:3].lower(): i for i, n in enumerate(DAY_NAMES)}),
)
#: Days each month can have (February: common and leap years).
_LENGTHS = {m: (28, 29) if m == 2 else (calendar.monthrange(2001, m)[1],) for m in range(1, 13)}
_LAST_RE = re.compile(r"l(?:-([0-9]+))?(w?)")
_NEAREST_RE = re.compile(r"([0-9]+)w")
_NTH_RE = re.compile(r"([a-z0-9]+)#(.*)")
_LAST_DOW_RE = re.compile(r"([a-z0-9]+)l|l([a-z0-9]+)")
#: What an L/W/#/? form looks like (to say so when one is used in a field without them).
_EXTENSION_CHARS = re.compile(r"[0-9-]*[LW#?][0-9LW#?-]*")
_ORDINALS = ("", "first", "second", "third", "fourth", "fifth")


def invalid(expr: str, reason: str) -> InvalidSchedule:
    """The refusal of schedule ``expr`` for ``reason`` (``field="schedule"``, ``value=expr``)."""
    return InvalidSchedule(f"schedule {expr!r}: {reason}", field="schedule", value=expr)


def parse_cron(expr: str, words: Sequence[str]) -> Cron:
    """Parse the fields of a cron expression.

    Args:
        expr: the whole expression as given (for messages).
        words: its 5 fields, or 6 with seconds first.

    Raises:
        InvalidSchedule: a field is malformed, or the expression can never fire (``0 0 30 2 *``,
            ``0 0 L-30 2 *``); the message names the field and the value.
    """
    if len(words) not in (5, 6):
        raise invalid(expr, f"expected 5 fields (or 6 with seconds first), got {len(words)}")
    texts = tuple(words) if len(words) == 6 else ("0", *words)
    sec, mins, hrs, _, months, _ = (
        _parse_field(expr, i, text) if i not in (_DOM, _DOW) else frozenset()
        for i, text in enumerate(texts)
    )
    dom, dow = _day_field(expr, _DOM, texts[_DOM]), _day_field(expr, _DOW, texts[_DOW])
    month_days = {
        (length, first): matching_days(dom, dow, length, first)
        for length in range(28, 32)
        for first in range(7)
    }
    _check_fires(expr, dom, dow, months, month_days)
    return Cron(
        texts,
        len(words) == 6,
        tuple(sorted(sec)),
        tuple(sorted(mins)),
        tuple(sorted(hrs)),
        dom,
        months,
        dow,
        not (dom.star or dow.star),
        texts[1].startswith("*") or texts[2].startswith("*"),
        month_days,
    )


def _check_fires(
    expr: str,
    dom: DayField,
    dow: DayField,
    months: frozenset[int],
    month_days: dict[tuple[int, int], tuple[int, ...]],
) -> None:
    """Refuse an expression with no matching day in any of its months: every length a month
    can have meets every weekday of its 1st within the 400-year Gregorian cycle."""
    kinds = [(m, length, first) for m in months for length in _LENGTHS[m] for first in range(7)]
    if any(month_days[length, first] for _, length, first in kinds):
        return
    month_list = (
        "any month" if len(months) == 12 else _join([MONTH_NAMES[m] for m in sorted(months)], "or")
    )
    if not any(dom.days(length, first) for _, length, first in kinds):
        reason = f"day-of-month field: {dom.text} never occurs in {month_list}"
    else:
        reason = (
            f"day-of-month field {dom.text} and day-of-week field {dow.text} never match "
            f"the same day in {month_list}"
        )
    raise invalid(expr, reason + ", so the schedule can never fire")


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
            first = _field_value(expr, index, start)
            # `29-L`: a range to the last day is a range to 31 (later days never exist).
            last = 31 if index == _DOM and stop.lower() == "l" else _field_value(expr, index, stop)
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
        if index not in (_DOM, _DOW) and _EXTENSION_CHARS.fullmatch(token.upper()):
            raise _field_error(
                expr,
                index,
                f"{token!r}: L, W, # and ? belong in the day-of-month and day-of-week fields",
            )
        kind = "a number or a name" if names else "a number"
        raise _field_error(expr, index, f"{token!r} is not {kind}")
    if not low <= int(token) <= high:
        raise _field_error(expr, index, f"{int(token)} is out of range {low}-{high}")
    return int(token)


def _field_error(expr: str, index: int, reason: str) -> InvalidSchedule:
    return invalid(expr, f"{_FIELDS[index][0]} field: {reason}")


def _day_field(expr: str, index: int, text: str) -> DayField:
    """Parse a day-of-month (``index`` 3) or day-of-week (5) field into its terms."""
    if text == "?":
        text_values: frozenset[int] = _parse_field(expr, index, "*")
        extensions: list[DayTerm] = []
    else:
        if "?" in text:
            raise _field_error(expr, index, f"'?' stands alone (means '*'), got {text!r}")
        plain: list[str] = []
        extensions = []
        for item in text.split(","):
            term = (_dom_term if index == _DOM else _dow_term)(expr, item, text)
            if term is None:
                plain.append(item)
            elif term not in extensions:
                extensions.append(term)
        text_values = _parse_field(expr, index, ",".join(plain)) if plain else frozenset()
    if index == _DOW:
        text_values = frozenset(d % 7 for d in text_values)
    terms: list[DayTerm] = []
    if text_values:
        terms.append(MonthDays(text_values) if index == _DOM else Weekdays(text_values))
    full = len(text_values) == (31 if index == _DOM else 7)
    return DayField(text, text.startswith(("*", "?")), (*terms, *extensions), full)


def _dom_term(expr: str, item: str, text: str) -> DayTerm | None:
    """An L or W term of the day-of-month field, or None for a plain item."""
    lower = item.lower()
    if "#" in lower:
        raise _field_error(expr, _DOM, f"{item!r}: # (nth weekday) belongs in day-of-week")
    last = _LAST_RE.fullmatch(lower)
    nearest = _NEAREST_RE.fullmatch(lower)
    if lower.endswith("w") and (nearest or last) and text.count(",") > 0:
        raise _field_error(
            expr, _DOM, f"{text!r}: a W term stands alone in its field (W takes a single day)"
        )
    if last:
        offset = int(last[1] or 0)
        if offset > 30:
            raise _field_error(expr, _DOM, f"{item!r}: the offset from L (last day) is 0-30")
        return NearestWeekday(None, offset) if last[2] else LastDay(offset)
    if nearest:
        return NearestWeekday(_field_value(expr, _DOM, nearest[1]))
    if lower.endswith("w"):
        raise _field_error(
            expr, _DOM, f"{item!r}: W takes a single day (15W, LW, L-2W), not a range or step"
        )
    if lower.startswith("l") and lower != "l":
        raise _field_error(expr, _DOM, f"{item!r}: use L, L-n (n = 0-30), LW or L-nW")
    return None


def _dow_term(expr: str, item: str, text: str) -> DayTerm | None:
    """A # or L term of the day-of-week field, or None for a plain item."""
    lower = item.lower()
    if "w" in lower.replace("wed", ""):
        raise _field_error(expr, _DOW, f"{item!r}: W (nearest weekday) belongs in day-of-month")
    nth = _NTH_RE.fullmatch(lower)
    if nth:
        weekday = _one_weekday(expr, item, nth[1], "#")
        if not (nth[2].isascii() and nth[2].isdigit() and 1 <= int(nth[2]) <= 5):
            raise _field_error(expr, _DOW, f"{item!r}: the number after # must be 1-5")
        return NthWeekday(weekday, int(nth[2]))
    if "#" in lower:
        raise _field_error(expr, _DOW, f"{item!r}: write weekday#n, e.g. 5#2 (second Friday)")
    if lower == "l":
        raise _field_error(
            expr,
            _DOW,
            "'L' by itself is ambiguous (Quartz reads it as Saturday): write 6L for "
            "the last Saturday of the month, or 6 for every Saturday",
        )
    last = _LAST_DOW_RE.fullmatch(lower)
    if last:
        return LastWeekday(_one_weekday(expr, item, last[1] or last[2], "L"))
    if "l" in lower:
        raise _field_error(expr, _DOW, f"{item!r}: write weekdayL, e.g. 5L (last Friday)")
    return None


def _one_weekday(expr: str, item: str, token: str, mark: str) -> int:
    if not (token.isdigit() or token in _FIELDS[_DOW][3]):
        raise _field_error(expr, _DOW, f"{item!r}: {mark} takes a single weekday (0-7 or a name)")
    return _field_value(expr, _DOW, token) % 7


# --- describe --------------------------------------------------------------------------------


def describe_cron(cron: Cron) -> str:
    """``cron`` in English, without its zone: ``"at 04:30 on the last Friday of the month"``."""
    return " ".join(p for p in (_describe_time(cron), _describe_days(cron)) if p)


def _join(items: Sequence[str], word: str = "and") -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _values(values: Sequence[int], names: Sequence[str] = ()) -> str:
    def label(v: int) -> str:
        return names[v] if names else str(v)

    step = values[1] - values[0] if len(values) >= 4 else 0
    if step > 1 and tuple(values) == tuple(range(values[0], values[-1] + 1, step)):
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


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _before_last(offset: int) -> str:
    if offset == 0:
        return "the last day of the month"
    return f"the last day of the month minus {offset} day{'s' if offset > 1 else ''}"


def _term_phrase(term: DayTerm) -> str:
    """One term in words: ``"day-of-month 1 and 15"``, ``"the second Friday of the month"``."""
    if isinstance(term, MonthDays):
        return "day-of-month " + _values(sorted(term.values))
    if isinstance(term, Weekdays):
        return _values(sorted(term.values), DAY_NAMES)
    if isinstance(term, LastDay):
        return _before_last(term.offset)
    if isinstance(term, NearestWeekday):
        if term.day is not None:
            return f"the weekday nearest the {_ordinal(term.day)}"
        if term.offset == 0:
            return "the last weekday of the month"
        return f"the weekday nearest {_before_last(term.offset)}"
    if isinstance(term, NthWeekday):
        return f"the {_ORDINALS[term.n]} {DAY_NAMES[term.weekday]} of the month"
    return f"the last {DAY_NAMES[term.weekday]} of the month"


def _field_phrase(field: DayField, word: str = "and") -> str:
    return _join([_term_phrase(t) for t in field.terms], word)


def _describe_days(cron: Cron) -> str:
    dom, dow = cron.dom, cron.dow
    doms, dows = _field_phrase(dom), _field_phrase(dow)
    if cron.day_or:
        days = f"on {doms} or on {dows}"
    elif dom.full:
        days = "" if dow.full else f"on {dows}"
    elif dow.full:
        days = f"on {doms}"
    else:
        plain = all(isinstance(t, Weekdays) for t in dow.terms)
        days = f"on {doms} if it is {'a ' if plain else ''}{_field_phrase(dow, 'or')}"
    months = sorted(cron.months)
    in_months = "" if len(months) == 12 else f"in {_values(months, MONTH_NAMES)}"
    return " ".join(p for p in (days, in_months) if p)
