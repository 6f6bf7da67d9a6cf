"""The engine: one scheduler node's core and its services.

A :class:`Node` runs its named tasks in one ``asyncio.TaskGroup`` (if one dies, the node stops
loudly). Its core is three of them, and one :class:`~pgpulse.node.services.Membership` value
(:attr:`Node.membership`: routes, shard count, leadership) the others read:

* ``claim``: the claim loop, :meth:`Recorder.run <pgpulse.node.recorder.Recorder.run>`: in one
  transaction and one round trip per step, write the outcomes of the attempts that ended (group
  commit) and claim due jobs along its routes, at most as many as there are free worker slots
  (backpressure, invariant 6); start each at once, then sleep until the next due instant, a
  wake-up notification, or an attempt that ended;
* ``heartbeat``: every ``heartbeat_interval`` seconds renew the leases of running attempts
  (fenced), then, in one round trip, record liveness, try to lead (or keep leading) and return
  expired leases to the pool — the leader's every one, the others' as backup for a silent leader
  (see :mod:`pgpulse.node.sweeper`); recompute shard ownership and the claim routes (for each
  handler this node has, its shards among the live nodes that have it: :mod:`pgpulse.core.routing`)
  from the live nodes it returns;
* ``listen``: LISTEN for ``pgpulse_wakeup`` so new, triggered or reaped work is claimed at once
  (:class:`~pgpulse.node.listener.Listener`).

Everything else is a :class:`~pgpulse.node.services.Service` in :attr:`Node.services`, a task of
its own. The node registers two:

* ``prune`` (leader only): delete old history once an hour
  (:meth:`Sweeper.prune_once <pgpulse.node.sweeper.Sweeper.prune_once>`);
* ``split_brain`` (a DSN of several hosts only): every ``split_brain_every`` heartbeats, ask
  each host whether it takes writes, and on a split brain claim on the newest one only
  (:class:`~pgpulse.node.split_brain.SplitBrainWatch`).

The edge that builds a node registers the others before it runs (:meth:`Node.add_service`):
the alerts' evaluation and delivery, and their check-in pings
(:func:`pgpulse.alerts.services.register`). The node tells what it did — an attempt started or
ended, it is about to register, the database's clock stepped (each heartbeat feeds
:class:`~pgpulse.node.db_clock.ClockWatch`), a split brain — to its observers
(:class:`~pgpulse.node.observer.NodeObserver`, :meth:`Node.add_observer`); it imports nothing
of the alerts.

The running attempts themselves — their leases' deadlines, their timeouts, self-fencing and
their outcomes — belong to :class:`~pgpulse.node.attempts.Attempts` (:attr:`Node.attempts`); these
loops only feed it claims and renewals and write what it hands over. On :meth:`Node.stop` the
loops end and :meth:`Node.run` drains: the attempts get ``drain_timeout`` seconds to finish,
then the rest are cancelled and their claims handed back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgpulse.core.errors import NodeIdTaken
from pgpulse.core.jobs import check_name
from pgpulse.core.routing import NEEDS_OPTION, Routes, routes_for, watched_shards
from pgpulse.core.sharding import shards_for
from pgpulse.core.wording import plural, seconds_text
from pgpulse.db.claims import CLAIM_SESSION_SETTINGS, ClaimStore
from pgpulse.db.database import Session
from pgpulse.db.registry import DEFAULT_NODE_TTL, ShellMode
from pgpulse.db.store import Store
from pgpulse.node import metrics
from pgpulse.node.attempts import Attempt, Attempts
from pgpulse.node.builtins import check_shell_env
from pgpulse.node.db_clock import DEFAULT_STEP_THRESHOLD, ClockReading, ClockWatch
from pgpulse.node.handlers import Handler, NodeHandlers
from pgpulse.node.listener import Listener
from pgpulse.node.observer import NodeObserver, Observers
from pgpulse.node.recorder import Recorder
from pgpulse.node.services import Membership, Periodic, Service, quiet_db_errors, run_every
from pgpulse.node.split_brain import DEFAULT_EVERY, SplitBrainWatch, several_hosts
from pgpulse.node.sweeper import Sweeper

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Settings of one node. Durations are seconds.

    Attributes:
        node_id: unique id; default ``<hostname>-<pid>-<random>``; a job name's rule (1-200
            printable characters, no space at either end), or InvalidInput.
        slots: worker slots — the most attempts this node runs at once.
        lease: lease length granted by a claim and by each renewal.
        heartbeat_interval: seconds between heartbeats (lease renewals, liveness, leadership,
            lease sweeping).
        node_ttl: a node silent this long is dead (its shards move); a node that does not lead
            also reaps leases expired this long (backup for a silent leader).
        poll_interval: longest sleep between two claims when nothing is known to be due.
        drain_timeout: on stop, how long running attempts may take to finish.
        keep_runs: how long finished run history is kept (leader prunes).
        handler_options: passed to handlers in ``RunContext.options``; its ``shell_env``, the
            node variables shell commands also get, is checked
            (:func:`pgpulse.node.builtins.check_shell_env`, InvalidInput).
        allow_shell: run ``shell`` jobs. Off by default: a ``shell`` job runs commands on every
            node, so each node opts in (``pgpulse node run --allow-shell-jobs``). A node without
            it claims no shell jobs (they wait for a node that allows them).
        alert_interval: seconds between the leader's evaluations of the alert rules (late,
            missed, silence, cluster rules); a failed or skipped run is evaluated at once by the
            node that recorded it. 0 turns alerting off on this node.
        dashboard_url: the dashboard's base address, for the links alerts carry, or ``None``.
        split_brain_every: with a DSN of several hosts, heartbeats between two checks for a
            split brain (:mod:`pgpulse.node.split_brain`; also one at start); 0: never.
        clock_step: seconds the database's clock may differ from the leader's monotonic clock
            over one heartbeat before it counts as a step (:mod:`pgpulse.node.db_clock`).
    """

    node_id: str = field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    )
    slots: int = 10
    lease: float = 30.0
    heartbeat_interval: float = 2.0
    node_ttl: float = DEFAULT_NODE_TTL
    poll_interval: float = 5.0
    drain_timeout: float = 10.0
    keep_runs: float = 7 * 86400.0
    handler_options: Mapping[str, Any] = field(default_factory=dict)
    allow_shell: bool = False
    alert_interval: float = 10.0
    dashboard_url: str | None = None
    split_brain_every: int = DEFAULT_EVERY
    clock_step: float = DEFAULT_STEP_THRESHOLD

    def __post_init__(self) -> None:
        check_name("node_id", self.node_id)  # InvalidInput: as a job's name (status shows it)
        # InvalidInput: a PGPULSE_* or libpq name the operator asked shell commands to get
        check_shell_env(self.handler_options.get("shell_env") or ())
        if self.lease <= 2 * self.heartbeat_interval:
            beat = self.heartbeat_interval
            raise ValueError(
                f"lease must be longer than two heartbeat intervals (2 x {beat:g} s), "
                f"got lease {self.lease:g} s"
            )

    @property
    def shell_mode(self) -> ShellMode:
        """How this node treats ``shell`` jobs, as it advertises it in the registry."""
        if not self.allow_shell:
            return "off"
        return "dry-run" if self.handler_options.get("shell_dry_run") else "run"

    @property
    def safety_margin(self) -> float:
        """Seconds before lease expiry at which an unrenewed attempt is cancelled."""
        return min(self.heartbeat_interval, self.lease / 4)


