"""Dispatch of one claimed job: decide at claim time, run the handler once, decide its outcome.

The decisions are pure (:meth:`Dispatcher.decide` and :func:`plan_finish`, over
:mod:`pgpulse.planner`); the only I/O is the handler call (:meth:`Dispatcher.run`). Nothing here
knows about leases, timeouts or writes: :mod:`pgpulse.attempts` runs each attempt through these
steps, stops it (a cancellation) when its lease is lost, its timeout passes or its node stops,
and hands its :class:`~pgpulse.model.Outcome` to the claim loop to write. :func:`report` counts
and logs an outcome once its write has landed or was refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pgpulse import metrics, tracing
from pgpulse.handlers import Handler, HandlerFailed, RunContext, call_handler, truncate_output
from pgpulse.limits import (
    calendar_skip,
    completes,
    resume_policy,
    resume_skip_reason,
    within_window,
)
from pgpulse.model import ClaimedJob, Outcome, RunOutcome
from pgpulse.planner import (
    MAX_INTERRUPTIONS,
    Advance,
    CatchUpPolicy,
    ClaimDecision,
    hold,
    plan_claim,
    retry_delay,
)
from pgpulse.wording import plural, seconds_text

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """How one attempt ended: ``ok``, or the error text; plus captured output (truncated)."""

    ok: bool
    error: str | None = None
    output: str | None = None


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
    were interrupted :data:`~pgpulse.planner.MAX_INTERRUPTIONS` times (handed back at a stop,
    or their lease lost with their node), or (a limit lowered during the run) its failed
    attempts already reached ``max_attempts``."""
    if job.interruptions >= MAX_INTERRUPTIONS:
        return (
            f"interrupted {job.interruptions} times: each attempt ended without an outcome "
            "(handed back at a stop, or its lease lost with its node)"
        )
    return f"attempts exhausted: {plural(job.failed_attempts, 'attempt')} failed"


#: A claimed occurrence at least this far behind the claim is decided in a worker thread: its
#: cost does not grow with the span (design.md, invariant 8), but the first such decision for a
#: schedule and zone makes their tables of offset changes (milliseconds: pgpulse.cron's
#: count_between), which a node's event loop must not spend inline.
DECIDE_IN_THREAD_BEHIND = timedelta(days=30)


def _judged(job: ClaimedJob, occurrence: datetime, now: datetime) -> tuple[CatchUpPolicy, datetime]:
    """The policy ``occurrence`` follows and the instant it is judged at: ``now`` less the
    job's spread offset (lateness counts from the spread instant), or the resume's mode for an
    occurrence inside a pause (:func:`~pgpulse.limits.resume_policy`)."""
    return resume_policy(
        job.policy,
        occurrence,
        now - job.spread_offset,
        mode=job.resume_mode,
        resumed_at=job.resumed_at,
    )


def _plan_claim(job: ClaimedJob) -> ClaimDecision:
    """:func:`~pgpulse.planner.plan_claim` for ``job`` at its claim instant."""
    policy, now = _judged(job, job.scheduled_for, job.db_now)
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
    following = schedule.next_after_or_none(job.scheduled_for, anchor=job.anchor_at)
    if following is None:
        return Advance(job.scheduled_for, complete=True)
    policy, judged_at = _judged(job, following, now)
    held = hold(schedule, policy, following, now=judged_at, anchor=job.anchor_at)
    return within_window(held, schedule, job.not_after, anchor=job.anchor_at)


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
    (:attr:`~pgpulse.model.ClaimedJob.failed_attempts` below ``max_attempts``: interrupted
    attempts do not count, issue 37) retries the same occurrence after an exponential backoff
    with jitter, its delay by the failure's number; the last failure ends
    the run ``failed`` and moves on (design.md, retry policy: a recurring job never dies of one
    failure).

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


#: The result of every attempt that succeeded without output.
_OK = AttemptResult(True)


async def run_attempt(
    handler: Handler,
    ctx: RunContext,
    is_async: bool | None = None,
    executor: concurrent.futures.Executor | None = None,
) -> AttemptResult:
    """Run the handler once and classify how it ended (:func:`~pgpulse.handlers.call_handler`;
    ``is_async`` and ``executor`` as there): its return is success, any exception a failed
    attempt.

    The job's timeout is not enforced here: the attempt's owner cancels the task when it passes
    (:mod:`pgpulse.attempts`, one watchdog per node), as it does on a lost lease or a stop.

    Raises:
        asyncio.CancelledError: the attempt was cancelled.
    """
    try:
        output = await call_handler(handler, ctx, is_async, executor)
    except HandlerFailed as exc:
        return AttemptResult(False, str(exc), truncate_output(exc.output))
    except Exception as exc:  # any handler error is a failed attempt, by design
        return AttemptResult(False, f"{type(exc).__name__}: {exc}")
    return _OK if output is None else AttemptResult(True, None, truncate_output(output))


