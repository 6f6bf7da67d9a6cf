"""Exclusion calendars: named sets of dates on which a job's occurrences do not run (pure).

A calendar lists dates explicitly, or names a country's (and optionally a subdivision's) public
holidays, or both. An occurrence is excluded when its *local date in the job's time zone* is
one of them: a job at 23:30 in New York on 3 July 2025 is not excluded by 4 July, though it is
already 4 July in UTC. What happens to an excluded occurrence (recorded as skipped with the
reason ``calendar <name>``, not run, not missed) is the planner's and the store's business.

Public holidays come from the ``holidays`` library (the Open World Holidays Framework, also
used by Home Assistant and pandas users), with its defaults: the ``public`` category, and
observed days included (the Friday off when the 4th of July is a Saturday). Its data changes
with its releases, as the tz database does: nodes should run the same version.

Cost: a country's holidays are computed once per (country, subdivision, year), lazily and
cached, so :meth:`ExclusionCalendar.excludes` is a set lookup after the first call for a year.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache, lru_cache
from typing import Any

from pgpulse.core.errors import InvalidInput
from pgpulse.core.extras import require
from pgpulse.core.zones import load_zone

__all__ = ["ExclusionCalendar", "is_calendar_name"]

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def is_calendar_name(value: object) -> bool:
    """Whether ``value`` is a name a calendar can have (1-64 letters, digits, ``_.-``, starting
    with a letter or digit): one no calendar can have names none, and is not looked up."""
    return isinstance(value, str) and _NAME_RE.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class ExclusionCalendar:
    """A named calendar of excluded dates. Build one with :meth:`create`.

    Attributes:
        name: the calendar's name (letters, digits, ``_.-``; 1-64 characters).
        dates: dates excluded explicitly.
        country: an ISO 3166-1 code the ``holidays`` library knows (``US``, ``DE``), whose
            public holidays are excluded; None for none.
        subdivision: a subdivision of ``country`` as ``holidays`` names it (``CA``, ``BY``), or
            None for the country's national holidays.
    """

    name: str
    dates: frozenset[date] = frozenset()
    country: str | None = None
    subdivision: str | None = None

    @classmethod
    def create(
        cls,
        name: str,
        *,
        dates: Iterable[date | str] = (),
        country: str | None = None,
        subdivision: str | None = None,
    ) -> ExclusionCalendar:
        """Validate and build a calendar.

        Args:
            name: the calendar's name.
            dates: dates to exclude: ``date`` objects or ISO 8601 dates (``2026-12-24``).
            country: ISO 3166-1 code of a country whose public holidays are excluded (case
                as given is kept only if ``holidays`` knows it; ``us`` is refused).
            subdivision: one of that country's subdivisions (needs ``country``).

        Raises:
            InvalidInput: one line naming the field (``calendar.name``, ``calendar.dates``,
                ``calendar.country``, ``calendar.subdivision``) and the value: a malformed
                name, a date that is not an ISO date, an unknown country or subdivision
                (with the known ones), a subdivision without a country, or no dates and no
                country at all.
        """
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise InvalidInput(
                f"calendar name {name!r} is not valid: 1-64 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit",
                field="calendar.name",
                value=name,
            )
        excluded = frozenset(_as_date(name, d) for d in dates)
        if subdivision is not None and country is None:
            raise InvalidInput(
                f"calendar {name!r}: subdivision {subdivision!r} needs a country",
                field="calendar.subdivision",
                value=subdivision,
            )
        if country is not None:
            _check_region(name, country, subdivision)
        if not excluded and country is None:
            raise InvalidInput(
                f"calendar {name!r} excludes nothing: give dates, a country, or both",
                field="calendar.dates",
                value=[],
            )
        return cls(name, excluded, country, subdivision)

    @property
    def skip_reason(self) -> str:
        """The reason an occurrence this calendar excludes is recorded with: ``calendar NAME``."""
        return f"calendar {self.name}"

    def excludes(self, day: date) -> bool:
        """Whether ``day`` (a local date) is excluded: listed, or a public holiday of the
        calendar's country (and subdivision). A set lookup once the year is cached."""
        if day in self.dates:
            return True
        return self.country is not None and day in _holidays(
            self.country, self.subdivision, day.year
        )

    def excludes_occurrence(self, occurrence: datetime, timezone: str) -> bool:
        """Whether the occurrence ``occurrence`` (an aware instant, e.g. ``scheduled_for``) of a
        job in ``timezone`` (an IANA name) falls on an excluded local date.

        Raises:
            ValueError: ``occurrence`` is naive.
            UnknownTimeZone: ``timezone`` is not a zone Pulse accepts.
        """
        if occurrence.tzinfo is None or occurrence.utcoffset() is None:
            raise ValueError(f"occurrence must be a timezone-aware datetime, got {occurrence!r}")
        return self.excludes(occurrence.astimezone(load_zone(timezone)).date())

    def describe(self) -> str:
        """In words: ``"public holidays of DE-BY and 2 more dates"``."""
        parts = []
        if self.country is not None:
            region = self.country + (f"-{self.subdivision}" if self.subdivision else "")
            parts.append(f"public holidays of {region}")
        if self.dates:
            count = len(self.dates)
            more = " more" if parts else ""
            parts.append(f"{count}{more} date{'s' if count > 1 else ''}")
        return " and ".join(parts)


