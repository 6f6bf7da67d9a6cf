"""Quartz/croniter day extensions (L, L-n, W, LW, L-nW, #, nL, ?): exact instants (February of
leap and common years, DST weeks), how they combine with the DOM/DOW rule, the published Quartz
and croniter vectors, refusals, descriptions, properties against a brute-force evaluator
(tests/cron_brute.py), and bounded cost.

Quartz numbers weekdays 1 = Sunday ... 7 = Saturday; Pulse, like Unix cron and croniter,
0 = Sunday ... 6 = Saturday (7 is Sunday too). Each Quartz vector below is converted: Quartz
``6L`` (last Friday) is Pulse ``5L``. Quartz's seven-field form (seconds first, a year last) is
written in Pulse's six-field form (seconds first) and checked within that year.

Transitions used: Europe/London 2024-03-31, 2026-03-29 (01:00 GMT -> 02:00 BST at 01:00 UTC),
2026-10-25 and 2027-10-31 (02:00 BST -> 01:00 GMT at 01:00 UTC); America/New_York 2026-03-08
(02:00 EST -> 03:00 EDT at 07:00 UTC) and 2026-11-01 (02:00 EDT -> 01:00 EST at 06:00 UTC).
"""

from __future__ import annotations

import functools
import timeit
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cron_brute import matching_dates
from helpers import utc
from pgpulse.core.errors import InvalidSchedule
from pgpulse.core.schedule import Schedule, parse_schedule
from test_schedule import following

SECOND = timedelta(seconds=1)
LONDON, NEW_YORK = "Europe/London", "America/New_York"


def days_of(schedule: Schedule, year: int, count: int = 12) -> list[int]:
    """The day of the month of the next ``count`` occurrences from the start of ``year``."""
    return [t.day for t in following(schedule, utc(year, 1, 1) - SECOND, count)]


# --- exact instants ----------------------------------------------------------------------------

# 2026, January to December: the days each rule gives (research notes, two evaluators agreeing).
YEAR_2026 = [
    pytest.param("0 0 L * *", [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], id="L"),
    pytest.param("0 0 L-2 * *", [29, 26, 29, 28, 29, 28, 29, 29, 28, 29, 28, 29], id="L-2"),
    pytest.param("0 0 ? * 5L", [30, 27, 27, 24, 29, 26, 31, 28, 25, 30, 27, 25], id="last_fri"),
    pytest.param("0 0 * * friL", [30, 27, 27, 24, 29, 26, 31, 28, 25, 30, 27, 25], id="friL"),
    pytest.param("0 0 * * L5", [30, 27, 27, 24, 29, 26, 31, 28, 25, 30, 27, 25], id="croniter_L5"),
    pytest.param("0 0 ? * 5#3", [16, 20, 20, 17, 15, 19, 17, 21, 18, 16, 20, 18], id="third_fri"),
    pytest.param("0 0 LW * *", [30, 27, 31, 30, 29, 30, 31, 31, 30, 30, 30, 31], id="LW"),
    pytest.param("0 0 15W * *", [15, 16, 16, 15, 15, 15, 15, 14, 15, 15, 16, 15], id="15W"),
    pytest.param("0 0 1W * ?", [1, 2, 2, 1, 1, 1, 1, 3, 1, 1, 2, 1], id="1W"),
]


@pytest.mark.parametrize(("expr", "days"), YEAR_2026)
def test_a_year_of_each_extension(expr: str, days: list[int]) -> None:
    schedule = parse_schedule(expr)
    got = following(schedule, utc(2025, 12, 31, 23, 59, 59), 12)
    assert got == [utc(2026, month, day) for month, day in enumerate(days, start=1)]


def test_a_fifth_monday_fires_only_in_months_that_have_one() -> None:
    schedule = parse_schedule("0 0 * * 1#5")
    assert following(schedule, utc(2026, 1, 1), 5) == [
        utc(2026, 3, 30),
        utc(2026, 6, 29),
        utc(2026, 8, 31),
        utc(2026, 11, 30),
        utc(2027, 3, 29),
    ]
    assert schedule.count_between(utc(2026, 1, 1), utc(2027, 1, 1)) == 4


@pytest.mark.parametrize(
    ("year", "last", "last_weekday", "w29"),
    [  # February: L, LW, and 29W (which fires only in a leap year's February)
        pytest.param(2024, 29, 29, 29, id="2024_leap_thursday"),
        pytest.param(2025, 28, 28, None, id="2025_common"),
        pytest.param(2026, 28, 27, None, id="2026_common_saturday_end"),
        pytest.param(2000, 29, 29, 29, id="2000_leap_by_400"),  # 2000-02-29: a Tuesday
        pytest.param(2100, 28, 26, None, id="2100_not_leap_sunday_end"),  # 2100-02-28: Sunday
        pytest.param(2400, 29, 29, 29, id="2400_leap"),
    ],
)
def test_february_of_leap_and_common_years(
    year: int, last: int, last_weekday: int, w29: int | None
) -> None:
    after = utc(year, 2, 1) - SECOND
    assert parse_schedule("0 0 L 2 *").next_after(after) == utc(year, 2, last)
    assert parse_schedule("0 0 LW 2 *").next_after(after) == utc(year, 2, last_weekday)
    got = parse_schedule("0 0 29W 2 *").next_after(after)
    if w29 is None:
        assert got.year > year
    else:
        assert got == utc(year, 2, w29)