class Dispatcher:
    """Runs the claimed jobs of one node, one attempt at a time each.

    Args:
        handlers: the node's handlers by name.
        node_id: this node's id (goes into each :class:`RunContext`).
        options: node-level handler options (e.g. ``shell_dry_run``).
        executor: the threads sync handlers run in (``None``: the event loop's default).
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        node_id: str,
        options: Mapping[str, Any],
        executor: concurrent.futures.Executor | None = None,
    ):
        self.handlers = handlers
        self.node_id = node_id
        self.options = options
        self.executor = executor
        self._is_async = {
            name: inspect.iscoroutinefunction(handler) for name, handler in handlers.items()
        }

    async def decide(self, job: ClaimedJob) -> Outcome | None:
        """The outcome of a claim whose handler is not to run, or ``None`` to run it. The
        decision is pure; for an occurrence at least :data:`DECIDE_IN_THREAD_BEHIND` behind it is
        made in a worker thread, off the event loop (its cost is bounded, but not tiny).

        Under overlap ``replace`` or ``allow`` a job row's occurrence that is to run is
        ``forked`` instead: it becomes an extra occurrence and the job row advances (catch-up
        applied). An extra occurrence is decided by :meth:`_decide_occurrence`.

        A claimed occurrence is skipped when it is past its catch-up policy (misfire), ends
        ``fenced`` when earlier attempts were interrupted
        :data:`~pgpulse.planner.MAX_INTERRUPTIONS` times (leases lost with their node, handed
        back at a stop: :func:`fenced_reason`), and fails the job (status ``failed``, cannot be
        scheduled) when this node has no handler of that name — which a node's own claims never
        bring (it claims only the handlers it has, :mod:`pgpulse.routing`): only a claim made
        for it by hand.
        """
        if job.occurrence is not None:
            return self._decide_occurrence(job)
        excluded = self._excluded(job)
        if excluded is not None:
            return excluded
        if job.db_now - job.scheduled_for < DECIDE_IN_THREAD_BEHIND:
            decision = _plan_claim(job)
        else:  # far behind: not on the event loop (see DECIDE_IN_THREAD_BEHIND)
            decision = await asyncio.to_thread(_plan_claim, job)
        if decision.action != "run":
            assert decision.advance is not None
            outcome: RunOutcome = "skipped" if decision.action == "skip" else "fenced"
            reason = _skip_reason(job, decision.advance, job.db_now)
            error = (
                reason  # on the claimed occurrence's own row, the summary of the skipped ones
                if outcome == "skipped"
                else fenced_reason(job)
            )
            return Outcome(
                job,
                outcome,
                advance=decision.advance,
                status=_final_status(job, decision.advance, ran=outcome == "fenced"),
                error=error,
                skip_reason=reason,
            )
        if job.overlap != "forbid":  # the occurrence runs apart from the job row (a fork)
            # the job row has already judged the window, the calendars and the spread
            # instant of this occurrence (above); it advances as a run of its own would
            nxt = next_advance(job, job.db_now)
            why = _skip_reason(job, nxt, job.db_now) if nxt.skipped_count else None
            return Outcome(job, "forked", advance=nxt, skip_reason=why)
        if job.handler in self.handlers:
            return None
        return self._no_handler(job)

    def _decide_occurrence(self, job: ClaimedJob) -> Outcome | None:
        """The claim-time decision of an extra occurrence: never a misfire (it runs however
        late: a backfill runs the past on purpose); ``fenced`` once earlier attempts were
        interrupted :data:`~pgpulse.planner.MAX_INTERRUPTIONS` times (:func:`fenced_reason`);
        ``failed`` (this occurrence only, not the job)
        when this node has no such handler."""
        if job.interruptions >= MAX_INTERRUPTIONS or job.failed_attempts >= job.max_attempts:
            return Outcome(job, "fenced", error=fenced_reason(job))
        if job.handler in self.handlers:
            return None
        failed = self._no_handler(job)
        return failed._replace(status="idle")

    def _no_handler(self, job: ClaimedJob) -> Outcome:
        """The outcome of a claim this node has no handler for: the job fails (status
        ``failed``, cannot be scheduled), naming why."""
        reason = (
            f"shell jobs are not allowed on node {self.node_id} (start it with --allow-shell-jobs)"
            if job.handler == "shell"
            else f"handler {job.handler!r} is not registered on node {self.node_id}"
        )
        log.error(
            "job %s/%s failed: %s",
            job.tenant,
            job.name,
            reason,
            extra={"action": "job_failed", "job": job.name},
        )
        return Outcome(job, "failed", status="failed", error=reason)

    @staticmethod
    def _excluded(job: ClaimedJob) -> Outcome | None:
        """The outcome of a first attempt that does not run because of the job's limits: an
        occurrence after ``not_after`` (the window changed while it was held) or on a date one
        of its calendars excludes (:func:`~pgpulse.limits.calendar_skip`); else ``None``."""
        if job.attempt != 1:
            return None
        if job.not_after is not None and job.scheduled_for > job.not_after:
            at = job.scheduled_for
            reason = "outside the job's window (after not_after)"
            end = Advance(at, 1, at, at, complete=True)
            return Outcome(job, "skipped", advance=end, status="completed", error=reason)
        calendars = job.exclusion_calendars
        if not calendars:
            return None
        found = calendar_skip(
            job.parsed_schedule, calendars, job.scheduled_for, anchor=job.anchor_at
        )
        if found is None:
            return None
        nxt, reason = found
        return Outcome(
            job,
            "skipped",
            advance=nxt,
            status=_final_status(job, nxt, ran=False),
            error=reason,
            skip_reason=reason,
        )

    async def run(self, job: ClaimedJob) -> AttemptResult:
        """Run ``job``'s handler once (after :meth:`decide` said to run it).

        Raises:
            asyncio.CancelledError: the attempt was cancelled.
        """
        handler = self.handlers[job.handler]
        ctx = RunContext(
            job_id=job.id,
            job_name=job.name,
            tenant=job.tenant,
            payload=job.payload,
            scheduled_for=job.scheduled_for,
            attempt=job.attempt,
            run_id=job.run_id,
            fencing_token=job.fencing_token,
            timeout=job.timeout,
            node_id=self.node_id,
            options=self.options,
            kind=job.kind,
        )
        if not tracing.is_enabled():
            return await run_attempt(handler, ctx, self._is_async.get(job.handler), self.executor)
        first = job.attempt == 1
        with tracing.attempt_span(
            job_id=job.id,
            job_name=job.name,
            tenant=job.tenant,
            handler=job.handler,
            scheduled_for=job.scheduled_for,
            attempt=job.attempt,
            run_id=job.run_id,
            fencing_token=job.fencing_token,
            node_id=self.node_id,
            lag=(job.db_now - job.scheduled_for).total_seconds() if first else None,
            claim=tracing.CURRENT_CLAIM.get(),
        ) as span:
            result = await run_attempt(handler, ctx, self._is_async.get(job.handler), self.executor)
            outcome = "succeeded" if result.ok else "failed"
            span.set_outcome(outcome, error=None if result.ok else result.error)
            return result


def report(outcome: Outcome, written: bool) -> None:
    """Count and log an outcome whose write has landed (``written``) or was refused by fencing
    (the lease was lost before it landed: nothing recorded).

    A retry logs its error and the next attempt's instant (INFO, ``run_retrying``); a run that
    fails for good is a WARNING with its error (``run_failed``, ``run_fenced``); the others are
    INFO (a job failed for want of a handler was logged as an ERROR when it was claimed).
    """
    job = outcome.job
    if outcome.outcome == "forked":
        log.debug(
            "%s/%s at %s forked into an extra occurrence (overlap %s)%s",
            job.tenant,
            job.name,
            job.scheduled_for,
            job.overlap,
            "" if written else ": lease lost first, nothing recorded",
            extra={"action": "run_forked", "job": job.name},
        )
        return
    metrics.observe_finish(outcome.outcome, job, written, outcome.advance, outcome.ended_at)
    if not written:
        if replaced_on_loss(job):
            log.info(
                "%s/%s at %s lost its lease before its outcome was written (overlap replace: "
                "usually a newer occurrence replaced it, and its run is recorded as cancelled)",
                job.tenant,
                job.name,
                job.scheduled_for.isoformat(),
                extra={"action": "replaced", "job": job.name},
            )
            return
        log.warning(
            "lease of %s/%s lost before its outcome was written; this node records nothing of "
            "it (the run's end is written by whoever ended the lease)",
            job.tenant,
            job.name,
            extra={"action": "write_fenced", "job": job.name},
        )
        return
    action = f"run_{outcome.outcome}"
    if outcome.outcome == "retrying":
        retry_at = (outcome.ended_at or job.db_now) + timedelta(0, outcome.retry_in or 0.0)
        log.info(
            "retrying %s/%s at %s: attempt %d failed (%s); attempt %d at %s (in %.3gs)",
            job.tenant,
            job.name,
            job.scheduled_for,
            job.attempt,
            outcome.error,
            job.attempt + 1,
            retry_at,
            outcome.retry_in or 0.0,
            extra={
                "action": action,
                "job": job.name,
                "error": outcome.error,
                "retry_at": retry_at.isoformat(),
            },
        )
    elif outcome.outcome in ("failed", "fenced") and outcome.status == "idle":
        log.warning(
            "%s %s/%s at %s (attempt %d): %s",
            outcome.outcome,
            job.tenant,
            job.name,
            job.scheduled_for,
            job.attempt,
            outcome.error,
            extra={"action": action, "job": job.name, "error": outcome.error},
        )
    elif log.isEnabledFor(logging.INFO):
        attempt = f" (attempt {job.attempt})" if outcome.ended_at is not None else ""
        log.info(
            "%s %s/%s at %s%s",
            outcome.outcome,
            job.tenant,
            job.name,
            job.scheduled_for,
            attempt,
            extra={"action": action, "job": job.name},
        )
