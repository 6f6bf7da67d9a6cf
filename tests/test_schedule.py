"""Tests of pgpulse.core.schedule: exact instants, DST in both hemispheres, refusals, properties.

Expected instants are written in UTC with the local wall time in a comment. Transitions used:
- Europe/London 2026-03-29 01:00 GMT -> 02:00 BST (at 01:00 UTC); 2026-10-25 02:00 BST -> 01:00 GMT
  (at 01:00 UTC, so 01:00-01:59 local happens twice).
- Australia/Sydney 2026-04-05 03:00 AEDT -> 02:00 AEST (at 16:00 UTC on 04-04);
  2026-10-04 02:00 AEST -> 03:00 AEDT (at 16:00 UTC on 10-03).
- America/New_York 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC); 2026-11-01 02:00 EDT -> 01:00 EST
  (06:00 UTC).
"""

from __future__ import annotations

import calendar
import timeit
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from cron_brute import day_matches
from helpers import utc
from pgpulse.core.errors import InvalidSchedule, UnknownTimeZone
from pgpulse.core.schedule import SCHEDULE_HELP, Schedule, parse_schedule
from pgpulse.core.zones import load_zone


def following(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    for _ in range(count):
        after = schedule.next_after(after)
        out.append(after)
    return out


LONDON, SYDNEY, NEW_YORK = "Europe/London", "Australia/Sydney", "America/New_York"

# (expression, after, the next occurrences) -- all in UTC.
UTC_CASES = [
    pytest.param(
        "30 4 1,15 * 5",
        utc(2026, 1, 1, 5),
        [
            utc(2026, 1, 2, 4, 30),
            utc(2026, 1, 9, 4, 30),
            utc(2026, 1, 15, 4, 30),
            utc(2026, 1, 16, 4, 30),
        ],
        id="dom_dow_or_rule",
    ),
    pytest.param(
        "0 0 */2 * 5",
        utc(2026, 1, 1),
        [  # odd days that are Fridays
            utc(2026, 1, 9),
            utc(2026, 1, 23),
            utc(2026, 2, 13),
            utc(2026, 2, 27),
        ],
        id="dom_star_step_and_rule",
    ),
    pytest.param(
        "0 0 1 * *", utc(2026, 1, 15), [utc(2026, 2, 1), utc(2026, 3, 1)], id="dow_star_and_rule"
    ),
    pytest.param(
        "0 0 * * 1",
        utc(2026, 1, 1),
        [utc(2026, 1, 5), utc(2026, 1, 12)],
        id="dom_star_weekday_only",
    ),
    pytest.param(
        "*/20 3-4 * * *",
        utc(2026, 1, 1, 3, 40),
        [utc(2026, 1, 1, 4), utc(2026, 1, 1, 4, 20), utc(2026, 1, 1, 4, 40), utc(2026, 1, 2, 3)],
        id="step_and_hour_range",
    ),
    pytest.param(
        "10-30/10 * * * *",
        utc(2026, 1, 1, 0, 30),
        [utc(2026, 1, 1, 1, 10), utc(2026, 1, 1, 1, 20), utc(2026, 1, 1, 1, 30)],
        id="range_with_step",
    ),
    pytest.param(
        "5/20 * * * *",
        utc(2026, 1, 1),
        [
            utc(2026, 1, 1, 0, 5),
            utc(2026, 1, 1, 0, 25),
            utc(2026, 1, 1, 0, 45),
            utc(2026, 1, 1, 1, 5),
        ],
        id="cronie_start_slash_step",
    ),
    pytest.param(
        "0 8,12,18 * * *", utc(2026, 1, 1, 12), [utc(2026, 1, 1, 18), utc(2026, 1, 2, 8)], id="list"
    ),
    pytest.param(
        "0 9 * jan-mar mon-fri",
        utc(2026, 3, 31, 9),
        [  # Tue 31 Mar -> Fri 1 Jan
            utc(2027, 1, 1, 9),
            utc(2027, 1, 4, 9),
        ],
        id="month_and_day_names_skip_months",
    ),
    pytest.param(
        "0 9 * JAN-Mar MON-fri",
        utc(2026, 3, 31, 9),
        [utc(2027, 1, 1, 9)],
        id="names_case_insensitive",
    ),
    pytest.param(
        "0 0 * * 7", utc(2026, 1, 1), [utc(2026, 1, 4), utc(2026, 1, 11)], id="dow_7_is_sunday"
    ),
    pytest.param(
        "0 0 * * 5-7",
        utc(2026, 1, 3, 12),
        [  # Sat noon -> Sun, Fri, Sat
            utc(2026, 1, 4),
            utc(2026, 1, 9),
            utc(2026, 1, 10),
            utc(2026, 1, 11),
        ],
        id="dow_range_to_7",
    ),
    pytest.param(
        "0 0 29 2 *", utc(2026, 1, 1), [utc(2028, 2, 29), utc(2032, 2, 29)], id="leap_day"
    ),
    pytest.param(
        "0 0 29 2 */7",
        utc(2089, 1, 1),
        [utc(2128, 2, 29)],  # 2100 is not leap
        id="leap_day_sunday_39_years_ahead",
    ),
    pytest.param(
        "0 0 31 * *",
        utc(2026, 1, 31),
        [utc(2026, 3, 31), utc(2026, 5, 31)],
        id="day_31_skips_short_months",
    ),
    pytest.param(
        "*/15 * * * * *",
        utc(2026, 1, 1, 12, 0, 7),
        [
            utc(2026, 1, 1, 12, 0, 15),
            utc(2026, 1, 1, 12, 0, 30),
            utc(2026, 1, 1, 12, 0, 45),
            utc(2026, 1, 1, 12, 1),
        ],
        id="six_fields_seconds_step",
    ),
    pytest.param(
        "30 0 12 * * *",
        utc(2026, 1, 1, 12, 0, 30),
        [utc(2026, 1, 2, 12, 0, 30), utc(2026, 1, 3, 12, 0, 30)],
        id="six_fields_fixed",
    ),
    pytest.param(
        "59 59 23 31 12 *",
        utc(2026, 12, 31, 23, 59, 58),
        [utc(2026, 12, 31, 23, 59, 59), utc(2027, 12, 31, 23, 59, 59)],
        id="year_end_carry",
    ),
    pytest.param("@yearly", utc(2026, 5, 5), [utc(2027, 1, 1), utc(2028, 1, 1)], id="yearly"),
    pytest.param("@annually", utc(2026, 5, 5), [utc(2027, 1, 1)], id="annually"),
    pytest.param("@monthly", utc(2026, 1, 1), [utc(2026, 2, 1)], id="monthly"),
    pytest.param("@weekly", utc(2026, 1, 1), [utc(2026, 1, 4)], id="weekly_sunday"),
    pytest.param("@daily", utc(2026, 1, 1, 0, 0, 1), [utc(2026, 1, 2)], id="daily"),
    pytest.param("@midnight", utc(2026, 1, 1), [utc(2026, 1, 2)], id="midnight"),
    pytest.param("  @HOURLY ", utc(2026, 1, 1, 0, 59, 59), [utc(2026, 1, 1, 1)], id="hourly"),
]


@pytest.mark.parametrize(("expr", "after", "expected"), UTC_CASES)
def test_next_occurrences_utc(expr: str, after: datetime, expected: list[datetime]) -> None:
    schedule = parse_schedule(expr)
    got = following(schedule, after, len(expected))
    assert got == expected
    assert all(t.tzinfo is UTC and t.microsecond == 0 for t in got)


# (expression, zone, after, the next occurrences in UTC)
DST_CASES = [
    pytest.param(
        "30 1 * * *",
        LONDON,
        utc(2026, 3, 28, 12),
        [
            utc(2026, 3, 29, 1),  # 01:30 does not exist: the first instant after the gap, 02:00 BST
            utc(2026, 3, 30, 0, 30),
        ],
        id="london_spring_forward_fixed_time_in_gap",
    ),
    pytest.param(
        "0,30 1 * * *",
        LONDON,
        utc(2026, 3, 29),
        [
            utc(2026, 3, 29, 1),  # 01:00 and 01:30 are both skipped: fire once, at 02:00 BST
            utc(2026, 3, 30, 0),
            utc(2026, 3, 30, 0, 30),
        ],
        id="london_two_times_in_gap_fire_once",
    ),
    pytest.param(
        "0 1-3 * * *",
        LONDON,
        utc(2026, 3, 29),
        [
            utc(2026, 3, 29, 1),  # 01:00 (skipped) and 02:00 BST are the same instant
            utc(2026, 3, 29, 2),
            utc(2026, 3, 30, 0),
        ],
        id="london_gap_time_and_next_hour_once",
    ),
    pytest.param(
        "30 1 * * *",
        LONDON,
        utc(2026, 10, 24, 12),
        [
            utc(2026, 10, 25, 0, 30),  # 01:30 BST, first pass only
            utc(2026, 10, 26, 1, 30),
        ],
        id="london_fall_back_fixed_time_first_pass_only",
    ),
    pytest.param(
        "30 1 * * *",
        LONDON,
        utc(2026, 10, 25, 1, 10),
        [  # from 01:10 GMT, 2nd pass
            utc(2026, 10, 26, 1, 30)
        ],
        id="london_fall_back_fixed_from_second_pass",
    ),
    pytest.param(
        "*/30 * * * *",
        LONDON,
        utc(2026, 3, 29),
        [utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 30)],  # 00:30 GMT,
        id="london_spring_forward_every_30_min_none_in_gap",
    ),  # then 02:00, 02:30 BST
    pytest.param(
        "*/15 * * * *",
        LONDON,
        utc(2026, 10, 24, 23, 50),
        [
            utc(2026, 10, 25, 0),
            utc(2026, 10, 25, 0, 15),
            utc(2026, 10, 25, 0, 30),
            utc(2026, 10, 25, 0, 45),  # 01:00..01:45 BST
            utc(2026, 10, 25, 1),
            utc(2026, 10, 25, 1, 15),
            utc(2026, 10, 25, 1, 30),
            utc(2026, 10, 25, 1, 45),  # 01:00..01:45 GMT again
            utc(2026, 10, 25, 2),
        ],
        id="london_fall_back_every_15_min_both_passes",
    ),
    pytest.param(
        "*/15 * * * *",
        LONDON,
        utc(2026, 10, 25, 1, 10),
        [utc(2026, 10, 25, 1, 15), utc(2026, 10, 25, 1, 30)],
        id="london_fall_back_elapsed_from_second_pass",
    ),
    pytest.param(
        "30 * * * *",
        LONDON,
        utc(2026, 10, 24, 23),
        [
            utc(2026, 10, 24, 23, 30),
            utc(2026, 10, 25, 0, 30),  # 00:30, 01:30 BST
            utc(2026, 10, 25, 1, 30),
            utc(2026, 10, 25, 2, 30),
        ],  # 01:30, 02:30 GMT
        id="london_fall_back_fixed_minute_star_hour_both_passes",
    ),
    pytest.param(
        "30 * * * *",
        LONDON,
        utc(2026, 3, 29, 0),
        [utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 30)],  # 00:30 GMT, 02:30 BST; no 01:30
        id="london_spring_forward_fixed_minute_star_hour_skips_gap",
    ),
    pytest.param(
        "* 1 * * *",
        LONDON,
        utc(2026, 3, 29, 0, 59),
        [utc(2026, 3, 30, 0)],
        id="london_every_minute_of_skipped_hour_never_fires",
    ),
    pytest.param(
        "0 * * * *",
        SYDNEY,
        utc(2026, 10, 3, 14, 30),
        [utc(2026, 10, 3, 15), utc(2026, 10, 3, 16), utc(2026, 10, 3, 17)],  # 01:00 AEST,
        id="sydney_spring_forward_hourly_none_in_gap",
    ),  # 03:00, 04:00 AEDT
    pytest.param(
        "0 * * * *",
        SYDNEY,
        utc(2026, 4, 4, 13, 30),
        [
            utc(2026, 4, 4, 14),
            utc(2026, 4, 4, 15),  # 01:00, 02:00 AEDT
            utc(2026, 4, 4, 16),
            utc(2026, 4, 4, 17),
        ],  # 02:00, 03:00 AEST
        id="sydney_fall_back_hourly_both_passes",
    ),
    pytest.param(
        "30 2 * * *",
        SYDNEY,
        utc(2026, 10, 3),
        [
            utc(2026, 10, 3, 16),  # 02:30 does not exist: 03:00 AEDT
            utc(2026, 10, 4, 15, 30),
        ],
        id="sydney_spring_forward_fixed_time_in_gap",
    ),
    pytest.param(
        "30 2 * * *",
        SYDNEY,
        utc(2026, 4, 4),
        [
            utc(2026, 4, 4, 15, 30),  # 02:30 AEDT, first pass only
            utc(2026, 4, 5, 16, 30),
        ],
        id="sydney_fall_back_fixed_time_first_pass_only",
    ),
    pytest.param(
        "30 2 * * *",
        NEW_YORK,
        utc(2026, 3, 7, 12),
        [
            utc(2026, 3, 8, 7),  # 03:00 EDT
            utc(2026, 3, 9, 6, 30),
        ],
        id="new_york_spring_forward_fixed_time_in_gap",
    ),
    pytest.param(
        "30 1 * * *",
        NEW_YORK,
        utc(2026, 10, 31, 12),
        [
            utc(2026, 11, 1, 5, 30),  # 01:30 EDT
            utc(2026, 11, 2, 6, 30),
        ],
        id="new_york_fall_back_fixed_time_first_pass_only",
    ),
    pytest.param(
        "0 2 * * *",
        NEW_YORK,
        utc(2026, 10, 31, 12),
        [utc(2026, 11, 1, 7)],
        id="new_york_end_of_repeated_hour_fires_once",
    ),  # 02:00 EST
    pytest.param(
        "*/30 * * * *",
        NEW_YORK,
        utc(2026, 11, 1, 5, 15),
        [
            utc(2026, 11, 1, 5, 30),
            utc(2026, 11, 1, 6),
            utc(2026, 11, 1, 6, 30),
            utc(2026, 11, 1, 7),
        ],
        id="new_york_fall_back_every_30_min_both_passes",
    ),
    pytest.param(
        "0 30 1 * * *",
        LONDON,
        utc(2026, 3, 28, 12),
        [utc(2026, 3, 29, 1)],
        id="six_fields_fixed_time_in_gap",
    ),
    pytest.param(
        "0 9 * * *", LONDON, utc(2026, 7, 1), [utc(2026, 7, 1, 8)], id="london_summer_offset"
    ),
]


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), DST_CASES)
def test_next_occurrences_dst(
    expr: str, zone: str, after: datetime, expected: list[datetime]
) -> None:
    assert following(parse_schedule(expr, zone), after, len(expected)) == expected


