"""Searching a schedule without walking it: the newest occurrence at or before an instant, the
n-th newest, how many lie in a range, and where a zone's UTC offset changes.

Each is checked against walking the schedule with ``next_after`` (itself checked against the
brute-force rule of docs/design.md, invariant 7, in test_schedule.py), on the same expressions,
zones and instants near daylight-saving changes.
"""

from __future__ import annotations

import itertools
import zoneinfo._zoneinfo as pure_zoneinfo  # type: ignore[import-not-found]  # the stdlib's reader of the tz database, an oracle
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import utc
from pgpulse.core.schedule import Schedule
from pgpulse.core.zones import PROBE_DAYS, OffsetChange, load_zone, offset_changes, zone_names
from test_schedule import PROPERTY_SETTINGS, _parse_or_reject, cases

SECOND = timedelta(seconds=1)


def walk(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Every occurrence in (start, end], by repeated next_after (the oracle)."""
    found, current = [], start
    while (current := schedule.next_after(current)) <= end:
        found.append(current)
    return found


@PROPERTY_SETTINGS
@given(cases())
def test_last_at_or_before_is_the_occurrence_next_after_steps_over(
    case: tuple[str, str, datetime],
) -> None:
    expr, zone, moment = case
    schedule = _parse_or_reject(expr, zone)
    last = schedule.last_at_or_before(moment)
    assert last is not None and last <= moment
    assert last.tzinfo is UTC and last.microsecond == 0
    assert schedule.next_after(last - SECOND) == last  # an occurrence...
    assert schedule.next_after(last) > moment  # ...and none later up to `moment`


@PROPERTY_SETTINGS
@given(cases(), st.integers(0, 3 * 86400), st.integers(0, 999_999))
def test_count_between_is_the_number_of_occurrences_walked(
    case: tuple[str, str, datetime], span: int, micros: int
) -> None:
    expr, zone, start = case
    schedule = _parse_or_reject(expr, zone)
    if len(expr.split()) == 6:
        span //= 24  # second-level expressions: at most three hours of them
    start += timedelta(microseconds=micros)
    end = start + timedelta(seconds=span, microseconds=micros // 3)
    assert schedule.count_between(start, end) == len(walk(schedule, start, end))
    assert schedule.count_between(end, start) == 0


@PROPERTY_SETTINGS
@given(cases(seconds=False), st.integers(1, 60))
def test_newest_at_or_before_counts_back_n(case: tuple[str, str, datetime], n: int) -> None:
    expr, zone, moment = case
    schedule = _parse_or_reject(expr, zone)
    expected: list[datetime] = []
    current = moment
    while len(expected) < n:
        found = schedule.last_at_or_before(current)
        assert found is not None
        expected.append(found)
        current = found - SECOND
    assert schedule.newest_at_or_before(moment, n) == expected[-1]


@settings(max_examples=60, deadline=None)
@given(
    cases(seconds=False),
    st.integers(0, 3 * 365 * 86400),
    st.integers(0, 3 * 365 * 86400),
)
def test_counts_over_years_add_up(case: tuple[str, str, datetime], first: int, second: int) -> None:
    """Over years (dozens of offset changes) a count is the sum of the counts of its parts."""
    expr, zone, start = case
    schedule = _parse_or_reject(expr, zone)
    middle = start + timedelta(seconds=first)
    end = middle + timedelta(seconds=second)
    whole = schedule.count_between(start, end)
    assert whole == schedule.count_between(start, middle) + schedule.count_between(middle, end)


@pytest.mark.parametrize(
    ("expr", "zone"),
    [
        pytest.param("*/20 * * * *", "Europe/London", id="elapsed_every_20_minutes_london"),
        pytest.param("30 1,2 * * *", "Europe/Berlin", id="fixed_in_the_skipped_and_repeated_hour"),
        pytest.param("0,30 2 * * *", "America/New_York", id="fixed_two_times_sharing_a_gap"),
        pytest.param("15 * * * 0", "Australia/Lord_Howe", id="half_hour_dst_sundays"),
        pytest.param("0 3 * * *", "Asia/Gaza", id="ramadan_dst_changes"),
    ],
)
def test_two_years_of_counts_and_searches_match_the_walk(expr: str, zone: str) -> None:
    schedule = _parse_or_reject(expr, zone)
    start, end = utc(2025, 11, 3, 7, 11, 13), utc(2027, 12, 2, 3, 4, 5)
    walked = walk(schedule, start, end)
    assert schedule.count_between(start, end) == len(walked)
    assert schedule.last_at_or_before(end) == walked[-1]
    for n in sorted({1, 2, 3, 100, 1000, len(walked)} & set(range(1, len(walked) + 1))):
        assert schedule.newest_at_or_before(end, n) == walked[-n]


@pytest.mark.parametrize(
    ("expr", "start", "end", "expected"),
    [
        # 3,652 days (two leap days) of minutes; 63,918 days (43 leap days) of seconds
        pytest.param("* * * * *", utc(2016, 6, 15), utc(2026, 6, 15), 3652 * 1440, id="10y_min"),
        pytest.param("* * * * * *", utc(1851, 6, 15), utc(2026, 6, 15), 63918 * 86400, id="175y"),
        pytest.param("0 0 29 2 *", utc(2000, 1, 1), utc(2400, 1, 1), 97, id="leap_days_400y"),
    ],
)
def test_counts_far_beyond_walking(
    expr: str, start: datetime, end: datetime, expected: int
) -> None:
    assert Schedule.count_between(_parse_or_reject(expr, "UTC"), start, end) == expected


def test_interval_searches_keep_the_anchor_to_the_microsecond() -> None:
    schedule = _parse_or_reject("@every 90s", "UTC")
    anchor = utc(2026, 1, 1) + timedelta(microseconds=357)
    moment = anchor + timedelta(seconds=90 * 1000 + 89, microseconds=999_999)
    assert schedule.last_at_or_before(moment, anchor=anchor) == anchor + 1000 * timedelta(
        seconds=90
    )
    assert schedule.newest_at_or_before(moment, 10, anchor=anchor) == anchor + 991 * timedelta(
        seconds=90
    )
    assert schedule.count_between(anchor, moment, anchor=anchor) == 1000
    assert schedule.count_between(anchor - timedelta(microseconds=1), anchor, anchor=anchor) == 1


# --- where offsets change -------------------------------------------------------------------


def _packaged(key: str) -> Any:
    """Zone ``key`` from the ``tzdata`` package (Pulse's source of rules, not the host's), read by
    the stdlib's pure-Python zoneinfo, whose transition tables are open to read."""
    with resources.files("tzdata.zoneinfo").joinpath(*key.split("/")).open("rb") as data:
        return pure_zoneinfo.ZoneInfo.from_file(data, key=key)


def _database_changes(key: str, until_year: int = 2040) -> list[OffsetChange]:
    """The offset changes of the zone as the tz database states them, from 1970 on: its explicit
    transition table, then, for the years after it, its rule (the POSIX TZ string: a slim tzdata
    file, as the package ships, ends its table at the last change of rules). Read by the
    stdlib's pure-Python zoneinfo: the oracle of the probing."""
    zone = _packaged(key)
    found: list[OffsetChange] = []
    before = zone._tti_before.utcoff if zone._tti_before else None
    for at, info in zip(zone._trans_utc, zone._ttinfos, strict=True):
        if info.utcoff != before and at >= 0 and before is not None:
            found.append(OffsetChange(datetime.fromtimestamp(at, UTC), before, info.utcoff))
        before = info.utcoff
    rule = zone._tz_after
    last = zone._trans_utc[-1] if zone._trans_utc else 0
    if hasattr(rule, "transitions"):
        first_year = datetime.fromtimestamp(max(last, 0), UTC).year
        moves = []
        for year in range(first_year, until_year + 1):
            start, end = rule.transitions(year)  # local standard / daylight time, as seconds
            moves.append((start - rule.std.utcoff.total_seconds(), rule.dst.utcoff))
            moves.append((end - rule.dst.utcoff.total_seconds(), rule.std.utcoff))
        for at, offset in sorted(moves):
            if at > last and at >= 0 and offset != before and before is not None:
                found.append(OffsetChange(datetime.fromtimestamp(at, UTC), before, offset))
            if at > last:
                before = offset
    return found


def _rule_changes(key: str, years: range) -> list[int]:
    """Timestamps (local time: off by at most the DST shift) of the changes of the zone's
    rule for the years after its table (its POSIX TZ string)."""
    rule = _packaged(key)._tz_after
    if not hasattr(rule, "transitions"):
        return []
    return sorted(t for year in years for t in rule.transitions(year))


def test_no_zone_changes_its_offset_twice_between_two_probes() -> None:
    """offset_changes probes every PROBE_DAYS days: no zone of the database may change its offset
    twice within that (plus the largest DST shift, 2 h) from 1970 on, by its table and rule."""
    closest = timedelta(days=365)
    for key in sorted(zone_names()):
        table = [int(c.at.timestamp()) for c in _database_changes(key)]
        last = datetime.fromtimestamp(table[-1], UTC).year if table else 1970
        instants = sorted({*table, *_rule_changes(key, range(last + 1, 2200))})
        for a, b in itertools.pairwise(instants):
            closest = min(closest, timedelta(seconds=b - a))
    assert closest > timedelta(days=PROBE_DAYS, hours=2), closest


@pytest.mark.parametrize("start_year", [1975, 2000, 2025])
def test_offset_changes_are_the_database_transitions(start_year: int) -> None:
    start, end = utc(start_year, 1, 1), utc(start_year + 12, 1, 1)
    for key in sorted(zone_names()):
        expected = [c for c in _database_changes(key) if start < c.at <= end]
        assert offset_changes(load_zone(key), start, end) == expected, key


def test_offset_changes_under_the_rule_after_the_table() -> None:
    zone = load_zone("America/New_York")
    changes = offset_changes(zone, utc(2040, 1, 1), utc(2240, 1, 1))
    assert len(changes) == 400  # two a year, as its rule says
    for change in changes:
        assert (change.at - SECOND).astimezone(zone).utcoffset() == change.before
        assert change.at.astimezone(zone).utcoffset() == change.after
    assert offset_changes(load_zone("UTC"), utc(1900, 1, 1), utc(2900, 1, 1)) == []
