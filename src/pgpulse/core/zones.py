"""Time zones: which names Pulse accepts, and UTC-offset arithmetic (pure, no clock).

Names. A job's zone must mean the same on every node, so only the names of the IANA time zone
database as the ``tzdata`` package lists them are accepted (canonical zones and their usual
aliases: ``Europe/Berlin``, ``UTC``, ``Etc/GMT+5``, ``US/Eastern``). Names whose rules depend on
the host are refused: ``localtime`` (a link to the host's own zone), ``posixrules``, ``posix/*``
(copies of the zones that only some hosts install), ``right/*`` (the variants for a clock that
counts leap seconds; POSIX time, the host's, Python's and PostgreSQL's, does not), and
``Factory`` (a placeholder meaning "zone not set"). Rules come from the ``tzdata`` package
too, never from the host's ``/usr/share/zoneinfo``: two nodes with the same Pulse installation
compute the same instants even when their hosts' tz databases are of different releases.

Offsets. A naive wall time ``w`` has two UTC offsets, on its first (``fold=0``) and second
(``fold=1``) pass: equal, ``w`` exists once; first > second, ``w`` is repeated (fall back); first
< second, ``w`` is skipped (spring forward). :func:`offset_changes` lists the instants where a
zone's offset changes, found by probing the zone every :data:`PROBE_DAYS` days and bisecting to
the second: exact as long as no two offset changes are closer than that, which holds for every
zone of the database from 1970 on (the closest pairs are 6.96 days apart; a test checks every
zone against the database's own transition table).
"""

from __future__ import annotations

import calendar
import struct
from datetime import UTC, datetime, timedelta
from functools import cache, lru_cache
from importlib import resources
from typing import NamedTuple
from zoneinfo import ZoneInfo

from pgpulse.core.errors import InvalidInput, UnknownTimeZone
from pgpulse.core.wording import did_you_mean

__all__ = [
    "EARLIEST_INSTANT",
    "INSTANT_RANGE",
    "LATEST_INSTANT",
    "OffsetChange",
    "ZoneRules",
    "changes_of_year",
    "check_instant_range",
    "fixed_instant",
    "in_instant_range",
    "is_utc",
    "load_zone",
    "offset_changes",
    "offsets",
    "transition",
    "year_kind",
    "zone_rules",
]

#: Days between two probes of a zone's offset (below the 6.96-day minimum spacing of changes).
PROBE_DAYS = 6
_PROBE = timedelta(days=PROBE_DAYS)
#: Wall times are probed in blocks of this many probes (a block is cached per zone).
_BLOCK_PROBES = 60
_BLOCK_DAYS = PROBE_DAYS * _BLOCK_PROBES
_SECOND = timedelta(seconds=1)
_TICK = timedelta(microseconds=1)
#: Names of the database that are not places: "zone not set".
_PLACEHOLDERS = frozenset({"Factory"})
#: Zones with one offset for all time (tzdata's ``Etc/*`` and the UTC/GMT aliases).
_FIXED = frozenset(
    {"UTC", "UCT", "GMT", "GMT0", "GMT+0", "GMT-0", "Greenwich", "Universal", "Zulu"}
)

#: The instants Pulse takes (a window's end, a pause's ``until``, an ``@at``, a backfill's range):
#: a day inside Python's years 1-9999 at each end, so that the instant has a wall time in every
#: zone (UTC offsets stay within a day) and a step of a microsecond or a day never overflows.
EARLIEST_INSTANT = datetime(1, 1, 2, tzinfo=UTC)
LATEST_INSTANT = datetime(9999, 12, 30, tzinfo=UTC)
#: How the range reads in a refusal.
INSTANT_RANGE = "from 0001-01-02 to 9999-12-30 (UTC)"


def is_utc(name: str) -> bool:
    """Whether zone ``name`` is UTC under one of its names (``UTC``, ``Etc/UTC``, ``GMT``,
    ``Zulu``...): its wall times are UTC's always, not only part of the year (Europe/London in
    winter is not)."""
    return name.removeprefix("Etc/") in _FIXED


def in_instant_range(value: datetime) -> datetime | None:
    """``value`` (aware; naive is read as UTC) as aware UTC when it lies in
    [:data:`EARLIEST_INSTANT`, :data:`LATEST_INSTANT`], else ``None`` (also when its conversion
    to UTC overflows the year 1 or 9999). Never raises."""
    try:
        instant = utc_if_naive(value).astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return instant if EARLIEST_INSTANT <= instant <= LATEST_INSTANT else None