def test_occurrences_between_fall_back_every_15_minutes() -> None:
    schedule = parse_schedule("*/15 * * * *", LONDON)
    got = schedule.occurrences_between(utc(2026, 10, 25, 0), utc(2026, 10, 25, 2), limit=100)
    assert got == [utc(2026, 10, 25, 0, 15) + timedelta(minutes=15 * k) for k in range(8)]
    assert schedule.occurrences_between(utc(2026, 10, 25), utc(2026, 10, 26), limit=3) == got[:3]
    assert schedule.occurrences_between(utc(2026, 10, 25), utc(2026, 10, 26), limit=0) == []
    assert schedule.occurrences_between(utc(2026, 10, 25), utc(2026, 10, 24), limit=5) == []


def test_zone_aware_inputs_in_any_zone_and_microseconds() -> None:
    schedule = parse_schedule("0 * * * *")
    tokyo = datetime(2026, 1, 1, 9, 59, 59, 999_999, tzinfo=load_zone("Asia/Tokyo"))
    assert schedule.next_after(tokyo) == utc(2026, 1, 1, 1)
    assert schedule.next_after(utc(2026, 1, 1, 1, 0, 0, 1)) == utc(2026, 1, 1, 2)


def test_cron_stays_on_whole_seconds_after_a_sub_second_instant() -> None:
    # Cron ignores the anchor and keeps Vixie cron's whole seconds, strictly later than `after`.
    every_second = parse_schedule("* * * * * *")
    anchor = utc(2026, 1, 1, 0, 0, 0, 357_000)
    assert every_second.next_after(utc(2026, 1, 1, 12, 0, 0, 1), anchor=anchor) == utc(
        2026, 1, 1, 12, 0, 1
    )
    assert every_second.next_after(utc(2026, 1, 1, 12, 0, 0, 999_999)) == utc(2026, 1, 1, 12, 0, 1)
    assert every_second.occurrences_between(
        utc(2026, 1, 1, 12, 0, 0, 500_000), utc(2026, 1, 1, 12, 0, 2, 500_000), limit=5
    ) == [utc(2026, 1, 1, 12, 0, 1), utc(2026, 1, 1, 12, 0, 2)]