def test_the_last_day_minus_n_at_the_start_of_february() -> None:
    # L-28 is the 1st of a leap February, the 0th (nothing) of a common one: Feb 2024 and Feb
    # 2028 are the only ones of 2024-2028; in 31-day months it is the 3rd.
    schedule = parse_schedule("0 0 L-28 2 *")
    assert following(schedule, utc(2024, 1, 1), 2) == [utc(2024, 2, 1), utc(2028, 2, 1)]


# (expression, zone, after, the next occurrences in UTC)
DST_CASES = [
    # London springs forward on 2026-03-29, the last Sunday (0L) and L-2 of March: 01:30 does not
    # exist; a fixed-time job fires at the first instant after the gap, 02:00 BST = 01:00 UTC.
    pytest.param("30 1 ? 3 0L", LONDON, utc(2026, 3, 1), [utc(2026, 3, 29, 1)], id="0L_gap"),
    pytest.param("30 1 L-2 3 *", LONDON, utc(2026, 3, 1), [utc(2026, 3, 29, 1)], id="L-2_gap"),
    # 2024-03-31 is both the last day and the last Sunday of March.
    pytest.param(
        "30 1 L 3 *",
        LONDON,
        utc(2024, 3, 1),
        [utc(2024, 3, 31, 1), utc(2025, 3, 31, 0, 30)],
        id="L_gap_2024",
    ),
    # Two fixed times inside one gap fire once, at its end; the next year's are BST.
    pytest.param(
        "0,30 1 L 3 *",
        LONDON,
        utc(2024, 3, 1),
        [utc(2024, 3, 31, 1), utc(2025, 3, 31), utc(2025, 3, 31, 0, 30)],
        id="L_fixed_two_minutes_share_the_gap",
    ),
    # An elapsed-time job never fires inside the gap: the 01:xx of 2024-03-31 are skipped.
    pytest.param(
        "*/30 1 L 3 *",
        LONDON,
        utc(2024, 3, 1),
        [utc(2025, 3, 31), utc(2025, 3, 31, 0, 30)],
        id="L_elapsed_skips_the_gap",
    ),
    # London falls back on 2026-10-25 (the last Sunday of October): 01:30 happens twice; a
    # fixed-time job fires on the first pass (01:30 BST = 00:30 UTC) only.
    pytest.param(
        "30 1 ? 10 0L",
        LONDON,
        utc(2026, 10, 1),
        [utc(2026, 10, 25, 0, 30), utc(2027, 10, 31, 0, 30)],
        id="0L_repeated_first_pass",
    ),
    # An elapsed-time job fires in both passes of the repeated hour.
    pytest.param(
        "*/30 1 ? 10 0L",
        LONDON,
        utc(2026, 10, 1),
        [
            utc(2026, 10, 25, 0),
            utc(2026, 10, 25, 0, 30),
            utc(2026, 10, 25, 1),
            utc(2026, 10, 25, 1, 30),
        ],
        id="0L_elapsed_both_passes",
    ),
    # 2027-10-31 is both L and 0L of October in London.
    pytest.param(
        "30 1 L 10 *", LONDON, utc(2027, 10, 1), [utc(2027, 10, 31, 0, 30)], id="L_repeated_2027"
    ),
    # New York springs forward on the second Sunday of March (0#2), falls back on the first
    # Sunday of November (0#1).
    pytest.param(
        "30 2 ? 3 0#2",
        NEW_YORK,
        utc(2026, 3, 1),
        [utc(2026, 3, 8, 7), utc(2027, 3, 14, 7)],
        id="0#2_gap",
    ),
    pytest.param(
        "30 1 ? 11 0#1",
        NEW_YORK,
        utc(2026, 10, 1),
        [utc(2026, 11, 1, 5, 30)],
        id="0#1_repeated_first_pass",
    ),
    pytest.param(
        "0 * ? 11 0#1",
        NEW_YORK,
        utc(2026, 11, 1, 4, 30),  # 00:30 EDT
        [utc(2026, 11, 1, 5), utc(2026, 11, 1, 6), utc(2026, 11, 1, 7)],  # 01:00 EDT, EST; 02:00
        id="0#1_hourly_both_passes",
    ),
    # The week of the change: the weekday nearest the 8th (a Sunday in March 2026) is Monday
    # the 9th, after the change: 09:00 EDT = 13:00 UTC; the 1st of March (Sunday) gives the 2nd.
    pytest.param(
        "0 9 8W 3 *",
        NEW_YORK,
        utc(2026, 3, 1),
        [utc(2026, 3, 9, 13)],
        id="8W_after_the_change",
    ),
    pytest.param(
        "0 9 1W 3 *", NEW_YORK, utc(2026, 2, 1), [utc(2026, 3, 2, 14)], id="1W_before_the_change"
    ),
]


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), DST_CASES)
def test_dst_weeks(expr: str, zone: str, after: datetime, expected: list[datetime]) -> None:
    schedule = parse_schedule(expr, zone)
    assert following(schedule, after, len(expected)) == expected
    assert schedule.count_between(after, expected[-1]) == len(expected)
    assert schedule.last_at_or_before(expected[-1]) == expected[-1]
    assert schedule.newest_at_or_before(expected[-1], len(expected)) == expected[0]