def check_instant_range(field_name: str, value: datetime, given: object = None) -> datetime:
    """``value`` as aware UTC (:func:`in_instant_range`), or the one refusal of an instant
    out of range, on every path that takes one.

    Args:
        field_name: the refused field (``not_before``, ``until``, ``from``, ``after``...).
        value: the instant (aware; naive is read as UTC).
        given: what the caller was given, echoed by the message (text as typed, quoted); by
            default ``value`` in ISO 8601.

    Raises:
        InvalidInput: ``field=field_name``: outside [:data:`EARLIEST_INSTANT`,
            :data:`LATEST_INSTANT`].
    """
    instant = in_instant_range(value)
    if instant is None:
        shown = repr(given) if isinstance(given, str) else value.isoformat()
        raise InvalidInput(
            f"{field_name} {shown} is out of range: Pulse takes instants {INSTANT_RANGE}",
            field=field_name,
            value=given if isinstance(given, str) else value.isoformat(),
        )
    return instant


@cache
def zone_names() -> frozenset[str]:
    """The zone names Pulse accepts: the ``tzdata`` package's list, less placeholders."""
    text = resources.files("tzdata").joinpath("zones").read_text("utf-8")
    return frozenset(text.split()) - _PLACEHOLDERS


def _refusal(name: str) -> str:
    """Why ``name`` is not accepted (for the error message; README's list of refused names
    gives the same reasons)."""
    if name == "localtime" or name == "posixrules":
        return "its rules depend on the host's configuration; name the zone, such as Europe/Berlin"
    for prefix, why in (
        # right/: tz's variant for a clock that counts leap seconds (27 s by 2017); the
        # system clock, Python and PostgreSQL keep POSIX time, which does not
        ("right/", "its clock counts leap seconds, which POSIX time (the host's, Python's and "
         "PostgreSQL's) does not"),
        ("posix/", "it is a copy that only some hosts install"),
    ):  # fmt: skip
        if name.startswith(prefix):
            plain = name.removeprefix(prefix)
            named = (
                f"{plain!r} instead" if plain in zone_names() else "a zone such as Europe/Berlin"
            )
            return f"{why}; name {named}"
    if name in _PLACEHOLDERS:
        return "it is a placeholder for 'zone not set'; name the zone, such as Europe/Berlin"
    return "it is not an IANA time zone name" + (
        did_you_mean(name, sorted(zone_names())) or " (such as Europe/London)"
    )


@lru_cache(maxsize=1024)
def load_zone(name: str) -> ZoneInfo:
    """Return the zone named ``name`` (one shared object per name).

    Args:
        name: an IANA time zone name, exactly as the database spells it (``Europe/London``).

    Raises:
        UnknownTimeZone: not a name of the database, or one whose meaning depends on the host
            (``localtime``, ``posixrules``, ``right/UTC``, ``Factory``); ``field="timezone"``,
            ``value=name``; the message says why.
    """
    if name in zone_names():
        try:
            return _packaged_zone(name)
        except (ValueError, OSError):  # a damaged tzdata installation
            pass
    raise UnknownTimeZone(
        f"timezone {name!r} is refused: {_refusal(name)}", field="timezone", value=name
    )


@cache
def _packaged_zone(name: str) -> ZoneInfo:
    """Zone ``name`` as the ``tzdata`` package has it (one object per name, as ``ZoneInfo(name)``
    caches; ``ZoneInfo(name)`` itself would read the host's files first)."""
    folder = resources.files("tzdata.zoneinfo")
    with folder.joinpath(*name.split("/")).open("rb") as data:
        return ZoneInfo.from_file(data, key=name)


