"""What a claimed occurrence does, decided without I/O: at its claim and at its attempt's end.

:func:`decide` is the one claim-time decision: from the claimed row's values and the claim's
instant it says whether the handler runs, and if not, the outcome to record (a misfire or
another catch-up skip, an occurrence outside the window or on an excluded date, a run whose
attempts were interrupted or exhausted, a fork under overlap ``replace``/``allow``, a handler
this node lacks). :func:`plan_finish` decides how a finished attempt is recorded. Both are pure
functions over the maths of :mod:`pgpulse.core.planner` (catch-up, retries),
:mod:`pgpulse.core.limits` (window, calendars, resumes, ``max_runs``) and
:mod:`pgpulse.core.schedule`, each called from here, never from one another's callers.
:mod:`pgpulse.node.attempts` runs an attempt through them.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from pgpulse.core.limits import (
    calendar_skip,
    completes,
    resume_policy,
    resume_skip_reason,
    within_window,
)
from pgpulse.core.model import AttemptResult, ClaimedJob, Outcome, RunOutcome
from pgpulse.core.planner import (
    MAX_INTERRUPTIONS,
    Advance,
    CatchUpPolicy,
    ClaimDecision,
    hold,
    plan_claim,
    retry_delay,
)
from pgpulse.core.skips import skip_of, skip_reason
from pgpulse.core.wording import plural, seconds_text

#: Why a claim's handler runs or not (:class:`Decision`): ``run``; ``fork`` (overlap
#: ``replace``/``allow``: the occurrence becomes an extra occurrence, the job row moves on);
#: ``catch_up`` (skipped by the catch-up policy or a resume's mode: a misfire, a coalesced or
#: superseded occurrence, one beyond ``backfill_limit``); ``window`` (after ``not_after``);
#: ``calendar`` (an excluded date); ``interrupted`` (earlier attempts interrupted
#: :data:`~pgpulse.core.planner.MAX_INTERRUPTIONS` times) or ``exhausted`` (failed attempts
#: already at ``max_attempts``), both ended ``fenced``; ``no_handler`` (this node lacks the
#: handler); ``skipped`` (listed to skip by hand, ``job skip``).
Verdict = Literal[
    "run",
    "fork",
    "catch_up",
    "window",
    "calendar",
    "interrupted",
    "exhausted",
    "no_handler",
    "skipped",
]


@dataclass(frozen=True, slots=True)
class Decision:
    """What a claim does (:func:`decide`).

    Attributes:
        verdict: why (:data:`Verdict`).
        outcome: what is recorded instead of running the handler; ``None`` exactly when the
            verdict is ``run``.
    """

    verdict: Verdict
    outcome: Outcome | None = None


#: The decision of almost every claim (immutable, so shared).
RUN = Decision("run")


def decide(job: ClaimedJob, now: datetime, *, node: str, handlers: Collection[str]) -> Decision:
    """Decide what the claim of ``job`` at ``now`` does (pure: the one claim-time decision).

    In order: an extra occurrence is never a misfire (:func:`_decide_occurrence`); a job row's
    first attempt is skipped when listed to skip by hand (:mod:`pgpulse.core.skips`), after
    ``not_after`` (the window changed while it was held) or on a date one of its calendars
    excludes; then the catch-up policy (or a resume's mode) judges
    the occurrence at ``now`` less its spread offset, and a run whose earlier attempts were
    interrupted :data:`~pgpulse.core.planner.MAX_INTERRUPTIONS` times, or failed ``max_attempts``
    times, ends ``fenced`` (:func:`fenced_reason`); an occurrence that is to run under overlap
    ``replace``/``allow`` is forked; last, a handler this node lacks fails the job (status
    ``failed``) — which a node's own claims never bring (it claims only the handlers it has,
    :mod:`pgpulse.core.routing`): only a claim made for it by hand.

    Args:
        job: the claimed job.
        now: the database's instant of the claim (``job.db_now`` on a node).
        node: the claiming node's id (named in a missing handler's reason).
        handlers: the names of the handlers this node has.

    Returns:
        :data:`RUN`, or a :class:`Decision` with the outcome to record.
    """
    if job.occurrence is not None:
        return _decide_occurrence(job, node, handlers)
    if job.attempt == 1 and job.skips and (chosen := skip_of(job.skips, job.scheduled_for)):
        # the listed occurrence is the one skipped (its own row); the job holds the next one,
        # which the next claim judges by the catch-up policy as any other
        at = job.scheduled_for
        following = _following(job, now)
        nxt = Advance(at if following is None else following, 1, at, at, following is None)
        reason = skip_reason(chosen)
        status = _final_status(job, nxt, ran=False)
        outcome = Outcome(
            job, "skipped", advance=nxt, status=status, error=reason, skip_reason=reason
        )
        return Decision("skipped", outcome)
    if job.attempt == 1 and job.not_after is not None and job.scheduled_for > job.not_after:
        at = job.scheduled_for
        end = Advance(at, 1, at, at, complete=True)
        reason = "outside the job's window (after not_after)"
        return Decision(
            "window", Outcome(job, "skipped", advance=end, status="completed", error=reason)
        )
    if job.attempt == 1 and (calendars := job.exclusion_calendars):
        excluded = calendar_skip(
            job.parsed_schedule, calendars, job.scheduled_for, anchor=job.anchor_at
        )
        if excluded is not None:
            nxt, reason = excluded
            status = _final_status(job, nxt, ran=False)
            outcome = Outcome(
                job, "skipped", advance=nxt, status=status, error=reason, skip_reason=reason
            )
            return Decision("calendar", outcome)
    planned = _plan_claim(job, now)
    if planned.action != "run":
        return _not_run(job, planned, now)
    if job.overlap != "forbid":  # the occurrence runs apart from the job row (a fork)
        # the job row has judged the window, the calendars and the spread instant of this
        # occurrence (above); it advances as a run of its own would
        nxt = next_advance(job, now)
        why = _skip_reason(job, nxt, now) if nxt.skipped_count else None
        return Decision("fork", Outcome(job, "forked", advance=nxt, skip_reason=why))
    if job.handler in handlers:
        return RUN
    return Decision("no_handler", _no_handler(job, node))


def _decide_occurrence(job: ClaimedJob, node: str, handlers: Collection[str]) -> Decision:
    """The claim-time decision of an extra occurrence: never a misfire (it runs however
    late: a backfill runs the past on purpose); ``fenced`` once earlier attempts were
    interrupted :data:`~pgpulse.core.planner.MAX_INTERRUPTIONS` times (:func:`fenced_reason`);
    ``failed`` (this occurrence only, not the job) when this node has no such handler."""
    if job.interruptions >= MAX_INTERRUPTIONS or job.failed_attempts >= job.max_attempts:
        verdict: Verdict = "interrupted" if job.interruptions >= MAX_INTERRUPTIONS else "exhausted"
        return Decision(verdict, Outcome(job, "fenced", error=fenced_reason(job)))
    if job.handler in handlers:
        return RUN
    return Decision("no_handler", _no_handler(job, node)._replace(status="idle"))


def _not_run(job: ClaimedJob, planned: ClaimDecision, now: datetime) -> Decision:
    """The decision of a claim the planner skips (catch-up) or ends ``fenced``."""
    assert planned.advance is not None
    reason = _skip_reason(job, planned.advance, now)
    if planned.action == "skip":
        status = _final_status(job, planned.advance, ran=False)
        # on the claimed occurrence's own row, the summary of the skipped ones
        outcome = Outcome(
            job, "skipped", advance=planned.advance, status=status, error=reason, skip_reason=reason
        )
        return Decision("catch_up", outcome)
    status = _final_status(job, planned.advance, ran=True)
    outcome = Outcome(
        job,
        "fenced",
        advance=planned.advance,
        status=status,
        error=fenced_reason(job),
        skip_reason=reason,
    )
    return Decision("interrupted" if planned.action == "interrupted" else "exhausted", outcome)


def _no_handler(job: ClaimedJob, node: str) -> Outcome:
    """The outcome of a claim this node has no handler for: the job fails (status
    ``failed``, cannot be scheduled), naming why."""
    reason = (
        f"shell jobs are not allowed on node {node} (start it with --allow-shell-jobs)"
        if job.handler == "shell"
        else f"handler {job.handler!r} is not registered on node {node}"
    )
    return Outcome(job, "failed", status="failed", error=reason)


def _skip_reason(job: ClaimedJob, advance: Advance | None, now: datetime) -> str:
    """Why ``advance`` skips occurrences of ``job``, decided at ``now`` (the database's
    instant): under ``skip``, the ones older than a newer due occurrence, which runs, are not
    late (they may be well inside the grace); only when even the newest was past its grace
    were they missed."""
    first = None if advance is None else advance.skipped_first
    if job.resume_mode and job.resumed_at and first is not None and first <= job.resumed_at:
        return resume_skip_reason(job.resume_mode)
    if job.catch_up == "skip":
        held = None if advance is None or advance.complete else advance.scheduled_for
        if held is not None and held <= now and (job.not_after is None or held <= job.not_after):
            return "superseded: a later occurrence was due (catch_up skip runs the newest)"
        return f"missed: later than its misfire_grace of {seconds_text(job.misfire_grace)}"
    if job.catch_up == "coalesce":
        return "coalesced into a later occurrence"
    return f"skipped: older than the newest {job.backfill_limit} (backfill_limit)"


def fenced_reason(job: ClaimedJob) -> str:
    """Why a claim of ``job`` ends its run ``fenced`` without running it: its earlier attempts
    were interrupted :data:`~pgpulse.core.planner.MAX_INTERRUPTIONS` times (handed back at a stop,
    or their lease lost with their node), or (a limit lowered during the run) its failed
    attempts already reached ``max_attempts``."""
    if job.interruptions >= MAX_INTERRUPTIONS:
        return (
            f"interrupted {job.interruptions} times: each attempt ended without an outcome "
            "(handed back at a stop, or its lease lost with its node)"
        )
    return f"attempts exhausted: {plural(job.failed_attempts, 'attempt')} failed"


#: A claimed occurrence at least this far behind the claim is decided in a worker thread: its
#: cost does not grow with the span (docs/design.md, invariant 8), but the first such decision for a
#: schedule and zone makes their tables of offset changes (milliseconds: pgpulse.core.cron's
#: count_between), which a node's event loop must not spend inline (:mod:`pgpulse.node.attempts`).
DECIDE_IN_THREAD_BEHIND = timedelta(days=30)


def _judged(job: ClaimedJob, occurrence: datetime, now: datetime) -> tuple[CatchUpPolicy, datetime]:
    """The policy ``occurrence`` follows and the instant it is judged at: ``now`` less the
    job's spread offset (lateness counts from the spread instant), or the resume's mode for an
    occurrence inside a pause (:func:`~pgpulse.core.limits.resume_policy`)."""
    return resume_policy(
        job.policy,
        occurrence,
        now - job.spread_offset,
        mode=job.resume_mode,
        resumed_at=job.resumed_at,
    )


def _plan_claim(job: ClaimedJob, now: datetime) -> ClaimDecision:
    """:func:`~pgpulse.core.planner.plan_claim` for ``job`` claimed at ``now``, its skips kept
    inside the job's window (:func:`~pgpulse.core.limits.within_window`)."""
    policy, now = _judged(job, job.scheduled_for, now)
    decision = plan_claim(
        job.parsed_schedule,
        policy,
        scheduled_for=job.scheduled_for,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        now=now,
        anchor=job.anchor_at,
        interruptions=job.interruptions,
    )
    if decision.advance is None:
        return decision
    windowed = within_window(
        decision.advance, job.parsed_schedule, job.not_after, anchor=job.anchor_at
    )
    return decision if windowed is decision.advance else ClaimDecision(decision.action, windowed)