# --- intervals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "after", "anchor", "expected"),
    [
        pytest.param(
            "@every 60s",
            utc(2026, 1, 1, 12, 3, 10),
            utc(2026, 1, 1, 10, 0, 50),
            utc(2026, 1, 1, 12, 3, 50),
            id="anchor_kept_after_two_hour_gap",
        ),
        pytest.param(
            "@every 60s",
            utc(2026, 1, 1, 12, 3, 50),
            utc(2026, 1, 1, 10, 0, 50),
            utc(2026, 1, 1, 12, 4, 50),
            id="on_grid_is_not_strictly_later",
        ),
        pytest.param(
            "@every 30s",
            utc(2026, 1, 1, 12, 0, 7, 500),
            None,
            utc(2026, 1, 1, 12, 0, 37, 500),
            id="no_anchor_means_after_plus_interval",
        ),
        pytest.param(
            "@every 60s",
            utc(2026, 1, 1, 12, 3, 10),
            utc(2026, 1, 1, 12, 0, 0, 357_000),
            utc(2026, 1, 1, 12, 4, 0, 357_000),
            id="sub_second_anchor_kept",
        ),
        pytest.param(
            "@every 60s",
            utc(2026, 1, 1, 12, 4),
            utc(2026, 1, 1, 12, 0, 0, 357_000),
            utc(2026, 1, 1, 12, 4, 0, 357_000),
            id="whole_second_after_sub_second_anchor",
        ),
        pytest.param(
            "@every 60s",
            utc(2026, 1, 1, 12, 4, 0, 357_000),
            utc(2026, 1, 1, 12, 0, 0, 357_000),
            utc(2026, 1, 1, 12, 5, 0, 357_000),
            id="sub_second_on_grid_is_not_strictly_later",
        ),
        pytest.param(
            "@every 60s",
            utc(2026, 1, 1, 12, 4, 0, 356_999),
            utc(2026, 1, 1, 12, 0, 0, 357_000),
            utc(2026, 1, 1, 12, 4, 0, 357_000),
            id="one_microsecond_before_an_occurrence",
        ),
        pytest.param(
            "@every 1s",
            utc(2026, 1, 1, 12, 0, 0, 999_999),
            utc(2026, 1, 1, 0, 0, 0, 1),
            utc(2026, 1, 1, 12, 0, 1, 1),
            id="one_second_grid_at_one_microsecond",
        ),
        pytest.param(
            "@every 60s",
            utc(2026, 1, 1, 12, 3, 10),
            datetime(2026, 1, 1, 13, 0, 0, 250_000, tzinfo=load_zone("Europe/Paris")),
            utc(2026, 1, 1, 12, 4, 0, 250_000),
            id="anchor_in_another_zone_keeps_fraction",
        ),
        pytest.param(
            "@every 1h30m",
            utc(2026, 1, 1, 2, 59, 59),
            utc(2026, 1, 1),
            utc(2026, 1, 1, 3),
            id="hours_and_minutes",
        ),
        pytest.param(
            "@every 2d",
            utc(2026, 1, 1),
            utc(2026, 1, 2),
            utc(2026, 1, 2),
            id="anchor_in_future_sets_phase",
        ),
        pytest.param(
            "@every 15m",
            utc(9000, 6, 1, 0, 7),
            utc(2026, 1, 1, 0, 5),
            utc(9000, 6, 1, 0, 20),
            id="seven_thousand_years_later",
        ),
    ],
)
def test_interval(expr: str, after: datetime, anchor: datetime | None, expected: datetime) -> None:
    assert parse_schedule(expr).next_after(after, anchor=anchor) == expected


