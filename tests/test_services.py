"""A node's services and its observer (pgpulse.node.services, pgpulse.node.observer): the node
core runs the claim loop, the heartbeat and the listener; every other loop is a service in its
list, and the alerts come in only through what the edge registers
(pgpulse.alerts.services.register)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from helpers import add, spec
from pgpulse.alerts import services as alert_services
from pgpulse.alerts.store import AlertStore
from pgpulse.core.errors import DatabaseUnavailable
from pgpulse.db.store import Store
from pgpulse.node.engine import Node, NodeConfig
from pgpulse.node.observer import NodeObserver, Observers
from pgpulse.node.services import Membership, Periodic

FOLLOWER = Membership(routes={}, shard_count=None, shards=(), leader=False)
LEADER = Membership(routes={}, shard_count=64, shards=(1, 2), leader=True)


async def test_a_leader_only_service_steps_on_the_leader_only() -> None:
    steps: list[str] = []
    now = [FOLLOWER]

    async def step() -> str:
        steps.append("pruned")
        return "pruned"

    prune = Periodic("prune", step, interval=1.0, membership=lambda: now[0], leader_only=True)
    assert await prune.run_once() is None
    now[0] = LEADER
    assert await prune.run_once() == "pruned"
    assert steps == ["pruned"]
    with pytest.raises(ValueError, match="membership"):
        Periodic("prune", step, interval=1.0, leader_only=True)


async def test_a_periodic_service_outlives_a_database_error_and_stops_when_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopping = asyncio.Event()
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise DatabaseUnavailable("the database does not answer")
        stopping.set()

    caplog.set_level(logging.WARNING)
    async with asyncio.timeout(5):
        await Periodic("sweep", step, interval=0.01).run(stopping)
    assert calls == 2
    assert [getattr(r, "action", None) for r in caplog.records] == ["sweep_failed"]


class Recording(NodeObserver):
    def __init__(self, name: str, said: list[str]) -> None:
        self.name, self.said = name, said

    async def node_registering(self) -> None:
        self.said.append(self.name)


async def test_observers_are_told_in_the_order_they_were_added() -> None:
    said: list[str] = []
    both = Observers([Recording("first", said), Recording("second", said)])
    await both.node_registering()
    await both.clock_stepped(None)  # type: ignore[arg-type]  # the defaults do nothing
    assert said == ["first", "second"]


async def test_a_node_runs_its_own_services_and_those_the_alerts_register(
    store: Store, dsn: str
) -> None:
    """The node registers ``prune`` itself; the alerts add ``alerts`` and ``checkins`` and one
    observer; a node with alerting off (alert_interval 0) gets none of theirs. A second service
    of a taken name is refused."""
    node = Node(store, dsn, {}, NodeConfig(node_id="services-a"))
    assert [s.name for s in node.services] == ["prune"]
    observer = alert_services.register(node)
    assert [s.name for s in node.services] == ["prune", "alerts", "checkins"]
    assert node.observers.observers == [observer]
    assert node.membership == Membership({}, None, (), False)
    with pytest.raises(ValueError, match="heartbeat"):
        node.add_service(Periodic("heartbeat", _nothing, interval=1.0))
    quiet = Node(store, dsn, {}, NodeConfig(node_id="services-b", alert_interval=0))
    assert alert_services.register(quiet) is None
    assert [s.name for s in quiet.services] == ["prune"]
    assert quiet.observers.observers == []


async def _nothing() -> Any:
    return None


async def test_deleting_a_job_removes_its_rules_and_silences_in_the_same_statement(
    store: Store, db: Any
) -> None:
    """The store's delete takes the job's alert rules and silences with it (no call into the
    alerts), and leaves another job's and the cluster-wide ones alone."""
    alerts = AlertStore(store.pool)
    await alerts.add_notifier("ops", "webhook", {"url": "https://93.184.215.14/hook"})
    await add(store, spec("gone"), spec("kept"))
    for job in ("gone", "kept"):
        await alerts.set_rule("failures", ["ops"], job=("default", job))
        await alerts.silence(3600, job=("default", job))
    await alerts.set_rule("failures", ["ops"])  # the default of every job
    await store.delete_job("default", "gone")
    rules = db.execute("SELECT job_id FROM pgpulse_alert_rules ORDER BY job_id").fetchall()
    silences = db.execute("SELECT job_id FROM pgpulse_alert_silences").fetchall()
    kept = db.execute("SELECT job_id FROM pgpulse_job_names WHERE name = 'kept'").fetchone()[
        "job_id"
    ]
    assert [r["job_id"] for r in rules] == [kept, None]
    assert [s["job_id"] for s in silences] == [kept]