def test_an_elapsed_job_on_the_last_sunday_of_march_at_1_never_fires_in_london() -> None:
    """Every last Sunday of March is London's spring-forward day: 01:xx never exists then."""
    with pytest.raises(InvalidSchedule, match="every time it matches falls in a daylight-saving"):
        parse_schedule("* 1 ? 3 0L", LONDON).next_after(utc(2026, 1, 1))
    assert parse_schedule("0 1 ? 3 0L", LONDON).next_after(utc(2026, 1, 1)) == utc(2026, 3, 29, 1)


# --- how extensions combine with the DOM/DOW rule --------------------------------------------


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        # '?' is '*': the other field alone decides (AND with every day) -- the second Friday.
        pytest.param(
            "0 0 ? * 5#2",
            utc(2026, 1, 1),
            [utc(2026, 1, 9), utc(2026, 2, 13), utc(2026, 3, 13)],
            id="question_mark_and_nth",
        ),
        # Both restricted: OR of the two sets -- the weekday nearest the 15th and every Friday.
        pytest.param(
            "0 0 15W * 5",
            utc(2026, 1, 1),
            [utc(2026, 1, d) for d in (2, 9, 15, 16, 23, 30)] + [utc(2026, 2, 6)],
            id="W_or_weekday",
        ),
        # OR: the 1st to the 7th, and the first Friday (inside them): croniter gives only the
        # first Friday (its side with '#' stays an intersection); Pulse keeps the union.
        pytest.param(
            "0 0 1-7 * 5#1",
            utc(2026, 1, 31),
            [utc(2026, 2, d) for d in range(1, 8)] + [utc(2026, 3, 1)],
            id="range_or_nth",
        ),
        # OR: the 15th and the second Friday (croniter: "can never happen").
        pytest.param(
            "0 0 15 * fri#2",
            utc(2026, 1, 1),
            [utc(2026, 1, 9), utc(2026, 1, 15), utc(2026, 2, 13), utc(2026, 2, 15)],
            id="day_or_nth",
        ),
        # A day-of-month starting with '*' (here */2: odd days) selects AND: the last Friday
        # of the month when it falls on an odd day.
        pytest.param(
            "0 0 */2 * 5L",
            utc(2026, 1, 1),
            [utc(2026, 2, 27), utc(2026, 3, 27), utc(2026, 5, 29), utc(2026, 7, 31)],
            id="star_step_and_last_friday",
        ),
        # L and W with a '*' day-of-week: AND with every weekday, so the day field alone.
        pytest.param(
            "0 0 L * *", utc(2026, 2, 1), [utc(2026, 2, 28), utc(2026, 3, 31)], id="L_and_star"
        ),
        # L in a list: the 1st and the last day.
        pytest.param(
            "0 0 1,L * *",
            utc(2026, 1, 30),
            [utc(2026, 1, 31), utc(2026, 2, 1), utc(2026, 2, 28), utc(2026, 3, 1)],
            id="list_with_L",
        ),
        # Day-of-week lists mix plain weekdays and extensions: every Monday and the last Friday.
        pytest.param(
            "0 0 ? * 1,5L",
            utc(2026, 1, 24),
            [utc(2026, 1, 26), utc(2026, 1, 30), utc(2026, 2, 2)],
            id="weekday_list_with_last_friday",
        ),
    ],
)
def test_combination_with_the_dom_dow_rule(
    expr: str, after: datetime, expected: list[datetime]
) -> None:
    assert following(parse_schedule(expr), after, len(expected)) == expected


# --- published vectors ------------------------------------------------------------------------


def test_quartz_test1420_chains() -> None:
    """Quartz CronExpressionTest.test1420, from 2025-11-18 10:15:00 (in UTC here)."""
    start = utc(2025, 11, 18, 10, 15)
    first_weekday = [
        (2025, 12, 1),
        *((2026, m, d) for m, d in enumerate([1, 2, 2, 1, 1, 1, 1, 3, 1, 1, 2, 1], start=1)),
    ]
    assert following(parse_schedule("0 0 0 1W * ?"), start, 13) == [
        utc(*day) for day in first_weekday
    ]
    last_days = [
        (2025, 11, 30),
        (2025, 12, 31),
        *(
            (2026, m, d)
            for m, d in enumerate([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], start=1)
        ),
    ]
    assert following(parse_schedule("59 59 23 L * ?"), start, 14) == [
        utc(*day, 23, 59, 59) for day in last_days
    ]


