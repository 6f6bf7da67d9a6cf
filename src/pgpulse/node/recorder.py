"""The claim loop, with group commit: the outcomes the attempts decided go out with the node's
next claim.

:meth:`Recorder.run` is the claim loop (one of a node's named tasks); :meth:`Recorder.step` is
one step of it: it takes the outcomes decided so far from
:class:`~pgpulse.node.attempts.Attempts`, writes them and claims as many due jobs as there are free
slots — one transaction and one round trip
(:meth:`~pgpulse.db.claims.ClaimStore.finish_and_claim`), so a busy node pays one round trip per
batch of runs ended and started, and an idle node writes each outcome at once (a decided outcome
wakes the claim loop; there is no timer). Every element stays
fenced by its own token, so batching changes no guarantee (docs/design.md, invariant 3).

One error policy for every outcome write, while the node runs and while it drains
(:meth:`Recorder.flush`): a write that failed for the connection's sake committed nothing, and
its outcomes are queued again ahead of newer ones (fenced writes are idempotent: if a lost reply
hid a commit, the next write changes nothing); a write the database refused for an outcome's
content is tried again one outcome per statement, so the one it refuses (a bug, a value out of
range) ends only its own attempt, unrecorded. Each settled outcome is counted and logged
(:func:`report`) and its attempt ends (:meth:`~pgpulse.node.attempts.Attempts.written`).

Extra occurrences (docs/states.md, "Extra occurrences") go the same way through their own
statements, in the same step: first the forks of job rows under overlap ``replace``/``allow``
(one statement each), then the job rows' step, then the occurrences' step
(:meth:`~pgpulse.db.claims.ClaimStore.finish_and_claim_occurrences`) into the slots the job rows
left free. The occurrences' step goes out when it has outcomes to write, or when the job
rows' step says a pending occurrence is due (``Step.occurrences_due``: one probe of an index in
the same statement, so a node with no extra occurrences sends nothing more), or after a hint
(:meth:`Recorder.hint_occurrences`: a notification for the node's shards, a fork). When the
occurrences' step finds nothing it can claim although one is due (its job paused, its batch
full), the probe alone does not send it again for ``poll`` seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime

import psycopg

from pgpulse.core.errors import DatabaseUnavailable, describe
from pgpulse.core.model import (
    ClaimKey,
    Outcome,
    Step,
    merge_steps,
    pause_after,
    quiet_for,
    with_occurrences,
)
from pgpulse.core.routing import Routes
from pgpulse.db.claims import ClaimStore
from pgpulse.node import metrics, tracing
from pgpulse.node.attempts import Attempts
from pgpulse.node.outcomes import report
from pgpulse.node.services import wait

log = logging.getLogger(__name__)


class Recorder:
    """Writes a node's outcomes with its claims.

    Args:
        store: the node's claim session (:data:`~pgpulse.db.claims.CLAIM_SESSION_SETTINGS`).
        attempts: the node's attempts: where outcomes come from and claimed jobs go.
        node_id: the claiming node.
        lease: seconds of lease each claim grants (a claim step may take half of it).
        poll: longest time, seconds, between two claims (of job rows when nothing is known to
            be due, and of extra occurrences).
        retry_cap: longest wait, seconds, before a failed claim step is tried again.
        wake: set to wake the claim loop: an attempt decided its outcome or ended, a
            notification, a shard change, a stop.
        stopping: set when the node stops: the loop ends (the drain writes the rest, :meth:`flush`).
    """

    def __init__(
        self,
        store: ClaimStore,
        attempts: Attempts,
        node_id: str,
        *,
        lease: float,
        poll: float = 5.0,
        retry_cap: float = 2.0,
        wake: asyncio.Event | None = None,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.store = store
        self.attempts = attempts
        self.node_id = node_id
        self.lease = lease
        self.poll = poll
        self.retry_cap = retry_cap
        self.wake = wake or asyncio.Event()
        self.stopping = stopping or asyncio.Event()
        #: What the loop claims: for each handler the node has, its shards among the nodes that
        #: have it (the heartbeat sets it; none: claim nothing).
        self.routes: Routes = {}
        #: The claims' health the heartbeat records: the database instant of the last claim
        #: step that succeeded, and the error of the last one if it failed.
        self.claimed_at: datetime | None = None
        self.claim_error: str | None = None
        self._hinted = True  # claim occurrences at the next step, whatever the probe says
        self._quiet_until = 0.0  # monotonic: until then the probe alone sends no claim

    def hint_occurrences(self) -> None:
        """An extra occurrence may be due now (a notification for this node's shards, a fork):
        the next step claims occurrences too."""
        self._hinted = True

    async def run(self) -> None:
        """The claim loop: a step (:meth:`run_once`) at a time until the node stops, each bounded
        by half a lease; between steps, sleep for as long as :func:`pause_after` says. A failed
        step is logged (``claim_failed``) and tried again after a backoff; its outcomes are
        queued again and go out with the retry."""
        retry_in = 0.1
        while not self.stopping.is_set():
            self.wake.clear()
            try:
                # A claim whose reply is lost is not lost work: its leases expire and are reaped.
                async with asyncio.timeout(self.lease / 2):
                    step = await self.run_once()
            except (psycopg.Error, OSError, TimeoutError, DatabaseUnavailable) as exc:
                log.warning("claim failed: %s", describe(exc), extra={"action": "claim_failed"})
                self.claim_error = describe(exc)[:1000]
                await wait(self.stopping, retry_in)
                retry_in = min(retry_in * 2, self.retry_cap)
                continue
            retry_in = 0.1
            self.claim_error = None
            self.claimed_at = step.db_now or self.claimed_at
            pause = pause_after(
                step, waiting=self.attempts.waiting, free=self.attempts.free(), poll=self.poll
            )
            if pause is None:
                await self.wake.wait()
            elif pause > 0:
                await wait(self.wake, pause)

    async def run_once(self) -> Step:
        """One step of the claim loop: :meth:`step` along :attr:`routes`, or along none once the
        node stops (a stopping node only writes)."""
        return await self.step({} if self.stopping.is_set() else self.routes)

    async def step(self, routes: Routes) -> Step:
        """Write the outcomes decided so far and claim due jobs along ``routes`` (each handler's
        jobs in its shards; none: claim nothing) into the free slots, then the same for extra
        occurrences (along the same routes: a node never claims an occurrence whose handler it
        lacks); start each claimed job at once.

        The attempts whose outcomes go out in this step end with it, so their slots count as
        free: after the step at most ``slots`` attempts run (invariant 6).

        Raises:
            psycopg.Error, DatabaseUnavailable: a statement failed; what it would have claimed
                was not, and the outcomes not written are queued again (but for one the
                database refused, see the module).
        """
        batch = self.attempts.take()
        limit = self.attempts.free(batch) if routes else 0
        if not batch and limit <= 0:
            return Step(set(), [], None, None)
        sent = time.monotonic()
        if limit > 0 and tracing.is_enabled():
            return await self._traced_step(batch, routes, limit, sent)
        return await self._write_and_claim(batch, routes, limit, sent)

    async def _traced_step(
        self, batch: list[Outcome], routes: Routes, limit: int, sent: float
    ) -> Step:
        """:meth:`step` inside a ``pgpulse.claim`` span (tracing on), its attempts linked to it."""
        with tracing.claim_span(node_id=self.node_id, limit=limit) as claim:
            token = tracing.CURRENT_CLAIM.set(claim)
            try:
                step = await self._write_and_claim(batch, routes, limit, sent)
                claim.set_claimed(len(step.jobs))
                return step
            finally:
                tracing.CURRENT_CLAIM.reset(token)

    async def _write_and_claim(
        self, batch: list[Outcome], routes: Routes, limit: int, sent: float
    ) -> Step:
        """The forks, the job-row step and the claim of extra occurrences (:meth:`step`)."""
        forks = [o for o in batch if o.outcome == "forked"]
        extra = [o for o in batch if o.job.occurrence is not None]
        rows = [o for o in batch if o.outcome != "forked" and o.job.occurrence is None]
        await self._fork(forks, rows + extra)

        async def claim_rows(outcomes: Sequence[Outcome]) -> Step:
            return await self.store.finish_and_claim(
                outcomes, self.node_id, routes, limit, lease=self.lease
            )

        if rows or limit > 0:
            step = await self._write(rows, claim_rows, requeue=extra)
        else:
            step = Step(set(), [], None, None)
        if limit > 0:
            metrics.observe_claim(time.monotonic() - sent, len(step.jobs))
        arrived = time.monotonic()
        for job in step.jobs:
            self.attempts.start(job, sent, arrived)
        free = limit - len(step.jobs)
        due = False
        if step.occurrences_due is not None and step.db_now is not None:
            due = step.occurrences_due <= step.db_now and arrived >= self._quiet_until
        if not extra and not (free > 0 and (self._hinted or due)):
            return with_occurrences(step, self._quiet_until - arrived)
        if free > 0:
            self._hinted = False

        async def claim_extra(outcomes: Sequence[Outcome]) -> Step:
            return await self.store.finish_and_claim_occurrences(
                outcomes, self.node_id, routes if free > 0 else {}, free, lease=self.lease
            )

        sent = time.monotonic()
        other = await self._write(extra, claim_extra)
        arrived = time.monotonic()
        for job in other.jobs:
            self.attempts.start(job, sent, arrived)
        if free > 0 and len(other.jobs) < free:  # nothing more is claimable now
            self._quiet_until = arrived + quiet_for(other, self.poll)
        merged = merge_steps(step, other)
        if free > len(other.jobs) and merged.db_now is not None and any(map(_frees, extra)):
            # A forked occurrence ended: its job row, due but held at max_concurrency, may be
            # claimable now, which this step's claim (before the write) could not see.
            merged = dataclasses.replace(merged, next_due=merged.db_now)
        return merged

    async def _fork(self, forks: Sequence[Outcome], later: Sequence[Outcome]) -> None:
        """Write each fork (one statement each); on a failed connection queue the forks not yet
        written and ``later`` again, and raise."""
        for i, outcome in enumerate(forks):
            try:
                written = await self.store.fork(outcome)
            except psycopg.Error as exc:
                if isinstance(exc, psycopg.OperationalError):
                    self.attempts.unwritten([*forks[i:], *later])
                    raise
                log.error(
                    "fork of %s refused by the database: %s",
                    outcome.job.name,
                    exc,
                    extra={"action": "record_refused", "job": outcome.job.name},
                )
                self.attempts.refused(outcome)
                continue
            except BaseException:
                self.attempts.unwritten([*forks[i:], *later])
                raise
            self._settled([outcome], {outcome.job.key} if written else ())
        if forks:
            self.hint_occurrences()  # the forked occurrences are due now

    async def _write(
        self,
        batch: Sequence[Outcome],
        write: Callable[[Sequence[Outcome]], Awaitable[Step]],
        *,
        requeue: Sequence[Outcome] = (),
    ) -> Step:
        """Write ``batch`` (and claim) with ``write``, under the module's error policy; on a
        failure, ``requeue`` (not sent yet) is queued again too."""
        try:
            step = await write(batch)
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.attempts.unwritten([*batch, *requeue])
            else:
                self.attempts.unwritten(requeue)
                await self._write_each(batch)
            raise
        except BaseException:
            self.attempts.unwritten([*batch, *requeue])
            raise
        self._settled(batch, step.written)
        return step

    async def flush(self, within: float) -> None:
        """Write the outcomes decided so far, claiming nothing (a stopping node), retrying a
        failed write for at most ``within`` seconds (then they are left: their leases expire
        and the sweeper returns their jobs)."""
        until = time.monotonic() + within
        retry_in = 0.1
        while self.attempts.waiting and (left := until - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(left):
                    await self.step({})
            except (psycopg.Error, OSError, TimeoutError, DatabaseUnavailable) as exc:
                log.warning(
                    "recording %d outcomes failed (%s); retrying in %.1fs",
                    self.attempts.waiting,
                    describe(exc),
                    retry_in,
                    extra={"action": "record_retry", "count": self.attempts.waiting},
                )
                await asyncio.sleep(min(retry_in, max(until - time.monotonic(), 0.0)))
                retry_in = min(retry_in * 2, 2.0)

    async def _write_each(self, batch: Sequence[Outcome]) -> None:
        """Write a batch whose joint write the database refused, one outcome per statement
        (claiming nothing)."""
        for i, outcome in enumerate(batch):
            try:
                written = await self._write_one(outcome)
            except psycopg.Error as exc:
                if isinstance(exc, psycopg.OperationalError):
                    self.attempts.unwritten(batch[i:])
                    return
                log.error(
                    "outcome of %s refused by the database: %s",
                    outcome.job.name,
                    exc,
                    extra={"action": "record_refused", "job": outcome.job.name},
                )
                self.attempts.refused(outcome)
            except BaseException:
                self.attempts.unwritten(batch[i:])
                raise
            else:
                self._settled([outcome], written)

    def _settled(self, batch: Sequence[Outcome], written: Collection[ClaimKey]) -> None:
        """The write of ``batch`` committed: count and log each outcome as it took effect (its
        claim is in ``written``) or was refused by fencing (:func:`report`); their attempts
        end."""
        for outcome in batch:
            report(outcome, outcome.job.key in written)
        self.attempts.written(batch, written)

    async def _write_one(self, outcome: Outcome) -> set[ClaimKey]:
        """Write one outcome, claiming nothing."""
        return await self.store.finish_runs([outcome], node=self.node_id)


def _frees(outcome: Outcome) -> bool:
    """Whether writing ``outcome`` ends an occurrence forked by overlap ``allow`` (its job row
    counts it against max_concurrency until then); a retry keeps it."""
    return (
        outcome.job.overlap == "allow"
        and outcome.job.kind == "scheduled"
        and outcome.outcome != "retrying"
    )
