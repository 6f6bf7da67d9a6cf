"""The values the engine and the store exchange: a claimed job, an attempt's outcome, what one
claim step and one heartbeat did (pure: no I/O, no clock).

The store builds them from rows and takes them as arguments (:mod:`pgpulse.db.store`); the engine,
the attempts it runs and the planner compute with them. Instants are aware datetimes; durations
are seconds.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

from pgpulse.core.calendars import ExclusionCalendar, from_definitions
from pgpulse.core.planner import Advance, CatchUpPolicy
from pgpulse.core.schedule import Schedule, parse_schedule
from pgpulse.core.spread import spread_offset

#: The outcomes an attempt's write gives its run row (``running`` is only ever shown, by the
#: ``pgpulse_runs_live`` view, never written).
RunOutcome = Literal["succeeded", "retrying", "failed", "skipped", "fenced"]

#: What an attempt's end asks of the store: a run outcome, or ``forked`` — a claimed job row
#: under overlap ``replace``/``allow`` hands its occurrence to an extra occurrence of its own and
#: moves on (``fork_occurrence``; docs/states.md, "Extra occurrences"). Never written as such.
StepOutcome = Literal["succeeded", "retrying", "failed", "skipped", "fenced", "forked"]

#: A job's overlap policy (docs/design.md, "Policies").
OverlapPolicy = Literal["forbid", "replace", "allow"]


class ClaimKey(NamedTuple):
    """What identifies one claim: the row holding its lease and the fencing token the claim
    got. Every write about a claimed run names both (docs/design.md, invariant 3), and a node may
    hold two claims of one job at once (a stale one whose outcome is still on its way, and the
    newer one; or several extra occurrences).

    Attributes:
        row: ``job`` — the job row, which holds the lease of its scheduled occurrence under
            overlap ``forbid`` (and while a claim under ``replace``/``allow`` is decided); or
            ``occurrence`` — a row of ``pgpulse_occurrences`` (a trigger, a backfill
            occurrence, a fork under ``replace``/``allow``), docs/states.md.
        id: that row's id (a job id, or an occurrence id, which is also its run's id).
        token: the claim's fencing token.
    """

    row: Literal["job", "occurrence"]
    id: int
    token: int


class ClaimedJob(NamedTuple):
    """A job this node holds a lease on, as the claim returned it (immutable).

    Attributes mirror ``pgpulse_jobs`` columns; durations are seconds. ``run_id`` is the id
    of the ``pgpulse_runs`` row of ``scheduled_for`` (written when an attempt ends; the claim only
    reserves the id); ``db_now`` is the database's instant of the claim (the run's
    ``started_at``). A claim row is these fields in this order: the store builds each claimed
    job from the row's tuple (a named tuple: no dict and no per-field setattr per job).

    The fields after ``db_now`` are the job's limits (:mod:`pgpulse.core.limits`), with defaults
    for a job that has none: ``spread`` (seconds; its stable offset, :attr:`spread_offset`, is
    computed here, not by the claim: the occurrence is due at ``scheduled_for + spread_offset``),
    ``not_after``, ``runs_left`` (runs ``max_runs`` still
    allows, this one included; ``None``: no limit), ``calendars`` (its exclusion calendars as
    JSON objects, ``None`` for none), the last resume's ``resume_mode`` and ``resumed_at``,
    ``auto_pause_after`` and ``failures`` (consecutive failed runs so far).
    ``overlap`` and ``max_concurrency`` are the job's overlap policy. ``interruptions`` counts
    the run's earlier attempts that ended without an outcome (handed back at a stop, or reaped
    with a lost lease): not failures (:attr:`failed_attempts`). A claim of an extra
    occurrence (``pgpulse_occurrences``) has its id in ``occurrence`` (also its ``run_id``) and
    its kind (``trigger``, ``backfill``, ``scheduled``, ``after``) in ``kind``;
    ``scheduled_for``, ``attempt``, ``fencing_token`` and ``payload`` are the occurrence's own.
    ``downstreams``: other jobs follow this one (docs/chains.md), so its final outcome is sent
    with ``flow_down``. A downstream occurrence (kind ``after``) carries its ``upstream_runs``
    and ``data_interval_start`` (its upstream's previous occurrence). ``last_success_at`` and
    ``last_success_scheduled_for``: the job's last succeeded run, as the claim read them.
    ``skips`` lists the occurrences of a job row to skip by hand (:mod:`pgpulse.core.skips`;
    ``None``: none).
    """

    id: int
    tenant: str
    name: str
    schedule: str
    timezone: str
    handler: str
    payload: dict[str, Any]
    catch_up: Literal["skip", "backfill", "coalesce"]
    backfill_limit: int | None
    misfire_grace: float
    max_attempts: int
    retry_backoff: float
    timeout: float | None
    anchor_at: datetime
    scheduled_for: datetime
    attempt: int
    fencing_token: int
    run_id: int
    db_now: datetime
    spread: float = 0.0
    not_after: datetime | None = None
    runs_left: int | None = None
    calendars: list[dict[str, Any]] | None = None
    resume_mode: str | None = None
    resumed_at: datetime | None = None
    auto_pause_after: int | None = None
    failures: int = 0
    overlap: OverlapPolicy = "forbid"
    max_concurrency: int | None = None
    interruptions: int = 0
    occurrence: int | None = None
    kind: Literal["scheduled", "trigger", "backfill", "after"] = "scheduled"
    downstreams: bool = False
    upstream_runs: list[int] | None = None
    data_interval_start: datetime | None = None
    last_success_at: datetime | None = None
    last_success_scheduled_for: datetime | None = None
    skips: list[dict[str, Any]] | None = None

    @property
    def key(self) -> ClaimKey:
        """This claim's key: the row holding its lease, and its token (:class:`ClaimKey`)."""
        if self.occurrence is not None:
            return ClaimKey("occurrence", self.occurrence, self.fencing_token)
        return ClaimKey("job", self.id, self.fencing_token)

    @property
    def failed_attempts(self) -> int:
        """The run's earlier attempts whose handler failed (or timed out): its attempts before
        this one less its :attr:`interruptions`. ``max_attempts`` bounds these (so a deploy
        during a run never uses up an attempt)."""
        return max(self.attempt - 1 - self.interruptions, 0)

    @property
    def spread_offset(self) -> timedelta:
        """The job's stable offset inside its spread window
        (:func:`pgpulse.core.spread.spread_offset`; zero without a spread). Computed by the node,
        once per (job, spread) in a process: the claim returning the database's
        ``pgpulse_spread_offset`` cost a SQL-function call per claimed row, 1.14-1.31x the
        database CPU per firing (docs/benchmarks.md, lever "spread offset computed by
        the claim's SQL")."""
        return _offset(self.id, self.spread) if self.spread else _NO_OFFSET

    @property
    def parsed_schedule(self) -> Schedule:
        """The job's schedule (parsed once per process, cached)."""
        return parse_schedule(self.schedule, self.timezone)

    @property
    def policy(self) -> CatchUpPolicy:
        """The job's catch-up policy (one shared immutable object per distinct setting)."""
        return _policy(self.catch_up, self.misfire_grace, self.backfill_limit)

    @property
    def exclusion_calendars(self) -> tuple[ExclusionCalendar, ...]:
        """The job's exclusion calendars (none for most jobs)."""
        return from_definitions(self.calendars)


_NO_OFFSET = timedelta(0)


@functools.lru_cache(maxsize=65536)
def _offset(job_id: int, spread: float) -> timedelta:
    return spread_offset(job_id, spread)


@functools.lru_cache(maxsize=1024)
def _policy(
    mode: Literal["skip", "backfill", "coalesce"], misfire_grace: float, backfill_limit: int | None
) -> CatchUpPolicy:
    return CatchUpPolicy(mode, misfire_grace, backfill_limit)


class Outcome(NamedTuple):
    """How an attempt of a claimed job ends: what :meth:`~pgpulse.db.claims.ClaimStore.finish_runs`
    writes (immutable; a named tuple, as it is built once per run on the hot path).

    Exactly one of ``advance`` (move to ``advance.scheduled_for``, recording its skipped
    occurrences) or ``retry_in`` (seconds until the next attempt of the same occurrence) applies;
    with neither, the job keeps its occurrence (used with ``status="failed"``).

    Attributes:
        job: the claimed job (its id, fencing token and run id fence the write).
        outcome: the run row's new outcome (``forked``: see :data:`StepOutcome`).
        advance: where the job goes next, for a final outcome.
        retry_in: seconds until the retry, for ``retrying``.
        status: the job's new status: ``idle``; ``failed`` (cannot be scheduled);
            ``completed`` (no occurrence left: a one-off's, a window's or ``max_runs``' last);
            ``paused`` (auto-pause after consecutive failed runs, ``pause_reason`` saying so).
        error: error text for the run and the job's ``last_error``.
        output: captured output (already truncated).
        skip_reason: error text of the skipped occurrences' rows.
        ended_at: the database's instant (as the node estimates it) when the handler ended;
            ``None`` when no handler ran. Not written: metrics take the run's duration from it,
            and the log the instant of a retry.
        pause_reason: with ``status="paused"``, why (recorded on the job).
    """

    job: ClaimedJob
    outcome: StepOutcome
    advance: Advance | None = None
    retry_in: float | None = None
    status: Literal["idle", "failed", "completed", "paused"] = "idle"
    error: str | None = None
    output: str | None = None
    skip_reason: str | None = None
    ended_at: datetime | None = None
    pause_reason: str | None = None

    @property
    def next_scheduled_for(self) -> datetime:
        """The occurrence the job holds after this write."""
        return self.advance.scheduled_for if self.advance else self.job.scheduled_for

    @property
    def next_run_at(self) -> datetime | None:
        """When the job may be claimed next: its occurrence plus the job's spread offset;
        ``None`` means ``retry_in`` seconds from now."""
        if self.advance is not None:
            return self.advance.scheduled_for + self.job.spread_offset
        return None if self.retry_in is not None else self.job.scheduled_for

    @property
    def counts_run(self) -> bool:
        """Whether this write ends a run that counts towards ``max_runs`` (it ran: succeeded,
        failed or fenced, and the job moves on)."""
        return self.advance is not None and self.outcome in ("succeeded", "failed", "fenced")

    @property
    def failures(self) -> int:
        """The job's consecutive failed runs after this write (a success resets them)."""
        if self.advance is None:
            return self.job.failures
        if self.outcome == "failed":
            return self.job.failures + 1
        return 0 if self.outcome == "succeeded" else self.job.failures


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """How one attempt's handler ended: ``ok``, or the error text; plus captured output
    (truncated)."""

    ok: bool
    error: str | None = None
    output: str | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """What one :meth:`~pgpulse.db.claims.ClaimStore.finish_and_claim` did.

    Attributes:
        written: the claims whose outcome was written; the others' leases were lost.
        jobs: the jobs claimed, oldest occurrence first.
        next_due: when fewer jobs than asked were claimed, the earliest due instant known: of
            the claimed shards' idle jobs, or of a job whose outcome was just written (it may
            be due already: the claim did not see it). ``None``: none known, or nothing asked.
        db_now: the database's instant of the claim (``None`` when nothing was asked).
        occurrences_due: when fewer jobs than asked were claimed, the earliest due instant of a
            pending extra occurrence of the claimed shards, due already or not (``None``: none,
            or not asked): when the node's claim of extra occurrences has work.
    """

    written: set[ClaimKey]
    jobs: list[ClaimedJob]
    next_due: datetime | None
    db_now: datetime | None
    occurrences_due: datetime | None = None


def pause_after(step: Step, *, waiting: int, free: int, poll: float) -> float | None:
    """How long the claim loop sleeps after ``step`` (pure): seconds, 0 for "step again at
    once", or ``None`` for "until woken".

    Outcomes decided meanwhile (``waiting``) go out at once. With no free slot only an attempt
    that ends (or a stop, a shard change) makes a claim useful, and each of those wakes the
    loop. Otherwise it sleeps until the next due instant the step returned (1 ms past it: the
    claim compares ``<=``), at most ``poll`` seconds; a notification or an ended attempt wakes
    it earlier.

    Args:
        step: what the step did (its ``next_due`` and ``db_now`` are the database's instants).
        waiting: outcomes decided since the step, not yet written.
        free: free worker slots.
        poll: the node's longest sleep, seconds.
    """
    if waiting:
        return 0.0
    if free <= 0:
        return None
    delay = poll
    if step.next_due is not None and step.db_now is not None:
        delay = min(delay, (step.next_due - step.db_now).total_seconds() + 0.001)
    return max(delay, 0.0)


def quiet_for(step: Step, poll: float) -> float:
    """Seconds the probe alone sends no claim of extra occurrences after one that claimed fewer
    than it could (``step``): until the next due instant it returned (1 ms past it), at most
    ``poll`` seconds (what was due but not claimable — a paused job's, a full batch's — is not
    asked for at every step)."""
    delay = poll
    if step.next_due is not None and step.db_now is not None:
        delay = min(delay, (step.next_due - step.db_now).total_seconds() + 0.001)
    return max(delay, 0.0)


def with_occurrences(step: Step, quiet: float) -> Step:
    """``step`` with its ``next_due`` brought forward to when extra occurrences should be
    claimed: their due instant, or the end of a quiet spell (``quiet`` seconds from now)."""
    if step.occurrences_due is None or step.db_now is None:
        return step
    at = max(step.occurrences_due, step.db_now + timedelta(seconds=max(quiet, 0.0)))
    if step.next_due is not None and step.next_due <= at:
        return step
    return Step(step.written, step.jobs, at, step.db_now, step.occurrences_due)


def merge_steps(rows: Step, extra: Step) -> Step:
    """One step's view of both claims: what was written and claimed, the earliest due."""
    dues = [due for due in (rows.next_due, extra.next_due) if due is not None]
    return Step(
        rows.written | extra.written,
        [*rows.jobs, *extra.jobs],
        min(dues) if dues else None,
        rows.db_now or extra.db_now,
    )


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What one :meth:`~pgpulse.db.claims.ClaimStore.heartbeat` found and did.

    Attributes:
        live: ids of the nodes alive by the database's clock (this one included if alive);
            ``None`` when the live set is the one the caller said it knows (its ``members``
            digest is unchanged), so it was not sent.
        db_now: the database's instant of the heartbeat.
        leader: whether the heartbeat's connection holds the leader lock (as the caller said,
            when it passed ``leading=True``).
        reaped: how many expired leases it returned to the pool.
        handlers: the handler names each live node advertises, by node id (capability
            routing, :func:`pgpulse.core.routing.routes_for`); ``None`` with ``live``.
        members: the md5 digest of the live set (ids and handlers), to send back as ``known``.
        shard_count: the database's shard count (``pgpulse_cluster``).
    """

    live: tuple[str, ...] | None
    db_now: datetime
    leader: bool
    reaped: int
    handlers: Mapping[str, tuple[str, ...]] | None = None
    members: str = ""
    shard_count: int = 64
