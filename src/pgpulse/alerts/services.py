"""The alerts' part of a node: the services and the observer the edge that builds a node
registers (:func:`register`; ``App.run_node``, ``pgpulse node run`` and the tests' helpers call
it). The node imports none of this (:mod:`pgpulse.node.services`, :mod:`pgpulse.node.observer`).

* the ``alerts`` service (:class:`~pgpulse.alerts.delivery.AlertLoop`): evaluate the alert rules
  and send their deliveries — the leader every ``alert_interval`` seconds, any node at once after
  it recorded a failed or skipped run; never on an attempt's path;
* the ``checkins`` service (:class:`~pgpulse.alerts.checkins.CheckinPinger`): send the check-in
  pings the attempts queued at their start and end (never waited for by an attempt);
* the :class:`AlertObserver`: queues those pings, wakes the evaluation after a failed or skipped
  run, reads whether the cluster had no live node before the node registers, and fires the
  cluster alerts ``db_clock`` and ``split_brain``.
"""

from __future__ import annotations

from pgpulse.alerts.checkins import CheckinPinger
from pgpulse.alerts.delivery import AlertLoop
from pgpulse.alerts.store import AlertStore
from pgpulse.core.model import ClaimedJob, Outcome
from pgpulse.node.engine import Node
from pgpulse.node.observer import ClockStep, NodeObserver
from pgpulse.node.split_brain import SplitBrain


def register(node: Node) -> AlertObserver | None:
    """Give ``node`` (not yet running) the alert services and observer, over its pool and with
    its settings (``alert_interval``, ``dashboard_url``, the ``http_allow`` handler option).
    A node whose ``alert_interval`` is 0 gets none: alerting is off on it.

    Returns:
        The observer registered, or ``None``.
    """
    config = node.config
    if config.alert_interval <= 0:
        return None
    allow = config.handler_options.get("http_allow")
    loop = AlertLoop(
        AlertStore(node.store.pool),
        node.node_id,
        leading=lambda: node.membership.leader,
        interval=config.alert_interval,
        margin=config.lease,
        allow=allow,
        dashboard_url=config.dashboard_url,
    )
    checkins = CheckinPinger(loop.store, allow=allow)
    observer = AlertObserver(loop, checkins)
    node.add_service(loop)
    node.add_service(checkins)
    node.add_observer(observer)
    return observer


def alertable(outcome: Outcome) -> bool:
    """Whether writing ``outcome`` may fire an alert rule at once (a failed run, a skip)."""
    return outcome.outcome == "failed" or bool(
        outcome.advance is not None and outcome.advance.skipped_count
    )


class AlertObserver(NodeObserver):
    """What the alerts do with what a node tells them.

    Args:
        loop: the node's alert loop (its store writes the cluster alerts; its kick evaluates at
            once).
        checkins: the node's check-in pinger.
    """

    def __init__(self, loop: AlertLoop, checkins: CheckinPinger) -> None:
        self.loop = loop
        self.checkins = checkins
        self._split_brain: str | None = None  # the key of the split brain alerted

    def attempt_started(self, job: ClaimedJob) -> None:
        """Queue the check-in ``start`` ping."""
        self.checkins.started(job)

    def attempt_ended(self, outcome: Outcome) -> None:
        """Queue the check-in end ping; after a failed or skipped run, evaluate at once."""
        self.checkins.ended(outcome)
        if alertable(outcome):
            self.loop.kick()

    async def node_registering(self) -> None:
        """Read whether the cluster had no live node (:meth:`AlertLoop.before_register
        <pgpulse.alerts.delivery.AlertLoop.before_register>`)."""
        await self.loop.before_register()

    async def clock_stepped(self, step: ClockStep) -> None:
        """Fire the ``db_clock`` alert for ``step`` (once per step: keyed by its node and
        instant), and deliver it at once.

        Raises:
            psycopg.Error, DatabaseUnavailable: it could not be written.
        """
        key = f"cluster/db_clock/{step.node_id}/{step.db_now.timestamp():.6f}"
        details = {
            "step_seconds": round(step.seconds, 3),
            "direction": "back" if step.seconds < 0 else "forward",
            "node": step.node_id,
            "db_now": step.db_now.isoformat(),
            "threshold_seconds": step.threshold,
        }
        if await self.loop.store.raise_cluster("db_clock", key, details) is not None:
            self.loop.kick()

    async def split_brain(self, found: SplitBrain | None) -> None:
        """Fire the ``split_brain`` alert once per split brain (its key names the writable
        hosts and their timelines) and deliver it at once; close it when it ends.

        Raises:
            psycopg.Error, DatabaseUnavailable: it could not be written (the next check
                writes it).
        """
        if found is None:
            self._split_brain = None
            await self.loop.store.resolve_cluster("split_brain")
            return
        if self._split_brain == found.key:
            return
        fired = await self.loop.store.raise_cluster("split_brain", found.key, found.details())
        self._split_brain = found.key
        if fired is not None:
            self.loop.kick()
