"""Leadership and the lease sweeper.

One node at a time is the leader: it holds a session-level advisory lock
(:data:`~pgpulse.store.LEADER_LOCK_KEY`) on a dedicated connection. If that node dies, its session
ends, PostgreSQL releases the lock, and the next node to try becomes leader. The leader returns
expired leases to the pool and prunes old history (design.md, "Cluster behaviour").

A leader can also go silent without losing its session: a paused process (SIGSTOP, a long GC
stop) or a half-open network keeps the lock. So every other node is a backup sweeper: it reaps
leases that have been expired for longer than ``backup_delay`` seconds, which the leader would
have reaped long before if it were working. Reaping twice is harmless (SKIP LOCKED, idempotent).
"""

from __future__ import annotations

import logging
import time

import psycopg

from pgpulse.database import AsyncConn, connect
from pgpulse.store import LEADER_LOCK_KEY, Store

log = logging.getLogger(__name__)

#: A node that is not the leader tries the lock, and reaps as backup, every this many calls
#: (heartbeats): an idle cluster then costs the database little.
NON_LEADER_EVERY = 5


class Sweeper:
    """Tries to lead; while leading, reaps expired leases and prunes history.

    Args:
        store: the store.
        dsn: where to open the leader's dedicated session.
        node_id: this node's id (the session's ``application_name`` is ``pgpulse:<id>``).
        keep_runs: seconds of finished run history to keep.
        prune_every: seconds between two prunes.
        backup_delay: a non-leader reaps leases expired for longer than this (seconds).
    """

    def __init__(self, store: Store, dsn: str, node_id: str, *, keep_runs: float,
                 prune_every: float = 3600.0, backup_delay: float = 10.0) -> None:
        self.store = store
        self.backup_delay = backup_delay
        self.dsn = dsn
        self.node_id = node_id
        self.keep_runs = keep_runs
        self.prune_every = prune_every
        self._conn: AsyncConn | None = None
        self._leading = False
        self._ticks = 0
        self._last_prune = float("-inf")

    @property
    def is_leader(self) -> bool:
        """Whether this node held the leader lock at the last check."""
        return self._leading and self._conn is not None and not self._conn.closed

    async def _ensure_leadership(self) -> bool:
        if self._conn is not None and self._conn.closed:
            if self._leading:
                log.warning("leader session lost", extra={"action": "leader_lost"})
            self._conn, self._leading = None, False
        if self._conn is None:  # kept open between tries: no new session every heartbeat
            self._conn = await connect(self.dsn, application_name=f"pgpulse:{self.node_id}")
        if self._leading:
            await self._conn.execute("SELECT 1")  # notice a dead session now, not later
            return True
        cur = await self._conn.execute("SELECT pg_try_advisory_lock(%s) AS ok",
                                       (LEADER_LOCK_KEY,))
        row = await cur.fetchone()
        self._leading = bool(row and row["ok"])
        if self._leading:
            log.info("node %s is the leader", self.node_id, extra={"action": "leader_elected"})
        return self._leading

    async def run_once(self) -> int:
        """One sweeper step: (re)take leadership if free; if leading, reap expired leases and
        prune when due; if not, reap only leases long expired (backup). Returns how many leases
        were reaped."""
        self._ticks += 1
        if not self.is_leader and self._ticks % NON_LEADER_EVERY != 1:
            return 0  # a candidate tries (and reaps as backup) every few heartbeats only
        try:
            leading = await self._ensure_leadership()
        except psycopg.Error:
            await self.close()
            raise
        if not leading:
            reaped = await self.store.reap_expired_leases(older_than=self.backup_delay)
            if reaped:
                log.warning("leader silent: returned %d long-expired leases to the pool", reaped,
                            extra={"action": "leases_reaped_by_backup", "count": reaped})
            return reaped
        reaped = await self.store.reap_expired_leases()
        if reaped:
            log.warning("returned %d expired leases to the pool", reaped,
                        extra={"action": "leases_reaped", "count": reaped})
        if time.monotonic() - self._last_prune >= self.prune_every:
            self._last_prune = time.monotonic()
            runs, nodes = await self.store.prune(keep_runs=self.keep_runs)
            if runs or nodes:
                log.info("pruned %d runs and %d silent nodes", runs, nodes,
                         extra={"action": "pruned", "runs": runs, "nodes": nodes})
        return reaped

    async def close(self) -> None:
        """Give leadership up (closing the session releases the lock)."""
        self._leading = False
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()