def replaced_on_loss(job: ClaimedJob) -> bool:
    """Whether a lost lease of ``job`` is, as a rule, no fault: an extra occurrence under
    overlap ``replace``, whose lease a newer occurrence ends (recorded ``cancelled`` by the
    replacing claim; docs/states.md). Its loss is logged at INFO, not as a WARNING."""
    return job.overlap == "replace" and job.occurrence is not None


def next_advance(job: ClaimedJob, now: datetime) -> Advance:
    """Where ``job`` goes after its occurrence at ``now`` (the database's instant): the next
    occurrence with its catch-up policy applied (:func:`_judged`), or ``complete`` when the
    schedule has none (a one-off)."""
    schedule = job.parsed_schedule
    following = _following(job, now)
    if following is None:
        return Advance(job.scheduled_for, complete=True)
    policy, judged_at = _judged(job, following, now)
    held = hold(schedule, policy, following, now=judged_at, anchor=job.anchor_at)
    return within_window(held, schedule, job.not_after, anchor=job.anchor_at)


def _following(job: ClaimedJob, now: datetime) -> datetime | None:
    """The occurrence after ``job``'s, before any catch-up: the schedule's next one, or for an
    ``@after`` schedule ``now`` (the end of this occurrence's run, or of its skip) plus the
    delay; ``None`` when a one-off has none."""
    schedule = job.parsed_schedule
    if schedule.delay is not None:
        return now + schedule.delay
    return schedule.next_after_or_none(job.scheduled_for, anchor=job.anchor_at)