# Quartz isSatisfiedBy vectors (10:15:00): (six-field expression, year, satisfied, not satisfied)
QUARTZ_SATISFIED = [
    pytest.param("0 15 10 L * ?", 2005, ["12-31", "09-30"], ["12-30", "09-29"], id="L"),
    pytest.param("0 15 10 L 2 ?", 2005, ["02-28"], ["02-27"], id="L_feb_2005"),
    pytest.param("0 15 10 L 2 ?", 2004, ["02-29"], ["02-28"], id="L_feb_2004"),
    pytest.param("0 15 10 L-2 * ?", 2005, ["12-29"], ["12-28", "12-30", "12-31"], id="L-2"),
    pytest.param("0 15 10 L-1 * ?", 2005, ["09-29"], ["09-27", "09-28", "09-30"], id="L-1"),
    pytest.param("0 15 10 L-3 2 ?", 2005, ["02-25"], ["02-24", "02-26", "02-28"], id="L-3_2005"),
    pytest.param("0 15 10 L-3 2 ?", 2000, ["02-26"], ["02-25", "02-27", "02-29"], id="L-3_2000"),
    pytest.param(
        "0 15 10 L-2 * ?",
        2010,
        ["10-29", "02-26", "06-28"],
        ["10-28", "02-25", "06-27"],
        id="testLastDayOffset_L-2",
    ),
    pytest.param(
        "0 15 10 L-5W * ?",
        2010,
        ["10-26", "09-24"],
        ["10-25", "10-27", "09-23", "09-25"],
        id="testLastDayOffset_L-5W",
    ),
    pytest.param("0 15 10 L-1 * ?", 2010, ["10-30"], [], id="testLastDayOffset_L-1"),
    pytest.param("0 15 10 L-1W * ?", 2010, ["10-29"], [], id="testLastDayOffset_L-1W"),
    pytest.param(
        "0 15 10 1,L * ?",
        2010,
        ["10-01", "10-31", "02-01", "02-28"],
        ["10-30", "02-27"],
        id="testLastDayOffset_1,L",
    ),
]


