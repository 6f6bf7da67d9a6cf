"""A node's alert loop: evaluate the rules, claim the deliveries due, send them, record each
outcome — off every attempt's path (docs/alerts.md, "How alerts are delivered").

* **No live node**: a starting node reads, before it registers, the last heartbeat of a
  cluster that has no live node (:meth:`AlertLoop.before_register`); its first evaluation fires
  ``no_live_node`` when that gap is longer than the rule's threshold.
* **Evaluation** is one statement (:meth:`~pgpulse.alerts.store.AlertStore.evaluate`). The leader
  sends it every ``interval`` seconds (late, missed, silence and cluster rules need a clock, not an
  event); any node sends it at once after it recorded a failed or skipped run
  (:meth:`AlertLoop.kick`, called by the node's alert observer once the outcome is committed), so a
  failure is noticed within one round trip. An idle cluster pays one statement per ``interval`` on
  the leader only. Several nodes evaluating at once produce one event per key.
* **Delivery** is claimed like a job: a lease (the notifier's timeout plus ``margin``), a fencing
  token, an attempt count (:meth:`~pgpulse.alerts.store.AlertStore.claim_deliveries`). Each send
  runs in a task of its own, bounded by the notifier's timeout, so a slow or unreachable notifier
  delays no other delivery and no run. Its outcome is written fenced: a node that lost the lease
  (killed mid-delivery, stalled) changes nothing, and the delivery is claimed again once the
  lease expires, with the same ``Idempotency-Key`` (webhook) or ``Message-ID`` (e-mail), so the
  receiver can drop the repeat. A failure is retried by the notifier's
  :class:`~pgpulse.alerts.notifiers.retry.RetryPolicy` (backoff with jitter, ``Retry-After``) until
  its ``max_attempts``; nothing is lost while the receiver is down.
* **Order**: the events of one job (or of the cluster) reach one notifier in the order they
  fired; a later one waits until the earlier one is delivered or given up (a ``recovered``
  never overtakes the failure it closes while the receiver was down), and each says the
  event's state when it is sent (``resolved`` once its alert is).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from pgpulse.alerts.notifiers import AlertEvent, JobRef, build_notifier, parse_notifier_config
from pgpulse.alerts.notifiers.email import EmailNotifier
from pgpulse.alerts.notifiers.webhook import WebhookNotifier
from pgpulse.alerts.rules import RULE_KINDS
from pgpulse.alerts.store import AlertStore
from pgpulse.core.egress import HttpAllowList
from pgpulse.core.errors import DatabaseUnavailable, describe
from pgpulse.core.wording import plural

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

#: Rules whose event is not about one occurrence (the webhook's ``occurrence`` is ``null``).
WINDOW_RULES = frozenset(kind.name for kind in RULE_KINDS.values() if not kind.occurrence)


def alert_event(row: dict[str, Any], dashboard_url: str | None = None) -> AlertEvent:
    """The :class:`~pgpulse.alerts.notifiers.AlertEvent` of a claimed delivery row (pure).

    Args:
        row: a row of ``claim_deliveries``.
        dashboard_url: the dashboard's base address (``https://pulse.example.com``), or ``None``.
    """
    job = None
    if row["job_id"] is not None and row["name"] is not None:
        job = JobRef(row["tenant"], row["name"], int(row["job_id"]))
    link = None
    if dashboard_url:
        base = dashboard_url.rstrip("/")
        link = f"{base}/ui/jobs/{row['job_id']}" if job is not None else f"{base}/ui/cluster"
    return AlertEvent(
        event_id=str(row["event_id"]),
        delivery_key=f"alert/{row['event_id']}",
        rule=row["rule"],
        fired_at=row["fired_at"],
        job=job,
        scheduled_for=None if row["rule"] in WINDOW_RULES else row["scheduled_for"],
        run_id=row["run_id"] if row["rule"] not in WINDOW_RULES else None,
        error=row["error"],
        details=dict(row["details"] or {}),
        dashboard_url=link,
        resolved_at=row.get("resolved_at"),
    )


class AlertLoop:
    """One node's evaluation and delivery of alerts: its ``alerts`` service
    (:class:`~pgpulse.node.services.Service`, :func:`pgpulse.alerts.services.register`).

    Args:
        store: the alerts' store over the node's pool.
        node_id: this node.
        leading: whether this node leads now (the sweeper's ``is_leader``).
        interval: seconds between the leader's evaluations.
        margin: seconds a delivery's lease outlasts its notifier's timeout.
        allow: the node's ``--http-allow`` list; every webhook connection is checked against it
            when it is made (the guarded transport of ``http`` jobs).
        dashboard_url: the dashboard's base address for links, or ``None``.
        max_in_flight: most deliveries this node sends at once.
        now: the instant an evaluation and a claim of deliveries take as now (tests pin it:
            docs/design.md, invariant 1); ``None``, always in production, is the database's.
    """

    def __init__(
        self,
        store: AlertStore,
        node_id: str,
        *,
        leading: Callable[[], bool],
        interval: float = 10.0,
        margin: float = 10.0,
        allow: HttpAllowList | None = None,
        dashboard_url: str | None = None,
        max_in_flight: int = 16,
        now: Callable[[], datetime | None] = lambda: None,
    ) -> None:
        self.name = "alerts"
        self.store = store
        self.node_id = node_id
        self.leading = leading
        self.interval = interval
        self.margin = margin
        self.allow = allow or HttpAllowList()
        self.dashboard_url = dashboard_url
        self.max_in_flight = max_in_flight
        self._now = now
        self._kick = asyncio.Event()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None
        self._retry_at: float | None = None  # loop time of the next pending delivery's due
        #: (since, until): the cluster had no live node before this node started; evaluated
        #: (rule ``no_live_node``) by the next tick, then forgotten.
        self.outage: tuple[datetime, datetime] | None = None

    async def before_register(self) -> None:
        """Read, before this node registers, whether the cluster had no live node (the
        register overwrites this node's own last heartbeat, which may be the last one sent);
        if so, the next evaluation, at once, fires ``no_live_node`` with the gap."""
        self.outage = await self.store.cluster_outage()
        if self.outage is not None:
            self.kick()

    def kick(self) -> None:
        """Evaluate soon (a failed or skipped run was just recorded). Safe from any task."""
        self._kick.set()

    async def run(self, stopping: asyncio.Event) -> None:
        """Evaluate and deliver until ``stopping`` is set; then cancel the sends in flight
        (their leases expire and another node sends them again)."""
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        try:
            while not stopping.is_set():
                wake = next_tick if self.leading() else float("inf")
                if self._retry_at is not None:
                    wake = min(wake, self._retry_at)
                timeout = max(min(wake - loop.time(), self.interval), 0.0)
                kicked = await _wait_either(self._kick, stopping, timeout)
                if stopping.is_set():
                    break
                now = loop.time()
                due = kicked or now >= wake or (self.leading() and now >= next_tick)
                if not due:
                    continue
                self._kick.clear()
                if self.leading() and now >= next_tick:
                    next_tick = now + self.interval
                try:
                    async with asyncio.timeout(max(self.interval, 5.0) * 2):
                        await self.tick()
                except (psycopg.Error, OSError, TimeoutError, DatabaseUnavailable) as exc:
                    log.warning(
                        "alert evaluation failed: %s",
                        describe(exc),
                        extra={"action": "alerts_failed"},
                    )
                    self._retry_at = loop.time() + min(self.interval, 0.5)
        finally:
            await self.aclose()

    async def drain(self, within: float) -> None:
        """Nothing to finish: :meth:`run` cancelled the sends in flight as it ended."""

    async def aclose(self) -> None:
        """Cancel the sends in flight (their leases expire and another claim sends them again)
        and close the HTTP client."""
        for task in list(self._in_flight):
            task.cancel()
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=5)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def tick(self) -> int:
        """Evaluate once, then claim and start the deliveries due (as many as there is room
        for). Returns how many deliveries it started."""
        loop = asyncio.get_running_loop()
        result = await self.store.evaluate(
            node=self.node_id,
            leader=self.leading(),
            outage=self.outage,
            # a run that ended past its deadline since the last evaluations (deadline)
            recent=max(60.0, 3 * self.interval),
            now=self._now(),
        )
        self.outage = None
        if result["fired"]:
            log.info(
                "%s fired (%s queued)",
                plural(result["fired"], "alert event"),
                plural(result["queued"], "delivery", "deliveries"),
                extra={"action": "alerts_fired", "count": result["fired"]},
            )
        next_due: datetime | None = result["next_due"]
        db_now: datetime = result["db_now"]
        self._retry_at = None
        if next_due is not None and next_due > db_now:
            self._retry_at = loop.time() + (next_due - db_now).total_seconds()
        if not result["queued"] and (next_due is None or next_due > db_now):
            return 0
        return await self.deliver_due()

    async def deliver_due(self) -> int:
        """Claim the due deliveries there is room for and start sending each."""
        room = self.max_in_flight - len(self._in_flight)
        if room <= 0:
            return 0
        rows = await self.store.claim_deliveries(
            node=self.node_id, limit=room, margin=self.margin, now=self._now()
        )
        for row in rows:
            task = asyncio.create_task(self._deliver(row), name=f"alert-delivery-{row['id']}")
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        if len(rows) == room:
            self._kick.set()  # more may be waiting
        return len(rows)

    async def wait_idle(self) -> None:
        """Wait until every started delivery has recorded its outcome (tests, drains)."""
        while self._in_flight:
            await asyncio.wait(set(self._in_flight))

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            from pgpulse.node.egress_transport import guarded_client

            self._client = guarded_client(self.allow)
        return self._client

    async def _deliver(self, row: dict[str, Any]) -> None:
        config = parse_notifier_config(row["kind"], row["config"])
        notifier = build_notifier(config, client=None if row["kind"] == "email" else self._http())
        if not isinstance(notifier, WebhookNotifier | EmailNotifier):
            await self._finish(
                row, "failed", None, None, f"a {row['kind']} notifier sends no alerts"
            )
            return
        event = alert_event(row, self.dashboard_url)
        attempt = int(row["attempts"])
        result = await notifier.send(event, attempt=attempt)
        if result.ok:
            await self._finish(row, "delivered", None, result.status, None)
            return
        delay = config.retry_policy().next_delay(attempt, result)
        log.warning(
            "alert %s to notifier %s failed (attempt %d): %s",
            row["event_id"],
            row["notifier"],
            attempt,
            result.error,
            extra={"action": "alert_delivery_failed", "notifier": row["notifier"]},
        )
        if delay is None:
            await self._finish(row, "failed", None, result.status, result.error)
        else:
            await self._finish(row, "pending", delay, result.status, result.error)
            loop = asyncio.get_running_loop()
            at = loop.time() + delay
            self._retry_at = at if self._retry_at is None else min(self._retry_at, at)
            self._kick.set()  # re-plan the loop's sleep around the retry

    async def _finish(
        self,
        row: dict[str, Any],
        status: str,
        retry_in: float | None,
        last_status: int | None,
        error: str | None,
    ) -> None:
        for wait in (0.1, 0.5, 2.0, None):
            try:
                written, waiting = await self.store.finish_delivery(
                    int(row["id"]),
                    int(row["fencing_token"]),
                    status=status,
                    retry_in=retry_in,
                    last_status=last_status,
                    error=error,
                )
            except (psycopg.Error, OSError, DatabaseUnavailable) as exc:
                if wait is None:  # its lease expires: another claim sends it again
                    log.warning(
                        "recording delivery %s failed: %s",
                        row["id"],
                        describe(exc),
                        extra={"action": "alert_record_failed"},
                    )
                    return
                await asyncio.sleep(wait)
                continue
            if written and waiting and status != "pending":
                self._kick.set()  # the next event of this alert may go now
            if not written:
                log.warning(
                    "delivery %s was taken over by another node; its outcome is not recorded",
                    row["id"],
                    extra={"action": "alert_delivery_fenced"},
                )
            return


async def _wait_either(first: asyncio.Event, second: asyncio.Event, seconds: float) -> bool:
    """Wait at most ``seconds`` for either event; return whether ``first`` is set."""
    if first.is_set() or second.is_set():
        return first.is_set()
    waiters = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return first.is_set()
