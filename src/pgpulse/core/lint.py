"""Lint: hazards in job definitions, found before they bite (pure, no I/O, no clock).

``pgpulse lint`` reads definitions (the stored jobs, an apply file or a crontab) and what the
database observed (:class:`Facts`: each job's lag and duration percentiles over its recent runs,
the handlers of live nodes, the tenant's calendars, the database's now) and asks
:func:`lint_jobs` for :class:`Finding` s. Each check is a function of those, so a test gives a
fixed ``now`` and gets the same dates every time.

The checks, by code:

* ``dst-gap``, ``dst-fold``: a cron job whose wall times fall in a daylight-saving gap or fold
  of its zone within a year of now, with the dates and what the rules do there (Debian cron's,
  docs/design.md invariant 7: a fixed-time job fires just after a gap and on the first pass of a
  fold; an elapsed-time job with a fixed hour is skipped in a gap and fires in both passes).
* ``herd``: more than ``herd`` jobs without ``spread`` due in the same second within a week,
  with a spread that would fit them (:mod:`pgpulse.core.spread`).
* ``calendar``: occurrences within a year on dates one of the tenant's calendars excludes that
  the job does not name (an oversight more often than a choice).
* ``misfire-grace``: under ``catch_up skip``, a ``misfire_grace`` below the job's observed p99
  lag: an occurrence as late as one in a hundred already is would be skipped.
* ``timeout``: a ``timeout`` below the job's observed p95 duration: one attempt in twenty would
  be cut off.
* ``handler``: a handler no live node has (shell: no live node allows shell jobs): its runs wait.
* ``backfill-limit``: ``catch_up backfill`` without ``backfill_limit``: every occurrence missed
  in an outage runs, however many.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.errors import InvalidSchedule
from pgpulse.core.jobs import JobSpec
from pgpulse.core.schedule import Schedule
from pgpulse.core.spread import MAX_SPREAD
from pgpulse.core.wording import plural, seconds_text
from pgpulse.core.zones import OffsetChange, instant_at, load_zone, offset_changes, wall_at

__all__ = [
    "CODES",
    "DEFAULT_HERD",
    "Facts",
    "Finding",
    "Observed",
    "finding_document",
    "format_finding",
    "lint_jobs",
]

Severity = Literal["error", "warning"]
#: Every finding's code, in the order a report lists them.
CODES: tuple[str, ...] = (
    "handler",
    "timeout",
    "misfire-grace",
    "dst-gap",
    "dst-fold",
    "herd",
    "calendar",
    "backfill-limit",
)
#: More jobs than this due in one second without spread is a herd (``--herd``).
DEFAULT_HERD = 50
#: How far ahead the daylight-saving and calendar checks look.
YEAR = timedelta(days=366)
#: How far ahead the herd check looks, and the most occurrences of one schedule it lists
#: there (a schedule denser than a minute is cut: it meets every other one within the week).
HERD_SPAN = timedelta(days=7)
HERD_OCCURRENCES = 10_080
#: Dates a finding lists (the count says how many there are).
SHOWN = 5


@dataclass(frozen=True, slots=True)
class Observed:
    """What a job's recent runs show (``queries.sql``: ``lint_observed``).

    Attributes:
        runs: how many of its last runs the percentiles are over.
        lag_p99: seconds from the spread instant to the first attempt's start, 99th
            percentile (``None``: no run started).
        duration_p95: seconds of the last attempt of its finished runs, 95th percentile.
    """

    runs: int
    lag_p99: float | None = None
    duration_p95: float | None = None


@dataclass(frozen=True, slots=True)
class Facts:
    """What the database knows that the definitions do not say.

    Attributes:
        now: the database's now (aware); every look ahead starts there.
        live_handlers: the handlers live nodes have (shell only from a node that allows shell
            jobs).
        calendars: each tenant's calendars.
        observed: by (tenant, name), for the jobs that have runs.
    """

    now: datetime
    live_handlers: frozenset[str] = frozenset()
    calendars: Mapping[str, Sequence[ExclusionCalendar]] = field(default_factory=dict)
    observed: Mapping[tuple[str, str], Observed] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Finding:
    """One hazard.

    Attributes:
        code: one of :data:`CODES`.
        severity: ``error`` (runs will wait or be cut off) or ``warning``.
        tenant: the jobs' tenant.
        jobs: the job (a herd: every job of it, by name).
        message: one line for people, with the dates and what will happen.
        dates: the instants it is about (aware UTC), the first :data:`SHOWN`.
        count: how many such instants there are in the span looked at.
        suggestion: what would fix it (a field and value), if there is one.
    """

    code: str
    severity: Severity
    tenant: str
    jobs: tuple[str, ...]
    message: str
    dates: tuple[datetime, ...] = ()
    count: int = 0
    suggestion: str | None = None

    @property
    def job(self) -> str:
        """The first job it is about."""
        return self.jobs[0]


def lint_jobs(specs: Sequence[JobSpec], facts: Facts, *, herd: int = DEFAULT_HERD) -> list[Finding]:
    """Every hazard of ``specs`` given ``facts``, by job (in ``specs`` order) then code; herds
    last.

    Args:
        specs: the definitions.
        facts: what the database observed, and its now.
        herd: more jobs than this due in one second without spread is a herd (>= 1).

    Raises:
        ValueError: ``herd`` below 1, or a naive ``facts.now``.

    Cost: per job a year of its zone's offset changes (cached), a search per excluded date of
    its tenant's calendars; the herd check lists at most :data:`HERD_OCCURRENCES` occurrences
    per distinct schedule.
    """
    if herd < 1:
        raise ValueError(f"herd must be at least 1, got {herd}")
    if facts.now.tzinfo is None:
        raise ValueError("facts.now must be timezone-aware")
    found: list[Finding] = []
    for spec in specs:
        found.extend(_job_findings(spec, facts))
    found.extend(_herds(specs, facts.now, herd))
    return found


def _job_findings(spec: JobSpec, facts: Facts) -> list[Finding]:
    """The findings of one job, in :data:`CODES` order."""
    schedule = spec.parsed_schedule()
    seen = facts.observed.get((spec.tenant, spec.name))
    found = [
        *_handler(spec, facts.live_handlers),
        *_timeout(spec, seen),
        *_misfire_grace(spec, seen),
        *_daylight_saving(spec, schedule, facts.now),
        *_calendars(spec, schedule, facts),
        *_backfill(spec, schedule, facts.now),
    ]
    return found


def _finding(spec: JobSpec, code: str, severity: Severity, message: str, **more: Any) -> Finding:
    return Finding(code, severity, spec.tenant, (spec.name,), message, **more)


def _handler(spec: JobSpec, live: frozenset[str]) -> list[Finding]:
    if spec.handler in live:
        return []
    why = (
        "no live node allows shell jobs (pgpulse node run --allow-shell-jobs)"
        if spec.handler == "shell"
        else f"no live node has handler {spec.handler!r}"
    )
    return [_finding(spec, "handler", "error", f"{why}: its runs wait for one")]


def _timeout(spec: JobSpec, seen: Observed | None) -> list[Finding]:
    if spec.timeout is None or seen is None or seen.duration_p95 is None:
        return []
    if spec.timeout >= seen.duration_p95:
        return []
    p95 = seen.duration_p95
    return [
        _finding(
            spec,
            "timeout",
            "error",
            f"timeout {seconds_text(spec.timeout)} is shorter than the p95 duration of its last "
            f"{plural(seen.runs, 'run')}, {seconds_text(p95)}: more than one attempt in twenty "
            "would be cut off",
            suggestion=f"timeout = {math.ceil(p95 * 1.5)}",
        )
    ]


def _misfire_grace(spec: JobSpec, seen: Observed | None) -> list[Finding]:
    if spec.catch_up != "skip" or seen is None or seen.lag_p99 is None:
        return []
    if spec.misfire_grace >= seen.lag_p99:
        return []
    p99 = seen.lag_p99
    return [
        _finding(
            spec,
            "misfire-grace",
            "warning",
            f"misfire_grace {seconds_text(spec.misfire_grace)} is below the p99 lag of its last "
            f"{plural(seen.runs, 'run')}, {seconds_text(p99)}: an occurrence as late as one in "
            "a hundred already is would be skipped (catch_up skip)",
            suggestion=f"misfire_grace = {math.ceil(p99 * 2)}",
        )
    ]


def _backfill(spec: JobSpec, schedule: Schedule, now: datetime) -> list[Finding]:
    if spec.catch_up != "backfill" or spec.backfill_limit is not None or schedule.kind == "once":
        return []
    per_day = schedule.count_between(now, now + timedelta(days=1), anchor=now)
    return [
        _finding(
            spec,
            "backfill-limit",
            "warning",
            "catch_up backfill without backfill_limit: every occurrence missed in an outage "
            f"runs, oldest first ({plural(per_day, 'run')} after a day down)",
            suggestion=f"backfill_limit = {max(1, min(per_day, 24))}",
        )
    ]


# -- daylight saving --------------------------------------------------------------------------


def _daylight_saving(spec: JobSpec, schedule: Schedule, now: datetime) -> list[Finding]:
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
    return _finding(
        spec, code, "warning", message, dates=dates[:SHOWN], count=len(hits), suggestion=suggestion
    )


# -- calendars --------------------------------------------------------------------------------


def _calendars(spec: JobSpec, schedule: Schedule, facts: Facts) -> list[Finding]:
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
            _finding(
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


def _herds(specs: Sequence[JobSpec], now: datetime, limit: int) -> list[Finding]:
    """Instants within :data:`HERD_SPAN` at which more than ``limit`` jobs without spread fall
    due, one finding per tenant and set of jobs (the same set due every hour is one herd).
    Interval jobs are left out: their grid starts when each is created."""
    by_schedule: dict[tuple[str, str], list[JobSpec]] = defaultdict(list)
    for spec in specs:
        if spec.spread == 0:
            kind = spec.parsed_schedule().kind
            if kind != "interval":
                by_schedule[(spec.schedule, spec.timezone)].append(spec)
    if sum(len(group) for group in by_schedule.values()) <= limit:
        return []
    due: dict[datetime, list[JobSpec]] = defaultdict(list)
    horizon = now + HERD_SPAN
    for group in by_schedule.values():
        schedule = group[0].parsed_schedule()
        listed = schedule.occurrences_between(now, horizon, limit=HERD_OCCURRENCES)
        if len(listed) == HERD_OCCURRENCES:  # cut: compare up to where every one is listed
            horizon = min(horizon, listed[-1])
        for instant in listed:
            due[instant].extend(group)
    herds: dict[str, list[tuple[datetime, tuple[str, ...]]]] = defaultdict(list)
    for instant in sorted(t for t in due if t <= horizon):
        jobs = due[instant]
        if len(jobs) > limit:
            for tenant, names in _by_tenant(jobs).items():
                herds[tenant].append((instant, names))
    span = horizon - now
    return [
        _herd_finding(tenant, instants, specs, limit, span)
        for tenant, instants in sorted(herds.items())
    ]


def _by_tenant(jobs: Iterable[JobSpec]) -> dict[str, tuple[str, ...]]:
    names: dict[str, list[str]] = defaultdict(list)
    for spec in jobs:
        names[spec.tenant].append(spec.name)
    return {tenant: tuple(sorted(group)) for tenant, group in names.items()}


def _herd_finding(
    tenant: str,
    herd: list[tuple[datetime, tuple[str, ...]]],
    specs: Sequence[JobSpec],
    limit: int,
    span: timedelta,
) -> Finding:
    """A tenant's herd: the instants at which more than ``limit`` of its jobs without spread
    fall due, the worst of them, and a spread that puts about ``limit`` of its jobs in each
    second (at least a minute), never longer than the shortest gap of any of their schedules
    (:func:`pgpulse.core.spread.check_spread` would refuse more)."""
    names = tuple(sorted({name for _, group in herd for name in group}))
    worst_at, worst = max(herd, key=lambda item: len(item[1]))
    named = set(names)
    gaps = [
        gap.total_seconds()
        for spec in specs
        if spec.tenant == tenant and spec.name in named
        if (gap := spec.parsed_schedule().shortest_gap()) is not None
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


# -- output -----------------------------------------------------------------------------------


def format_finding(finding: Finding) -> str:
    """One line: ``severity code tenant/job: message (suggestion)``."""
    who = finding.job if finding.tenant == "default" else f"{finding.tenant}/{finding.job}"
    if len(finding.jobs) > 1:
        who += f" (+{len(finding.jobs) - 1})"
    hint = f" [suggest: {finding.suggestion}]" if finding.suggestion else ""
    return f"{finding.severity}: {finding.code}: {who}: {finding.message}{hint}"


def finding_document(finding: Finding) -> dict[str, Any]:
    """A finding as JSON: code, severity, tenant, job, jobs, message, dates (UTC ISO 8601),
    count, suggestion."""
    return {
        "code": finding.code,
        "severity": finding.severity,
        "tenant": finding.tenant,
        "job": finding.job,
        "jobs": list(finding.jobs),
        "message": finding.message,
        "dates": [d.astimezone(UTC).isoformat() for d in finding.dates],
        "count": finding.count,
        "suggestion": finding.suggestion,
    }
