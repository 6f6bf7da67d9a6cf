"""Group commit of attempt outcomes: many fenced ``finish_runs`` elements per statement.

Attempts that end while a write is in flight wait for it and then go out together in the next
statement, so a busy node pays one round trip per batch instead of one per run, and an idle node
still writes each outcome at once (there is no timer). Every element stays fenced by its own
token, so batching changes no guarantee (design.md, invariant 3).
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


class OutcomeRecorder:
    """Writes outcomes for one node, batching those that arrive while a write is in flight.

    Args:
        store: the store to write through.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pending: list[tuple[Outcome, asyncio.Future[bool]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def record(self, outcome: Outcome) -> bool:
        """Write ``outcome`` (fenced); return ``True`` if it took effect, ``False`` if the lease
        was lost. Connection loss is retried until the write lands: the write is idempotent
        under fencing (if a lost reply hid a commit, the retry changes nothing).

        If the caller is cancelled while waiting, the outcome is still written: it was decided
        while the lease was held, and fencing refuses it if the lease is gone.
        """
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((outcome, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name="outcome-writer")
        return await asyncio.shield(future)

    async def _write_all(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            written = await self._write(batch)
            for outcome, future in batch:
                if not future.done():
                    future.set_result(outcome.job.id in written)

    async def _write(self, batch: list[tuple[Outcome, asyncio.Future[bool]]]) -> set[int]:
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
        """Wait until every outcome handed in so far is written."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