@pytest.mark.parametrize(("expr", "year", "yes", "no"), QUARTZ_SATISFIED)
def test_quartz_is_satisfied_by(expr: str, year: int, yes: list[str], no: list[str]) -> None:
    schedule = parse_schedule(expr)
    for text, satisfied in [*((d, True) for d in yes), *((d, False) for d in no)]:
        month, day = map(int, text.split("-"))
        instant = utc(year, month, day, 10, 15)
        fires = schedule.next_after(instant - SECOND) == instant
        assert fires == satisfied, (expr, text)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        # Quartz refuses these too (ParseException).
        pytest.param("0 43 9 ? * SAT,SUN,L", "day-of-week field: 'L' by itself", id="dow_L_list"),
        pytest.param("0 43 9 ? * 6,7,L", "day-of-week field: 'L' by itself", id="dow_L_list_num"),
        pytest.param("0/5 * * 32W 1 ?", "day-of-month field: 32 is out of range 1-31", id="32W"),
        pytest.param("L 30 * * * ?", "second field: 'L': L, W, # and ? belong", id="L_seconds"),
        # Quartz (since 2.5.1) accepts a W term in a list; Pulse keeps Quartz's documented
        # rule, and croniter's ("15W,16" is invalid there): W takes a single day.
        pytest.param("0 15 10 2W,16 * ?", "a W term stands alone", id="quartz_2W,16"),
        pytest.param("0 15 10 L-1W,L-1 * ?", "a W term stands alone", id="quartz_L-1W,L-1"),
        # croniter refuses these too.
        pytest.param("0 0 15W,16 * *", "a W term stands alone", id="croniter_15W,16"),
        pytest.param("0 0 1,15W * *", "a W term stands alone", id="croniter_1,15W"),
        pytest.param("0 0 0W * *", "day-of-month field: 0 is out of range 1-31", id="0W"),
        pytest.param(
            "0 0 * * 1#7", "day-of-week field: '1#7': the number after # must be 1-5", id="#7"
        ),
        pytest.param("0 0 * * 1#0", "'1#0': the number after # must be 1-5", id="#0"),
        pytest.param("0 0 * * 1#6", "'1#6': the number after # must be 1-5", id="#6"),
        pytest.param("0 0 * * L-1", "day-of-week field: 'L-1': write weekdayL", id="dow_L-1"),
        pytest.param("0 0 * * L8", "day-of-week field: 8 is out of range 0-7", id="L8"),
        # The refusals.
        pytest.param("L * * * *", "minute field: 'L': L, W, # and ? belong", id="L_minute"),
        pytest.param("0 L * * *", "hour field: 'L'", id="L_hour"),
        pytest.param("0 0 * L *", "month field: 'L'", id="L_month"),
        pytest.param("0 5W * * *", "hour field: '5W'", id="W_hour"),
        pytest.param("0 0 * 5#2 *", "month field: '5#2'", id="hash_month"),
        pytest.param("? * * * *", "minute field: '?'", id="question_minute"),
        pytest.param("0 0 1-5W * *", "'1-5W': W takes a single day", id="W_range"),
        pytest.param("0 0 */2W * *", "'*/2W': W takes a single day", id="W_step"),
        pytest.param("0 0 L-31 * *", "'L-31': the offset from L (last day) is 0-30", id="L-31"),
        pytest.param("0 0 LL * *", "'LL': use L, L-n (n = 0-30), LW or L-nW", id="LL"),
        pytest.param("0 0 L- * *", "'L-': use L, L-n", id="L_dash"),
        pytest.param("0 0 5#2 * *", "'5#2': # (nth weekday) belongs in day-of-week", id="hash_dom"),
        pytest.param("0 0 * * 5W", "'5W': W (nearest weekday) belongs in day-of-month", id="W_dow"),
        pytest.param("0 0 * * 1-5#2", "'1-5#2': write weekday#n", id="hash_range"),
        pytest.param("0 0 * * 5#", "'5#': the number after # must be 1-5", id="hash_empty"),
        pytest.param("0 0 * * 1-5L", "'1-5L': write weekdayL", id="L_range_dow"),
        pytest.param("0 0 * * xL", "'xL': L takes a single weekday", id="L_bad_weekday"),
        pytest.param("0 0 ?,1 * *", "day-of-month field: '?' stands alone", id="question_list"),
        pytest.param("0 0 ?/2 * *", "'?' stands alone", id="question_step"),
        pytest.param("0 0 31W 4 *", "31W never occurs in April", id="31W_april"),
        pytest.param("0 0 L-30 2 *", "L-30 never occurs in February", id="L-30_february"),
        pytest.param(
            "0 0 */20 * 5#2",
            "day-of-month field */20 and day-of-week field 5#2 never match the same day in "
            "any month, so the schedule can never fire",
            id="never_the_same_day",
        ),
    ],
)
def test_refused(expr: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_schedule(expr)
    assert (caught.value.field, caught.value.value) == ("schedule", expr)
    assert str(caught.value).startswith(f"schedule {expr!r}: ")
    assert message in str(caught.value)


def test_quartz_5L_parses_and_means_the_last_friday_here() -> None:
    """Quartz's '0 43 9 ? * 5L' parses (there: the last Thursday); in Unix numbering, the last
    Friday."""
    assert parse_schedule("0 43 9 ? * 5L").next_after(utc(2026, 1, 1)) == utc(2026, 1, 30, 9, 43)


@pytest.mark.parametrize(
    ("expr", "base", "expected"),
    [
        pytest.param(
            "2 4 1 * wed",
            datetime(2010, 1, 25, 4, 46),
            ["2010-01-27 04:02", "2010-02-01 04:02", "2010-02-03 04:02"],
            id="readme_or",
        ),
        pytest.param(
            "0 0 * * sat#1,sun#2", datetime(2010, 1, 25, 4, 46), ["2010-02-06"], id="nth_list"
        ),
        pytest.param(
            "0 0 * * 5#3,L5",
            datetime(2010, 1, 25, 4, 46),
            ["2010-01-29", "2010-02-19"],
            id="nth_and_last",
        ),
        # croniter's Vixie-bug mode (implement_cron_bug=True) is Pulse's only mode.
        pytest.param(
            "1 1 */32,1-7 * 2",
            datetime(2024, 7, 12),
            ["2024-08-06 01:01", "2024-09-03 01:01"],
            id="readme_cron_bug",
        ),
        pytest.param(
            "0 16 */2 * sat",
            datetime(2023, 5, 2),
            ["2023-05-13 16:00", "2023-05-27 16:00", "2023-06-03 16:00", "2023-06-17 16:00"],
            id="vixie_cron_bug",
        ),
        pytest.param(
            "0 0 31 2 0",
            datetime(2026, 1, 1),
            ["2026-02-01", "2026-02-08", "2026-02-15"],
            id="impossible_dom_or_sundays",
        ),
        pytest.param("0 0 l * *", datetime(2024, 1, 30), ["2024-01-31"], id="l_jan"),
        pytest.param("0 0 l * *", datetime(2024, 2, 1), ["2024-02-29"], id="l_leap"),
        pytest.param("0 0 l * *", datetime(2023, 2, 1), ["2023-02-28"], id="l_common"),
        pytest.param(
            "0 0 l * *",
            datetime(2015, 9, 4),
            ["2015-09-30", "2015-10-31", "2015-11-30", "2015-12-31"],
            id="l_2015",
        ),
        pytest.param("0 0 l * *", datetime(2020, 2, 1), ["2020-02-29", "2020-03-31"], id="l_2020"),
        pytest.param("0 0 l * *", datetime(2100, 2, 1), ["2100-02-28", "2100-03-31"], id="l_2100"),
        pytest.param("0 0 l * *", datetime(2400, 2, 1), ["2400-02-29"], id="l_2400"),
        pytest.param("0 0 29-L * *", datetime(2015, 9, 4), ["2015-09-29", "2015-09-30"], id="29-L"),
        pytest.param(
            "0 9 15W * *",
            datetime(2024, 1, 1),
            ["2024-01-15 09:00", "2024-02-15 09:00", "2024-03-15 09:00"],
            id="15W",
        ),
        pytest.param("0 9 15W * *", datetime(2024, 6, 1), ["2024-06-14 09:00"], id="15W_saturday"),
        pytest.param("0 9 15W * *", datetime(2024, 9, 1), ["2024-09-16 09:00"], id="15W_sunday"),
        pytest.param("0 9 1W * *", datetime(2024, 5, 31), ["2024-06-03 09:00"], id="1W_saturday"),
        pytest.param("0 9 31W * *", datetime(2025, 3, 1), ["2025-03-31 09:00"], id="31W"),
        pytest.param("0 9 30W * *", datetime(2024, 11, 1), ["2024-11-29 09:00"], id="30W"),
        pytest.param(
            "0 0 1W * *",
            datetime(2023, 12, 31),
            ["2024-01-01", "2024-02-01", "2024-03-01", "2024-04-01", "2024-05-01", "2024-06-03"],
            id="1W_chain",
        ),
        pytest.param(
            "0 0 * * sat#1", datetime(2010, 2, 25), ["2010-03-06", "2010-04-03"], id="sat#1"
        ),
        pytest.param(
            "0 0 * * wed#5",
            datetime(2010, 1, 25),
            ["2010-03-31", "2010-06-30", "2010-09-29"],
            id="wed#5",
        ),
        pytest.param(
            "0 0 * * L5",
            datetime(1987, 1, 15),
            [
                "1987-01-30",
                "1987-02-27",
                "1987-03-27",
                "1987-04-24",
                "1987-05-29",
                "1987-06-26",
                "1987-07-31",
                "1987-08-28",
                "1987-09-25",
                "1987-10-30",
                "1987-11-27",
                "1987-12-25",
            ],
            id="L5_1987",
        ),
        pytest.param(
            "0 0 * * L2,L4",
            datetime(2016, 6, 1),
            [
                "2016-06-28",
                "2016-06-30",
                "2016-07-26",
                "2016-07-28",
                "2016-08-25",
                "2016-08-30",
                "2016-09-27",
                "2016-09-29",
                "2016-10-25",
                "2016-10-27",
            ],
            id="L2,L4",
        ),
        pytest.param(
            "0 0 * * L6,6#1",
            datetime(2021, 3, 1),
            ["2021-03-06", "2021-03-27", "2021-04-03", "2021-04-24", "2021-05-01", "2021-05-29"],
            id="L6,6#1",
        ),
        pytest.param(
            "0 0 * * 1#4,L1",
            datetime(2021, 11, 1),
            ["2021-11-22", "2021-11-29", "2021-12-27", "2022-01-24", "2022-01-31"],
            id="1#4,L1",
        ),
    ],
)
def test_croniter_vectors(expr: str, base: datetime, expected: list[str]) -> None:
    """croniter's README and test_croniter.py (get_next from ``base``, UTC)."""
    got = following(parse_schedule(expr), base.replace(tzinfo=UTC), len(expected))
    assert [t.strftime("%Y-%m-%d %H:%M").removesuffix(" 00:00") for t in got] == expected


@pytest.mark.parametrize(
    ("expr", "before", "expected"),
    [
        pytest.param(
            "0 0 * * L6",
            datetime(2017, 12, 31),
            [
                "2017-12-30",
                "2017-11-25",
                "2017-10-28",
                "2017-09-30",
                "2017-08-26",
                "2017-07-29",
                "2017-06-24",
                "2017-05-27",
                "2017-04-29",
                "2017-03-25",
                "2017-02-25",
                "2017-01-28",
            ],
            id="L6_backwards",
        ),
        pytest.param(
            "0 0 31 2 0",
            datetime(2026, 3, 1),
            ["2026-02-22", "2026-02-15", "2026-02-08"],
            id="impossible_dom_or_sundays_backwards",
        ),
        pytest.param("0 9 15W * *", datetime(2024, 6, 30), ["2024-06-14 09:00"], id="15W_prev"),
    ],
)
def test_croniter_vectors_backwards(expr: str, before: datetime, expected: list[str]) -> None:
    """croniter's get_prev (strictly before ``before``) is last_at_or_before one second back."""
    schedule, cursor, got = parse_schedule(expr), before.replace(tzinfo=UTC), []
    for _ in expected:
        found = schedule.last_at_or_before(cursor - SECOND)
        assert found is not None
        got.append(found.strftime("%Y-%m-%d %H:%M").removesuffix(" 00:00"))
        cursor = found
    assert got == expected


@pytest.mark.parametrize(
    ("expr", "base", "croniter", "pulse"),
    [
        # croniter clamps 31W to a 30-day month's last day; Quartz and Pulse: no 31st, no fire.
        pytest.param("0 9 31W * *", datetime(2024, 11, 1), "2024-11-29", "2024-12-31", id="31W"),
        # croniter reads a '#' side as an intersection even under OR: only the first Friday.
        pytest.param(
            "0 0 1-7 * fri#1", datetime(2026, 1, 31), "2026-02-06", "2026-02-01", id="1-7_fri#1"
        ),
        # croniter drops the day-of-week side of '15W * fri': only the weekday nearest the 15th.
        pytest.param(
            "0 0 15W * fri", datetime(2026, 1, 1), "2026-01-15", "2026-01-02", id="15W_fri"
        ),
    ],
)
def test_where_pulse_and_croniter_differ(
    expr: str, base: datetime, croniter: str, pulse: str
) -> None:
    got = parse_schedule(expr).next_after(base.replace(tzinfo=UTC))
    assert got.strftime("%Y-%m-%d") == pulse != croniter


def test_mixed_weekday_lists_croniter_refuses_are_unions_here() -> None:
    """croniter refuses '5,6#3' and '5,L6'; Pulse reads each as the union of its terms."""
    fridays_and_third_saturday = parse_schedule("0 0 * * 5,6#3")
    assert following(fridays_and_third_saturday, utc(2026, 1, 1), 4) == [
        utc(2026, 1, 2),
        utc(2026, 1, 9),
        utc(2026, 1, 16),
        utc(2026, 1, 17),
    ]
    assert following(parse_schedule("0 0 * * 5,L6"), utc(2026, 1, 29), 3) == [
        utc(2026, 1, 30),
        utc(2026, 1, 31),
        utc(2026, 2, 6),
    ]


# --- descriptions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        ("0 10 ? * 5L", "at 10:00 on the last Friday of the month (UTC)"),
        ("0 10 15W * ?", "at 10:00 on the weekday nearest the 15th (UTC)"),
        ("0 10 1W * *", "at 10:00 on the weekday nearest the 1st (UTC)"),
        ("0 10 22W * *", "at 10:00 on the weekday nearest the 22nd (UTC)"),
        ("0 10 L * *", "at 10:00 on the last day of the month (UTC)"),
        ("0 10 L-3 * *", "at 10:00 on the last day of the month minus 3 days (UTC)"),
        ("0 10 L-1 * *", "at 10:00 on the last day of the month minus 1 day (UTC)"),
        ("0 10 LW * *", "at 10:00 on the last weekday of the month (UTC)"),
        (
            "0 10 L-2W * *",
            "at 10:00 on the weekday nearest the last day of the month minus 2 days (UTC)",
        ),
        ("0 10 ? * 1#2", "at 10:00 on the second Monday of the month (UTC)"),
        ("0 10 ? * 0#5", "at 10:00 on the fifth Sunday of the month (UTC)"),
        ("0 10 1,L * *", "at 10:00 on day-of-month 1 and the last day of the month (UTC)"),
        ("0 10 ? * 1,5L", "at 10:00 on Monday and the last Friday of the month (UTC)"),
        ("0 0 15W * 5", "at 00:00 on the weekday nearest the 15th or on Friday (UTC)"),
        (
            "0 0 */2 * 5L",
            "at 00:00 on day-of-month 1 through 31 in steps of 2 if it is the last Friday of "
            "the month (UTC)",
        ),
        ("0 0 L 2 ?", "at 00:00 on the last day of the month in February (UTC)"),
        ("0 0 ? * ?", "at 00:00 (UTC)"),
    ],
)
def test_describe(expr: str, text: str) -> None:
    assert parse_schedule(expr).describe() == text


