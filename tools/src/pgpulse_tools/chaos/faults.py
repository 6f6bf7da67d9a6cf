"""Faults: a seeded plan (pure) and the injector that carries it out.

:func:`plan_faults` draws the fault schedule from the seed alone, so a seed names a plan:
every kind appears once first (in a seeded order), then random kinds follow until the fault
phase ends. A node never has two faults at once, at least one regular node stays healthy, and
the database restarts one at a time. Kinds:

============== =========================================================================
kill           SIGKILL a node, start it again (same node id) after a short downtime
pause          SIGSTOP a node for 1.3–2.5 leases, then SIGCONT: the zombie (the stop waits,
               up to 2 s, for a sync handler in flight on that node, so a thread the node
               cannot cancel holds an effect that meets the fencing guard after the lease)
partition      cut the node's proxy (``stall``: a silent network; ``drop``: resets) for
               0.5–2 leases, then heal
delay          add 50–400 ms to every chunk of the node's traffic for 0.5–1.5 leases
pg_restart     stop PostgreSQL (``fast`` or ``immediate``: a crash), start it again
join_leave     start an extra node, SIGTERM it 1–3 leases later (it drains and hands back)
failover       (replicated cluster) cut replication 0.3–1 s before SIGKILLing the primary,
               promote the standby, rebuild the old primary as the new standby 0.5–2 s later
               (Patroni: ``patronictl failover``)
switchover     (replicated cluster) stop the primary cleanly, promote the standby, rejoin
               the old primary as the new standby 0.2–1 s later (Patroni: ``patronictl
               switchover``)
reshard        (opt-in: ``--faults ...,reshard``) change the database's shard count online
               (``pgpulse shards set``: 64, 128, 256 or 1,024, never the current one) while
               the nodes run, waiting up to 1–2 leases for every live node to switch
============== =========================================================================

The database faults (``pg_restart``, ``failover``, ``switchover``) happen one at a time; the
injector also waits for the previous one to end (a rebuild can outlast its plan).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg

from pgpulse.app import connect
from pgpulse.core.errors import DatabaseUnavailable
from pgpulse.db.resharding import set_shard_count
from pgpulse.sql import load_queries
from pgpulse_tools.chaos.cluster import Cluster
from pgpulse_tools.chaos.history import Fault
from pgpulse_tools.chaos.proxy import CutMode, ProxyGroup
from pgpulse_tools.chaos.server import Server

log = logging.getLogger(__name__)
Q = load_queries("chaos.sql", __package__)
#: Seconds a pause waits for a sync handler in flight on its node (:meth:`Injector.apply`):
#: short beside the lease that separates two faults of one node (:func:`plan_faults`).
IN_FLIGHT_WAIT = 2.0
#: Seconds of planned work a sync handler must have left for a pause to count it in flight.
_MARGIN = 0.1

#: The kinds of a run on one server.
FAULT_KINDS: tuple[str, ...] = ("kill", "pause", "partition", "delay", "pg_restart", "join_leave")
#: The faults that move a replicated cluster's primary.
CLUSTER_KINDS: tuple[str, ...] = ("failover", "switchover")
#: The kinds of a run on a replicated cluster (a restart of one server is a failover's job).
CLUSTER_RUN_KINDS: tuple[str, ...] = (
    *(k for k in FAULT_KINDS if k != "pg_restart"),
    *CLUSTER_KINDS,
)
#: Kinds planned only when asked for (``--faults``): a run of the default kinds keeps the plan
#: its seed always gave.
OPT_IN_KINDS: tuple[str, ...] = ("reshard",)
#: The shard counts a ``reshard`` fault moves between.
RESHARD_COUNTS: tuple[int, ...] = (64, 128, 256, 1024)
_NODE_KINDS = frozenset({"kill", "pause", "partition", "delay"})
_DATABASE_KINDS = frozenset({"pg_restart", *CLUSTER_KINDS})
#: Seconds a rebuild of the old primary is expected to take (planning only; see Injector).
_REBUILD = 2.0


@dataclass(frozen=True, slots=True)
class PlannedFault:
    """One fault of the plan.

    Attributes:
        at: seconds after the start of the fault phase.
        kind: one of :data:`FAULT_KINDS`.
        node: the node index (for ``join_leave`` the extra node's; ``None`` for ``pg_restart``).
        hold: seconds the fault lasts (downtime, pause, cut, delay, restart gap, membership).
        mode: ``stall``/``drop`` for a partition, ``fast``/``immediate`` for a restart.
        latency: seconds added per chunk, for ``delay``.
        window: seconds replication is cut before a ``failover``'s kill (the commits of that
            window reach the primary only).
    """

    at: float
    kind: str
    node: int | None
    hold: float
    mode: str = ""
    latency: float = 0.0
    window: float = 0.0

    def describe(self, node_id: str | None) -> str:
        """A one-line description, e.g. ``pause node-2 for 6.1s`` (a move of the primary is
        described by what the server did: see :meth:`Promotion.describe`)."""
        what = {
            "kill": "SIGKILL {n}, restart after {h}",
            "pause": "SIGSTOP {n} for {h}",
            "partition": "cut {n} ({m}) for {h}",
            "delay": "delay {n} by {l} for {h}",
            "pg_restart": "restart PostgreSQL ({m}) with {h} down",
            "join_leave": "start {n}, SIGTERM it after {h}",
            "failover": "fail the primary over",
            "switchover": "switch the primary over",
            "reshard": "set the shard count to {m}, waiting up to {h}",
        }[self.kind]
        return what.format(
            n=node_id, h=f"{self.hold:.1f}s", m=self.mode, l=f"{self.latency * 1000:.0f}ms"
        )


def _draw(kind: str, rng: random.Random, lease: float) -> tuple[float, str, float]:
    """(hold seconds, mode, latency or window seconds) of a fault of ``kind``."""
    if kind == "kill":
        return rng.uniform(0.2, 2.0), "", 0.0
    if kind == "pause":
        return lease * rng.uniform(1.3, 2.5), "", 0.0
    if kind == "partition":
        return lease * rng.uniform(0.5, 2.0), rng.choice(("stall", "drop")), 0.0
    if kind == "delay":
        return lease * rng.uniform(0.5, 1.5), "", rng.uniform(0.05, 0.4)
    if kind == "pg_restart":
        return rng.uniform(0.3, 2.0), rng.choice(("fast", "immediate")), 0.0
    if kind == "join_leave":
        return lease * rng.uniform(1.0, 3.0), "", 0.0
    if kind == "failover":
        return rng.uniform(0.5, 2.0), "", rng.uniform(0.3, 1.0)
    if kind == "switchover":
        return rng.uniform(0.2, 1.0), "", 0.0
    if kind == "reshard":
        return lease * rng.uniform(1.0, 2.0), "", 0.0
    raise ValueError(f"unknown fault kind {kind!r}")


#: The faults that take turns (one at a time in each lane): the database's, the shard count's.
_LANES = {**dict.fromkeys(_DATABASE_KINDS, "database"), "reshard": "shard_count"}


def _lane_hold(kind: str, hold: float, window: float, lease: float) -> float:
    """Seconds a fault of ``kind`` keeps its lane busy: a move of the primary until the old
    one is rebuilt and a lease later, a restart a lease after it, a reshard for its wait."""
    if kind in CLUSTER_KINDS:
        return window + hold + _REBUILD + lease
    if kind == "pg_restart":
        return hold + lease
    return hold


def _next_count(rng: random.Random, plan: Sequence[PlannedFault]) -> str:
    """The shard count a ``reshard`` sets: one of :data:`RESHARD_COUNTS` other than the one
    the plan's last reshard set (64 before any)."""
    current = next((int(f.mode) for f in reversed(plan) if f.kind == "reshard"), 64)
    return str(rng.choice([c for c in RESHARD_COUNTS if c != current]))


