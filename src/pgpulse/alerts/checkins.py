"""A node's check-in pings: each attempt of a job with a ``checkin`` rule pings the rule's
``checkin`` notifiers when it starts and when it ends (success or failure), off the attempt's
path (docs/alerts.md, "Check-ins").

* **Never on the attempt's path.** The node's alert observer
  (:class:`~pgpulse.alerts.services.AlertObserver`) calls :meth:`CheckinPinger.started` just before
  the handler runs and :meth:`CheckinPinger.ended` once the attempt's outcome is committed (a
  fenced write, whose attempt lost its lease, pings nothing). Both only put an event in a bounded
  queue, never wait and never raise: a full queue drops the event, logged (``checkin_dropped``) and
  counted (``pgpulse_checkin_pings_total{result="dropped"}``).
* **Who pings what.** The ``checkin`` rules and their notifiers are read in one statement
  (:meth:`~pgpulse.alerts.store.AlertStore.checkin_targets`), at most once per ``refresh``
  seconds and only while attempts run: a node whose jobs run nothing reads nothing, and an
  event of a job without a rule is dropped before it is queued once the rules are known. A
  job's own rule replaces the default (the rule without a job).
* **Sending.** At most ``max_in_flight`` pings at once, each in a task of its own with the
  notifier's retries (:class:`~pgpulse.alerts.notifiers.retry.RetryPolicy`); an attempt's end is
  sent after its start is done, so the monitor sees them in order. A ping that fails for good is
  logged (``checkin_failed``, the URL masked: secrets never reach a log) and counted; it never
  fails or delays a run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING, Any

import psycopg

from pgpulse.alerts.notifiers import CheckinConfig, CheckinEvent, CheckinNotifier, JobRef
from pgpulse.alerts.notifiers.events import CheckinPhase
from pgpulse.alerts.store import AlertStore
from pgpulse.core.egress import HttpAllowList
from pgpulse.core.errors import DatabaseUnavailable, PulseError, describe
from pgpulse.core.model import ClaimedJob, Outcome
from pgpulse.core.wording import plural
from pgpulse.node import metrics

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

#: Outcomes whose attempt ran its handler and ends in a ping: ``retrying`` is a failed attempt.
END_PHASES: dict[str, CheckinPhase] = {
    "succeeded": "success",
    "failed": "failure",
    "retrying": "failure",
}
#: One attempt's pings to one notifier: (job id, occurrence, attempt number, notifier name).
AttemptKey = tuple[int, Any, int, str]
Targets = dict[int | None, list[tuple[str, CheckinNotifier]]]


class CheckinPinger:
    """Pings the ``checkin`` notifiers of the jobs a node runs.

    Args:
        store: the alerts' store over the node's pool.
        allow: the node's ``--http-allow`` list: every connection is checked against it.
        max_queue: events waiting to be sent at most; more are dropped (and counted).
        max_in_flight: pings sent at once at most.
        refresh: seconds the rules read are trusted before they are read again.
    """

    def __init__(
        self,
        store: AlertStore,
        *,
        allow: HttpAllowList | None = None,
        max_queue: int = 1000,
        max_in_flight: int = 8,
        refresh: float = 10.0,
    ) -> None:
        self.name = "checkins"
        self.store = store
        self.allow = allow or HttpAllowList()
        self.refresh = refresh
        self._queue: asyncio.Queue[CheckinEvent] = asyncio.Queue(max_queue)
        self._slots = asyncio.Semaphore(max_in_flight)
        self._in_flight: set[asyncio.Task[None]] = set()
        self._starts: dict[AttemptKey, asyncio.Task[None]] = {}
        self._targets: Targets | None = None
        self._read_at = -float("inf")
        self._client: httpx.AsyncClient | None = None
        #: Events dropped because the queue was full (also in the metric).
        self.dropped = 0

    # -- what attempts call (on the event loop; never block, never raise) ------------------

    def started(self, job: ClaimedJob) -> None:
        """An attempt of ``job`` is about to run its handler."""
        self._offer(job, "start", None, None)

    def ended(self, outcome: Outcome) -> None:
        """An attempt's outcome was committed: ``success``, or ``failure`` (a failed attempt,
        retried or not). An outcome without a handler run (skipped, forked) pings nothing."""
        phase = END_PHASES.get(outcome.outcome)
        if phase is None or outcome.ended_at is None:
            return
        duration = (outcome.ended_at - outcome.job.db_now).total_seconds()
        error = outcome.error if phase == "failure" else None
        self._offer(outcome.job, phase, error, max(duration, 0.0))

    def _offer(
        self, job: ClaimedJob, phase: CheckinPhase, error: str | None, duration: float | None
    ) -> None:
        if self._known_unwatched(job.id):
            return
        event = CheckinEvent(
            phase=phase,
            job=JobRef(job.tenant, job.name, job.id),
            scheduled_for=job.scheduled_for,
            run_id=job.run_id,
            attempt=job.attempt,
            error=error,
            duration=duration,
        )
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            metrics.checkin_ping("dropped")
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.warning(
                    "check-in queue full: %s dropped so far (%s of %s)",
                    plural(self.dropped, "ping"),
                    phase,
                    job.name,
                    extra={"action": "checkin_dropped", "job": job.name},
                )

    def _known_unwatched(self, job_id: int) -> bool:
        """Whether the rules, read recently, give this job no check-in notifier."""
        if self._targets is None or time.monotonic() - self._read_at > self.refresh:
            return False
        return not self._targets.get(job_id, self._targets.get(None, []))

    # -- the sender ------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Send the queued pings until ``stopping`` is set (the node's ``checkins`` task);
        :meth:`drain` then sends what the node's last writes queued."""
        stop = asyncio.ensure_future(stopping.wait())
        try:
            while not stopping.is_set():
                get = asyncio.ensure_future(self._queue.get())
                await asyncio.wait({get, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not get.done():
                    get.cancel()
                    break
                await self._dispatch_safely(get.result())
        finally:
            stop.cancel()

    async def drain(self, within: float) -> None:
        """Send what is queued and wait for the pings in flight, for at most ``within``
        seconds; cancel the rest and close the HTTP client (a stopping node)."""
        try:
            async with asyncio.timeout(within):
                while not self._queue.empty():
                    await self._dispatch_safely(self._queue.get_nowait())
                await self.wait_idle()
        except TimeoutError:
            log.warning(
                "check-in pings still unsent at stop: %d queued, %d in flight",
                self._queue.qsize(),
                len(self._in_flight),
                extra={"action": "checkin_unsent"},
            )
        for task in list(self._in_flight):
            task.cancel()
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=2)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def wait_idle(self) -> None:
        """Wait until no ping is in flight."""
        while self._in_flight:
            await asyncio.wait(set(self._in_flight))

    async def _dispatch_safely(self, event: CheckinEvent) -> None:
        try:
            await self._dispatch(event)
        except Exception:  # a bug here must not stop the node: this ping is lost, counted
            metrics.checkin_ping("failed")
            log.exception("check-in dispatch failed", extra={"action": "checkin_failed"})

    async def _dispatch(self, event: CheckinEvent) -> None:
        targets = await self._targets_of(event.job.id)
        for name, notifier in targets:
            key: AttemptKey = (event.job.id, event.scheduled_for, event.attempt, name)
            prior = None if event.phase == "start" else self._starts.pop(key, None)
            await self._slots.acquire()  # waits while max_in_flight pings are out: the queue fills
            task = asyncio.create_task(
                self._ping(name, notifier, event, prior), name=f"checkin-{name}"
            )
            self._in_flight.add(task)
            task.add_done_callback(self._done)
            if event.phase == "start":
                self._starts[key] = task
                task.add_done_callback(functools.partial(self._forget, key))

    def _done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._slots.release()

    def _forget(self, key: AttemptKey, task: asyncio.Task[None]) -> None:
        if self._starts.get(key) is task:
            del self._starts[key]

    async def _targets_of(self, job_id: int) -> list[tuple[str, CheckinNotifier]]:
        """The notifiers ``job_id``'s attempts ping (the rules read again when stale)."""
        if self._targets is None or time.monotonic() - self._read_at > self.refresh:
            try:
                rows = await self.store.checkin_targets()
            except (psycopg.Error, OSError, DatabaseUnavailable) as exc:
                log.warning(
                    "reading the check-in rules failed: %s",
                    describe(exc),
                    extra={"action": "checkin_rules_failed"},
                )
                rows = None
            if rows is not None:
                self._targets = self._build(rows)
                self._read_at = time.monotonic()
        targets = self._targets or {}
        return targets.get(job_id, targets.get(None, []))

    def _build(self, rows: list[dict[str, Any]]) -> Targets:
        if self._client is None and rows:
            from pgpulse.node.egress_transport import guarded_client

            self._client = guarded_client(self.allow)
        targets: Targets = {}
        for row in rows:
            try:
                config = CheckinConfig.from_json(row["config"])
            except PulseError as exc:  # stored by an older version, say: that one is skipped
                log.warning(
                    "check-in notifier %s is not valid (%s); it is not pinged",
                    row["name"],
                    exc,
                    extra={"action": "checkin_failed", "notifier": row["name"]},
                )
                continue
            notifier = CheckinNotifier(config, client=self._client)
            targets.setdefault(row["job_id"], []).append((row["name"], notifier))
        return targets

    async def _ping(
        self,
        name: str,
        notifier: CheckinNotifier,
        event: CheckinEvent,
        prior: asyncio.Task[None] | None,
    ) -> None:
        """Send one ping with its retries, after the attempt's start ping when there is one."""
        if prior is not None and not prior.done():
            await asyncio.wait({prior})
        policy = notifier.config.retry_policy()
        attempt = 1
        while True:
            try:
                result = await notifier.send(event, attempt=attempt)
            except Exception:  # a bug must not end the node: count it and go on
                log.exception(
                    "check-in %s of %s to %s crashed",
                    event.phase,
                    event.job.name,
                    name,
                    extra={"action": "checkin_failed", "notifier": name},
                )
                metrics.checkin_ping("failed")
                return
            if result.ok:
                metrics.checkin_ping("sent")
                return
            delay = policy.next_delay(attempt, result)
            if delay is None:
                metrics.checkin_ping("failed")
                log.warning(
                    "check-in %s of %s to notifier %s failed after %s: %s",
                    event.phase,
                    event.job.label(),
                    name,
                    plural(attempt, "attempt"),
                    result.error,
                    extra={"action": "checkin_failed", "notifier": name, "job": event.job.name},
                )
                return
            await asyncio.sleep(delay)
            attempt += 1
