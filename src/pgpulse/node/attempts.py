"""The attempts a node runs: one owner for their leases, timeouts and outcomes.

An attempt enters with its claim (:meth:`Attempts.start`) and leaves at one moment: when the
write of its outcome is settled (:meth:`Attempts.written`: it took effect or fencing refused it;
:meth:`Attempts.refused`: the database refused it), or, if it never decided an outcome, when its
task ends (its lease was lost, its node stopped it, or it crashed). Until then it occupies a
worker slot and its lease is renewed by every heartbeat, and:

* its task is one coroutine, :meth:`Attempts._run`, read top to bottom: decide
  (:func:`~pgpulse.node.dispatch.decide`, the one pure claim-time decision) → tell the observer the
  handler starts → run the handler (:meth:`~pgpulse.node.handlers.NodeHandlers.run`) → decide the
  outcome (:func:`~pgpulse.node.dispatch.plan_finish`) → hand it to the recorder → end;
* one watchdog timer per node, armed for the earliest deadline of all, cancels an attempt whose
  lease was not renewed in time — ``lease - safety margin`` after the last renewal that landed
  was *sent*, so before the lease can expire (self-fencing, docs/design.md invariant 3): nothing is
  recorded — and an attempt past its job's timeout, which ends as a failed attempt
  (``timed out after Ns``). A renewal the database refuses (stale token) cancels at once;
* its decided outcome waits for the claim loop, which writes it with its next claim
  (:meth:`Attempts.take`); once an outcome is decided the attempt is never cancelled: the fenced
  write decides whether it counts.

The node's :class:`~pgpulse.node.observer.NodeObserver` is told when a handler starts and when an
outcome's write took effect; it only queues or sets a flag, so it never holds an attempt up.

The claim loop calls :meth:`~Attempts.free`, :meth:`~Attempts.start`, :meth:`~Attempts.take`,
:meth:`~Attempts.written`, :meth:`~Attempts.unwritten` and :meth:`~Attempts.refused`; the
heartbeat :meth:`~Attempts.leases` and :meth:`~Attempts.renewed`; a stopping node
:meth:`~Attempts.stop`. Attempts are keyed by claim, (job id, fencing token), not by job: a node
may hold a stale claim of a job (its handler ignored a cancel; its outcome is on its way, to be
refused) beside a newer claim of the same job, and each keeps its own lease and deadline.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from pgpulse.core.model import AttemptResult, ClaimedJob, ClaimKey, Outcome
from pgpulse.core.wording import seconds_text
from pgpulse.node import metrics
from pgpulse.node.dispatch import (
    DECIDE_IN_THREAD_BEHIND,
    Decision,
    decide,
    plan_finish,
    replaced_on_loss,
)
from pgpulse.node.handlers import NodeHandlers
from pgpulse.node.observer import NodeObserver

log = logging.getLogger(__name__)

#: Most outcomes handed to one write.
MAX_BATCH = 500

#: Why an attempt was cancelled: its job's timeout passed, its lease could not be renewed in
#: time (or was refused), or its node stopped it.
StopReason = Literal["timeout", "lease_lost", "stop"]


@dataclass(slots=True, eq=False)
class Attempt:
    """One claim of a job that this node runs (read its fields; only :class:`Attempts` changes
    them). Instants are monotonic seconds (:func:`time.monotonic`).

    Attributes:
        job: the claimed job.
        claimed_mono: when the claim was sent (the lease counts from there).
        deadline: it is cancelled unless its lease is renewed before (self-fencing).
        timeout_at: it is cancelled as timed out then (``inf``: no timeout).
        task: the task running it.
        began: its task took its first step (a task cancelled before that would never run its
            coroutine: :meth:`Attempts._cancel` leaves it to see :attr:`stop_reason` instead).
        stop_reason: why it was cancelled, if it was.
        started: its handler was called (a stop then hands the claim back counted).
        outcome: its outcome, once decided.
    """

    job: ClaimedJob
    claimed_mono: float
    deadline: float
    timeout_at: float
    task: asyncio.Task[None] = field(init=False)
    began: bool = False
    stop_reason: StopReason | None = None
    started: bool = False
    outcome: Outcome | None = None

    @property
    def key(self) -> ClaimKey:
        """The claim's (job id, fencing token)."""
        return self.job.key

    def db_now(self) -> datetime:
        """The database's instant now, as estimated from the claim: its instant plus the
        monotonic time elapsed since it was sent."""
        return self.job.db_now + timedelta(0, time.monotonic() - self.claimed_mono)


