"""The engine: one scheduler node's loops.

A :class:`Node` runs four named tasks in one ``asyncio.TaskGroup`` (if one dies, the node stops
loudly):

* ``claim``: in one transaction and one round trip per step, write the outcomes of the attempts
  that ended (group commit) and claim due jobs of the owned shards, at most as many as there are
  free worker slots (backpressure, invariant 6); start each at once, then sleep until the next
  due instant (the claim returns it), a wake-up notification, or an ended attempt;
* ``heartbeat``: every ``heartbeat_interval`` seconds renew the leases of running attempts
  (fenced), then, in one statement, record liveness, try to lead (or keep leading) and return
  expired leases to the pool — the leader's every one, the others' as backup for a silent leader
  (see :mod:`pgpulse.sweeper`); recompute shard ownership from the live nodes it returns;
* ``prune``: the leader deletes old history once an hour; other nodes send nothing;
* ``listen``: LISTEN for ``pgpulse_wakeup`` so new, triggered or reaped work is claimed at once.

Self-fencing (invariant 3): each running attempt has a deadline, ``lease - safety_margin`` after
the last successful renewal was *sent*. If it passes without a renewal (the database is
unreachable, the node was paused), the attempt is cancelled before the lease can expire, and
nothing is recorded as done. A renewal that the database refuses (stale token) cancels at once.
One timer per node watches every deadline (armed for the earliest), not one timer per attempt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgpulse import metrics
from pgpulse.database import Session, connect
from pgpulse.dispatch import Dispatcher
from pgpulse.errors import DatabaseUnavailable
from pgpulse.handlers import Handler
from pgpulse.model import ClaimedJob, Outcome, Step
from pgpulse.recorder import OutcomeRecorder
from pgpulse.sharding import shards_for
from pgpulse.store import CLAIM_SESSION_SETTINGS, Store
from pgpulse.sweeper import Sweeper

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Settings of one node. Durations are seconds.

    Attributes:
        node_id: unique id; default ``<hostname>-<pid>-<random>``.
        slots: worker slots — the most attempts this node runs at once.
        lease: lease length granted by a claim and by each renewal.
        heartbeat_interval: seconds between heartbeats (lease renewals, liveness, leadership,
            lease sweeping).
        node_ttl: a node silent this long is dead (its shards move); a node that does not lead
            also reaps leases expired this long (backup for a silent leader).
        poll_interval: longest sleep between two claims when nothing is known to be due.
        drain_timeout: on stop, how long running attempts may take to finish.
        keep_runs: how long finished run history is kept (leader prunes).
        handler_options: passed to handlers in ``RunContext.options``.
        allow_shell: run ``shell`` jobs. Off by default: a ``shell`` job runs commands on every
            node, so each node opts in (``pgpulse node run --allow-shell-jobs``). A node without
            it fails shell jobs it claims, naming the flag; one with it revives them at start.
    """

    node_id: str = field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    )
    slots: int = 10
    lease: float = 30.0
    heartbeat_interval: float = 2.0
    node_ttl: float = 10.0
    poll_interval: float = 5.0
    drain_timeout: float = 10.0
    keep_runs: float = 7 * 86400.0
    handler_options: Mapping[str, Any] = field(default_factory=dict)
    allow_shell: bool = False

    def __post_init__(self) -> None:
        if self.lease <= 2 * self.heartbeat_interval:
            raise ValueError("lease must be longer than two heartbeat intervals")

    @property
    def safety_margin(self) -> float:
        """Seconds before lease expiry at which an unrenewed attempt is cancelled."""
        return min(self.heartbeat_interval, self.lease / 4)


@dataclass(slots=True)
class _Attempt:
    job: ClaimedJob
    task: asyncio.Task[Any]
    claimed_mono: float
    deadline: float  # monotonic seconds: cancelled unless renewed before (self-fencing)
    timeout_at: float  # monotonic seconds: cancelled as timed out (inf: no timeout)
    stop_reason: str | None = None
    finishing: bool = False  # its fenced outcome write is under way: a refused renewal
    #                           means that write committed or will be refused; no cancel