def plan_faults(
    seed: int,
    *,
    duration: float,
    nodes: int,
    lease: float,
    kinds: Sequence[str] = FAULT_KINDS,
    warmup: float = 2.0,
) -> list[PlannedFault]:
    """Draw the fault plan of a run (pure: the same arguments give the same plan).

    Args:
        seed: the run's seed.
        duration: seconds during which faults start (each then lasts its ``hold``).
        nodes: regular nodes (indexes ``0..nodes-1``; the extra node is ``nodes``).
        lease: the nodes' lease, seconds (pauses outlast it; partitions straddle it).
        kinds: the fault kinds to draw from (each is planned at least once if time allows).
        warmup: seconds before the first fault.

    Returns:
        Faults ordered by start.

    Raises:
        ValueError: an unknown kind, or fewer than 2 nodes for node faults.
    """
    unknown = set(kinds) - {*FAULT_KINDS, *CLUSTER_KINDS, *OPT_IN_KINDS}
    if unknown:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}")
    if nodes < 2 and _NODE_KINDS & set(kinds):
        raise ValueError("node faults need at least 2 nodes (one stays healthy)")
    rng = random.Random(seed)
    pending = list(kinds)
    rng.shuffle(pending)
    busy = [0.0] * (nodes + 1)  # until when each node (and the extra one) is taken
    lanes = dict.fromkeys(_LANES.values(), 0.0)  # until when the database, the count are
    plan: list[PlannedFault] = []
    t = warmup
    while t < duration and kinds:
        kind = pending[0] if pending else rng.choice(list(kinds))
        hold, mode, latency = _draw(kind, rng, lease)
        window = latency if kind == "failover" else 0.0
        latency = 0.0 if kind == "failover" else latency
        node: int | None = None
        if kind in _NODE_KINDS:
            healthy = [i for i in range(nodes) if busy[i] <= t]
            node = rng.choice(healthy) if len(healthy) >= 2 else None
            ready = node is not None
        elif kind in _LANES:
            ready = lanes[_LANES[kind]] <= t
        else:
            node, ready = nodes, busy[nodes] <= t
        if not ready:
            t += 0.5
            continue
        if kind == "reshard":
            mode = _next_count(rng, plan)
        plan.append(
            PlannedFault(
                round(t, 3), kind, node, round(hold, 3), mode, round(latency, 3), round(window, 3)
            )
        )
        if pending and kind == pending[0]:
            pending.pop(0)
        if kind in _LANES:
            lanes[_LANES[kind]] = t + _lane_hold(kind, hold, window, lease)
        elif node is not None:
            busy[node] = t + hold + lease  # time to come back before the next fault on it
        room = (duration - t) / (len(pending) + 1)
        t += rng.uniform(0.5, max(1.0, min(4.0, room)))
    return plan


