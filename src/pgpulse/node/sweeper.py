"""Leadership and the lease sweeper, carried by each node's heartbeat.

One node at a time is the leader: its heartbeat session holds a session-level advisory lock
(:data:`~pgpulse.db.claims.LEADER_LOCK_KEY`). Every node that does not lead tries the lock within
its heartbeat statement (:meth:`~pgpulse.db.claims.ClaimStore.heartbeat`, no extra round trip), so
when the leader dies — its session ends and PostgreSQL releases the lock — another node leads from
its next heartbeat. The sweep follows the heartbeat statement in the same round trip, on the same
session: it returns expired leases to the pool and ends pauses whose end came — the leader's,
all of them; any other node's, those older than ``backup_delay``. That backup covers a leader
that went silent without losing its session (SIGSTOP, a long GC stop, a half-open network): it
keeps the lock. Reaping twice is harmless (SKIP LOCKED, fenced).

:class:`Sweeper` keeps this node's side of it: whether it leads (forgotten, with a warning, when
the heartbeat session reconnects: the lock died with the old connection), the reaping log, and
the leader's housekeeping — pruning old history every ``prune_every`` seconds, a rare statement
of its own over the node's pool (docs/design.md, "Cluster behaviour").
"""

from __future__ import annotations

import logging
import time

from pgpulse.core.model import Heartbeat
from pgpulse.core.wording import plural
from pgpulse.db.database import Session
from pgpulse.db.store import Store

log = logging.getLogger(__name__)


class Sweeper:
    """This node's part in leadership, lease sweeping and housekeeping.

    Call :meth:`leading` for each heartbeat statement's ``leading`` argument, and
    :meth:`observe` with what it returned.

    Args:
        store: the node's store (its pool sends the prunes).
        session: the node's heartbeat session: it holds the leader lock while this node leads.
        node_id: this node's id.
        keep_runs: seconds of finished run history to keep.
        prune_every: seconds between two prunes by the leader.
    """

    def __init__(
        self,
        store: Store,
        session: Session,
        node_id: str,
        *,
        keep_runs: float,
        prune_every: float = 3600.0,
    ) -> None:
        self.store = store
        self.session = session
        self.node_id = node_id
        self.keep_runs = keep_runs
        self.prune_every = prune_every
        self._leading = False
        self._generation = 0  # the session's connection that took the lock
        self._said_leading = False  # what the heartbeat in flight was told
        self._last_prune = float("-inf")

    @property
    def is_leader(self) -> bool:
        """Whether the last heartbeat found the leader lock held by this node's session, and
        that session has not reconnected since."""
        return self._leading and self._generation == self.session.generation

    def leading(self) -> bool:
        """What the next heartbeat says: whether this node's session holds the leader lock.

        A session that reconnected since has lost it: leadership is then forgotten (warning
        ``leader_lost``) and the heartbeat tries the lock again.
        """
        if self._leading and not self.is_leader:
            self._lose()
        self._said_leading = self._leading
        return self._leading

    def observe(self, beat: Heartbeat) -> None:
        """Take in what a heartbeat statement found: leadership, and the leases it reaped."""
        if self._said_leading and self._generation != self.session.generation:
            # The session reconnected to send this heartbeat: the new connection does not hold
            # the lock, whatever it answered to "leading". The next heartbeat tries for it.
            self._lose()
        elif beat.leader and not self._leading:
            self._leading, self._generation = True, self.session.generation
            log.info("node %s is the leader", self.node_id, extra={"action": "leader_elected"})
        if beat.reaped and beat.leader:
            log.warning(
                "returned %s to the pool",
                plural(beat.reaped, "expired lease"),
                extra={"action": "leases_reaped", "count": beat.reaped},
            )
        elif beat.reaped:
            log.warning(
                "leader silent: returned %s to the pool",
                plural(beat.reaped, "long-expired lease"),
                extra={"action": "leases_reaped_by_backup", "count": beat.reaped},
            )

    def _lose(self) -> None:
        self._leading = False
        log.warning("leader session lost", extra={"action": "leader_lost"})

    async def prune_once(self) -> tuple[int, int] | None:
        """If this node leads and its last prune is ``prune_every`` seconds old, delete old
        history (:meth:`~pgpulse.db.claims.ClaimStore.prune`). Sends nothing otherwise.

        Returns:
            (runs deleted, nodes deleted), or ``None`` if it did not prune.
        """
        if not self.is_leader or time.monotonic() - self._last_prune < self.prune_every:
            return None
        self._last_prune = time.monotonic()  # a failed prune waits for the next period too
        runs, nodes = await self.store.prune(keep_runs=self.keep_runs)
        if runs or nodes:
            log.info(
                "pruned %s and %s",
                plural(runs, "run"),
                plural(nodes, "silent node"),
                extra={"action": "pruned", "runs": runs, "nodes": nodes},
            )
        return runs, nodes