def test_interval_is_constant_time() -> None:
    schedule = parse_schedule("@every 1s")
    anchor = utc(2000, 1, 1)
    near = timeit.timeit(lambda: schedule.next_after(utc(2000, 1, 2), anchor=anchor), number=200)
    far = timeit.timeit(lambda: schedule.next_after(utc(9999, 1, 2), anchor=anchor), number=200)
    assert far < near * 20 + 0.01  # a loop over 2.5e11 steps would take hours


def test_interval_occurrences_between_keep_anchor() -> None:
    schedule = parse_schedule("@every 20m")
    got = schedule.occurrences_between(
        utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), anchor=utc(2025, 12, 31, 23, 5), limit=10
    )
    assert got == [utc(2026, 1, 1, 1, 5), utc(2026, 1, 1, 1, 25), utc(2026, 1, 1, 1, 45)]
    assert schedule.occurrences_between(utc(2026, 1, 1), utc(2026, 1, 1, 1), limit=10) == [
        utc(2026, 1, 1, 0, 20),
        utc(2026, 1, 1, 0, 40),
        utc(2026, 1, 1, 1),
    ]


def test_interval_occurrences_between_keep_a_sub_second_anchor() -> None:
    schedule = parse_schedule("@every 60s")
    anchor = utc(2026, 1, 1, 12, 0, 0, 357_000)  # a job created at db-now 12:00:00.357
    # `end` is not truncated either: 12:03:00.357 is within 12:03:00.500, not within 12:03:00.300.
    got = schedule.occurrences_between(
        anchor, utc(2026, 1, 1, 12, 3, 0, 500_000), anchor=anchor, limit=10
    )
    assert got == [utc(2026, 1, 1, 12, m, 0, 357_000) for m in (1, 2, 3)]
    assert (
        schedule.occurrences_between(
            anchor, utc(2026, 1, 1, 12, 3, 0, 300_000), anchor=anchor, limit=10
        )
        == got[:2]
    )
    assert (
        schedule.occurrences_between(
            anchor, utc(2026, 1, 1, 12, 3, 0, 357_000), anchor=anchor, limit=10
        )
        == got
    )  # end is inclusive
    # start on an occurrence: that one is excluded (strictly later)
    assert schedule.occurrences_between(got[0], got[2], anchor=anchor, limit=10) == got[1:]