def _final_status(job: ClaimedJob, advance: Advance, ran: bool) -> Literal["idle", "completed"]:
    """``completed`` when the job has no occurrence left after ``advance`` (its window, its
    ``max_runs`` — this run counted when it ``ran`` — or a one-off's end), else ``idle``."""
    runs_left = None if job.runs_left is None else job.runs_left - (1 if ran else 0)
    return (
        "completed" if completes(advance, not_after=job.not_after, runs_left=runs_left) else "idle"
    )


def plan_finish(
    job: ClaimedJob, result: AttemptResult, now: datetime, rng: random.Random | None = None
) -> Outcome:
    """Decide how an attempt's end is written (pure).

    Success moves the job to its next occurrence computed from ``scheduled_for`` with the
    catch-up policy applied at ``now`` (an extra occurrence, ``job.occurrence``, has none: its
    final outcome ends it; docs/states.md, "Extra occurrences"). A failure with attempts left
    (:attr:`~pgpulse.core.model.ClaimedJob.failed_attempts` below ``max_attempts``: interrupted
    attempts do not count, so a deploy never uses one up) retries the same occurrence after an
    exponential backoff with jitter, its delay by the failure's number; the last failure ends
    the run ``failed`` and moves on (docs/design.md, retry policy: a recurring job never dies of
    one failure).

    Args:
        job: the claimed job.
        result: how the attempt ended.
        now: the database's instant estimated at the end of the attempt (claim time plus the
            monotonic time elapsed since).
        rng: random source for the jitter (tests pass a seeded one).
    """
    if job.occurrence is not None:  # an extra occurrence: no schedule to advance
        if not result.ok and job.failed_attempts + 1 < job.max_attempts:
            delay = retry_delay(job.failed_attempts + 1, job.retry_backoff, rng)
            return Outcome(
                job,
                "retrying",
                retry_in=delay,
                error=result.error,
                output=result.output,
                ended_at=now,
            )
        outcome: RunOutcome = "succeeded" if result.ok else "failed"
        return Outcome(job, outcome, error=result.error, output=result.output, ended_at=now)
    if not result.ok and job.failed_attempts + 1 < job.max_attempts:
        return Outcome(
            job,
            "retrying",
            retry_in=retry_delay(job.failed_attempts + 1, job.retry_backoff, rng),
            error=result.error,
            output=result.output,
            ended_at=now,
        )
    nxt = next_advance(job, now)
    status: Literal["idle", "completed", "paused"] = _final_status(job, nxt, ran=True)
    pause_reason = None
    if (
        not result.ok
        and status == "idle"
        and job.auto_pause_after is not None
        and job.failures + 1 >= job.auto_pause_after
    ):
        status = "paused"
        pause_reason = f"auto-paused after {job.failures + 1} consecutive failed runs"
    return Outcome(
        job,
        "succeeded" if result.ok else "failed",
        advance=nxt,
        status=status,
        error=result.error,
        output=result.output,
        skip_reason=_skip_reason(job, nxt, now) if nxt.skipped_count else None,
        ended_at=now,
        pause_reason=pause_reason,
    )
