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
import inspect
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pgpulse import metrics
from pgpulse.handlers import Handler, HandlerFailed, RunContext, call_handler, truncate_output
from pgpulse.model import ClaimedJob, Outcome, RunOutcome
from pgpulse.planner import ClaimDecision, advance, plan_claim, retry_delay

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """How one attempt ended: ``ok``, or the error text; plus captured output (truncated)."""

    ok: bool
    error: str | None = None
    output: str | None = None


def _skip_reason(job: ClaimedJob) -> str:
    if job.catch_up == "skip":
        return f"missed: later than misfire_grace ({job.misfire_grace:g}s)"
    if job.catch_up == "coalesce":
        return "coalesced into a later occurrence"
    return f"missed: beyond backfill_limit ({job.backfill_limit})"


#: A claimed occurrence at least this far behind the claim is decided in a worker thread: the
#: decision costs some microseconds per offset change of the job's zone in between (about two
#: a year; design.md, invariant 8), which a node's event loop must not spend inline.
DECIDE_IN_THREAD_BEHIND = timedelta(days=30)


def _plan_claim(job: ClaimedJob) -> ClaimDecision:
    """:func:`~pgpulse.planner.plan_claim` for ``job`` at its claim instant."""
    return plan_claim(
        job.parsed_schedule,
        job.policy,
        scheduled_for=job.scheduled_for,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        now=job.db_now,
        anchor=job.anchor_at,
    )


def plan_finish(
    job: ClaimedJob, result: AttemptResult, now: datetime, rng: random.Random | None = None
) -> Outcome:
    """Decide how an attempt's end is written (pure).

    Success moves the job to its next occurrence computed from ``scheduled_for`` with the
    catch-up policy applied at ``now`` (an extra occurrence, ``job.occurrence``, has none: its
    final outcome ends it; docs/states.md, "Extra occurrences"). A failure with attempts left
    retries the same occurrence after an exponential backoff with jitter; the last failure ends
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
        if not result.ok and job.attempt < job.max_attempts:
            delay = retry_delay(job.attempt, job.retry_backoff, rng)
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
    if not result.ok and job.attempt < job.max_attempts:
        return Outcome(
            job,
            "retrying",
            retry_in=retry_delay(job.attempt, job.retry_backoff, rng),
            error=result.error,
            output=result.output,
            ended_at=now,
        )
    nxt = advance(
        job.parsed_schedule, job.policy, after=job.scheduled_for, now=now, anchor=job.anchor_at
    )
    return Outcome(
        job,
        "succeeded" if result.ok else "failed",
        advance=nxt,
        error=result.error,
        output=result.output,
        skip_reason=_skip_reason(job) if nxt.skipped_count else None,
        ended_at=now,
    )


#: The result of every attempt that succeeded without output.
_OK = AttemptResult(True)


async def run_attempt(
    handler: Handler, ctx: RunContext, is_async: bool | None = None
) -> AttemptResult:
    """Run the handler once and classify how it ended (:func:`~pgpulse.handlers.call_handler`;
    ``is_async`` as there): its return is success, any exception a failed attempt.

    The job's timeout is not enforced here: the attempt's owner cancels the task when it passes
    (:mod:`pgpulse.attempts`, one watchdog per node), as it does on a lost lease or a stop.

    Raises:
        asyncio.CancelledError: the attempt was cancelled.
    """
    try:
        output = await call_handler(handler, ctx, is_async)
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
    """

    def __init__(self, handlers: Mapping[str, Handler], node_id: str, options: Mapping[str, Any]):
        self.handlers = handlers
        self.node_id = node_id
        self.options = options
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
        ``fenced`` when earlier attempts used up ``max_attempts`` without an outcome (leases lost
        or expired, handed back at a stop), and fails the job (status ``failed``, cannot be
        scheduled) when this node has no handler of that name — which a node's own claims never
        bring (it claims only the handlers it has, :mod:`pgpulse.routing`): only a claim made
        for it by hand.
        """
        if job.occurrence is not None:
            return self._decide_occurrence(job)
        if job.db_now - job.scheduled_for < DECIDE_IN_THREAD_BEHIND:
            decision = _plan_claim(job)
        else:  # far behind: not on the event loop (see DECIDE_IN_THREAD_BEHIND)
            decision = await asyncio.to_thread(_plan_claim, job)
        if decision.action != "run":
            assert decision.advance is not None
            outcome: RunOutcome = "skipped" if decision.action == "skip" else "fenced"
            error = (
                None
                if outcome == "skipped"
                else f"attempts exhausted: {job.max_attempts} attempts ended without an outcome "
                "(lease lost or expired, or handed back at a stop)"
            )
            return Outcome(
                job, outcome, advance=decision.advance, error=error, skip_reason=_skip_reason(job)
            )
        if job.overlap != "forbid":  # the occurrence runs apart from the job row (a fork)
            nxt = advance(
                job.parsed_schedule,
                job.policy,
                after=job.scheduled_for,
                now=job.db_now,
                anchor=job.anchor_at,
            )
            reason = _skip_reason(job) if nxt.skipped_count else None
            return Outcome(job, "forked", advance=nxt, skip_reason=reason)
        if job.handler in self.handlers:
            return None
        return self._no_handler(job)

    def _decide_occurrence(self, job: ClaimedJob) -> Outcome | None:
        """The claim-time decision of an extra occurrence: never a misfire (it runs however
        late: a backfill runs the past on purpose); ``fenced`` once earlier attempts used up
        ``max_attempts`` without an outcome; ``failed`` (this occurrence only, not the job)
        when this node has no such handler."""
        if job.attempt > job.max_attempts:
            return Outcome(
                job,
                "fenced",
                error=f"attempts exhausted: {job.max_attempts} attempts ended without an outcome",
            )
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
        return await run_attempt(handler, ctx, self._is_async.get(job.handler))


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
        log.warning(
            "lease of %s/%s lost before its outcome was written; nothing recorded",
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