def test_jobs_created_in_the_same_second_fire_at_distinct_instants() -> None:
    schedule = parse_schedule("@every 60s")
    created = [utc(2026, 1, 1, 12, 0, 0, us) for us in range(0, 1_000_000, 1_000)]
    after = utc(2026, 1, 1, 13, 0, 0, 999_999)  # e.g. a node back from downtime
    firings = {schedule.next_after(after, anchor=at) for at in created}
    assert len(firings) == len(created)
    assert firings == {at + timedelta(hours=1, minutes=1) for at in created}


INTERVALS = st.sampled_from(["@every 1s", "@every 7s", "@every 60s", "@every 1h30m", "@every 2d"])
MICROSECOND_INSTANTS = st.datetimes(
    datetime(1990, 1, 1), datetime(2200, 1, 1), timezones=st.just(UTC)
)


@settings(max_examples=500, deadline=None)
@given(
    INTERVALS,
    MICROSECOND_INSTANTS,
    MICROSECOND_INSTANTS,
    st.sampled_from(["UTC", "Asia/Kolkata", "America/St_Johns"]),
)
def test_interval_next_after_is_strictly_later_and_on_the_exact_grid(
    expr: str, anchor: datetime, after: datetime, view: str
) -> None:
    schedule = parse_schedule(expr)
    step = schedule.interval
    assert step is not None
    # the same instants seen in another zone (fractional offsets) give the same answer
    got = schedule.next_after(
        after.astimezone(load_zone(view)), anchor=anchor.astimezone(load_zone(view))
    )
    assert got.tzinfo is UTC
    assert got > after  # strictly later...
    assert got - step <= after  # ...and the first such grid point
    assert (got - anchor) % step == timedelta(0)  # exactly anchor + k * interval
    assert got.microsecond == anchor.microsecond  # @every periods are whole seconds
    # an occurrence is never returned for itself, and the grid is the same from any point on it
    assert schedule.next_after(got, anchor=anchor) == got + step
    assert schedule.next_after(after, anchor=got) == got
    assert schedule.next_after(after) == after + step  # no anchor: exactly after + interval


# --- parsing and refusals ------------------------------------------------------------------------


def test_parsed_fields() -> None:
    schedule = parse_schedule("  */5 * * * *\n", LONDON)
    assert (schedule.expr, schedule.timezone, schedule.kind, schedule.interval) == (
        "*/5 * * * *",
        LONDON,
        "cron",
        None,
    )
    every = parse_schedule("@every 1h30m")
    assert (every.kind, every.interval) == ("interval", timedelta(hours=1, minutes=30))
    assert parse_schedule("*/5 * * * *", LONDON) is parse_schedule("*/5 * * * *", LONDON)
    assert "@every" in SCHEDULE_HELP and "day-of-week" in SCHEDULE_HELP


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        pytest.param(
            "61 * * * *",
            "schedule '61 * * * *': minute field: 61 is out of range 0-59",
            id="minute_out_of_range",
        ),
        pytest.param("0 24 * * *", "hour field: 24 is out of range 0-23", id="hour_out_of_range"),
        pytest.param("0 0 0 * *", "day-of-month field: 0 is out of range 1-31", id="dom_zero"),
        pytest.param("0 0 * 13 *", "month field: 13 is out of range 1-12", id="month_13"),
        pytest.param("0 0 * * 8", "day-of-week field: 8 is out of range 0-7", id="dow_8"),
        pytest.param("60 * * * * *", "second field: 60 is out of range 0-59", id="second_60"),
        pytest.param("0 5-1 * * *", "hour field: range '5-1' is reversed", id="reversed_range"),
        pytest.param(
            "0 0 * * fri-sun", "day-of-week field: range 'fri-sun' is reversed", id="reversed_names"
        ),
        pytest.param("*/0 * * * *", "minute field: step 0", id="step_zero"),
        pytest.param("*/x * * * *", "minute field: step 'x' is not a number", id="step_garbage"),
        pytest.param("1,,2 * * * *", "minute field: empty list item", id="empty_list_item"),
        pytest.param("0 0 * foo *", "month field: 'foo' is not a number or a name", id="bad_name"),
        pytest.param("0 0 * * mon-", "day-of-week field: '' is not a number", id="open_range"),
        pytest.param("0 0 * L *", "month field: 'L': L, W, # and ? belong", id="L_in_month"),
        pytest.param("0 0 * * 5#6", "day-of-week field: '5#6': the number after #", id="hash_6"),
        pytest.param("x * * * *", "minute field: 'x' is not a number", id="garbage"),
        pytest.param(
            "* * * *", "expected 5 fields (or 6 with seconds first), got 4", id="4_fields"
        ),
        pytest.param("* * * * * * *", "got 7", id="7_fields"),
        pytest.param("", "got 0", id="empty"),
        pytest.param(
            "0 0 30 2 *", "day-of-month field: 30 never occurs in February", id="never_feb_30"
        ),
        pytest.param(
            "0 0 31 4 *", "day-of-month field: 31 never occurs in April", id="never_apr_31"
        ),
        pytest.param(
            "0 0 31 2,4,6,9,11 *",
            "never occurs in February, April, June, September or November",
            id="never_short_months",
        ),
        pytest.param("0 0 30-31 2 */2", "day-of-month field", id="never_with_dow_star"),
        pytest.param(
            "@reboot", "Pulse has no reboot event: start the command from your service", id="reboot"
        ),
        pytest.param("@fortnightly", "unknown macro '@fortnightly'", id="unknown_macro"),
        pytest.param("@daily 5", "unknown macro", id="macro_with_fields"),
        pytest.param("@every 0s", "@every duration '0s' must be from 1s to 3650d", id="every_0s"),
        pytest.param("@every 3651d", "must be from 1s to 3650d", id="every_too_long"),
        pytest.param("@every 500ms", "@every duration '500ms' is not valid", id="every_ms"),
        pytest.param("@every 1x", "@every duration '1x' is not valid", id="every_bad_unit"),
        pytest.param(
            "@every 30m1h", "@every duration '30m1h' is not valid", id="every_wrong_order"
        ),
        pytest.param("@every 1.5h", "@every duration '1.5h' is not valid", id="every_fraction"),
        pytest.param("@every", "@every duration '' is not valid", id="every_missing"),
        pytest.param("@every 1h 30m", "@every duration '1h 30m' is not valid", id="every_spaces"),
        pytest.param(
            "@every 9999999999d", "@every duration '9999999999d' is too long", id="every_overflow"
        ),
    ],
)
def test_refused_schedule(expr: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_schedule(expr, LONDON)
    assert (caught.value.field, caught.value.value) == ("schedule", expr)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"schedule {expr!r}: ")