class Injector:
    """Carries out planned faults on the cluster, its proxies and the server.

    Args:
        cluster: the node processes.
        proxies: one node's proxies per node index (the extra node's last).
        server: the PostgreSQL server.
        clock: the database's current instant, as the harness estimates it.
        leader: returns the current leader's node id (to say when the leader was hit).
        dsn: returns the database's DSN now (for ``reshard``).
        node_ttl: the nodes' time-to-live, seconds (a ``reshard`` waits for the live ones).
    """

    def __init__(
        self,
        cluster: Cluster,
        proxies: Sequence[ProxyGroup],
        server: Server,
        clock: Callable[[], datetime],
        leader: Callable[[], Awaitable[str | None]],
        dsn: Callable[[], str] | None = None,
        node_ttl: float = 10.0,
    ) -> None:
        self.dsn = dsn
        self.node_ttl = node_ttl
        self.cluster = cluster
        self.proxies = proxies
        self.server = server
        self.clock = clock
        self.leader = leader
        self._database = asyncio.Lock()  # one database fault at a time, whatever the plan said
        # One join_leave at a time: the plan spaces them by their hold, not by how long the
        # extra node takes to stop (up to its stop grace), and one that found it still stopping
        # would neither start it (start is a no-op on a live node) nor own its exit.
        self._join_leave = asyncio.Lock()

    async def apply(self, fault: PlannedFault) -> Fault:
        """Inject ``fault``, hold it, end it; return what happened, with instants.

        Raises:
            DatabaseUnavailable: PostgreSQL did not come back after a restart, or a failover
                left no working cluster.
            OSError: a node could not be started again.
        """
        if fault.kind in _DATABASE_KINDS:
            async with self._database:
                return await self._database_fault(fault)
        if fault.kind == "reshard":
            return await self._reshard(fault)
        if fault.kind == "join_leave":
            async with self._join_leave:
                return await self._join_and_leave(fault)
        node_id = None if fault.node is None else self.cluster.node_id(fault.node)
        detail = fault.describe(node_id)
        if (
            fault.kind == "pause"
            and node_id
            and fault.node is not None
            and self.cluster.running(fault.node)
        ):
            detail += await self._effect_in_flight(node_id)  # before the fault's instant
        if node_id is not None and await self._safe_leader() == node_id:
            detail += " (the leader)"
        started = self.clock()
        log.warning("fault: %s", detail, extra={"action": "chaos_fault", "kind": fault.kind})
        assert fault.node is not None
        index = fault.node
        if not self.cluster.running(index):
            return Fault(fault.kind, node_id, started, started, f"{detail} — skipped: down")
        await self._begin(fault, index)
        await asyncio.sleep(fault.hold)
        await self._end(fault, index)
        return Fault(fault.kind, node_id, started, self.clock(), detail)

    async def _join_and_leave(self, fault: PlannedFault) -> Fault:
        """Start the extra node, let it run for the hold, SIGTERM it and wait for its exit
        (within its stop grace: a hang is recorded by the cluster)."""
        assert fault.node is not None
        index = fault.node
        node_id = self.cluster.node_id(index)
        detail = fault.describe(node_id)
        started = self.clock()
        log.warning("fault: %s", detail, extra={"action": "chaos_fault", "kind": fault.kind})
        await self.cluster.start(index)
        await asyncio.sleep(fault.hold)
        code = await self.cluster.terminate(index)
        return Fault(
            fault.kind, node_id, started, self.clock(), f"{detail}; exited with code {code}"
        )

    async def _database_fault(self, fault: PlannedFault) -> Fault:
        detail = fault.describe(None)
        started = self.clock()
        log.warning("fault: %s", detail, extra={"action": "chaos_fault", "kind": fault.kind})
        if fault.kind == "pg_restart":
            await self.server.restart(fault.hold, fault.mode)
            return Fault(fault.kind, None, started, self.clock(), detail)
        done = await self.server.fail_over(
            fault.kind, down=fault.hold, window=fault.window, clock=self.clock
        )
        return Fault(
            fault.kind,
            None,
            started,
            self.clock(),
            f"{detail}: {done.describe()}",
            died_at=done.died_at,
            promoted_at=done.promoted_at,
        )

    async def _reshard(self, fault: PlannedFault) -> Fault:
        """Change the shard count (:func:`pgpulse.db.resharding.set_shard_count`), trying again
        while the database is away (a database fault may be under way: the change resumes)."""
        assert self.dsn is not None, "reshard needs the injector's dsn"
        detail = fault.describe(None)
        started = self.clock()
        log.warning("fault: %s", detail, extra={"action": "chaos_fault", "kind": fault.kind})
        give_up = time.monotonic() + 60.0
        while True:
            try:
                async with connect(self.dsn(), max_size=2) as store:
                    done = await set_shard_count(
                        store.pool, int(fault.mode), wait=fault.hold, ttl=self.node_ttl
                    )
                break
            except (psycopg.Error, OSError, DatabaseUnavailable) as exc:
                if time.monotonic() > give_up:
                    return Fault(fault.kind, None, started, self.clock(), f"{detail}: {exc}")
                await asyncio.sleep(0.5)
        switched = (
            f"every live node switched in {done.switch_seconds:.1f}s"
            if done.switch_seconds is not None
            else "not every node switched in time"
        )
        return Fault(
            fault.kind,
            None,
            started,
            self.clock(),
            f"{detail}: {done.old} → {done.new}, {switched}",
        )

    async def _begin(self, fault: PlannedFault, index: int) -> None:
        if fault.kind == "kill":
            await self.cluster.kill(index)
        elif fault.kind == "pause":
            self.cluster.pause(index)
        elif fault.kind == "partition":
            mode: CutMode = "drop" if fault.mode == "drop" else "stall"
            self.proxies[index].cut(mode)
        elif fault.kind == "delay":
            self.proxies[index].delay(fault.latency)

    async def _effect_in_flight(self, node_id: str) -> str:
        """Wait (at most :data:`IN_FLIGHT_WAIT` seconds) until a sync handler is in flight on
        ``node_id`` with work left, and say which (``" with job N in flight"``), so the pause
        that follows freezes an execution the node cannot cancel: on SIGCONT its effect comes
        after the lease ran out and the guard must refuse it (the checker's ``fenced``).
        Without the wait that figure would depend on timing. A pause goes ahead without one,
        saying so. Never raises: a database fault under way only shortens the wait."""
        if self.dsn is None:
            return ""
        give_up = time.monotonic() + IN_FLIGHT_WAIT
        while time.monotonic() < give_up:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.dsn(), autocommit=True, connect_timeout=1
                ) as conn:
                    while time.monotonic() < give_up:
                        cur = await conn.execute(
                            Q["in_flight"], {"node": node_id, "margin": _MARGIN}
                        )
                        row = await cur.fetchone()
                        if row is not None:
                            return f" with job {row[0]} in flight"
                        await asyncio.sleep(0.05)
            except (psycopg.Error, OSError):  # a database fault under way: try again
                await asyncio.sleep(0.2)
        return " with no sync handler in flight"

    async def _end(self, fault: PlannedFault, index: int) -> None:
        if fault.kind == "kill":
            await self.cluster.start(index)
        elif fault.kind == "pause":
            self.cluster.resume(index)
        else:
            self.proxies[index].heal()

    async def _safe_leader(self) -> str | None:
        try:
            async with asyncio.timeout(1.0):
                return await self.leader()
        except Exception:  # the leader is only a remark in the log; never fail a fault on it
            return None