class Node:
    """One scheduler node.

    Args:
        store: the store (its pool is the node's connection pool).
        dsn: DSN for the node's dedicated sessions (claims, heartbeats and the leader lock,
            LISTEN).
        handlers: handlers by name.
        config: node settings.
        pool_apart: the store's pool has a DSN of its own (``--pool-database-url``: through
            PgBouncer, which chooses its server): a split brain moves the dedicated sessions
            to the newest primary, not the pool.
    """

    def __init__(
        self,
        store: Store,
        dsn: str,
        handlers: Mapping[str, Handler],
        config: NodeConfig | None = None,
        *,
        pool_apart: bool = False,
    ) -> None:
        self.store = store
        self.dsn = dsn
        self.config = config or NodeConfig()
        self.handlers = {
            name: handler
            for name, handler in handlers.items()
            if (name != "shell" or self.config.allow_shell)
            and (name not in NEEDS_OPTION or self.config.handler_options.get(NEEDS_OPTION[name][0]))
        }
        self.node_id = self.config.node_id
        #: The shards this node owns among every live node (what ``status`` shows).
        self.shards: tuple[int, ...] = ()
        #: The shard count ``shards`` and ``routes`` are of (the database's, as of the last
        #: heartbeat; ``None`` before the first).
        self.shard_count: int | None = None
        self._watched: frozenset[int] = frozenset()
        # The live nodes with their handlers as of the last heartbeat that sent them, their
        # digest (sent back: an unchanged set is not sent again), and what the current
        # placement was computed from.
        self._live: Mapping[str, Sequence[str]] = {}
        self._members: str | None = None
        self._placed_for: tuple[str | None, int, str] | None = None
        self._registered = False
        self._hostname, self._pid = socket.gethostname(), os.getpid()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.started = asyncio.Event()
        # Heartbeats and renewals use their own session, which reconnects at once after a
        # database restart (the pool would back off for seconds: leases would be lost).
        self._beat_session = Session(dsn, f"pgpulse:{self.node_id}:beat")
        self.beat = ClaimStore(self._beat_session)
        # The claim loop claims and records through a session of its own, planned for it.
        self._claim_session = Session(
            dsn, f"pgpulse:{self.node_id}:claim", CLAIM_SESSION_SETTINGS, keeps_state=True
        )
        self.sweeper = Sweeper(
            store, self._beat_session, self.node_id, keep_runs=self.config.keep_runs
        )
        #: What the node tells of what it did (:meth:`add_observer`).
        self.observers = Observers()
        # Sync handlers run in threads of the node's own: one per slot, so a claimed job never
        # waits for a thread, and a node hosted in an application's event loop leaves that
        # loop's default executor to the application.
        self._threads = concurrent.futures.ThreadPoolExecutor(self.config.slots, "pgpulse-handler")
        self.attempts = Attempts(
            NodeHandlers(self.handlers, self.node_id, self.config.handler_options, self._threads),
            slots=self.config.slots,
            lease=self.config.lease,
            margin=self.config.safety_margin,
            wake=self._wake,
            observer=self.observers,
        )
        self.listener = Listener(
            dsn,
            self.node_id,
            self._wants,
            self._wake,
            self._stopping,
            self.config.heartbeat_interval,
            on_note=lambda: self.recorder.hint_occurrences(),
        )
        self.recorder = Recorder(
            ClaimStore(self._claim_session),
            self.attempts,
            self.node_id,
            lease=self.config.lease,
            poll=self.config.poll_interval,
            retry_cap=self.config.heartbeat_interval,
            wake=self._wake,
            stopping=self._stopping,
        )
        #: The database clock, as the heartbeats read it (the leader reports its steps).
        self.db_clock = ClockWatch(self.node_id, threshold=self.config.clock_step)
        self.split_brain: SplitBrainWatch | None = None
        if self.config.split_brain_every > 0 and several_hosts(dsn):
            self.split_brain = SplitBrainWatch(
                dsn,
                self.node_id,
                sessions=(self._beat_session, self._claim_session),
                pool=(
                    store.pool
                    if isinstance(store.pool, AsyncConnectionPool) and not pool_apart
                    else None
                ),
                listener=self.listener,
                observer=self.observers,
                every=self.config.split_brain_every * self.config.heartbeat_interval,
            )
        #: The node's services, each a named task beside the core's (:meth:`add_service`).
        self.services: list[Service] = []
        self.add_service(
            Periodic(
                "prune",
                self.sweeper.prune_once,
                interval=self.config.heartbeat_interval,
                membership=lambda: self.membership,
                leader_only=True,
            )
        )
        if self.split_brain is not None:
            self.add_service(self.split_brain)

    def add_service(self, service: Service) -> None:
        """Run ``service`` as a task of the node, named by it (before :meth:`run`).

        Raises:
            ValueError: the node has a task of that name already.
        """
        taken = {"claim", "heartbeat", "listen", *(s.name for s in self.services)}
        if service.name in taken:
            raise ValueError(f"node {self.node_id} has a task named {service.name!r} already")
        self.services.append(service)

    def add_observer(self, observer: NodeObserver) -> None:
        """Tell ``observer`` what the node does from now on (before :meth:`run`)."""
        self.observers.observers.append(observer)

    @property
    def membership(self) -> Membership:
        """This node's place in the cluster now: its claim routes, the shard count, its shards
        and whether it leads (what services read)."""
        return Membership(self.routes, self.shard_count, self.shards, self.sweeper.is_leader)

    @property
    def routes(self) -> Routes:
        """What the node claims: for each handler it has, its shards among the nodes that have
        it (the claim loop's, :attr:`Recorder.routes <pgpulse.node.recorder.Recorder.routes>`)."""
        return self.recorder.routes

    @routes.setter
    def routes(self, routes: Routes) -> None:
        self.recorder.routes = routes

    # -- lifecycle -------------------------------------------------------------------------

    async def register(self, *, rejoin: bool = False) -> None:
        """Register this node, with the handlers it can run and its shell mode.

        Raises:
            NodeIdTaken: another live process holds this node id; nothing was written.
        """
        # A start registers through the pool (the node's own sessions open with its loops); a
        # rejoin through the heartbeat session, which register_node does not count as a holder's.
        registry = self.beat if rejoin else self.store
        if not rejoin:
            with _quiet_db_errors("outage_check"):  # before: registering hides the last beat
                await self.observers.node_registering()
        await registry.register_node(
            self.node_id,
            hostname=self._hostname,
            pid=self._pid,
            slots=self.config.slots,
            handlers=list(self.handlers),
            shell=self.config.shell_mode,
            ttl=self.config.node_ttl,
            rejoin=rejoin,
        )
        self._registered = True

    async def open_claim_session(self) -> None:
        """Open the claim session now, checking that it keeps its state (not behind a pooler
        in transaction mode: :func:`~pgpulse.db.database.check_session_kept`).

        Raises:
            SessionStateLost: a pooler in transaction mode is in between; the node must not
                start.
            DatabaseUnavailable, psycopg.Error: the database does not answer.
        """
        async with self._claim_session.connection():
            pass

    async def deregister(self) -> None:
        """Mark this node's registry row stopped (its id is free at once); a row another
        process took over is left alone."""
        await self.store.stop_node(self.node_id, hostname=self._hostname, pid=self._pid)

    async def start(self) -> None:
        """Register this node (unless :meth:`register` did) and take its first share of shards
        (before claiming anything).

        Raises:
            NodeIdTaken: another live process holds this node id; nothing was written.
        """
        if self.split_brain is not None:  # before any write: on a split brain, the newest host
            with _quiet_db_errors("split_brain_check"):
                await self.split_brain.check_once()
        if not self._registered:
            await self.register()
        with _quiet_db_errors("first heartbeat"):  # no shards until a heartbeat gets through
            await self.heartbeat_once()
        revived = await self.store.revive_jobs(list(self.handlers))
        if revived:
            log.info(
                "revived %s whose handler this node knows",
                plural(revived, "job"),
                extra={"action": "jobs_revived", "count": revived},
            )
        log.info(
            "node %s started with %s",
            self.node_id,
            plural(self.config.slots, "slot"),
            extra={"action": "node_started", "node": self.node_id},
        )

    async def run(self) -> None:
        """Run until :meth:`stop`, then drain: finish, or hand back, running attempts."""
        await self.start()
        self.started.set()
        try:
            await self._run_loops()
        except BaseExceptionGroup as group:
            # A node whose id another process took over (its row was stale) stops, saying so.
            taken = group.subgroup(NodeIdTaken)
            if taken is None:
                raise
            first = taken.exceptions[0]
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
        finally:
            await self._drain()

    async def _run_loops(self) -> None:
        """Run :meth:`_loops` until they end; once the node stops, they get
        :data:`STOP_STEP_TIMEOUT` seconds to finish their step (a heartbeat waiting on a locked
        table would hold the drain up), then they are cancelled."""
        loops = asyncio.create_task(self._loops(), name="loops")
        stopping = asyncio.create_task(self._stopping.wait(), name="stopping")
        try:
            await asyncio.wait({loops, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not loops.done():
                await asyncio.wait({loops}, timeout=STOP_STEP_TIMEOUT)
            if not loops.done():
                self._overran("the loops' last step")
                loops.cancel()
                await asyncio.wait({loops}, timeout=STOP_STEP_TIMEOUT)
                return
            loops.result()
        finally:
            stopping.cancel()
            if not loops.done():  # run() itself was cancelled
                loops.cancel()

    async def _loops(self) -> None:
        """The node's loops, in one task group: if one dies, the node stops."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.recorder.run(), name="claim")
            # A heartbeat may take as long as a renewal is still useful: a slow link (or a
            # session reconnecting through one) can still keep the leases.
            group.create_task(
                run_every(
                    self.heartbeat_once,
                    "heartbeat",
                    self.config.heartbeat_interval,
                    self._stopping,
                    limit=self.config.lease - self.config.safety_margin,
                    logger=log,
                ),
                name="heartbeat",
            )
            group.create_task(self.listener.run(), name="listen")
            for service in self.services:
                group.create_task(service.run(self._stopping), name=service.name)

    def stop(self) -> None:
        """Ask the node to stop claiming and drain (safe to call from a signal handler)."""
        self._stopping.set()
        self._wake.set()

    async def _drain(self) -> None:
        """Give running attempts ``drain_timeout`` seconds to finish (writing their outcomes
        as they come and renewing their leases meanwhile: a drain may outlast a lease), then
        cancel the rest, write what they decided and hand their claims back, then say goodbye.
        The hand-back and the goodbye each get :data:`STOP_STEP_TIMEOUT` seconds, so a
        database that hangs (a locked ``pgpulse_nodes``, a lost synchronous standby) never
        holds the process: past a deadline the node says so in one line and goes on."""
        interval = self.config.heartbeat_interval
        if self.attempts.unfinished():
            log.info(
                "draining %s",
                plural(len(self.attempts.unfinished()), "running attempt"),
                extra={"action": "node_draining", "node": self.node_id},
            )
        until = time.monotonic() + self.config.drain_timeout
        beat_at = time.monotonic() + interval
        while (left := until - time.monotonic()) > 0:
            await self.recorder.flush(min(left, interval))  # what was decided meanwhile
            if not self.attempts.unfinished():
                break
            await self.attempts.wait_unfinished(min(until, beat_at) - time.monotonic())
            if self.attempts.unfinished() and time.monotonic() >= beat_at:
                with _quiet_db_errors("heartbeat"):  # also says "draining": no shards
                    async with asyncio.timeout(interval):
                        await self.heartbeat_once()
                beat_at = time.monotonic() + interval
        stopped = self.attempts.stop()
        if not await _within(STOP_STEP_TIMEOUT, self._hand_back_stopped(stopped)):
            self._overran("the hand-back")
        if not await _within(STOP_STEP_TIMEOUT, self._deregister_quietly()):
            self._overran("the deregistration")
        await self.close()
        # A sync handler's thread cannot be interrupted: its result was discarded, and the
        # process need not wait for it.
        self._threads.shutdown(wait=False, cancel_futures=True)
        log.info("node %s stopped", self.node_id, extra={"action": "node_stopped"})

    def _overran(self, step: str) -> None:
        """Say, in one line, that a step of the shutdown ran out of time and was given up."""
        log.warning(
            "node %s: %s did not finish within %s; stopping without it (unreleased leases "
            "expire and are reaped, an unwritten stop looks like a lost node)",
            self.node_id,
            step,
            seconds_text(STOP_STEP_TIMEOUT),
            extra={"action": "stop_step_timeout", "step": step},
        )

    async def _hand_back_stopped(self, stopped: Sequence[Attempt]) -> None:
        """Wait for the cancelled attempts, write what they decided, hand back their claims and
        let the services finish what those writes queued (the last check-ins: the hand-back step
        of :meth:`_drain`)."""
        if stopped:
            await asyncio.wait([attempt.task for attempt in stopped], timeout=STOP_STEP_TIMEOUT)
        await self.recorder.flush(STOP_STEP_TIMEOUT)  # outcomes decided before the cancel
        await self._hand_back([attempt for attempt in stopped if attempt.outcome is None])
        if self.services:  # what the last writes queued (the ends they committed)
            await asyncio.gather(*(service.drain(2.0) for service in self.services))

    async def _deregister_quietly(self) -> None:
        with _quiet_db_errors("stop_node"):
            await self.deregister()

    async def close(self) -> None:
        """Close the node's own connections, its heartbeat and claim sessions (leadership goes
        with the heartbeat session, which holds the leader lock). :meth:`run` closes them as it
        ends; a node driven step by step (:meth:`start`, :meth:`claim_once`,
        :meth:`heartbeat_once`) is closed with this. Nothing is drained or handed back. A later
        step opens the sessions again. Never raises a database error."""
        await self._beat_session.close()
        await self._claim_session.close()

    async def _hand_back(self, stopped: Sequence[Attempt]) -> None:
        """Hand the claims of stopped attempts back, so other nodes need not wait for their
        leases to expire. An attempt whose handler had started counts: the history keeps it,
        with the reason, and the next claim is the next attempt (only a claim that never
        started its handler goes back uncounted)."""
        if not stopped:
            return
        reason = (
            f"handed back by node {self.node_id} at shutdown: unfinished after the drain "
            f"timeout ({seconds_text(self.config.drain_timeout)})"
        )
        started = {attempt.key for attempt in stopped if attempt.started}
        with _quiet_db_errors("hand_back"):
            handed, counted = await self.store.hand_back(
                [attempt.key for attempt in stopped], started=started, reason=reason
            )
            log.info(
                "handed back %s (%s)",
                plural(handed, "unfinished claim"),
                f"{counted} counted as {'an attempt' if counted == 1 else 'attempts'}",
                extra={"action": "claims_released", "count": handed, "counted": counted},
            )

    # -- claiming --------------------------------------------------------------------------

    async def claim_once(self) -> int:
        """One step of the claim loop (:meth:`Recorder.run_once`); return how many jobs it
        claimed."""
        return len((await self.recorder.run_once()).jobs)

    # -- heartbeat, leases, shards ---------------------------------------------------------

    def _wants(self, job_id: int) -> bool:
        """Whether a wake-up for job ``job_id`` is this node's: its shard is on a route."""
        return self.shard_count is not None and job_id % self.shard_count in self._watched

    async def heartbeat_once(self) -> None:
        """Renew the leases of running attempts; then, in one round trip, record liveness, lead
        (or try to) and sweep (:meth:`~pgpulse.db.claims.ClaimStore.heartbeat`); then, if the live
        nodes, their handlers or the database's shard count changed, recompute the owned shards
        and the claim routes (in a thread: the event loop never waits on the placement).
        Renewal goes first: on a slow link it is the write that keeps work alive.

        Raises:
            NodeIdTaken: another process took this node's id over while it was silent past
                its time-to-live; the node must stop.
        """
        await self.renew_once()
        state = "draining" if self._stopping.is_set() else "alive"
        sent = self.db_clock.monotonic()
        beat = await self.beat.heartbeat(
            self.node_id,
            running=len(self.attempts),
            shards=self.shards,
            ttl=self.config.node_ttl,
            state=state,
            leading=self.sweeper.leading(),
            backup_delay=self.config.node_ttl,
            hostname=self._hostname,
            pid=self._pid,
            shard_count=self.shard_count,
            known=self._members,
            claimed_at=self.recorder.claimed_at,
            claim_error=self.recorder.claim_error,
        )
        self.sweeper.observe(beat)
        await self._watch_clock(ClockReading(beat.db_now, sent, self.db_clock.monotonic()))
        if beat.handlers is not None:
            self._live, self._members = beat.handlers, beat.members
        if state == "alive" and self.node_id not in self._live:
            # The row is missing (pruned), or another process took the id over while this one
            # was silent past its time-to-live: then this raises NodeIdTaken and the node stops.
            await self.register(rejoin=True)
            self._members = None  # the next heartbeat sends the set with this node back in it
        placed_for = (self._members, beat.shard_count, state)
        if placed_for == self._placed_for:
            return
        routes: dict[str, tuple[int, ...]] = {}
        shards: tuple[int, ...] = ()
        if state == "alive":
            routes, shards = await asyncio.to_thread(
                _place, self.node_id, tuple(self.handlers), self._live, beat.shard_count
            )
        self._placed_for = placed_for
        self._apply(routes, shards, beat.shard_count)

    async def _watch_clock(self, reading: ClockReading) -> None:
        """The leader reports a step of the database clock (:mod:`pgpulse.node.db_clock`): logged
        by the watch, told to the observers here (their failed write is logged, never fails the
        beat)."""
        step = self.db_clock.observe(reading, leading=self.sweeper.is_leader)
        if step is None:
            return
        with _quiet_db_errors("db_clock_alert"):
            await self.observers.clock_stepped(self.db_clock.step_of(step))

    def _apply(
        self, routes: dict[str, tuple[int, ...]], shards: tuple[int, ...], count: int
    ) -> None:
        """Claim along ``routes`` (of ``count`` shards) from now on, and show ``shards``. No
        await here: the claim loop sees the routes and the count change together."""
        if routes != self.routes or count != self.shard_count:
            self.routes = routes
            self.shard_count = count
            self.recorder.store.shard_count = count
            self._watched = watched_shards(routes)
            self.recorder.hint_occurrences()
            self._wake.set()
        if shards != self.shards:
            log.info(
                "node %s owns %d of %s among %s",
                self.node_id,
                len(shards),
                plural(count, "shard"),
                plural(len(set(self._live) | {self.node_id}), "live node"),
                extra={"action": "shards_changed", "shards": list(shards), "shard_count": count},
            )
            self.shards = shards
            metrics.set_shards(len(shards))
            self.recorder.hint_occurrences()
            self._wake.set()

    async def renew_once(self) -> None:
        """Renew the leases of every running attempt (fenced); the attempts whose renewal the
        database refused are cancelled (:meth:`Attempts.renewed`)."""
        held = self.attempts.leases()
        if not held:
            return
        sent = time.monotonic()
        renewed = await self.beat.renew(held, lease=self.config.lease)
        self.attempts.renewed(held, renewed, sent)


def _place(
    node: str, handlers: Sequence[str], live: Mapping[str, Sequence[str]], count: int
) -> tuple[dict[str, tuple[int, ...]], tuple[int, ...]]:
    """``node``'s claim routes (:func:`pgpulse.core.routing.routes_for`) and its shards among every
    live node (:func:`pgpulse.core.sharding.shards_for`), at ``count`` shards (pure; cached by the
    set of nodes, so an unchanged cluster costs lookups)."""
    return routes_for(node, handlers, live, count), shards_for(node, live, count)


#: Seconds each step of a node's shutdown after the drain may take (the loops' last step, the
#: hand-back, the deregistration); past it the step is given up (:meth:`Node._drain`).
STOP_STEP_TIMEOUT = 5.0


async def _within(seconds: float, step: Coroutine[Any, Any, None]) -> bool:
    """Run ``step`` for at most ``seconds``; return whether it finished. One that did not is
    cancelled, and waited for no more than ``seconds`` again (psycopg asks the server to
    cancel a statement, which a hung server may not answer). Its errors propagate."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if task in done:
        task.result()
        return True
    task.cancel()
    await asyncio.wait({task}, timeout=seconds)
    return False


def _quiet_db_errors(what: str) -> contextlib.AbstractContextManager[None]:
    """:func:`~pgpulse.node.services.quiet_db_errors`, logged as the engine's."""
    return quiet_db_errors(what, log)