@pytest.mark.parametrize("expr", ["0 0 29 2 *", "0 0 30 2 1", "0 0 31 2,3 *", "0 0 31 * *"])
def test_rare_but_possible_schedules_are_accepted(expr: str) -> None:
    assert parse_schedule(expr).kind == "cron"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "America", "../etc/passwd", "utc"])
def test_unknown_time_zone(zone: str) -> None:
    with pytest.raises(UnknownTimeZone) as caught:
        parse_schedule("0 0 * * *", zone)
    assert (caught.value.field, caught.value.value) == ("timezone", zone)
    assert repr(zone) in str(caught.value)


def test_naive_datetimes_are_refused() -> None:
    schedule = parse_schedule("@every 1m")
    with pytest.raises(ValueError, match="after must be a timezone-aware"):
        parse_schedule("* * * * *").next_after(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="anchor must be a timezone-aware"):
        schedule.next_after(utc(2026, 1, 1), anchor=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="limit"):
        schedule.occurrences_between(utc(2026, 1, 1), utc(2026, 1, 2), limit=-1)


def test_schedule_matching_only_skipped_wall_times_raises() -> None:
    # The last Sunday of March, 01:xx: always inside London's spring-forward gap, and with the
    # minute '*' the job follows elapsed time, so it never fires there.
    schedule = parse_schedule("* 1 25-31 3 */7", LONDON)
    with pytest.raises(InvalidSchedule) as caught:
        schedule.next_after(utc(2026, 1, 1))
    assert caught.value.value == "* 1 25-31 3 */7"
    assert str(caught.value) == (
        "schedule '* 1 25-31 3 */7' never fires in time zone Europe/London: every time it "
        "matches falls in a daylight-saving gap (wall times the clocks skip); with a fixed "
        "minute and hour (no '*' in either) a time in a gap fires just after it"
    )
    # The same job at a fixed minute fires once a year, just after the gap.
    fixed = parse_schedule("30 1 25-31 3 */7", LONDON)
    assert following(fixed, utc(2026, 1, 1), 2) == [utc(2026, 3, 29, 1), utc(2027, 3, 28, 1)]


@pytest.mark.parametrize(
    ("expr", "zone", "text"),
    [
        pytest.param(
            "30 4 1,15 * 5",
            LONDON,
            "at 04:30 on day-of-month 1 and 15 or on Friday (Europe/London)",
            id="or_rule",
        ),
        pytest.param("@every 30s", "UTC", "every 30 seconds", id="every_30s"),
        pytest.param("@every 1h30m", "UTC", "every 1 hour 30 minutes", id="every_1h30m"),
        pytest.param("@every 1h", "UTC", "every hour", id="every_hour"),
        pytest.param("*/5 * * * *", "UTC", "every 5 minutes (UTC)", id="every_5_minutes"),
        pytest.param("* * * * *", "UTC", "every minute (UTC)", id="every_minute"),
        pytest.param("*/15 * * * * *", "UTC", "every 15 seconds (UTC)", id="every_15_seconds"),
        pytest.param("30 0 12 * * *", "UTC", "at 12:00:30 (UTC)", id="six_fields"),
        pytest.param(
            "0 9 * jan-mar mon-fri",
            "UTC",
            "at 09:00 on Monday through Friday in January through March (UTC)",
            id="names",
        ),
        pytest.param(
            "0 9,17 * * 1,3",
            "UTC",
            "at 09:00 and 17:00 on Monday and Wednesday (UTC)",
            id="times_list",
        ),
        pytest.param(
            "*/15 9-17 * * *",
            "UTC",
            "every 15 minutes past hour 9 through 17 (UTC)",
            id="minutes_past_hours",
        ),
        pytest.param("30 * * * *", "UTC", "at minute 30 (UTC)", id="minute_30"),
        pytest.param("0 */2 * * *", "UTC", "at minute 0 past every 2 hours (UTC)", id="every_2h"),
        pytest.param(
            "0 0 */2 * 5",
            "UTC",
            "at 00:00 on day-of-month 1 through 31 in steps of 2 if it is a Friday (UTC)",
            id="and_rule",
        ),
        pytest.param("@weekly", "UTC", "at 00:00 on Sunday (UTC)", id="weekly"),
        pytest.param("0 0 1 * *", "UTC", "at 00:00 on day-of-month 1 (UTC)", id="monthly"),
    ],
)
def test_describe(expr: str, zone: str, text: str) -> None:
    assert parse_schedule(expr, zone).describe() == text


# --- properties --------------------------------------------------------------------------------

ZONES = [
    "UTC",
    LONDON,
    SYDNEY,
    NEW_YORK,
    "Australia/Lord_Howe",
    "Europe/Dublin",
    "America/Santiago",
    "America/Havana",
    "Pacific/Chatham",
    "Asia/Kolkata",
]


def _transitions(zone: str) -> list[datetime]:
    """The instants at which `zone` changes its UTC offset, 2025-2028 (bisection per day)."""
    tz, day, found = load_zone(zone), utc(2025, 1, 1), []
    while day.year < 2029:
        low, high = day, day + timedelta(days=1)
        if low.astimezone(tz).utcoffset() != high.astimezone(tz).utcoffset():
            while high - low > timedelta(seconds=1):
                mid = low + (high - low) / 2
                if mid.astimezone(tz).utcoffset() == high.astimezone(tz).utcoffset():
                    high = mid
                else:
                    low = mid
            found.append(high)
        day += timedelta(days=1)
    return found