def utc_if_naive(value: datetime) -> datetime:
    """``value`` as given when it has an offset, else read as UTC: the rule for an instant given
    without an offset wherever it names stored history, kept in UTC (a backfill's range on
    the command line, in the API and in Python; the API's and the dashboard's run filters)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def offsets(zone: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
    """The UTC offsets of the naive wall time ``wall`` on its first and second pass."""
    first, second = zone.utcoffset(wall.replace(fold=0)), zone.utcoffset(wall.replace(fold=1))
    assert first is not None and second is not None  # a ZoneInfo always knows the offset
    return first, second


def wall_at(instant: datetime, offset: timedelta) -> datetime:
    """The naive wall time of the UTC ``instant`` under ``offset``."""
    return (instant + offset).replace(tzinfo=None)


def instant_at(wall: datetime, offset: timedelta) -> datetime:
    """The UTC instant of the naive ``wall`` time read with ``offset``."""
    return (wall - offset).replace(tzinfo=UTC)


def transition(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """Return the first whole-second instant in (before, after] with ``after``'s UTC offset.

    Assumes exactly one offset change in between (tzdata transitions fall on whole seconds).
    """
    target = after.astimezone(zone).utcoffset()
    low, high = int(before.timestamp()), int(after.timestamp())
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == target:
            high = mid
        else:
            low = mid
    return datetime.fromtimestamp(high, UTC)


def fixed_instant(zone: ZoneInfo, wall: datetime) -> datetime:
    """Where a local wall time happens once, as Debian cron fires a fixed-time job: its first
    pass (``fold=0``) when it is repeated, or the first instant after the gap that skips it
    (wall times sharing a gap map to the same instant).

    Args:
        zone: the zone.
        wall: a naive wall time (microseconds kept when it exists or is repeated).

    Returns:
        An aware UTC instant. Raises ``OverflowError`` at the ends of the calendar.
    """
    first, second = offsets(zone, wall)
    if first >= second:  # exists, or repeated: first pass
        return instant_at(wall, first)
    return transition(zone, instant_at(wall, second), instant_at(wall, first))


class OffsetChange(NamedTuple):
    """A change of a zone's UTC offset: from ``at`` on (a UTC instant) the offset is ``after``;
    just before, ``before``. ``after > before``: a gap (wall times skipped); else an overlap."""

    at: datetime
    before: timedelta
    after: timedelta


def offset_changes(zone: ZoneInfo, start: datetime, end: datetime) -> list[OffsetChange]:
    """Every change of ``zone``'s UTC offset at an instant ``t`` with ``start < t <= end``.

    Args:
        zone: the zone.
        start, end: aware instants.

    Returns:
        The changes, oldest first. Cost: one cached block per :data:`_BLOCK_DAYS` days of the
        range (60 probes and a bisection per change, the first time a block is asked for).
    """
    if zone.key in _FIXED or zone.key.startswith("Etc/") or end <= start:
        return []
    # A change at instant t shows in fold=0 wall times at t + max(before, after), within a day
    # and a bit of t: probe the wall times of the range widened by two days.
    low = start.astimezone(UTC).toordinal() - 2
    high = end.astimezone(UTC).toordinal() + 2
    found: list[OffsetChange] = []
    for block in range(low // _BLOCK_DAYS, high // _BLOCK_DAYS + 1):
        found.extend(c for c in _block_changes(zone, block) if start < c.at <= end)
    return found


@lru_cache(maxsize=16384)
def _block_changes(zone: ZoneInfo, block: int) -> tuple[OffsetChange, ...]:
    """The changes whose fold=0 wall time falls in (first day of ``block``, first of the next]
    (days by proleptic Gregorian ordinal; blocks partition all wall times)."""
    first_day = block * _BLOCK_DAYS
    if first_day < 1 or first_day + _BLOCK_DAYS > datetime.max.toordinal():
        return ()  # the ends of the calendar: nothing is scheduled there
    probe = datetime.fromordinal(first_day)
    offset = zone.utcoffset(probe)
    changes: list[OffsetChange] = []
    for _ in range(_BLOCK_PROBES):
        following = probe + _PROBE
        after = zone.utcoffset(following)
        if after != offset:
            assert offset is not None and after is not None
            wall = _first_wall_with(zone, probe, following, after)
            changes.append(OffsetChange(instant_at(wall, max(offset, after)), offset, after))
        probe, offset = following, after
    return tuple(changes)


def _first_wall_with(zone: ZoneInfo, low: datetime, high: datetime, target: timedelta) -> datetime:
    """The first whole-second wall time in (low, high] whose fold=0 offset is ``target``
    (``high``'s is, ``low``'s is not; one change in between)."""
    while high - low > _SECOND:
        mid = low + timedelta(seconds=(high - low).total_seconds() // 2)
        if zone.utcoffset(mid) == target:
            high = mid
        else:
            low = mid
    return high


# --- every offset change of a zone, in bounded form ---------------------------------------------
# A zone's changes are its TZif file's transitions up to the last one it lists, then a yearly
# rule (the file's POSIX TZ footer). Under a yearly rule, the changes of a year depend only on
# the year's calendar (leap or not, weekday of 1 January: fourteen kinds), as does every cron
# schedule's set of matching days: fourteen reference years stand for all the years of the rule.

YearKind = tuple[bool, int]


def year_kind(year: int) -> YearKind:
    """The calendar kind of ``year``: (leap year, weekday of 1 January, Monday = 0)."""
    return calendar.isleap(year), calendar.weekday(year, 1, 1)


class ZoneRules(NamedTuple):
    """Every offset change of a zone (:func:`zone_rules`).

    Attributes:
        listed: the changes before 1 January of ``rule_year`` (UTC), oldest first.
        rule_year: from this year on, the changes of each year (by UTC instant) are those of
            the reference year of its kind, on the same days and times of day.
        reference: for each :func:`year_kind`, a year from ``rule_year`` on.
        yearly: for each kind, the reference year's changes.
    """

    listed: tuple[OffsetChange, ...]
    rule_year: int
    reference: dict[YearKind, int]
    yearly: dict[YearKind, tuple[OffsetChange, ...]]


def _tzif_transitions(name: str) -> tuple[int, ...]:
    """The transition instants (POSIX seconds) listed in zone ``name``'s TZif file (RFC 8536:
    the 64-bit block of version 2 and later, else the 32-bit one)."""
    data = resources.files("tzdata.zoneinfo").joinpath(*name.split("/")).read_bytes()
    if data[:4] != b"TZif":
        return ()
    isut, isstd, leap, count, types, chars = struct.unpack(">6l", data[20:44])
    if data[4] == 0:
        return struct.unpack(f">{count}l", data[44 : 44 + 4 * count])
    second = 44 + count * 5 + types * 6 + chars + leap * 8 + isstd + isut
    count = struct.unpack(">6l", data[second + 20 : second + 44])[3]
    return struct.unpack(f">{count}q", data[second + 44 : second + 44 + 8 * count])


def _year_changes(zone: ZoneInfo, year: int) -> tuple[OffsetChange, ...]:
    """The changes whose instant lies in UTC year ``year``."""
    start = datetime(year, 1, 1, tzinfo=UTC)
    return tuple(offset_changes(zone, start - _TICK, start.replace(year=year + 1) - _TICK))


def _shifted(changes: tuple[OffsetChange, ...], year: int) -> tuple[OffsetChange, ...]:
    """``changes`` (of one UTC year) moved to ``year``, same days and times of day."""
    return tuple(c._replace(at=c.at.replace(year=year)) for c in changes)


@cache
def zone_rules(zone: ZoneInfo) -> ZoneRules | None:
    """Every offset change of ``zone``, as a bounded list and a yearly rule.

    Cost: once per zone (cached), a bisection per listed transition and a probe of some
    fifteen to thirty years.

    Returns:
        The rules; ``None`` when the yearly rule cannot stand for its years (a change within
        two days of a new year, or two years of one kind that differ), so the caller lists
        changes over the range it needs instead.
    """
    stamps = (
        () if zone.key in _FIXED or zone.key.startswith("Etc/") else _tzif_transitions(zone.key)
    )
    low, high = EARLIEST_INSTANT.timestamp(), datetime(9000, 1, 1, tzinfo=UTC).timestamp()
    stamps = tuple(s for s in stamps if low < s < high)
    rule_year = datetime.fromtimestamp(stamps[-1], UTC).year + 1 if stamps else 1971
    rule_start = datetime(rule_year, 1, 1, tzinfo=UTC)
    listed: list[OffsetChange] = []
    for stamp in stamps:
        before = datetime.fromtimestamp(stamp - 1, zone).utcoffset()
        after = datetime.fromtimestamp(stamp, zone).utcoffset()
        if before != after:
            assert before is not None and after is not None
            listed.append(OffsetChange(datetime.fromtimestamp(stamp, UTC), before, after))
    if stamps:  # the rule's own changes after the last listed one, in that year
        last = datetime.fromtimestamp(stamps[-1], UTC)
        listed.extend(offset_changes(zone, last, rule_start - _TICK))
    reference: dict[YearKind, int] = {}
    yearly: dict[YearKind, tuple[OffsetChange, ...]] = {}
    margin = timedelta(days=2)
    for year in range(rule_year, min(rule_year + 60, 9000)):
        changes = _year_changes(zone, year)
        start = datetime(year, 1, 1, tzinfo=UTC)
        if any(not start + margin < c.at < start.replace(year=year + 1) - margin for c in changes):
            return None
        kind = year_kind(year)
        if kind not in reference:
            reference[kind], yearly[kind] = year, changes
        elif _shifted(yearly[kind], year) != changes:
            return None
    if len(reference) < 14:
        return None
    return ZoneRules(tuple(listed), rule_year, reference, yearly)


def changes_of_year(rules: ZoneRules, year: int) -> tuple[OffsetChange, ...]:
    """The changes of UTC year ``year`` (from ``rules.rule_year`` on) under the yearly rule."""
    return _shifted(rules.yearly[year_kind(year)], year)