def test_schedule_next_explains_an_extension() -> None:
    """`pgpulse schedule next` as a real process: the description and the instants."""
    from helpers import pgpulse

    shown = pgpulse(
        "schedule",
        "next",
        "0 30 9 ? * 5L",
        "--tz",
        "Europe/London",
        "--count",
        "2",
        "--after",
        "2026-03-01",
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "at 09:30:00 on the last Friday of the month (Europe/London)",
        "UTC                        Europe/London",
        "2026-03-27T09:30:00+00:00  2026-03-27T09:30:00+00:00",
        "2026-04-24T08:30:00+00:00  2026-04-24T09:30:00+01:00",
    ]
    refused = pgpulse("schedule", "next", "0 0 * * 5#6")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (
        "error: schedule '0 0 * * 5#6': day-of-week field: '5#6': the number after # must be 1-5\n"
    )


# --- properties: the same days as a brute-force evaluator, over years -------------------------


@st.composite
def dom_fields(draw: st.DrawFn) -> str:
    """A day-of-month field: a star form, a W term alone, or a list of plain items and L terms."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.sampled_from(["*", "?", "*/2", "*/10"]))
    if kind == 1:
        return draw(
            st.one_of(
                st.integers(1, 31).map(lambda n: f"{n}W"),
                st.integers(0, 30).map(lambda n: "LW" if n == 0 else f"L-{n}W"),
            )
        )
    items = st.one_of(
        st.integers(1, 31).map(str),
        st.just("L"),
        st.integers(0, 30).map(lambda n: f"L-{n}"),
        st.tuples(st.integers(1, 31), st.integers(1, 31)).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.integers(1, 31).map(lambda n: f"{n}-L"),
    )
    return ",".join(draw(st.lists(items, min_size=1, max_size=3)))


@st.composite
def dow_fields(draw: st.DrawFn) -> str:
    """A day-of-week field: a star form, or a list of plain weekdays, w#k and wL terms."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["*", "?", "*/2", "*/3"]))
    weekday = st.one_of(st.integers(0, 7).map(str), st.sampled_from(["sun", "mon", "fri", "sat"]))
    items = st.one_of(
        weekday,
        st.tuples(weekday, st.integers(1, 5)).map(lambda wk: f"{wk[0]}#{wk[1]}"),
        weekday.map(lambda w: f"{w}L"),
        weekday.map(lambda w: f"L{w}"),  # croniter's spelling
        st.tuples(st.integers(0, 6), st.integers(0, 6)).map(lambda ab: f"{min(ab)}-{max(ab)}"),
    )
    return ",".join(draw(st.lists(items, min_size=1, max_size=3)))