TRANSITIONS = {zone: _transitions(zone) for zone in ZONES}
SECOND_FIELDS = ["0", "30", "*/20", "10-15"]
MINUTE_FIELDS = ["0", "30", "*/15", "0,30", "5-10", "*/7", "15/20", "45"]
HOUR_FIELDS = ["0", "1", "2", "3", "0-3", "*/6", "1,2", "9-17/4", "23"]
DOM_FIELDS = ["1", "15", "*/10", "28-31", "1,15", "*/2", "L", "L-2", "15W", "LW", "1,L", "?"]
MONTH_FIELDS = ["3", "10", "3,4,10", "jan-jun", "*/2"]
DOW_FIELDS = ["0", "1-5", "sun", "*/2", "6,0", "7", "0L", "0#1", "0#2", "5#5", "1,5L", "?"]


@st.composite
def expressions(draw: st.DrawFn, seconds: bool = True) -> str:
    """Small cron expressions, '*' in half of the fields, hours around the DST changes."""
    fields = [
        draw(st.one_of(st.just("*"), st.sampled_from(choices)))
        for choices in (MINUTE_FIELDS, HOUR_FIELDS, DOM_FIELDS, MONTH_FIELDS, DOW_FIELDS)
    ]
    if seconds and draw(st.booleans()):
        fields.insert(0, draw(st.one_of(st.just("*"), st.sampled_from(SECOND_FIELDS))))
    return " ".join(fields)


