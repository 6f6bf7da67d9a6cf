"""A node's LISTEN session: ``pgpulse_wakeup`` notifications wake its claim loop at once.

New, triggered or reaped work is notified by the statement that makes it due (the job id as
payload). A LISTEN session never writes, so it would never learn that its server stopped being
the primary: a standby hears no notification (``NOTIFY`` runs on the primary only), and a
primary made read-only takes no new work. So, once per heartbeat interval without a
notification, the session asks its server whether it still takes writes
(:func:`~pgpulse.db.database.session_is_read_only`) and, if not, connects again — with a
multi-host DSN, to the primary (docs/ha.md). Anything notified while it was not listening is
covered by one wake-up as it subscribes again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from pgpulse.core.errors import DatabaseUnavailable
from pgpulse.db.database import (
    NODE_SETTINGS,
    AsyncConn,
    apply_settings,
    connect,
    session_is_read_only,
)
from pgpulse.node.services import wait

log = logging.getLogger(__name__)


class Listener:
    """The LISTEN side loop of one node.

    Args:
        dsn: the node's database (its writing DSN: the primary's notifications).
        node_id: the node's id (its session is ``pgpulse:<node id>:listen``).
        wants: whether a job id's notification is this node's business (its shard, by the
            node's shard count, is one the node claims from now); a notification it does not
            want is ignored.
        wake: set on each notification for an owned shard (and after each subscription).
        stopping: set when the node stops; the loop then ends.
        interval: seconds between two checks that the server still takes writes, and between
            two connection attempts after a failure.
        on_note: called on each notification for an owned shard, before ``wake`` is set (the
            node's recorder then probes for extra occurrences: a trigger or a backfill wakes
            their shard). ``None``: nothing more than ``wake``.
    """

    def __init__(
        self,
        dsn: str,
        node_id: str,
        wants: Callable[[int], bool],
        wake: asyncio.Event,
        stopping: asyncio.Event,
        interval: float,
        on_note: Callable[[], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.application_name = f"pgpulse:{node_id}:listen"
        self.wants = wants
        self.wake = wake
        self.stopping = stopping
        self.interval = interval
        self.on_note = on_note

    async def run(self) -> None:
        """Listen until ``stopping`` is set, connecting again after any failure, whenever
        the server turned read-only, and within an interval of :attr:`dsn` changing
        (:mod:`pgpulse.node.split_brain` moves it). Never raises a database error."""
        while not self.stopping.is_set():
            try:
                dsn = self.dsn
                conn = await connect(dsn, application_name=self.application_name)
                async with conn:
                    await apply_settings(conn, NODE_SETTINGS)  # not the database's own
                    await conn.execute("LISTEN pgpulse_wakeup")
                    self.wake.set()  # anything notified while we were not listening
                    while not self.stopping.is_set():
                        await self._hear(conn)
                        if self.dsn != dsn:  # moved (a split brain): listen where claims go
                            break
                        if not self.stopping.is_set() and await session_is_read_only(conn):
                            log.warning(
                                "listen session: the server is read-only, reconnecting",
                                extra={"action": "listen_read_only"},
                            )
                            break
            except (psycopg.Error, OSError, DatabaseUnavailable) as exc:
                log.warning("listen session lost: %s", exc, extra={"action": "listen_lost"})
                await wait(self.stopping, self.interval)

    async def _hear(self, conn: AsyncConn) -> None:
        """Take notifications for one interval (or until stopping), waking the node for each
        one of its shards."""
        gen = conn.notifies(timeout=self.interval)
        stop = asyncio.ensure_future(self.stopping.wait())
        nxt: asyncio.Future[Any] | None = None
        try:
            while not self.stopping.is_set():
                nxt = asyncio.ensure_future(anext(gen))
                done, _ = await asyncio.wait({nxt, stop}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    break
                try:
                    note = nxt.result()
                except StopAsyncIteration:  # the interval is over
                    break
                if not note.payload or self.wants(int(note.payload)):
                    if self.on_note is not None:
                        self.on_note()
                    self.wake.set()
        finally:
            # The reader must be gone before the connection closes, or close() waits forever
            # (also when this task is cancelled): psycopg's notifies() holds the connection's
            # lock while it is suspended, even right after it yielded a notification (a stop
            # just after a wake-up hung on exit).
            for pending in (stop, nxt):
                if pending is not None and not pending.done():
                    pending.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await pending
            with contextlib.suppress(Exception):
                await gen.aclose()