MONTHS = st.one_of(
    st.just("*"),
    st.lists(st.integers(1, 12), min_size=1, max_size=3, unique=True).map(
        lambda ms: ",".join(map(str, ms))
    ),
)
# Years around the leap-year exceptions (2000 is a leap year, 2100 is not) and today.
YEARS = st.one_of(st.integers(1999, 2001), st.integers(2023, 2028), st.integers(2098, 2101))


@settings(max_examples=150, deadline=None)
@given(dom_fields(), MONTHS, dow_fields(), YEARS)
def test_days_are_those_of_a_brute_force_evaluator(
    dom: str, month: str, dow: str, year: int
) -> None:
    """Two years of days, one by one: the occurrences, their count and the last of them."""
    expr = f"0 0 {dom} {month} {dow}"
    start, end = date(year, 1, 1), date(year + 1, 12, 31)
    expected = [utc(d.year, d.month, d.day) for d in matching_dates(dom, month, dow, start, end)]
    try:
        schedule = parse_schedule(expr)
    except InvalidSchedule as exc:
        assert "can never fire" in str(exc), exc
        assert expected == []
        return
    low, high = utc(year, 1, 1) - SECOND, utc(year + 1, 12, 31)
    assert schedule.occurrences_between(low, high, limit=1000) == expected
    assert schedule.count_between(low, high) == len(expected)
    last = schedule.last_at_or_before(high)
    if expected:
        assert last == expected[-1]
    else:
        assert last is None or last <= low