@st.composite
def zoned_instants(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and an instant: anywhere, within a day of one of its DST changes, or very near."""
    zone = draw(st.sampled_from(ZONES))
    anywhere = st.datetimes(datetime(2020, 1, 1), datetime(2035, 12, 31), timezones=st.just(UTC))
    if not TRANSITIONS[zone] or draw(st.integers(0, 2)) == 0:
        return zone, draw(anywhere)
    seconds = draw(st.sampled_from([(-90 * 60, 90 * 60), (-30 * 3600, 6 * 3600)]))
    return zone, draw(st.sampled_from(TRANSITIONS[zone])) + timedelta(
        seconds=draw(st.integers(*seconds))
    )


@st.composite
def dst_cases(draw: st.DrawFn, seconds: bool = True) -> tuple[str, str, datetime]:
    """An expression aimed at the wall hours around one DST change, and an instant before it."""
    zone = draw(st.sampled_from([z for z in ZONES if TRANSITIONS[z]]))
    change = draw(st.sampled_from(TRANSITIONS[zone]))
    tz = load_zone(zone)
    hour, last = (change - timedelta(seconds=1)).astimezone(tz).hour, change.astimezone(tz).hour
    hours = [hour]
    while hours[-1] != last:  # every wall hour from before the change to after it (mod 24)
        hours.append((hours[-1] + 1) % 24)
    local = change.astimezone(tz)
    # The change's day, also as the L/# forms that name it (its weekday's n-th or last).
    length = calendar.monthrange(local.year, local.month)[1]
    weekday = local.isoweekday() % 7
    doms = ["*", "?", str(local.day), f"L-{length - local.day}"]
    dows = ["*", "?", str(weekday), f"{weekday}#{(local.day - 1) // 7 + 1}"]
    if local.day + 7 > length:
        dows.append(f"{weekday}L")
    fields = [
        draw(st.sampled_from(["*", *MINUTE_FIELDS])),
        draw(st.sampled_from(["*", ",".join(map(str, hours)), *map(str, hours)])),
        draw(st.sampled_from(doms)),
        draw(st.sampled_from(["*", str(local.month)])),
        draw(st.sampled_from(dows)),
    ]
    if seconds and draw(st.booleans()):
        fields.insert(0, draw(st.sampled_from(["*", *SECOND_FIELDS])))
    after = change + timedelta(seconds=draw(st.integers(-3 * 3600, 3600)))
    return " ".join(fields), zone, after


@st.composite
def cases(draw: st.DrawFn, seconds: bool = True) -> tuple[str, str, datetime]:
    """(expression, zone, instant): general ones, or ones aimed at a DST change."""
    if draw(st.booleans()):
        return draw(dst_cases(seconds))
    zone, after = draw(zoned_instants())
    return draw(expressions(seconds)), zone, after


PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _parse_or_reject(expr: str, zone: str) -> Schedule:
    """The schedule, or the example rejected if it is refused or never fires from 2020 on: one
    that only matches wall times DST skips (``* 1 * 3 0#5`` in London, whose fifth Sunday of
    March is always its last, the day it springs forward; see the test of such schedules)."""
    try:
        schedule = parse_schedule(expr, zone)
        schedule.next_after(datetime(2020, 1, 1, tzinfo=UTC))
    except InvalidSchedule:
        reject()
    return schedule


@cache
def _matcher(expr: str) -> tuple[CronSim, str, str]:
    """A field oracle: cronsim's parsed sets for the time and month fields (its syntax is ours
    there), and the day fields for tests/cron_brute.py's day-by-day evaluator (cronsim knows
    neither L-n nor W)."""
    fields = expr.upper().split()
    dom, dow = fields[-3], fields[-1]
    fields[-3] = fields[-1] = "*"
    return CronSim(" ".join(fields), datetime(2000, 1, 1)), dom, dow


def _matches(expr: str, wall: datetime) -> bool:
    oracle, dom, dow = _matcher(expr)
    return (
        wall.second in oracle.seconds
        and wall.minute in oracle.minutes
        and wall.hour in oracle.hours
        and wall.month in oracle.months
        and day_matches(dom, dow, wall.date())
    )


def _is_elapsed(expr: str) -> bool:
    fields = expr.split()
    return fields[-5].startswith("*") or fields[-4].startswith("*")


def _fires_at(expr: str, zone: ZoneInfo, instant: datetime, step: timedelta) -> bool:
    """Brute-force rule of docs/design.md invariant 7: does the job fire at `instant`?"""
    local = instant.astimezone(zone)
    wall = local.replace(tzinfo=None, fold=0)
    if _is_elapsed(expr):
        return _matches(expr, wall)
    if _matches(expr, wall) and local.fold == 0:
        return True
    before = (instant - step).astimezone(zone).replace(tzinfo=None, fold=0)
    skipped = int((wall - before) / step) - 1  # > 0 just after a spring-forward gap
    return any(_matches(expr, before + step * k) for k in range(1, skipped + 1))


@PROPERTY_SETTINGS
@given(cases())
def test_next_after_is_later_matches_and_exists(case: tuple[str, str, datetime]) -> None:
    expr, zone, after = case
    schedule = _parse_or_reject(expr, zone)
    got = schedule.next_after(after)
    assert got > after
    assert got.tzinfo is UTC and got.microsecond == 0
    local = got.astimezone(load_zone(zone))
    # The wall time really exists: reading it back in the zone gives the same instant.
    assert (
        local.replace(tzinfo=None).replace(tzinfo=load_zone(zone), fold=local.fold).astimezone(UTC)
        == got
    )
    assert _fires_at(expr, load_zone(zone), got, timedelta(seconds=1))


@PROPERTY_SETTINGS
@given(cases(seconds=False))
def test_next_after_misses_nothing(case: tuple[str, str, datetime]) -> None:
    """Scan every minute of the next 26 hours with the brute-force rule: same first hit. A
    schedule may fire from 2020 on and never after ``after`` (``* 0 * 3 0#2`` in Havana, whose
    second Sunday of March springs forward at midnight from 2027): next_after refuses it, and
    the scan must find nothing either."""
    expr, zone, after = case
    schedule = _parse_or_reject(expr, zone)
    try:
        got: datetime | None = schedule.next_after(after)
    except InvalidSchedule:
        got = None
    tz, minute = load_zone(zone), timedelta(minutes=1)
    candidate = after.replace(second=0, microsecond=0) + minute
    while candidate <= after + timedelta(hours=26):
        if _fires_at(expr, tz, candidate, minute):
            assert got == candidate
            return
        candidate += minute
    assert got is None or got > after + timedelta(hours=26)


@PROPERTY_SETTINGS
@given(
    cases(),
    st.sampled_from(["", "@every 45s", "@every 1h30m", "@every 7m"]),
    st.integers(0, 3 * 86400),
    st.integers(0, 40),
)
def test_occurrences_between_is_repeated_next_after(
    case: tuple[str, str, datetime], interval: str, span: int, limit: int
) -> None:
    expr, zone, start = case
    expr = interval or expr
    schedule = _parse_or_reject(expr, zone)
    end = start + timedelta(seconds=span)
    expected: list[datetime] = []
    current = start
    while len(expected) < limit:
        current = schedule.next_after(current, anchor=start)
        if current > end:
            break
        expected.append(current)
    assert schedule.occurrences_between(start, end, limit=limit) == expected


# --- cronsim as an oracle ------------------------------------------------------------------------
# cronsim implements the same Debian DOM/DOW rule ("day_and" when either field starts with '*'),
# the same 'a/n' = 'a-max/n' and the same 0-7 day-of-week range, so in UTC (no DST) its
# occurrences must equal ours. Its L, W and # are not all ours (no L-n, no nW), so none are
# generated here: tests/test_cron_days.py checks them against a brute-force evaluator.

FIELD_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


@st.composite
def random_items(draw: st.DrawFn, index: int) -> str:
    low, high = FIELD_RANGES[index]
    # a < b: cronsim reads a one-value range with a step ('0-0/1') as 'a/n' ('0/1' = 0-max).
    a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2, unique=True)))
    step = draw(st.integers(1, high - low + 1))
    return draw(
        st.sampled_from(["*", f"*/{step}", f"{a}", f"{a}-{b}", f"{a}-{b}/{step}", f"{a}/{step}"])
    )


@st.composite
def random_expressions(draw: st.DrawFn) -> str:
    return " ".join(
        ",".join(draw(st.lists(random_items(i), min_size=1, max_size=3))) for i in range(5)
    )


@settings(max_examples=300, deadline=None)
@given(
    random_expressions(),
    st.datetimes(datetime(2000, 1, 1), datetime(2090, 1, 1), timezones=st.just(UTC)),
)
def test_same_as_cronsim_in_utc(expr: str, start: datetime) -> None:
    try:
        oracle = CronSim(expr, start)
    except CronSimError:
        with pytest.raises(InvalidSchedule):
            parse_schedule(expr)
        return
    schedule = parse_schedule(expr)
    ours = following(schedule, start, 5)
    assert ours == [next(oracle) for _ in range(5)]


def test_cached_cron_answers_belong_to_their_expression_and_zone() -> None:
    """Cron searches are cached per (expression, zone, instant): the same instant asked of the
    same expression in two zones, or of two expressions, gets each its own answer, also when
    asked again (cache hits)."""
    after = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # London springs forward at 01:00 UTC
    cases = {
        ("0 9 * * *", "UTC"): datetime(2026, 3, 29, 9, 0, tzinfo=UTC),
        ("0 9 * * *", "Europe/London"): datetime(2026, 3, 29, 8, 0, tzinfo=UTC),
        ("0 9 * * *", "America/New_York"): datetime(2026, 3, 29, 13, 0, tzinfo=UTC),
        ("30 1 * * *", "Europe/London"): datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        ("30 1 * * *", "UTC"): datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
    }
    for _ in range(2):
        assert {key: parse_schedule(*key).next_after(after) for key in cases} == cases
