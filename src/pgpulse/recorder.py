"""Group commit of attempt outcomes: many fenced ``finish_runs`` elements per statement.

Outcomes queue here until a writer takes them as one batch. On a running node the writer is the
claim loop (:meth:`OutcomeRecorder.attach`): each of its steps writes the queued outcomes and
claims the next jobs in one transaction and one round trip, so a busy node pays one statement
per batch of runs ended and started, and an idle node writes each outcome at once (recording
wakes the loop; there is no timer). Detached (tests, a node draining) the recorder writes with
its own task. Every element stays fenced by its own token, so batching changes no guarantee
(design.md, invariant 3).

Nobody waits for a write: an attempt ends when its outcome is queued, and the recorder reports
each write's result to its ``on_settled`` callback (the node frees the attempt's slot and lease
there; metrics and the run's log line come from there too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg

from pgpulse.model import Outcome
from pgpulse.store import Store

log = logging.getLogger(__name__)

#: Seconds one batch write may take before it is abandoned and retried.
WRITE_TIMEOUT = 5.0
#: Most outcomes written by one statement.
MAX_BATCH = 500

#: Outcomes taken for one write.
Batch = list[Outcome]

#: Told how each queued outcome's write ended: ``(outcome, written, error)``; ``written`` is
#: ``False`` when fencing refused it (the lease was lost) or, with ``error`` set, when the
#: database refused the element itself.
Settled = Callable[[Outcome, bool, "psycopg.Error | None"], None]


def _ignore(outcome: Outcome, written: bool, error: psycopg.Error | None) -> None:
    return None


class OutcomeRecorder:
    """Queues the outcomes of one node and hands them to a writer in batches.

    Args:
        store: the store the recorder's own writer writes through (when detached).
        on_settled: called once per outcome when its write ended (see :data:`Settled`).
    """

    def __init__(self, store: Store, on_settled: Settled = _ignore) -> None:
        self.store = store
        self.on_settled = on_settled
        self._pending: Batch = []
        self._writer: asyncio.Task[None] | None = None
        self._host: asyncio.Event | None = None

    @property
    def pending(self) -> int:
        """How many outcomes wait for a writer."""
        return len(self._pending)

    def attach(self, wake: asyncio.Event) -> None:
        """Make the caller (the node's claim loop) the writer: from now on :meth:`record` only
        queues the outcome and sets ``wake``; the caller writes with :meth:`take` and
        :meth:`settle` (or :meth:`put_back` after a failed write)."""
        self._host = wake

    def detach(self) -> None:
        """Write with the recorder's own task again, starting with anything queued (a node
        that stops claiming detaches first, so its last outcomes still land)."""
        self._host = None
        self._kick()

    def record(self, outcome: Outcome) -> None:
        """Queue ``outcome`` (fenced) for the next write; its result goes to ``on_settled``. A
        failed write is retried until it lands: the write is idempotent under fencing (if a
        lost reply hid a commit, the retry changes nothing)."""
        self._pending.append(outcome)
        if self._host is not None:
            self._host.set()
        else:
            self._kick()

    def take(self) -> Batch:
        """Remove and return the oldest queued outcomes (at most :data:`MAX_BATCH`)."""
        batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
        return batch

    def put_back(self, batch: Batch) -> None:
        """Queue a batch whose write failed again, ahead of newer outcomes."""
        self._pending[:0] = batch

    def settle(self, batch: Batch, written: set[int]) -> None:
        """Report each outcome of a written ``batch`` to ``on_settled``: it took effect (its job
        id is in ``written``) or was refused by fencing."""
        for outcome in batch:
            self.on_settled(outcome, outcome.job.id in written, None)

    async def write_each(self, batch: Batch) -> None:
        """Write a batch whose joint write failed for a reason other than the connection, one
        outcome per statement, so one outcome the database refuses (a bug, a value out of
        range) fails only its own attempt instead of every later write."""
        for outcome in batch:
            try:
                written = await self.store.finish_runs([outcome])
            except psycopg.OperationalError:
                self.put_back([outcome])
            except psycopg.Error as exc:
                log.error(
                    "outcome of %s refused by the database: %s",
                    outcome.job.name,
                    exc,
                    extra={"action": "record_refused", "job": outcome.job.name},
                )
                self.on_settled(outcome, False, exc)
            else:
                self.settle([outcome], written)

    def _kick(self) -> None:
        if self._pending and (self._writer is None or self._writer.done()):
            self._writer = asyncio.create_task(self._write_all(), name="outcome-writer")

    async def _write_all(self) -> None:
        while self._pending and self._host is None:
            batch = self.take()
            try:
                written = await self._write(batch)
            except psycopg.Error:
                await self.write_each(batch)
                continue
            except BaseException:
                self.put_back(batch)
                raise
            self.settle(batch, written)

    async def _write(self, batch: Batch) -> set[int]:
        delay = 0.1
        while True:
            try:
                async with asyncio.timeout(WRITE_TIMEOUT):
                    return await self.store.finish_runs(batch)
            except (psycopg.OperationalError, TimeoutError) as exc:
                log.warning(
                    "recording %d outcomes failed (%s); retrying in %.1fs",
                    len(batch),
                    exc or type(exc).__name__,
                    delay,
                    extra={"action": "record_retry", "count": len(batch)},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def flush(self) -> None:
        """Wait until every outcome queued so far is written (by the recorder's own writer;
        call :meth:`detach` first if a claim loop was the writer)."""
        self._kick()
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
            self._kick()
