"""Lint's value types: what the database observed (:class:`Facts`) and what lint found
(:class:`Finding`), with their output (pure; :mod:`pgpulse.core.lint` has the checks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.jobs import JobSpec

__all__ = [
    "CODES",
    "SHOWN",
    "Facts",
    "Finding",
    "Observed",
    "Severity",
    "finding_document",
    "format_finding",
    "job_finding",
]

Severity = Literal["error", "warning"]
#: Every finding's code, in the order a report lists them.
CODES: tuple[str, ...] = (
    "handler",
    "upstream",
    "timeout",
    "misfire-grace",
    "dst-gap",
    "dst-fold",
    "herd",
    "calendar",
    "backfill-limit",
)
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
        stored: by (tenant, name), the stored jobs among those the definitions' ``after``
            lists name (the definitions linted count as existing too).
    """

    now: datetime
    live_handlers: frozenset[str] = frozenset()
    calendars: Mapping[str, Sequence[ExclusionCalendar]] = field(default_factory=dict)
    observed: Mapping[tuple[str, str], Observed] = field(default_factory=dict)
    stored: frozenset[tuple[str, str]] = frozenset()


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


def job_finding(spec: JobSpec, code: str, severity: Severity, message: str, **more: Any) -> Finding:
    """A finding about job ``spec`` (``more``: :class:`Finding`'s other attributes)."""
    return Finding(code, severity, spec.tenant, (spec.name,), message, **more)


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
