"""Dispatch of one claimed job: decide at claim time, run one attempt, write its fenced outcome.

The decisions are pure (:func:`plan_finish` over :mod:`pgpulse.planner`); the only I/O is the
handler call and one fenced outcome, queued on the node's
:class:`~pgpulse.recorder.OutcomeRecorder` (group commit). The attempt ends once its outcome is
queued; :meth:`Dispatcher.settled` counts and logs the write when it has landed. Cancelling the
attempt's task is how the engine stops a run whose lease is lost or whose node shuts down: an
attempt cancelled before its outcome was decided writes nothing (the engine releases shutdown
claims; a lost lease has nothing left to write to).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pgpulse import metrics
from pgpulse.errors import UnknownHandler
from pgpulse.handlers import Handler, HandlerFailed, RunContext, call_handler, truncate_output
from pgpulse.model import ClaimedJob, Outcome, RunOutcome
from pgpulse.planner import advance, plan_claim, retry_delay
from pgpulse.recorder import OutcomeRecorder

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


def plan_finish(
    job: ClaimedJob, result: AttemptResult, now: datetime, rng: random.Random | None = None
) -> Outcome:
    """Decide how an attempt's end is written (pure).

    Success moves the job to its next occurrence computed from ``scheduled_for`` with the
    catch-up policy applied at ``now``. A failure with attempts left retries the same
    occurrence after an exponential backoff with jitter; the last failure ends the run
    ``failed`` and moves on (design.md, retry policy: a recurring job never dies of one failure).

    Args:
        job: the claimed job.
        result: how the attempt ended.
        now: the database's instant estimated at the end of the attempt (claim time plus the
            monotonic time elapsed since).
        rng: random source for the jitter (tests pass a seeded one).
    """
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
        skip_reason=_skip_reason(job) if nxt.skipped else None,
        ended_at=now,
    )


async def run_attempt(
    job: ClaimedJob,
    handler: Handler,
    ctx: RunContext,
    is_async: bool | None = None,
    timed_out: Callable[[ClaimedJob], bool] | None = None,
) -> AttemptResult:
    """Run the handler once under the job's timeout (``job.timeout`` seconds, none if ``None``)
    and classify how it ended (:func:`~pgpulse.handlers.call_handler`; ``is_async`` as there).

    Args:
        job: the claimed job (its ``timeout`` in seconds, or ``None``).
        handler: the job's handler.
        ctx: the attempt's context, passed to the handler.
        is_async: whether ``handler`` is a coroutine function (``None``: look it up).
        timed_out: ``None``: the timeout is an ``asyncio.timeout`` around the handler. Otherwise
            the caller enforces it (a node's one watchdog timer, not a timer per run): it
            cancels the attempt's task, and ``timed_out(job)`` then says True; that cancellation
            (alone: not with a lost lease or a shutdown) is the timeout.

    Raises:
        asyncio.CancelledError: the engine cancelled the attempt (lost lease, shutdown).
    """
    limit: asyncio.Timeout | None = None
    try:
        if job.timeout is None or timed_out is not None:
            output = await call_handler(handler, ctx, is_async)
        else:
            async with asyncio.timeout(job.timeout) as limit:
                output = await call_handler(handler, ctx, is_async)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if timed_out is None or not timed_out(job) or task is None or task.uncancel() > 0:
            raise
        return AttemptResult(False, f"timed out after {job.timeout:g}s")
    except TimeoutError as exc:
        if limit is None or not limit.expired():  # the handler's own TimeoutError, not ours
            return AttemptResult(False, f"{type(exc).__name__}: {exc}")
        return AttemptResult(False, f"timed out after {job.timeout:g}s")
    except HandlerFailed as exc:
        return AttemptResult(False, str(exc), truncate_output(exc.output))
    except Exception as exc:  # any handler error is a failed attempt, by design
        return AttemptResult(False, f"{type(exc).__name__}: {exc}")
    return _OK if output is None else AttemptResult(True, None, truncate_output(output))


#: The result of every attempt that succeeded without output.
_OK = AttemptResult(True)


class Dispatcher:
    """Runs claimed jobs of one node.

    Args:
        recorder: writes outcomes (fenced, group-committed); report each write's result to
            :meth:`settled`.
        handlers: the node's handlers by name.
        node_id: this node's id (goes into each :class:`RunContext`).
        options: node-level handler options (e.g. ``shell_dry_run``).
        clock: returns the database's current instant as the node estimates it.
        on_finishing: called just before an attempt's outcome is queued, so the node never
            cancels an attempt whose fenced write is decided.
        timed_out: whether the caller cancelled this claim of a job for its timeout (see
            :func:`run_attempt`); ``None``: each attempt keeps its own timer.
    """

    def __init__(
        self,
        recorder: OutcomeRecorder,
        handlers: Mapping[str, Handler],
        node_id: str,
        options: Mapping[str, Any],
        clock: Callable[[ClaimedJob], datetime],
        on_finishing: Callable[[ClaimedJob], None] = lambda job: None,
        timed_out: Callable[[ClaimedJob], bool] | None = None,
    ) -> None:
        self.recorder = recorder
        self.handlers = handlers
        self.node_id = node_id
        self.options = options
        self.clock = clock
        self.on_finishing = on_finishing
        self.timed_out = timed_out
        self._is_async = {
            name: inspect.iscoroutinefunction(handler) for name, handler in handlers.items()
        }

    def _record(self, outcome: Outcome) -> Outcome:
        self.on_finishing(outcome.job)
        self.recorder.record(outcome)
        return outcome

    async def dispatch(self, job: ClaimedJob) -> Outcome:
        """Take a claimed job to the end of its attempt: decide, run the handler if the
        occurrence is to run, and queue the fenced outcome (not waiting for its write).

        Returns:
            The outcome queued.

        Raises:
            asyncio.CancelledError: the attempt was cancelled; nothing was queued.
        """
        decision = plan_claim(
            job.parsed_schedule,
            job.policy,
            scheduled_for=job.scheduled_for,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            now=job.db_now,
            anchor=job.anchor_at,
        )
        if decision.action != "run":
            assert decision.advance is not None
            outcome: RunOutcome = "skipped" if decision.action == "skip" else "fenced"
            error = (
                None
                if outcome == "skipped"
                else f"attempts exhausted: {job.max_attempts} leases lost or expired"
            )
            return self._record(
                Outcome(
                    job,
                    outcome,
                    advance=decision.advance,
                    error=error,
                    skip_reason=_skip_reason(job),
                )
            )
        try:
            handler = self.handlers[job.handler]
        except (KeyError, UnknownHandler):
            reason = (
                f"shell jobs are not allowed on node {self.node_id} (start it with "
                "--allow-shell-jobs)"
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
            return self._record(Outcome(job, "failed", status="failed", error=reason))
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
        )
        result = await run_attempt(
            job, handler, ctx, self._is_async.get(job.handler), self.timed_out
        )
        return self._record(plan_finish(job, result, self.clock(job)))

    @staticmethod
    def settled(outcome: Outcome, written: bool, error: psycopg.Error | None = None) -> None:
        """Count and log the end of an outcome's write (the recorder's ``on_settled``):
        ``written`` False means fencing refused it (the lease was lost before it landed), or,
        with ``error``, that the database refused it (the recorder logged why)."""
        if error is not None:
            return
        job = outcome.job
        metrics.observe_finish(outcome.outcome, job, written, outcome.advance, outcome.ended_at)
        if not written:
            log.warning(
                "lease of %s/%s lost before its outcome was written; nothing recorded",
                job.tenant,
                job.name,
                extra={"action": "write_fenced", "job": job.name},
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
                extra={"action": f"run_{outcome.outcome}", "job": job.name},
            )