class Node:
    """One scheduler node.

    Args:
        store: the store (its pool is the node's connection pool).
        dsn: DSN for the node's dedicated sessions (LISTEN, leader lock).
        handlers: handlers by name.
        config: node settings.
    """

    def __init__(
        self,
        store: Store,
        dsn: str,
        handlers: Mapping[str, Handler],
        config: NodeConfig | None = None,
    ) -> None:
        self.store = store
        self.dsn = dsn
        self.config = config or NodeConfig()
        self.handlers = {
            name: handler
            for name, handler in handlers.items()
            if name != "shell" or self.config.allow_shell
        }
        self.node_id = self.config.node_id
        self.shards: tuple[int, ...] = ()
        self.running: dict[int, _Attempt] = {}
        # Heartbeats and renewals use their own session, which reconnects at once after a
        # database restart (the pool would back off for seconds: leases would be lost).
        self._beat_session = Session(dsn, f"pgpulse:{self.node_id}:beat")
        self.beat = Store(self._beat_session)
        # The claim loop claims and records through a session of its own, planned for it.
        self._claim_session = Session(dsn, f"pgpulse:{self.node_id}:claim", CLAIM_SESSION_SETTINGS)
        self.claimer = Store(self._claim_session)
        self.sweeper = Sweeper(
            store, self._beat_session, self.node_id, keep_runs=self.config.keep_runs
        )
        self.recorder = OutcomeRecorder(store, self._settled)
        self.dispatcher = Dispatcher(
            self.recorder,
            self.handlers,
            self.node_id,
            self.config.handler_options,
            self._estimated_db_now,
            self._finishing,
            self._timed_out,
        )
        self._wake = asyncio.Event()
        self._watchdog: asyncio.Handle | None = None
        self._watchdog_at = 0.0  # monotonic deadline the watchdog is armed for
        self._deadline_after = self.config.lease - self.config.safety_margin  # see _deadline
        self._stopping = asyncio.Event()
        self.started = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Register this node and take its first share of shards (before claiming anything)."""
        await self.store.register_node(
            self.node_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            slots=self.config.slots,
            handlers=list(self.handlers),
        )
        with _quiet_db_errors("first heartbeat"):  # no shards until a heartbeat gets through
            await self.heartbeat_once()
        revived = await self.store.revive_jobs(list(self.handlers))
        if revived:
            log.info(
                "revived %d jobs whose handler this node knows",
                revived,
                extra={"action": "jobs_revived", "count": revived},
            )
        log.info(
            "node %s started with %d slots",
            self.node_id,
            self.config.slots,
            extra={"action": "node_started", "node": self.node_id},
        )

    async def run(self) -> None:
        """Run until :meth:`stop`, then drain: finish, or hand back, running attempts."""
        loop = asyncio.get_running_loop()
        # Sync handlers run in threads: one per slot, so a claimed job never waits for a thread.
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(self.config.slots, "pgpulse-handler")
        )
        await self.start()
        self.started.set()
        self.recorder.attach(self._wake)  # the claim loop writes outcomes with its claims
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._claim_loop(), name="claim")
                # A heartbeat may take as long as a renewal is still useful: a slow link (or a
                # session reconnecting through one) can still keep the leases.
                group.create_task(
                    self._every(
                        self.heartbeat_once,
                        "heartbeat",
                        self.config.lease - self.config.safety_margin,
                    ),
                    name="heartbeat",
                )
                group.create_task(self._every(self.sweeper.prune_once, "prune"), name="prune")
                group.create_task(self._listen_loop(), name="listen")
        finally:
            await self._drain()

    def stop(self) -> None:
        """Ask the node to stop claiming and drain (safe to call from a signal handler)."""
        self._stopping.set()
        self._wake.set()

    async def _drain(self) -> None:
        self.recorder.detach()  # no claim loop any more: outcomes are written on their own
        if self.running:
            log.info(
                "draining %d running attempts",
                len(self.running),
                extra={"action": "node_draining", "node": self.node_id},
            )
            pending = {attempt.task for attempt in self.running.values()}
            until = time.monotonic() + self.config.drain_timeout
            while pending and (left := until - time.monotonic()) > 0:
                _, pending = await asyncio.wait(
                    pending, timeout=min(left, self.config.heartbeat_interval)
                )
                if pending:  # keep their leases, or the watchdog stops them before the grace
                    with _quiet_db_errors("heartbeat"):  # ends (a drain may outlast a lease)
                        async with asyncio.timeout(self.config.heartbeat_interval):
                            await self.heartbeat_once()  # also says "draining": no shards
        unfinished = [a for a in self.running.values() if not a.finishing]
        for attempt in unfinished:
            attempt.stop_reason = "shutdown"
            attempt.task.cancel()
        if unfinished:
            await asyncio.wait([a.task for a in unfinished], timeout=5)
        with _quiet_db_errors("flush outcomes"):
            async with asyncio.timeout(10):
                await self.recorder.flush()  # outcomes decided before the cancel still land
        unfinished = [a for a in unfinished if not a.finishing]  # (one may decide meanwhile)
        if unfinished:
            with _quiet_db_errors("release_runs"):
                released = await self.store.release_runs(
                    [(a.job.id, a.job.fencing_token) for a in unfinished],
                    reason=f"released by node {self.node_id} at shutdown",
                )
                log.info(
                    "released %d unfinished claims",
                    released,
                    extra={"action": "claims_released", "count": released},
                )
        metrics.set_running(len(self.running))
        with _quiet_db_errors("stop_node"):
            await self.store.stop_node(self.node_id)
        await self._beat_session.close()  # gives leadership up: the session held the lock
        await self._claim_session.close()
        log.info("node %s stopped", self.node_id, extra={"action": "node_stopped"})

    # -- claiming --------------------------------------------------------------------------

    async def claim_once(self) -> int:
        """One step of the claim loop (see :meth:`_step`); return how many jobs it claimed."""
        return len((await self._step()).jobs)

    async def _step(self) -> Step:
        """Write the outcomes queued so far and claim as many due jobs as there are free slots
        (one transaction, one round trip: :meth:`Store.finish_and_claim`); start each claimed
        job at once.

        The attempts whose outcomes go out in this step end with it, so their slots count as
        free: after the step at most ``slots`` attempts run (invariant 6). A failed step
        claims nothing and queues its outcomes again.
        """
        batch = self.recorder.take()
        ending = sum(1 for outcome in batch if self._holds(outcome.job))
        free = self.config.slots - len(self.running) + ending
        limit = free if self.shards and not self._stopping.is_set() else 0
        if not batch and limit <= 0:
            return Step(set(), [], None, None)
        sent = time.monotonic()
        try:
            step = await self.claimer.finish_and_claim(
                batch, self.node_id, self.shards, limit, lease=self.config.lease
            )
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                self.recorder.put_back(batch)
            else:  # not the connection: find the outcome the database refuses, then go on
                await self.recorder.write_each(batch)
            raise
        except BaseException:
            self.recorder.put_back(batch)
            raise
        self.recorder.settle(batch, step.written)  # frees their slots: see _settled
        if limit:
            metrics.observe_claim(time.monotonic() - sent, len(step.jobs))
        arrived = time.monotonic()
        for job in step.jobs:
            self._start(job, sent, arrived)
        metrics.set_running(len(self.running))
        return step

    def _start(self, job: ClaimedJob, claimed_mono: float, started_mono: float) -> None:
        """Start an attempt of ``job``: its lease counts from ``claimed_mono`` (when the claim
        was sent), its timeout from ``started_mono`` (when the claim's reply arrived)."""
        task = asyncio.create_task(self.dispatcher.dispatch(job), name=f"run:{job.name}")
        timeout_at = math.inf if job.timeout is None else started_mono + job.timeout
        attempt = _Attempt(job, task, claimed_mono, self._deadline(claimed_mono), timeout_at)
        self.running[job.id] = attempt
        self._arm_watchdog(min(attempt.deadline, timeout_at))
        task.add_done_callback(functools.partial(self._finished, job.id))
        if log.isEnabledFor(logging.DEBUG):  # not even the log record's extras otherwise
            log.debug(
                "claimed %s/%s for %s",
                job.tenant,
                job.name,
                job.scheduled_for,
                extra={"action": "run_claimed", "job": job.name},
            )

    def _attempt_of(self, job: ClaimedJob) -> _Attempt | None:
        """The running attempt of this claim of ``job`` (same fencing token), if any: the job
        may have been claimed again since, by this node, under a newer token."""
        attempt = self.running.get(job.id)
        if attempt is None or attempt.job.fencing_token != job.fencing_token:
            return None
        return attempt

    def _holds(self, job: ClaimedJob) -> bool:
        """Whether this claim of ``job`` (by fencing token) still occupies a slot."""
        return self._attempt_of(job) is not None

    def _settled(self, outcome: Outcome, written: bool, error: psycopg.Error | None) -> None:
        """The recorder's report on an outcome's write: forget the attempt (this claim of the
        job: its outcome was written or refused, so its slot and lease are done with), then
        count and log it."""
        if self._holds(outcome.job):
            del self.running[outcome.job.id]
        self.dispatcher.settled(outcome, written, error)

    def _finished(self, job_id: int, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "attempt of job %d failed: %r",
                job_id,
                task.exception(),
                extra={"action": "attempt_crashed"},
            )
        attempt = self.running.get(job_id)
        if attempt is None or attempt.task is not task or attempt.finishing:
            return  # the job was claimed again since, or its outcome's write will forget it
        del self.running[job_id]
        metrics.set_running(len(self.running))
        self._wake.set()

    def _finishing(self, job: ClaimedJob) -> None:
        """Mark this claim's attempt as writing its outcome (no cancel from now on)."""
        attempt = self._attempt_of(job)
        if attempt is not None:
            attempt.finishing = True

    def _deadline(self, renewed_mono: float) -> float:
        """When an attempt whose lease was granted or renewed at ``renewed_mono`` (the request's
        send time) must stop unless renewed again: ``safety_margin`` before the lease ends."""
        return renewed_mono + self._deadline_after

    def _arm_watchdog(self, deadline: float) -> None:
        """Make the node's one watchdog timer fire no later than ``deadline`` (monotonic)."""
        timer = self._watchdog
        # The armed deadline is kept beside the handle: a loop may return a plain Handle, with
        # no when(), for an instant already past (uvloop does; a paused node meets that).
        if timer is None or timer.cancelled() or self._watchdog_at > deadline:
            if timer is not None:
                timer.cancel()
            loop = asyncio.get_running_loop()
            self._watchdog_at = deadline
            self._watchdog = loop.call_at(loop.time() + (deadline - time.monotonic()), self._watch)

    def _watch(self) -> None:
        """The watchdog fired: cancel every attempt past its lease deadline or its timeout,
        re-arm for the next of either."""
        self._watchdog = None
        now = time.monotonic()
        later = []
        for attempt in list(self.running.values()):
            if attempt.deadline <= now:
                self._lease_lost(attempt, "lease not renewed in time")
            elif attempt.timeout_at <= now:
                self._time_out(attempt)
            else:
                later.append(min(attempt.deadline, attempt.timeout_at))
        if later:
            self._arm_watchdog(min(later))

    def _time_out(self, attempt: _Attempt) -> None:
        """Cancel an attempt past its job's timeout; it ends as a failed attempt
        (:func:`~pgpulse.dispatch.run_attempt` asks :meth:`_timed_out`)."""
        if attempt.task.done() or attempt.finishing or attempt.stop_reason is not None:
            return
        attempt.stop_reason = "timeout"
        attempt.timeout_at = math.inf
        attempt.task.cancel()

    def _timed_out(self, job: ClaimedJob) -> bool:
        """Whether this claim of ``job`` was cancelled for its timeout (and nothing else)."""
        attempt = self._attempt_of(job)
        return attempt is not None and attempt.stop_reason == "timeout"

    def _lease_lost(self, attempt: _Attempt, why: str) -> None:
        if attempt.task.done() or self.running.get(attempt.job.id) is not attempt:
            return
        attempt.stop_reason = "lease_lost"
        metrics.lease_renewal_failed()
        attempt.task.cancel()
        log.warning(
            "lease of %s/%s lost (%s); attempt cancelled, nothing recorded",
            attempt.job.tenant,
            attempt.job.name,
            why,
            extra={"action": "lease_lost", "job": attempt.job.name},
        )

    def _estimated_db_now(self, job: ClaimedJob) -> datetime:
        """The database's instant now, as claim time plus monotonic time elapsed since."""
        attempt = self.running.get(job.id)
        elapsed = time.monotonic() - attempt.claimed_mono if attempt else 0.0
        return job.db_now + timedelta(0, elapsed)  # (days, seconds): half the keyword call

    async def _claim_loop(self) -> None:
        retry_in = 0.1
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                # A claim whose reply is lost is not lost work: its leases expire and are reaped.
                async with asyncio.timeout(self.config.lease / 2):
                    step = await self._step()
            except (psycopg.Error, OSError, TimeoutError, DatabaseUnavailable) as exc:
                log.warning(
                    "claim failed: %s", exc or type(exc).__name__, extra={"action": "claim_failed"}
                )
                await _wait(self._stopping, retry_in)  # queued outcomes go out with the retry
                retry_in = min(retry_in * 2, self.config.heartbeat_interval)
                continue
            retry_in = 0.1
            if self.recorder.pending:
                continue  # outcomes arrived during the step: write them (and claim) now
            if len(self.running) >= self.config.slots:
                await self._wake.wait()  # every slot busy: only an ended attempt (or a stop, a
                continue  # shard change) makes a claim useful, and each of those wakes us
            delay = self.config.poll_interval  # or until a freed slot or a notification wakes us
            if step.next_due is not None and step.db_now is not None:
                delay = min(delay, (step.next_due - step.db_now).total_seconds() + 0.001)
            await _wait(self._wake, max(delay, 0.0))

    # -- heartbeat, leases, shards ---------------------------------------------------------

    async def heartbeat_once(self) -> None:
        """Renew the leases of running attempts; then, in one statement, record liveness, lead
        (or try to) and reap expired leases; then recompute the owned shards. Renewal goes
        first: on a slow link it is the write that keeps work alive."""
        await self.renew_once()
        state = "draining" if self._stopping.is_set() else "alive"
        beat = await self.beat.heartbeat(
            self.node_id,
            running=len(self.running),
            shards=self.shards,
            ttl=self.config.node_ttl,
            state=state,
            leading=self.sweeper.leading(),
            backup_delay=self.config.node_ttl,
        )
        self.sweeper.observe(beat)
        live = beat.live
        if state == "alive" and self.node_id not in live:
            await self.beat.register_node(
                self.node_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                slots=self.config.slots,
                handlers=list(self.handlers),
            )
        shards = () if state != "alive" else shards_for(self.node_id, live)
        if shards != self.shards:
            log.info(
                "node %s owns %d shards among %d live nodes",
                self.node_id,
                len(shards),
                len(set(live) | {self.node_id}),
                extra={"action": "shards_changed", "shards": list(shards)},
            )
            self.shards = shards
            metrics.set_shards(len(shards))
            self._wake.set()

    async def renew_once(self) -> None:
        """Renew the leases of every running attempt; cancel those the database refused."""
        attempts = list(self.running.values())
        if not attempts:
            return
        sent = time.monotonic()
        renewed = await self.beat.renew_leases(
            [(a.job.id, a.job.fencing_token) for a in attempts], lease=self.config.lease
        )
        for attempt in attempts:
            if self.running.get(attempt.job.id) is not attempt:
                continue  # it ended during the renewal (the job may already run again)
            if attempt.job.id in renewed:
                attempt.deadline = self._deadline(sent)  # the watchdog finds it when it fires
            elif not attempt.finishing:
                self._lease_lost(attempt, "the database refused the renewal")

    async def _every(self, step: Any, name: str, limit: float | None = None) -> None:
        """Run ``step`` every heartbeat interval until stopping, each run bounded by ``limit``
        seconds (default two intervals); DB errors and timeouts are logged."""
        interval = self.config.heartbeat_interval
        while not self._stopping.is_set():
            with _quiet_db_errors(name):
                async with asyncio.timeout(limit or interval * 2):
                    await step()
            await _wait(self._stopping, interval)

    async def _listen_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn = await connect(self.dsn, application_name=f"pgpulse:{self.node_id}:listen")
                async with conn:
                    await conn.execute("LISTEN pgpulse_wakeup")
                    self._wake.set()  # anything notified while we were not listening
                    gen = conn.notifies()
                    stop = asyncio.ensure_future(self._stopping.wait())
                    nxt: asyncio.Future[Any] | None = None
                    try:
                        while not self._stopping.is_set():
                            nxt = asyncio.ensure_future(anext(gen))
                            done, _ = await asyncio.wait(
                                {nxt, stop}, return_when=asyncio.FIRST_COMPLETED
                            )
                            if nxt not in done:
                                break
                            note = nxt.result()
                            if not note.payload or int(note.payload) in self.shards:
                                self._wake.set()
                    finally:
                        # The reader must be gone before the connection closes, or close()
                        # waits forever (also when this task is cancelled): psycopg's notifies()
                        # holds the connection's lock while it is suspended, even right after it
                        # yielded a notification (a stop just after a wake-up hung on exit).
                        for pending in (stop, nxt):
                            if pending is not None and not pending.done():
                                pending.cancel()
                                with contextlib.suppress(asyncio.CancelledError, Exception):
                                    await pending
                        with contextlib.suppress(Exception):
                            await gen.aclose()
            except (psycopg.Error, OSError, StopAsyncIteration, DatabaseUnavailable) as exc:
                log.warning("listen session lost: %s", exc, extra={"action": "listen_lost"})
                await _wait(self._stopping, self.config.heartbeat_interval)


async def _wait(event: asyncio.Event, seconds: float) -> None:
    """Wait for ``event`` at most ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        pass


class _quiet_db_errors:  # lower case: used as a context manager, reads like a statement
    """Log database errors and timeouts of a side loop instead of letting them kill the node."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is not None and isinstance(
            exc, psycopg.Error | OSError | TimeoutError | DatabaseUnavailable
        ):
            log.warning(
                "%s failed: %s",
                self.what,
                exc or type(exc).__name__,
                extra={"action": f"{self.what}_failed"},
            )
            return True
        return False