@settings(max_examples=25, deadline=None)
@given(dom_fields(), MONTHS, dow_fields(), st.integers(1980, 2380))
def test_counts_over_decades_match_the_brute_force_count(
    dom: str, month: str, dow: str, year: int
) -> None:
    """Twenty-two years (all seven weekdays of the 1st of every month several times)."""
    expr = f"0 0 {dom} {month} {dow}"
    try:
        schedule = parse_schedule(expr)
    except InvalidSchedule:
        return
    start, end = date(year, 3, 1), date(year + 22, 2, 28)
    expected = len(matching_dates(dom, month, dow, start, end))
    low, high = utc(year, 3, 1) - SECOND, utc(year + 22, 2, 28)
    assert schedule.count_between(low, high) == expected


# --- bounded cost -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [  # 1851-06-15 to 2026-06-15: 175 years, 2,100 months, 9,131 weeks
        pytest.param("0 0 L * *", 2100, id="L"),
        pytest.param("0 0 LW * *", 2100, id="LW"),
        # 1851-06-15 is a Sunday: its 15W is the 16th, inside the range (2026-06-15 is too).
        pytest.param("0 0 15W * *", 2101, id="15W"),
        pytest.param("0 0 ? * 5L", 2100, id="last_friday"),
        pytest.param("0 0 ? * 5#2", 2100, id="second_friday"),
        pytest.param("* * L * *", 2100 * 1440, id="every_minute_of_the_last_day"),
    ],
)
def test_a_count_over_175_years_is_exact(expr: str, expected: int) -> None:
    assert parse_schedule(expr).count_between(utc(1851, 6, 15), utc(2026, 6, 15)) == expected


def test_fifth_mondays_over_400_years_match_the_brute_force_count() -> None:
    expected = len(matching_dates("*", "*", "1#5", date(2000, 1, 1), date(2399, 12, 31)))
    schedule = parse_schedule("0 0 * * 1#5")
    assert schedule.count_between(utc(2000, 1, 1) - SECOND, utc(2399, 12, 31)) == expected


def test_counting_175_years_costs_about_what_counting_one_year_costs() -> None:
    """Calendar arithmetic, not a walk: in UTC (no offset changes) a count over 175 years costs
    a small multiple of a count over one (a walk would be 175 times as long); in London, with
    about two offset changes a year since 1916, some milliseconds (0.25 s is a loose bound for a
    noisy machine: a walk over 18 million 5-minute slots would take minutes)."""
    for expr in ("*/5 * L-2 * *", "0 9 ? * 1#5", "* * 15W * *"):
        schedule = parse_schedule(expr)
        # The best of several rounds: a round the scheduler preempted says nothing of the cost.
        one = min(
            timeit.repeat(
                functools.partial(schedule.count_between, utc(2025, 6, 1), utc(2026, 6, 1)),
                number=50,
                repeat=7,
            )
        )
        many = min(
            timeit.repeat(
                functools.partial(schedule.count_between, utc(1851, 6, 1), utc(2026, 6, 1)),
                number=50,
                repeat=7,
            )
        )
        assert many < one * 10 + 0.005, (expr, one, many)
        london = parse_schedule(expr, LONDON)
        took = (
            timeit.timeit(
                functools.partial(london.count_between, utc(1851, 6, 1), utc(2026, 6, 1)),
                number=5,
            )
            / 5
        )
        assert took < 0.25, (expr, took)  # a walk over 175 years of 5-minute slots takes minutes
