"""The database clock: the leader compares the database's ``now()`` between two
heartbeats with its own monotonic clock, and a difference beyond the threshold is a step —
logged (``db_clock_step``) and alerted (rule ``db_clock``). The comparison on values, then real
heartbeats of a real node on a real PostgreSQL whose monotonic clock the test shifts (what the
node reads as the database's time then moves against it, as a stepped host clock would)."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from helpers import apgpulse
from pgpulse.alerts import services as alert_services
from pgpulse.alerts.store import AlertStore
from pgpulse.db.store import Store
from pgpulse.node.db_clock import ClockReading, ClockWatch, clock_step
from pgpulse.node.engine import Node, NodeConfig
from pgpulse.node.handlers import RunContext

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def reading(db_offset: float, sent: float, received: float) -> ClockReading:
    return ClockReading(T0 + timedelta(seconds=db_offset), sent, received)


@pytest.mark.parametrize(
    ("db_moved", "sent", "received", "step"),
    [
        pytest.param(2.0, 2.0, 2.01, 0.0, id="in_step"),
        pytest.param(2.0, 2.0, 12.0, 0.0, id="slow_heartbeat_is_no_step"),
        pytest.param(-298.0, 2.0, 2.01, -299.99, id="stepped_back_5_minutes"),
        pytest.param(302.0, 2.0, 2.01, 299.99, id="stepped_forward_5_minutes"),
    ],
)
def test_a_step_is_what_the_database_clock_moved_beyond_the_round_trips(
    db_moved: float, sent: float, received: float, step: float
) -> None:
    """clock_step() on values: the first reading is at 0 (sent 0, received 0.01); the second
    sent at ``sent`` and answered at ``received``; the database's clock moved ``db_moved``. What
    the round trips leave uncertain is never a step."""
    before = reading(0.0, 0.0, 0.01)
    assert clock_step(before, reading(db_moved, sent, received)) == pytest.approx(step)


def test_only_the_leader_reports_a_step_and_only_beyond_the_threshold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    watch = ClockWatch("n1", threshold=5.0)
    assert watch.observe(reading(0.0, 0.0, 0.0), leading=True) is None  # nothing to compare
    assert watch.observe(reading(-100.0, 1.0, 1.0), leading=False) is None  # not the leader
    assert watch.observe(reading(-96.0, 2.0, 2.0), leading=True) is None  # 4 s off: not a step
    assert watch.observe(reading(-200.0, 3.0, 3.0), leading=True) == pytest.approx(-105.0)
    [said] = [r for r in caplog.records if getattr(r, "action", None) == "db_clock_step"]
    assert "moved back 105 s" in said.getMessage()


async def noop(ctx: RunContext) -> None:
    """A handler that does nothing."""


class ShiftedClock:
    """The node's monotonic clock, shifted by :attr:`shift` seconds by the test."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.shift


def _events(db: Any) -> list[dict[str, Any]]:
    cur = db.execute(
        "SELECT e.details, e.resolved_at,"
        " (SELECT count(*) FROM pgpulse_alert_deliveries d WHERE d.event_id = e.id) AS deliveries"
        " FROM pgpulse_alert_events e WHERE e.rule = 'db_clock' ORDER BY e.id"
    )
    return list(cur.fetchall())


async def test_the_leader_logs_and_alerts_a_database_clock_step_from_real_heartbeats(
    store: Store, dsn: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A real node leads (real heartbeats). Between two heartbeats its monotonic clock is
    moved 300 s ahead (to it, the database's clock fell 300 s behind: stepped back), later
    600 s back (the database's clock jumped ahead). Each step is logged once and fires one
    db_clock alert with one delivery; steady heartbeats in between fire nothing."""
    caplog.set_level(logging.WARNING)
    alerts = AlertStore(store.pool)
    await alerts.add_notifier("ops", "webhook", {"url": "https://93.184.215.14/hook"})
    await alerts.set_rule("db_clock", ["ops"])
    config = NodeConfig(node_id="node-a", heartbeat_interval=0.2, lease=2.0, node_ttl=1.0)
    node = Node(store, dsn, {"noop": noop}, config)
    alert_services.register(node)  # as App.run_node does
    clock = ShiftedClock()
    node.db_clock = ClockWatch("node-a", threshold=config.clock_step, monotonic=clock)
    try:
        await node.start()  # the first heartbeat: it leads
        assert node.sweeper.is_leader
        await node.heartbeat_once()
        assert _events(db) == []
        clock.shift += 300.0
        await node.heartbeat_once()
        await node.heartbeat_once()
        clock.shift -= 600.0
        await node.heartbeat_once()
        await node.heartbeat_once()
    finally:
        await node.close()
    events = _events(db)
    assert [e["details"]["direction"] for e in events] == ["back", "forward"]
    assert events[0]["details"]["step_seconds"] == pytest.approx(-300.0, abs=1.0)
    assert events[1]["details"]["step_seconds"] == pytest.approx(600.0, abs=1.0)
    assert [e["deliveries"] for e in events] == [1, 1]
    steps = [r for r in caplog.records if getattr(r, "action", None) == "db_clock_step"]
    assert [round(r.__dict__["step_seconds"]) for r in steps] == [-300, 600]
    listed = await apgpulse("alert", "list", "--json", dsn=dsn)
    assert listed.returncode == 0, listed.stderr
    assert "db_clock" in listed.stdout


async def test_node_run_refuses_a_clock_step_or_split_brain_rate_out_of_range(dsn: str) -> None:
    """The two new node options, as a user types them: bad values are one line, exit 2."""
    step = await apgpulse("node", "run", "--clock-step", "0", dsn=dsn)
    assert step.returncode == 2 and "--clock-step" in step.stderr, step
    every = await apgpulse("node", "run", "--split-brain-every", "-1", dsn=dsn)
    assert every.returncode == 2 and "--split-brain-every" in every.stderr, every
    assert "Traceback" not in step.stderr + every.stderr
