"""One-off schedules (``@at``): the one instant, across DST, what every search says before and
after it, the end signal the planner reads, refusals, and ``schedule next`` as a real process.

Transitions used: Europe/London 2026-03-29 01:00 GMT -> 02:00 BST (at 01:00 UTC) and
2026-10-25 02:00 BST -> 01:00 GMT (at 01:00 UTC); America/New_York 2026-03-08 02:00 EST ->
03:00 EDT (07:00 UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from helpers import pgpulse, utc
from pgpulse.core.errors import InvalidSchedule, ScheduleEnded
from pgpulse.core.jobs import JobSpec
from pgpulse.core.schedule import parse_schedule


@pytest.mark.parametrize(
    ("expr", "zone", "instant"),
    [
        pytest.param("@at 2026-12-24T18:00:00", "Europe/Berlin", utc(2026, 12, 24, 17), id="wall"),
        pytest.param("@at 2026-12-24 18:00", "Europe/Berlin", utc(2026, 12, 24, 17), id="space"),
        pytest.param("@at 2026-07-01T09:30", "Europe/London", utc(2026, 7, 1, 8, 30), id="bst"),
        pytest.param(
            "@at 2026-12-24T18:00:00+01:00", "America/New_York", utc(2026, 12, 24, 17), id="offset"
        ),
        pytest.param("@at 2026-12-24T17:00:00Z", "Asia/Tokyo", utc(2026, 12, 24, 17), id="zulu"),
        pytest.param(
            "@AT 2026-12-24T18:00:00.250",
            "UTC",
            utc(2026, 12, 24, 18, 0, 0, 250_000),
            id="fraction",
        ),
        # 01:30 does not exist in London that day: the first instant after the gap, 02:00 BST.
        pytest.param("@at 2026-03-29T01:30", "Europe/London", utc(2026, 3, 29, 1), id="gap"),
        pytest.param("@at 2026-03-08T02:30", "America/New_York", utc(2026, 3, 8, 7), id="gap_ny"),
        # 01:30 happens twice in London that day: the first pass, 01:30 BST = 00:30 UTC.
        pytest.param(
            "@at 2026-10-25T01:30", "Europe/London", utc(2026, 10, 25, 0, 30), id="repeated"
        ),
    ],
)
def test_the_one_instant(expr: str, zone: str, instant: datetime) -> None:
    schedule = parse_schedule(expr, zone)
    assert (schedule.kind, schedule.at, schedule.final, schedule.interval) == (
        "once",
        instant,
        instant,
        None,
    )
    assert schedule.next_after(instant - timedelta(days=400)) == instant
    assert schedule.next_after(instant - timedelta(microseconds=1)) == instant
    assert schedule.next_after_or_none(instant - timedelta(microseconds=1)) == instant
    assert schedule.next_after_or_none(instant) is None
    assert schedule.next_after_or_none(instant + timedelta(days=1)) is None


def test_every_search_sees_one_occurrence() -> None:
    schedule = parse_schedule("@at 2026-12-24T18:00:00", "Europe/Berlin")
    at, second = utc(2026, 12, 24, 17), timedelta(seconds=1)
    assert schedule.last_at_or_before(at) == at
    assert schedule.last_at_or_before(at + timedelta(days=9000)) == at
    assert schedule.last_at_or_before(at - second) is None
    assert schedule.count_between(at - second, at) == 1
    assert schedule.count_between(utc(1900, 1, 1), utc(2100, 1, 1)) == 1
    assert schedule.count_between(at, at + second) == 0  # (start, end]: start is excluded
    assert schedule.count_between(utc(2027, 1, 1), utc(2026, 1, 1)) == 0
    assert schedule.newest_at_or_before(at, 1) == at
    assert schedule.newest_at_or_before(at + second, 2) is None
    assert schedule.occurrences_between(utc(2026, 1, 1), utc(2027, 1, 1), limit=10) == [at]
    assert schedule.occurrences_between(at, utc(2027, 1, 1), limit=10) == []


def test_next_after_past_the_instant_raises_a_schedule_ended() -> None:
    """Recurring schedules keep raising InvalidSchedule when they cannot fire again; a one-off
    one past its instant raises the subclass ScheduleEnded (next_after_or_none says None)."""
    schedule = parse_schedule("@at 2026-12-24T18:00:00+01:00")
    with pytest.raises(ScheduleEnded) as caught:
        schedule.next_after(utc(2026, 12, 24, 17))
    assert isinstance(caught.value, InvalidSchedule)
    assert (caught.value.field, caught.value.value) == ("schedule", schedule.expr)
    assert str(caught.value) == (
        "schedule '@at 2026-12-24T18:00:00+01:00': no occurrence after 2026-12-24T17:00:00+00:00:"
        " a one-off schedule fires once, at 2026-12-24T17:00:00+00:00"
    )
    for recurring in ("0 0 * * *", "@every 1h", "0 0 L * *"):
        assert parse_schedule(recurring).final is None
    # A recurring schedule that can never fire again still raises, through both methods.
    stuck = parse_schedule("* 1 25-31 3 */7", "Europe/London")
    with pytest.raises(
        InvalidSchedule, match="every time it matches falls in a daylight-saving gap"
    ):
        stuck.next_after_or_none(utc(2026, 1, 1))


@pytest.mark.parametrize(
    ("expr", "zone", "text"),
    [
        pytest.param(
            "@at 2026-12-24T18:00:00",
            "Europe/Berlin",
            "once, at 2026-12-24 18:00:00+01:00 (Europe/Berlin)",
            id="wall",
        ),
        pytest.param(
            "@at 2026-12-24T18:00:00+01:00",
            "Europe/London",
            "once, at 2026-12-24 17:00:00+00:00 (Europe/London)",
            id="offset_shown_in_the_zone",
        ),
        pytest.param(
            "@at 2026-10-25T01:30",
            "Europe/London",
            "once, at 2026-10-25 01:30:00+01:00 (Europe/London)",
            id="first_pass_named_by_its_offset",
        ),
        pytest.param(
            "@at 2026-03-29T01:30",
            "Europe/London",
            "once, at 2026-03-29 02:00:00+01:00 (Europe/London)",
            id="gap_says_when_it_really_fires",
        ),
    ],
)
def test_describe(expr: str, zone: str, text: str) -> None:
    assert parse_schedule(expr, zone).describe() == text


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        pytest.param("@at", "@at '' is not a date and time: write 2026-12-24T18:00:00", id="none"),
        pytest.param("@at tomorrow", "@at 'tomorrow' is not a date and time", id="word"),
        pytest.param("@at 2026-12-24", "@at '2026-12-24' is not a date and time", id="date_only"),
        pytest.param("@at 20261224T1800", "is not a date and time", id="basic_format"),
        pytest.param("@at 2026-12-24T18:00 now", "'2026-12-24T18:00 now' is not", id="extra"),
        pytest.param(
            "@at 2026-02-30T10:00",
            "@at '2026-02-30T10:00' is not a valid date and time (day is out of range for month)",
            id="feb_30",
        ),
        pytest.param("@at 2026-12-24T25:00", "is not a valid date and time", id="hour_25"),
        pytest.param("@at 2026-12-24T18:00+25:00", "is not a valid date and time", id="offset"),
        pytest.param(
            "@at 0001-01-01T00:30+01:00",
            "@at '0001-01-01T00:30+01:00' is out of range: Pulse takes instants from 0001-01-02 "
            "to 9999-12-30 (UTC)",
            id="before_year_1",
        ),
        # In range in UTC, but its wall time in a zone west of UTC would be in the year 0: every
        # listing's description of it broke (the adversarial tester's finding).
        pytest.param(
            "@at 0001-01-01T00:00:00Z",
            "@at '0001-01-01T00:00:00Z' is out of range",
            id="first_instant_of_year_1",
        ),
        pytest.param("@at 9999-12-31T12:00", "@at '9999-12-31T12:00' is out of range", id="last"),
    ],
)
def test_refused(expr: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_schedule(expr, "Europe/Berlin")
    assert (caught.value.field, caught.value.value) == ("schedule", expr)
    assert str(caught.value).startswith(f"schedule {expr!r}: ")
    assert message in str(caught.value)


def test_a_job_spec_takes_a_one_off_schedule() -> None:
    made = JobSpec.create(name="party", schedule="@at 2026-12-24T18:00", handler="noop")
    assert made.parsed_schedule().at == datetime(2026, 12, 24, 18, tzinfo=UTC)


def test_schedule_next_prints_the_one_occurrence_then_says_it_ended() -> None:
    shown = pgpulse(
        "schedule", "next", "@at 2026-12-24T18:00", "--tz", "Europe/Berlin",
        "--count", "3", "--after", "2026-12-01T00:00Z",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "once, at 2026-12-24 18:00:00+01:00 (Europe/Berlin)",
        "UTC                        Europe/Berlin",
        "2026-12-24T17:00:00+00:00  2026-12-24T18:00:00+01:00",
        "no occurrence after 2026-12-24T17:00:00+00:00: the schedule has ended",
    ]
    after = pgpulse("schedule", "next", "@at 2026-12-24T18:00+01:00", "--after", "2027-01-01")
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines()[1:] == [
        "no occurrence after 2027-01-01T00:00:00+00:00: the schedule has ended"
    ]
