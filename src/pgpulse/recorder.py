"""Group commit: the outcomes the attempts decided go out with the node's next claim.

:meth:`Recorder.step` is one step of the claim loop: it takes the outcomes decided so far from
:class:`~pgpulse.attempts.Attempts`, writes them and claims as many due jobs as there are free
slots — one transaction and one round trip
(:meth:`~pgpulse.claims.ClaimStore.finish_and_claim`), so a busy node pays one statement per
batch of runs ended and started, and an idle node writes each outcome at once (a decided outcome
wakes the claim loop; there is no timer). Every element stays
fenced by its own token, so batching changes no guarantee (design.md, invariant 3).

One error policy for every outcome write, while the node runs and while it drains
(:meth:`Recorder.flush`): a write that failed for the connection's sake committed nothing, and
its outcomes are queued again ahead of newer ones (fenced writes are idempotent: if a lost reply
hid a commit, the next write changes nothing); a write the database refused for an outcome's
content is tried again one outcome per statement, so the one it refuses (a bug, a value out of
range) ends only its own attempt, unrecorded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import psycopg

from pgpulse import metrics
from pgpulse.attempts import Attempts
from pgpulse.claims import ClaimStore
from pgpulse.errors import DatabaseUnavailable, describe
from pgpulse.model import Outcome, Step
from pgpulse.routing import Routes

log = logging.getLogger(__name__)


class Recorder:
    """Writes a node's outcomes with its claims.

    Args:
        store: the node's claim session (:data:`~pgpulse.claims.CLAIM_SESSION_SETTINGS`).
        attempts: the node's attempts: where outcomes come from and claimed jobs go.
        node_id: the claiming node.
        lease: seconds of lease each claim grants.
    """

    def __init__(
        self, store: ClaimStore, attempts: Attempts, node_id: str, *, lease: float
    ) -> None:
        self.store = store
        self.attempts = attempts
        self.node_id = node_id
        self.lease = lease

    async def step(self, routes: Routes) -> Step:
        """Write the outcomes decided so far and claim due jobs along ``routes`` (each handler's
        jobs in its shards; none: claim nothing) into the free slots, in one transaction; start
        each claimed job at once.

        The attempts whose outcomes go out in this step end with it, so their slots count as
        free: after the step at most ``slots`` attempts run (invariant 6).

        Raises:
            psycopg.Error, DatabaseUnavailable: the step failed; nothing was claimed, and its
                outcomes are queued again (but for one the database refused, see the module).
        """
        batch = self.attempts.take()
        limit = self.attempts.free(batch) if routes else 0
        if not batch and limit <= 0:
            return Step(set(), [], None, None)
        sent = time.monotonic()
        try:
            step = await self.store.finish_and_claim(
                batch, self.node_id, routes, limit, lease=self.lease
            )
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.attempts.unwritten(batch)
            else:
                await self._write_each(batch)
            raise
        except BaseException:
            self.attempts.unwritten(batch)
            raise
        self.attempts.written(batch, step.written)
        if limit > 0:
            metrics.observe_claim(time.monotonic() - sent, len(step.jobs))
        arrived = time.monotonic()
        for job in step.jobs:
            self.attempts.start(job, sent, arrived)
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
        """Write a batch whose joint write the database refused, one outcome per statement."""
        for i, outcome in enumerate(batch):
            try:
                written = await self.store.finish_runs([outcome])
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
                self.attempts.written([outcome], written)
