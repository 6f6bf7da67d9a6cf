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
* ``upstream``: an ``after`` that names a job its tenant does not have (deleted or renamed since
  the job was written: ``after`` names jobs by name, docs/chains.md): the job waits for it.
* ``backfill-limit``: ``catch_up backfill`` without ``backfill_limit``: every occurrence missed
  in an outage runs, however many.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from pgpulse.core.findings import (
    CODES,
    Facts,
    Finding,
    Observed,
    finding_document,
    format_finding,
    job_finding,
)
from pgpulse.core.jobs import JobSpec
from pgpulse.core.lint_schedules import calendar_findings, dst_findings, herds
from pgpulse.core.schedule import Schedule
from pgpulse.core.wording import plural, seconds_text

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

#: More jobs than this due in one second without spread is a herd (``--herd``).
DEFAULT_HERD = 50


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
    its tenant's calendars; the herd check lists at most
    :data:`~pgpulse.core.lint_schedules.HERD_OCCURRENCES` occurrences
    per distinct schedule.
    """
    if herd < 1:
        raise ValueError(f"herd must be at least 1, got {herd}")
    if facts.now.tzinfo is None:
        raise ValueError("facts.now must be timezone-aware")
    found: list[Finding] = []
    known = facts.stored | {(spec.tenant, spec.name) for spec in specs}
    for spec in specs:
        found.extend(_job_findings(spec, facts, known))
    found.extend(herds(specs, facts.now, herd))
    return found


def _job_findings(spec: JobSpec, facts: Facts, known: frozenset[tuple[str, str]]) -> list[Finding]:
    """The findings of one job (``known``: the jobs that exist, by tenant and name), in
    :data:`CODES` order."""
    schedule = spec.parsed_schedule()
    seen = facts.observed.get((spec.tenant, spec.name))
    found = [
        *_handler(spec, facts.live_handlers),
        *_upstream(spec, known),
        *_timeout(spec, seen),
        *_misfire_grace(spec, seen),
        *dst_findings(spec, schedule, facts.now),
        *calendar_findings(spec, schedule, facts),
        *_backfill(spec, schedule, facts.now),
    ]
    return found


def _handler(spec: JobSpec, live: frozenset[str]) -> list[Finding]:
    if spec.handler in live:
        return []
    why = (
        "no live node allows shell jobs (pgpulse node run --allow-shell-jobs)"
        if spec.handler == "shell"
        else f"no live node has handler {spec.handler!r}"
    )
    return [job_finding(spec, "handler", "error", f"{why}: its runs wait for one")]


def _upstream(spec: JobSpec, known: frozenset[tuple[str, str]]) -> list[Finding]:
    missing = [name for name in spec.after if (spec.tenant, name) not in known]
    if not missing:
        return []
    one = len(missing) == 1
    names = ", ".join(repr(name) for name in missing)
    return [
        job_finding(
            spec,
            "upstream",
            "error",
            f"after names {names}, {'a job' if one else 'jobs'} tenant {spec.tenant!r} does not "
            f"have (deleted or renamed since?): it waits for {'it' if one else 'them'} and "
            "never runs",
        )
    ]


def _timeout(spec: JobSpec, seen: Observed | None) -> list[Finding]:
    if spec.timeout is None or seen is None or seen.duration_p95 is None:
        return []
    if spec.timeout >= seen.duration_p95:
        return []
    p95 = seen.duration_p95
    return [
        job_finding(
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
        job_finding(
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
        job_finding(
            spec,
            "backfill-limit",
            "warning",
            "catch_up backfill without backfill_limit: every occurrence missed in an outage "
            f"runs, oldest first ({plural(per_day, 'run')} after a day down)",
            suggestion=f"backfill_limit = {max(1, min(per_day, 24))}",
        )
    ]
