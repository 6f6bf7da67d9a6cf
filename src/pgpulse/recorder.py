"""Group commit of attempt outcomes: many fenced ``finish_runs`` elements per statement.

Outcomes queue here until a writer takes them as one batch. On a running node the writer is the
claim loop (:meth:`OutcomeRecorder.attach`): each of its steps writes the queued outcomes and
claims the next jobs in one transaction and one round trip, so a busy node pays one statement
per batch of runs ended and started, and an idle node writes each outcome at once (recording
wakes the loop; there is no timer). Detached (tests, a node draining) the recorder writes with
its own task. Every element stays fenced by its own token, so batching changes no guarantee
(design.md, invariant 3).
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from pgpulse.store import Outcome, Store

log = logging.getLogger(__name__)

#: Seconds one batch write may take before it is abandoned and retried.
WRITE_TIMEOUT = 5.0
#: Most outcomes written by one statement.
MAX_BATCH = 500

#: Outcomes taken for one write, each with the future its attempt waits on.
Batch = list[tuple[Outcome, "asyncio.Future[bool]"]]


class OutcomeRecorder:
    """Queues the outcomes of one node and hands them to a writer in batches.

    Args:
        store: the store the recorder's own writer writes through (when detached).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
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

    async def record(self, outcome: Outcome) -> bool:
        """Queue ``outcome`` (fenced) and wait for its write; return ``True`` if it took effect,
        ``False`` if the lease was lost. A failed write is retried until it lands: the write is
        idempotent under fencing (if a lost reply hid a commit, the retry changes nothing).

        If the caller is cancelled while waiting, the outcome is still written: it was decided
        while the lease was held, and fencing refuses it if the lease is gone.
        """
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((outcome, future))
        if self._host is not None:
            self._host.set()
        else:
            self._kick()
        return await asyncio.shield(future)

    def take(self) -> Batch:
        """Remove and return the oldest queued outcomes (at most :data:`MAX_BATCH`)."""
        batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
        return batch

    def put_back(self, batch: Batch) -> None:
        """Queue a batch whose write failed again, ahead of newer outcomes."""
        self._pending[:0] = batch

    @staticmethod
    def settle(batch: Batch, written: set[int]) -> None:
        """Tell each attempt of a written ``batch`` whether its outcome took effect (its job id
        is in ``written``) or was refused by fencing."""
        for outcome, future in batch:
            if not future.done():
                future.set_result(outcome.job.id in written)

    async def write_each(self, batch: Batch) -> None:
        """Write a batch whose joint write failed for a reason other than the connection, one
        outcome per statement, so one outcome the database refuses (a bug, a value out of
        range) fails only its own attempt (its future raises) instead of every later write."""
        for outcome, future in batch:
            try:
                written = await self.store.finish_runs([outcome])
            except psycopg.OperationalError:
                self.put_back([(outcome, future)])
            except psycopg.Error as exc:
                log.error("outcome of %s refused by the database: %s", outcome.job.name, exc,
                          extra={"action": "record_refused", "job": outcome.job.name})
                if not future.done():
                    future.set_exception(exc)
            else:
                self.settle([(outcome, future)], written)

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
                    return await self.store.finish_runs([outcome for outcome, _ in batch])
            except (psycopg.OperationalError, TimeoutError) as exc:
                log.warning("recording %d outcomes failed (%s); retrying in %.1fs", len(batch),
                            exc or type(exc).__name__, delay,
                            extra={"action": "record_retry", "count": len(batch)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def flush(self) -> None:
        """Wait until every outcome queued so far is written (by the recorder's own writer;
        call :meth:`detach` first if a claim loop was the writer)."""
        self._kick()
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
            self._kick()
