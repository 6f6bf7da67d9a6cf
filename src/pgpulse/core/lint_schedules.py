"""Lint's checks that evaluate schedules (pure, no I/O, no clock): daylight-saving gaps and
folds, calendars a job does not use, herds (:mod:`pgpulse.core.lint` lists them all)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.errors import InvalidSchedule
from pgpulse.core.findings import SHOWN, Facts, Finding, job_finding
from pgpulse.core.jobs import JobSpec
from pgpulse.core.schedule import Schedule, parse_schedule
from pgpulse.core.spread import MAX_SPREAD
from pgpulse.core.wording import plural, seconds_text
from pgpulse.core.zones import OffsetChange, instant_at, load_zone, offset_changes, wall_at

__all__ = ["HERD_OCCURRENCES", "HERD_SPAN", "YEAR", "calendar_findings", "dst_findings", "herds"]

#: How far ahead the daylight-saving and calendar checks look.
YEAR = timedelta(days=366)
#: How far ahead the herd check looks, and the most occurrences of one schedule it lists
#: there (a schedule denser than a minute is cut: it meets every other one within the week).
HERD_SPAN = timedelta(days=7)
HERD_OCCURRENCES = 10_080


# -- daylight saving --------------------------------------------------------------------------


def dst_findings(spec: JobSpec, schedule: Schedule, now: datetime) -> list[Finding]:
    """The gaps and folds within a year whose skipped or repeated wall times the job matches."""
    cron = schedule.cron
    if cron is None or (cron.elapsed and len(cron.hours) == 24):
        return []  # an interval, a one-off, or a job of every hour: elapsed time, no hazard
    zone = load_zone(spec.timezone)
    end = now + YEAR
    if spec.not_after is not None:
        end = min(end, spec.not_after)
    hits: dict[str, list[tuple[OffsetChange, datetime]]] = {"dst-gap": [], "dst-fold": []}
    for change in offset_changes(zone, now, end):
        start, stop = _span(change)
        wall = cron.next_wall(start, start.year)
        if wall is not None and wall < stop:
            hits["dst-gap" if change.after > change.before else "dst-fold"].append((change, wall))
    return [
        _dst_finding(spec, code, changes, elapsed=cron.elapsed)
        for code, changes in hits.items()
        if changes
    ]


def _span(change: OffsetChange) -> tuple[datetime, datetime]:
    """The wall times a change skips (a gap) or repeats (a fold): [start, stop), naive."""
    low, high = sorted((change.before, change.after))
    return wall_at(change.at, low), wall_at(change.at, high)


def _dst_finding(
    spec: JobSpec, code: str, hits: list[tuple[OffsetChange, datetime]], *, elapsed: bool
) -> Finding:
    change, wall = hits[0]
    start, stop = _span(change)
    day = f"{wall:%Y-%m-%d}"
    zone = spec.timezone
    if code == "dst-gap":
        dates = tuple(c.at for c, _ in hits)
        what = (
            "it does not run then (elapsed time: a skipped wall time never happens)"
            if elapsed
            else f"it runs at {stop:%H:%M} instead ({change.at:%H:%M} UTC), just after the gap"
        )
        message = (
            f"on {day} {zone} skips {start:%H:%M}-{stop:%H:%M}: its {wall:%H:%M} does not "
            f"exist; {what}"
        )
    else:
        dates = tuple(instant_at(w, c.before) for c, w in hits)
        what = (
            "it runs in both passes (elapsed time)"
            if elapsed
            else f"it runs once, on the first pass ({dates[0]:%H:%M} UTC)"
        )
        message = (
            f"on {day} {zone} repeats {start:%H:%M}-{stop:%H:%M}: its {wall:%H:%M} happens "
            f"twice; {what}"
        )
    if len(hits) > 1:
        others = ", ".join(f"{w:%Y-%m-%d}" for _, w in hits[1:SHOWN])
        message += f" (also on {others})"
    suggestion = 'timezone = "UTC", or a time outside the changed hour'
    return job_finding(
        spec, code, "warning", message, dates=dates[:SHOWN], count=len(hits), suggestion=suggestion
    )


# -- calendars --------------------------------------------------------------------------------


def calendar_findings(spec: JobSpec, schedule: Schedule, facts: Facts) -> list[Finding]:
    """Occurrences within a year on dates a calendar of the tenant that the job does not name
    excludes: one search per excluded date, not a walk over the occurrences."""
    found: list[Finding] = []
    zone = load_zone(spec.timezone)
    first = facts.now.astimezone(zone).date()
    for calendar in facts.calendars.get(spec.tenant, ()):
        if calendar.name in spec.calendars:
            continue
        hits = [
            hit
            for day in _excluded_days(calendar, first, first + YEAR)
            if (hit := _occurrence_on(schedule, spec.timezone, day, facts.now)) is not None
        ]
        if not hits:
            continue
        days = ", ".join(f"{d.astimezone(zone):%Y-%m-%d}" for d in hits[:SHOWN])
        more = f" and {len(hits) - SHOWN} more" if len(hits) > SHOWN else ""
        found.append(
            job_finding(
                spec,
                "calendar",
                "warning",
                f"{plural(len(hits), 'occurrence')} within a year on dates calendar "
                f"{calendar.name!r} of tenant {spec.tenant!r} excludes ({days}{more}), which the "
                "job does not use: they run",
                dates=tuple(hits[:SHOWN]),
                count=len(hits),
                suggestion=f"calendars = {json.dumps([*spec.calendars, calendar.name])}",
            )
        )
    return found


def _excluded_days(calendar: ExclusionCalendar, first: date, last: date) -> list[date]:
    """The dates in [first, last] ``calendar`` excludes, ascending."""
    days = {d for d in calendar.dates if first <= d <= last}
    if calendar.country is not None:
        day = first
        while day <= last:
            if calendar.excludes(day):
                days.add(day)
            day += timedelta(days=1)
    return sorted(days)


def _occurrence_on(schedule: Schedule, timezone: str, day: date, now: datetime) -> datetime | None:
    """The first occurrence after ``now`` on local date ``day``, or ``None``."""
    zone = load_zone(timezone)
    midnight = datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)
    start = max(midnight - timedelta(microseconds=1), now)
    try:
        hit = schedule.next_after_or_none(start, anchor=now)
    except InvalidSchedule:
        return None
    if hit is None or hit.astimezone(zone).date() != day:
        return None
    return hit


# -- herds ------------------------------------------------------------------------------------


def herds(specs: Sequence[JobSpec], now: datetime, limit: int) -> list[Finding]:
    """Instants within :data:`HERD_SPAN` at which more than ``limit`` jobs of one tenant without
    spread fall due, one finding per tenant. Jobs are counted by group (tenant, schedule, zone),
    so the cost is the distinct schedules', not the jobs'. Interval jobs are left out (their
    grid starts when each is created), and ``@after`` ones (each follows its own runs)."""
    groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for spec in specs:
        if spec.spread == 0 and spec.parsed_schedule().kind not in ("interval", "delay"):
            groups[(spec.tenant, spec.schedule, spec.timezone)].append(spec.name)
    if all(len(names) <= limit for names in _per_tenant(groups).values()):
        return []
    due: dict[datetime, list[tuple[str, str, str]]] = defaultdict(list)
    horizon = now + HERD_SPAN
    listed_by: dict[tuple[str, str], list[datetime]] = {}
    for key in groups:
        _, expr, zone = key
        if (expr, zone) not in listed_by:
            schedule = parse_schedule(expr, zone)
            listed = schedule.occurrences_between(now, horizon, limit=HERD_OCCURRENCES)
            if len(listed) == HERD_OCCURRENCES:  # cut: compare up to where every one is listed
                horizon = min(horizon, listed[-1])
            listed_by[(expr, zone)] = listed
        for instant in listed_by[(expr, zone)]:
            due[instant].append(key)
    found: dict[str, list[tuple[datetime, list[tuple[str, str, str]]]]] = defaultdict(list)
    for instant in sorted(t for t in due if t <= horizon):
        by_tenant: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
        for key in due[instant]:
            by_tenant[key[0]].append(key)
        for tenant, keys in by_tenant.items():
            if sum(len(groups[key]) for key in keys) > limit:
                found[tenant].append((instant, keys))
    span = horizon - now
    return [
        _herd_finding(tenant, herd, groups, limit, span) for tenant, herd in sorted(found.items())
    ]


def _per_tenant(groups: dict[tuple[str, str, str], list[str]]) -> dict[str, list[str]]:
    names: dict[str, list[str]] = defaultdict(list)
    for (tenant, _, _), group in groups.items():
        names[tenant].extend(group)
    return names


def _herd_finding(
    tenant: str,
    herd: list[tuple[datetime, list[tuple[str, str, str]]]],
    groups: dict[tuple[str, str, str], list[str]],
    limit: int,
    span: timedelta,
) -> Finding:
    """A tenant's herd: the instants at which more than ``limit`` of its jobs without spread
    fall due, the worst of them, and a spread that puts about ``limit`` of its jobs in each
    second (at least a minute), never longer than the shortest gap of any of their schedules
    (:func:`pgpulse.core.spread.check_spread` would refuse more)."""
    keys = {key for _, at in herd for key in at}
    names = tuple(sorted(name for key in keys for name in groups[key]))
    worst_at, worst_keys = max(herd, key=lambda item: sum(len(groups[k]) for k in item[1]))
    worst = sorted(name for key in worst_keys for name in groups[key])
    gaps = [
        gap.total_seconds()
        for _, expr, zone in keys
        if (gap := parse_schedule(expr, zone).shortest_gap()) is not None
    ]
    spread = min([max(60.0, math.ceil(len(worst) / limit)), MAX_SPREAD, *gaps])
    shown = ", ".join(worst[:SHOWN]) + (
        f" and {len(worst) - SHOWN} more" if len(worst) > SHOWN else ""
    )
    return Finding(
        "herd",
        "warning",
        tenant,
        names,
        f"{len(worst)} jobs without spread fall due in the same second at "
        f"{worst_at:%Y-%m-%d %H:%M:%S} UTC ({shown}); more than {limit} at "
        f"{plural(len(herd), 'instant')} within {_span_text(span)}, "
        f"{plural(len(names), 'job')} in all",
        dates=tuple(instant for instant, _ in herd[:SHOWN]),
        count=len(herd),
        suggestion=f"spread = {spread:g}",
    )


def _span_text(span: timedelta) -> str:
    """``7 days``, or ``13 h 53 min`` for a span cut short."""
    if span >= HERD_SPAN:
        return "7 days"
    return seconds_text(round(span.total_seconds())).split("(")[-1].rstrip(")")
