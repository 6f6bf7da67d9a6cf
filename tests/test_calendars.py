"""Exclusion calendars: explicit dates, a country's and a subdivision's public holidays (the
``holidays`` library), the local date of an occurrence in the job's zone, refusals, and the
per-year cache that keeps a check cheap."""

from __future__ import annotations

import subprocess
import sys
import timeit
from datetime import UTC, date, datetime
from typing import Any

import pytest

from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.errors import InvalidInput, UnknownTimeZone


def test_explicit_dates() -> None:
    calendar = ExclusionCalendar.create("freeze", dates=["2026-12-24", date(2026, 12, 31)])
    assert calendar.dates == {date(2026, 12, 24), date(2026, 12, 31)}
    assert calendar.excludes(date(2026, 12, 24)) and calendar.excludes(date(2026, 12, 31))
    assert not calendar.excludes(date(2026, 12, 25))
    assert calendar.skip_reason == "calendar freeze"
    assert calendar.describe() == "2 dates"


def test_a_countrys_public_holidays_with_observed_days() -> None:
    us = ExclusionCalendar.create("us", country="US")
    assert us.excludes(date(2026, 1, 1))  # New Year's Day
    assert us.excludes(date(2026, 11, 26))  # Thanksgiving: the fourth Thursday of November
    assert us.excludes(date(2026, 7, 3))  # 4 July 2026 is a Saturday: observed on Friday
    assert not us.excludes(date(2025, 7, 3))  # 4 July 2025 is a Friday
    assert not us.excludes(date(2026, 3, 17))  # St Patrick's Day is not a US public holiday
    assert us.describe() == "public holidays of US"


def test_a_subdivision_adds_its_own_holidays() -> None:
    germany = ExclusionCalendar.create("de", country="DE")
    bavaria = ExclusionCalendar.create("by", country="DE", subdivision="BY", dates=["2026-06-05"])
    epiphany, unity = date(2026, 1, 6), date(2026, 10, 3)
    assert bavaria.excludes(epiphany) and not germany.excludes(epiphany)
    assert bavaria.excludes(unity) and germany.excludes(unity)
    assert bavaria.excludes(date(2026, 6, 5)) and not germany.excludes(date(2026, 6, 5))
    assert bavaria.describe() == "public holidays of DE-BY and 1 more date"


def test_the_occurrence_is_judged_by_its_local_date_in_the_jobs_zone() -> None:
    calendar = ExclusionCalendar.create("xmas", dates=["2026-12-25"])
    # 2026-12-25 02:00 UTC is still the 24th in New York and already the 25th in Tokyo.
    instant = datetime(2026, 12, 25, 2, tzinfo=UTC)
    assert not calendar.excludes_occurrence(instant, "America/New_York")
    assert calendar.excludes_occurrence(instant, "Asia/Tokyo")
    assert calendar.excludes_occurrence(instant, "UTC")
    with pytest.raises(ValueError, match="occurrence must be a timezone-aware"):
        calendar.excludes_occurrence(datetime(2026, 12, 25), "UTC")
    with pytest.raises(UnknownTimeZone):
        calendar.excludes_occurrence(instant, "Mars/Olympus")


def test_a_check_is_a_set_lookup_after_the_first_of_a_year() -> None:
    calendar = ExclusionCalendar.create("gb", country="GB", subdivision="ENG")
    calendar.excludes(date(2031, 5, 5))  # computes 2031 once
    per_call = timeit.timeit(lambda: calendar.excludes(date(2031, 5, 6)), number=10_000) / 10_000
    first = timeit.timeit(lambda: calendar.excludes(date(2032, 1, 2)), number=1)
    assert per_call * 20 < first, (per_call, first)  # a lookup, not the library's computation
    assert calendar.excludes(date(2031, 5, 5))  # Early May bank holiday: first Monday of May


def test_import_pgpulse_does_not_load_the_holidays_library() -> None:
    code = "import sys, pgpulse, pgpulse.core.calendars; print('holidays' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        pytest.param({"name": ""}, "calendar.name", "calendar name '' is not valid", id="empty"),
        pytest.param(
            {"name": "a b", "dates": ["2026-01-01"]}, "calendar.name", "'a b'", id="space"
        ),
        pytest.param({"name": "x" * 65, "country": "US"}, "calendar.name", "1-64", id="long"),
        pytest.param(
            {"name": "c", "dates": ["24/12/2026"]},
            "calendar.dates",
            "calendar 'c': '24/12/2026' is not a date: write 2026-12-24",
            id="not_iso",
        ),
        pytest.param(
            {"name": "c", "dates": ["2026-02-30"]},
            "calendar.dates",
            "'2026-02-30' is not a date",
            id="feb_30",
        ),
        pytest.param(
            {"name": "c", "dates": [datetime(2026, 1, 1, tzinfo=UTC)]},
            "calendar.dates",
            "is a date and time; give a date",
            id="datetime",
        ),
        pytest.param(
            {"name": "c", "country": "XX"},
            "calendar.country",
            "calendar 'c': country 'XX' is not one the holidays library knows",
            id="unknown",
        ),
        pytest.param(
            {"name": "c", "country": "us"},
            "calendar.country",
            "(codes are upper case)",
            id="lower_case",
        ),
        pytest.param(
            {"name": "c", "country": "DE", "subdivision": "ZZ"},
            "calendar.subdivision",
            "calendar 'c': DE has no subdivision 'ZZ' (known: BB, BE,",
            id="unknown_subdivision",
        ),
        pytest.param(
            {"name": "c", "subdivision": "BY"},
            "calendar.subdivision",
            "subdivision 'BY' needs a country",
            id="subdivision_alone",
        ),
        pytest.param(
            {"name": "c"},
            "calendar.dates",
            "calendar 'c' excludes nothing",
            id="nothing",
        ),
    ],
)
def test_refused(kwargs: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        ExclusionCalendar.create(**kwargs)
    assert caught.value.field == field
    assert message in str(caught.value)
