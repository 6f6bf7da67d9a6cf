"""The node registry: a node's row in ``pgpulse_nodes``, from its start to its stop.

A node registers with what it can run — its handler names, and how it treats ``shell`` jobs —
so that every node routes claims by capability (:mod:`pgpulse.core.routing`) and ``status`` shows
which jobs no live node can run. One node id is one process: registering refuses an
id whose row is held by another live process, and a stale, stopped or abandoned row (its
holder's heartbeat session gone) is taken over. A
process knows its row by (host, pid): its heartbeats and its stop touch only that row, never
one another process took over. :class:`NodeRegistry` is the base of
:class:`~pgpulse.db.claims.ClaimStore` (and so of :class:`~pgpulse.db.store.Store`); ``now``
parameters exist for tests only (docs/design.md, invariant 1).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any, Literal

from pgpulse.core.errors import NodeIdTaken
from pgpulse.db.database import ConnectionSource
from pgpulse.sql import QUERIES

#: A node's time-to-live, seconds (NodeConfig's default): how those who read the registry judge
#: a row that recorded none (registered by hand, say); the SQL's ``coalesce(ttl, 10)`` says it.
DEFAULT_NODE_TTL = 10.0

#: How a node treats ``shell`` jobs: not allowed, run (``--allow-shell-jobs``), or recorded
#: without running (``--shell-dry-run``).
ShellMode = Literal["off", "run", "dry-run"]


class NodeRegistry:
    """Intent-named access to the node registry.

    Args:
        pool: an open pool of autocommit connections with dict rows, or one of a node's
            dedicated sessions.
    """

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(QUERIES[name], params or {})
            return list(await cur.fetchall()) if cur.description else []

    async def register_node(
        self,
        node: str,
        *,
        hostname: str,
        pid: int,
        slots: int,
        handlers: Collection[str],
        shell: ShellMode = "off",
        ttl: float | None = None,
        rejoin: bool = False,
        now: datetime | None = None,
    ) -> None:
        """Insert or take over this node's registry row (state ``alive``), one statement.

        Args:
            node: the node id.
            hostname, pid: this process; with ``node`` they identify its row from now on.
            slots: its worker slots.
            handlers: the handler names it can run (``shell`` only if allowed): what it
                claims, and what ``status`` counts as runnable.
            shell: how it treats ``shell`` jobs (shown by ``status``).
            ttl: seconds of silence after which the node's peers count it dead (its
                ``node_ttl``); ``status`` and the API judge it by the same. ``None``: unknown
                (judged by NodeConfig's default, 10 s).
            rejoin: the node was running and registers again (its row went missing): keep its
                ``started_at``. ``False`` (a start, a restart under the same id) resets it.

        Raises:
            NodeIdTaken: another live process holds ``node`` (a heartbeat within its
                time-to-live, not stopped, its heartbeat session connected): nothing was
                written. A row of this same process, a stopped or stale row, or one whose
                holder's heartbeat session is gone (a process killed with SIGKILL) is taken
                over. The session this is sent on never counts as the holder's (a running
                node registers again on its own heartbeat session, ``pgpulse:<id>:beat``).
        """
        rows = await self._rows(
            "register_node",
            {
                "node": node,
                "hostname": hostname,
                "pid": pid,
                "slots": slots,
                "handlers": sorted(handlers),
                "shell": shell,
                "ttl": ttl,
                "rejoin": rejoin,
                "now": now,
            },
        )
        if rows:
            return
        holder = await self._rows("register_holder", {"node": node, "now": now})
        if not holder:  # deleted between the two statements (pruned): the id is free
            await self.register_node(
                node,
                hostname=hostname,
                pid=pid,
                slots=slots,
                handlers=handlers,
                shell=shell,
                ttl=ttl,
                rejoin=rejoin,
                now=now,
            )
            return
        raise NodeIdTaken(
            node, hostname=holder[0]["hostname"], pid=holder[0]["pid"], silent=holder[0]["silent"]
        )

    async def stop_node(
        self,
        node: str,
        *,
        hostname: str | None = None,
        pid: int | None = None,
        now: datetime | None = None,
    ) -> None:
        """Mark this node stopped: it owns no shards from now on, and its id is free at once.

        Args:
            node: the node id.
            hostname, pid: this process (``None``: whichever holds the row); a row another
                process took over is left alone.
        """
        await self._rows("stop_node", {"node": node, "hostname": hostname, "pid": pid, "now": now})

    async def revive_jobs(self, handlers: Collection[str]) -> int:
        """Return jobs that failed for want of a handler in ``handlers`` to idle, due at once
        (jobs failed so by nodes of schema 1, which claimed what they could not run).
        Returns how many were revived."""
        return len(await self._rows("revive_jobs", {"handlers": sorted(handlers)}))