def from_definitions(definitions: Iterable[dict[str, Any]] | None) -> tuple[ExclusionCalendar, ...]:
    """The calendars of stored definitions, as the claim and the job views read them: objects
    with ``name``, ``dates`` (``date`` values or ISO 8601 dates), ``country`` and
    ``subdivision`` (``None`` or empty: no calendar). Trusted input (the store validated it)."""
    return tuple(
        ExclusionCalendar(
            d["name"],
            frozenset(
                v if isinstance(v, date) else date.fromisoformat(v) for v in d.get("dates") or ()
            ),
            d.get("country"),
            d.get("subdivision"),
        )
        for d in definitions or ()
    )


def _as_date(name: str, value: date | str) -> date:
    if isinstance(value, datetime):  # a datetime is a date too: refuse the ambiguity
        raise InvalidInput(
            f"calendar {name!r}: {value!r} is a date and time; give a date",
            field="calendar.dates",
            value=value,
        )
    if isinstance(value, date):
        return value
    try:
        if isinstance(value, str) and re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
            return date.fromisoformat(value)
    except ValueError:
        pass
    raise InvalidInput(
        f"calendar {name!r}: {value!r} is not a date: write 2026-12-24",
        field="calendar.dates",
        value=value,
    )


@cache
def _regions() -> dict[str, tuple[str, ...]]:
    """Countries ``holidays`` knows, with their subdivisions (imported on first use: the
    library is large, and ``import pgpulse`` should not pay for it; the calendars extra)."""
    holidays = require("holidays", extra="calendars", what="a calendar of public holidays")
    return {code: tuple(subs) for code, subs in holidays.list_supported_countries().items()}


def _check_region(name: str, country: str, subdivision: str | None) -> None:
    regions = _regions()
    if country not in regions:
        hint = " (codes are upper case)" if country.upper() in regions else ""
        raise InvalidInput(
            f"calendar {name!r}: country {country!r} is not one the holidays library knows"
            f"{hint}: use an ISO 3166-1 code such as US, GB, DE",
            field="calendar.country",
            value=country,
        )
    if subdivision is not None and subdivision not in regions[country]:
        known = ", ".join(regions[country]) or "none"
        raise InvalidInput(
            f"calendar {name!r}: {country} has no subdivision {subdivision!r} (known: {known})",
            field="calendar.subdivision",
            value=subdivision,
        )


@lru_cache(maxsize=4096)
def _holidays(country: str, subdivision: str | None, year: int) -> frozenset[date]:
    """The public holidays (observed days included) of one region in one year."""
    holidays = require("holidays", extra="calendars", what="a calendar of public holidays")
    return frozenset(holidays.country_holidays(country, subdiv=subdivision, years=year))