class Attempts:
    """The table of one node's attempts in flight, their watchdog and their outcomes.

    Args:
        handlers: the node's handlers (what :func:`~pgpulse.node.dispatch.decide` may run, and how).
        slots: worker slots: the most attempts in flight (docs/design.md, invariant 6).
        lease: seconds of lease a claim or a renewal grants.
        margin: seconds before the lease ends at which an unrenewed attempt is cancelled.
        wake: set when an attempt decided its outcome or ended without one: the claim loop has
            something to write, or a free slot.
        observer: told of each handler's start and each committed outcome, or ``None``.
    """

    def __init__(
        self,
        handlers: NodeHandlers,
        *,
        slots: int,
        lease: float,
        margin: float,
        wake: asyncio.Event,
        observer: NodeObserver | None = None,
    ) -> None:
        self.handlers = handlers
        self.observer = observer
        self.slots = slots
        self._renew_within = lease - margin
        self._wake = wake
        self._table: dict[ClaimKey, Attempt] = {}
        self._decided: list[Outcome] = []  # not yet taken, oldest first
        self._watchdog: asyncio.Handle | None = None
        # The armed instant is kept beside the handle: a loop may return a plain Handle, with
        # no when(), for an instant already past (uvloop does; a paused node meets that).
        self._watchdog_at = math.inf

    def __len__(self) -> int:
        return len(self._table)

    def __iter__(self) -> Iterator[Attempt]:
        return iter(list(self._table.values()))

    def get(self, key: ClaimKey) -> Attempt | None:
        """The attempt of claim ``key`` (job id, fencing token), if it is in flight."""
        return self._table.get(key)

    @property
    def watchdog_at(self) -> float | None:
        """The monotonic instant the watchdog fires at, or ``None`` when it is not armed."""
        return None if self._watchdog is None else self._watchdog_at

    # -- the claim loop ------------------------------------------------------------------------

    def free(self, batch: Sequence[Outcome] = ()) -> int:
        """Free worker slots once the outcomes of ``batch`` (taken with :meth:`take`) are
        written: their attempts end with that write, so after it at most ``slots`` run."""
        return self.slots - len(self._table) + len(batch)

    def start(self, job: ClaimedJob, claimed_mono: float, started_mono: float) -> Attempt:
        """Start an attempt of ``job`` at once (docs/design.md, invariant 6).

        Args:
            job: the claimed job.
            claimed_mono: when the claim was sent (monotonic): its lease counts from there.
            started_mono: when the claim's reply arrived (monotonic): its timeout counts from
                there.
        """
        timeout_at = math.inf if job.timeout is None else started_mono + job.timeout
        attempt = Attempt(job, claimed_mono, claimed_mono + self._renew_within, timeout_at)
        attempt.task = asyncio.create_task(self._run(attempt), name=f"run:{job.name}")
        self._table[attempt.key] = attempt
        self._arm(min(attempt.deadline, timeout_at))
        metrics.set_running(len(self._table))
        if log.isEnabledFor(logging.DEBUG):  # not even the log record's extras otherwise
            log.debug(
                "claimed %s/%s for %s",
                job.tenant,
                job.name,
                job.scheduled_for,
                extra={"action": "run_claimed", "job": job.name},
            )
        return attempt

    @property
    def waiting(self) -> int:
        """How many decided outcomes wait to be taken."""
        return len(self._decided)

    def take(self, limit: int = MAX_BATCH) -> list[Outcome]:
        """Remove and return the oldest decided outcomes (at most ``limit``) to be written."""
        batch, self._decided = self._decided[:limit], self._decided[limit:]
        return batch

    def unwritten(self, batch: Sequence[Outcome]) -> None:
        """The write of ``batch`` failed and committed nothing: queue its outcomes again, ahead
        of newer ones (the write is idempotent under fencing: if a lost reply hid a commit, the
        next write changes nothing)."""
        self._decided[:0] = batch

    def written(self, batch: Sequence[Outcome], written: Collection[ClaimKey]) -> None:
        """The write of ``batch`` committed: each outcome took effect (its claim is in
        ``written``) or was refused by fencing (its lease was lost): the observer is told of
        each that took effect; its attempt ends."""
        for outcome in batch:
            took = outcome.job.key in written
            if took and self.observer is not None:
                self.observer.attempt_ended(outcome)
            self._end(outcome.job.key)

    def refused(self, outcome: Outcome) -> None:
        """The database refused ``outcome`` itself (a bug, a value out of range): its attempt
        ends unrecorded, and its lease expires (the sweeper then returns the job)."""
        self._end(outcome.job.key)

    # -- the heartbeat ---------------------------------------------------------------------

    def leases(self) -> list[ClaimKey]:
        """The claims whose leases the next heartbeat renews: every attempt in flight (one
        whose outcome is on its way too, until its write lands)."""
        return list(self._table)

    def renewed(
        self, held: Sequence[ClaimKey], renewed: Collection[ClaimKey], sent_mono: float
    ) -> None:
        """Take in a renewal of the leases ``held``, sent at ``sent_mono`` (monotonic): each
        renewed claim may run until ``lease - margin`` after that; an attempt whose renewal was
        refused is cancelled at once, unless its outcome is decided (then its fenced write
        settles it)."""
        deadline = sent_mono + self._renew_within
        for key in held:
            attempt = self._table.get(key)
            if attempt is None:
                continue  # it ended during the renewal
            if key in renewed:
                attempt.deadline = deadline  # the watchdog finds it when it fires
            elif attempt.outcome is None:
                self._lose(attempt, "the database refused the renewal")

    # -- stopping --------------------------------------------------------------------------

    def unfinished(self) -> list[Attempt]:
        """The attempts in flight whose outcome is not decided."""
        return [attempt for attempt in self._table.values() if attempt.outcome is None]

    async def wait_unfinished(self, within: float) -> None:
        """Wait until an attempt without an outcome decides one or ends, or ``within`` seconds
        pass."""
        tasks = {attempt.task for attempt in self.unfinished()}
        if tasks and within > 0:
            await asyncio.wait(tasks, timeout=within, return_when=asyncio.FIRST_COMPLETED)

    def stop(self) -> list[Attempt]:
        """Cancel every attempt whose outcome is not decided (the node stops) and return them.
        Those that still have no outcome when their tasks end are the node's to hand back
        (:attr:`Attempt.started` says whether the attempt counts)."""
        stopped = self.unfinished()
        for attempt in stopped:
            self._cancel(attempt, "stop")
        return stopped

    # -- one attempt -----------------------------------------------------------------------

    async def _run(self, attempt: Attempt) -> None:
        """The attempt, top to bottom: decide, run the handler, decide the outcome, hand it to
        the recorder (:meth:`take`; the wake-up). Without an outcome (a lost lease, a stop, a
        crash) the attempt ends with its task. Cancellations land in the awaits here."""
        attempt.began = True  # before the first await: from here a cancel reaches this task
        job = attempt.job
        try:
            if attempt.stop_reason is not None:  # stopped before its first step: never ran
                return
            decision = await decide_claim(job, self.handlers)
            outcome = decision.outcome
            if outcome is None:
                attempt.started = True
                if self.observer is not None:
                    self.observer.attempt_started(job)
                result = await self._perform(attempt)
                outcome = plan_finish(job, result, attempt.db_now())
            attempt.outcome = outcome  # from here on no cancel: the fenced write settles it
            self._decided.append(outcome)
        except Exception as exc:  # a bug on the attempt's path: logged; its lease expires
            log.error(
                "attempt of %s/%s crashed: %r",
                job.tenant,
                job.name,
                exc,
                extra={"action": "attempt_crashed", "job": job.name},
            )
        finally:
            if attempt.outcome is None:  # ends with its task: nothing to write
                self._end(attempt.key)
            self._wake.set()  # an outcome to write, or a free slot

    async def _perform(self, attempt: Attempt) -> AttemptResult:
        """Run the attempt's handler once. A cancellation that is its timeout's alone is a
        failed attempt (``timed out after Ns``); any other (a lost lease or a stop, on top of a
        timeout or not) propagates, and nothing is recorded."""
        try:
            return await self.handlers.run(attempt.job)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if attempt.stop_reason != "timeout" or task is None or task.uncancel() != 0:
                raise
            timeout = attempt.job.timeout or 0.0  # stop_reason "timeout": the job has one
            return AttemptResult(False, f"timed out after {seconds_text(timeout)}")

    @staticmethod
    def _cancel(attempt: Attempt, reason: StopReason) -> None:
        """Stop ``attempt`` for ``reason``: cancel its task, or, before its first step, leave
        it to see the reason (a task cancelled then never runs the ``finally`` of :meth:`_run`)."""
        attempt.stop_reason = reason
        if attempt.began:
            attempt.task.cancel()

    def _end(self, key: ClaimKey) -> None:
        """The one place an attempt leaves the table (its slot and its lease are done with)."""
        if self._table.pop(key, None) is not None:
            metrics.set_running(len(self._table))

    # -- the watchdog ----------------------------------------------------------------------

    def _arm(self, deadline: float) -> None:
        """Make the watchdog fire no later than ``deadline`` (monotonic)."""
        timer = self._watchdog
        if timer is None or timer.cancelled() or self._watchdog_at > deadline:
            if timer is not None:
                timer.cancel()
            loop = asyncio.get_running_loop()
            self._watchdog_at = deadline
            self._watchdog = loop.call_at(loop.time() + (deadline - time.monotonic()), self._watch)

    def _watch(self) -> None:
        """Cancel every attempt past its lease deadline or its timeout; re-arm for the next."""
        self._watchdog, self._watchdog_at = None, math.inf
        now = time.monotonic()
        later = []
        for attempt in list(self._table.values()):
            if attempt.outcome is not None:
                continue  # its write settles it
            if attempt.deadline <= now:
                # say by how much: the last renewal that landed was sent this long ago
                silent = now - attempt.deadline + self._renew_within
                self._lose(
                    attempt,
                    f"lease not renewed in time: no renewal landed for {silent:.1f} s, and the "
                    f"node gives up {self._renew_within:.1f} s after one (--lease less the "
                    "safety margin); a slow database or a stalled heartbeat delays renewals",
                )
            elif attempt.timeout_at <= now:
                self._time_out(attempt)
            else:
                later.append(min(attempt.deadline, attempt.timeout_at))
        if later:
            self._arm(min(later))

    def _time_out(self, attempt: Attempt) -> None:
        """Cancel an attempt past its job's timeout: it ends as a failed attempt."""
        if attempt.task.done() or attempt.stop_reason is not None:
            return
        attempt.timeout_at = math.inf
        self._cancel(attempt, "timeout")

    def _lose(self, attempt: Attempt, why: str) -> None:
        """Cancel an attempt whose lease is lost (or about to be): nothing is recorded."""
        if attempt.task.done() or attempt.outcome is not None:
            return
        metrics.lease_renewal_failed()
        self._cancel(attempt, "lease_lost")
        if replaced_on_loss(attempt.job):
            log.info(
                "attempt of %s/%s at %s cancelled: the database ended its lease (overlap "
                "replace: usually a newer occurrence replaced it, and its run is recorded as "
                "cancelled)",
                attempt.job.tenant,
                attempt.job.name,
                attempt.job.scheduled_for.isoformat(),
                extra={"action": "replaced", "job": attempt.job.name},
            )
            return
        log.warning(
            "lease of %s/%s lost (%s); attempt cancelled, this node records nothing of it (the "
            "run's end is written by whoever ended the lease: a take-over, a replace, a delete, "
            "a pause that cancelled it)",
            attempt.job.tenant,
            attempt.job.name,
            why,
            extra={"action": "lease_lost", "job": attempt.job.name},
        )


async def decide_claim(job: ClaimedJob, handlers: NodeHandlers) -> Decision:
    """:func:`~pgpulse.node.dispatch.decide` for ``job`` at its claim's instant (``job.db_now``) on
    the node of ``handlers``: in a worker thread when a job row's occurrence is at least
    :data:`~pgpulse.node.dispatch.DECIDE_IN_THREAD_BEHIND` behind the claim (the first decision for
    a schedule and zone far back makes their tables of offset changes: not on the event loop),
    else inline. A missing handler is logged (an ERROR: the job fails)."""
    node = handlers.node_id
    if job.occurrence is not None or job.db_now - job.scheduled_for < DECIDE_IN_THREAD_BEHIND:
        decision = decide(job, job.db_now, node=node, handlers=handlers)
    else:
        decision = await asyncio.to_thread(decide, job, job.db_now, node=node, handlers=handlers)
    if decision.verdict == "no_handler" and decision.outcome is not None:
        log.error(
            "job %s/%s failed: %s",
            job.tenant,
            job.name,
            decision.outcome.error,
            extra={"action": "job_failed", "job": job.name},
        )
    return decision
