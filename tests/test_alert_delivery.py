"""Exactly one delivery per alert event, with three node processes on a real PostgreSQL and a
real webhook receiver and SMTP server on 127.0.0.1: while the receiver is up, while it is down
for a while, and when the node delivering is killed mid-delivery."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import add, pgpulse, spec
from notify_servers import CountingReceiver, SmtpReceiver, run_smtp_receiver
from pgpulse.alerts.delivery import AlertLoop
from pgpulse.alerts.store import AlertStore
from pgpulse.core.egress import HttpAllowList
from pgpulse.db.store import Store
from test_engine import TRIGGERED_ONLY, wait_until

TESTS = Path(__file__).parent
NODE_OPTIONS = ("--lease", "3", "--heartbeat", "0.5", "--poll", "0.5", "--alert-interval", "0.5")


def _node(dsn: str, node_id: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PGPULSE_DATABASE_URL": dsn,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pgpulse",
            "--log-level",
            "ERROR",
            "node",
            "run",
            "--app",
            "alerts_app:app",
            "--node-id",
            node_id,
            "--http-allow",
            "127.0.0.1",
            *NODE_OPTIONS,
        ],
        env=env,
    )


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    yield from run_smtp_receiver()


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    state = CountingReceiver()
    try:
        yield state
    finally:
        state.stop()


def _deliveries(db: Any) -> list[dict[str, Any]]:
    return list(
        db.execute(
            "SELECT e.id, e.job_id, d.status, d.attempts, d.locked_by FROM pgpulse_alert_events e "
            "JOIN pgpulse_alert_deliveries d ON d.event_id = e.id ORDER BY e.id"
        ).fetchall()
    )


@pytest.mark.slow
async def test_three_nodes_deliver_each_event_exactly_once(
    store: Store, dsn: str, db: Any, receiver: CountingReceiver
) -> None:
    # a timeout that a loaded machine's answer never outlasts: a delivery timed out is sent
    # again (same key), and this test counts each key's sends
    hook = {"url": receiver.url(), "timeout": 10, "retry_backoff": 0.2, "max_attempts": 100}
    added = pgpulse(
        "notifier", "add", "hook", "--kind", "webhook", "--config", json.dumps(hook),
        "--http-allow", "127.0.0.1", dsn=dsn,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    rule = pgpulse("alert", "rule", "set", "failures", "--notify", "hook", dsn=dsn)
    assert rule.returncode == 0, rule.stderr
    jobs = [f"boom-{i}" for i in range(3)]
    await add(
        store, *(spec(j, schedule=TRIGGERED_ONLY, handler="boom", max_attempts=1) for j in jobs)
    )
    receiver.start()
    nodes = {name: _node(dsn, name) for name in ("a", "b", "c")}
    try:
        await wait_until(
            lambda: (
                db.execute(
                    "SELECT count(*) AS n FROM pgpulse_nodes WHERE array_length(shards, 1) > 0"
                ).fetchone()["n"]
                == 3
            ),
            within=30,
        )
        # 1. The receiver is up.
        await store.trigger_job("default", jobs[0])
        await wait_until(lambda: len(receiver.by_key) == 1, within=30)

        # 2. The receiver is down for a while: the delivery is retried until it is back.
        receiver.stop()
        await store.trigger_job("default", jobs[1])
        await wait_until(
            lambda: (
                db.execute("SELECT max(attempts) AS n FROM pgpulse_alert_deliveries").fetchone()[
                    "n"
                ]
                >= 3
            ),
            within=30,
        )
        receiver.start()
        await wait_until(lambda: len(receiver.by_key) == 2, within=30)

        # 3. The node delivering is killed mid-delivery: another sends it again, same key.
        receiver.hold_next.set()
        await store.trigger_job("default", jobs[2])
        await wait_until(receiver.held.is_set, within=30)
        holder = db.execute(
            "SELECT locked_by FROM pgpulse_alert_deliveries WHERE status = 'pending' "
            "AND locked_by IS NOT NULL"
        ).fetchone()["locked_by"]
        nodes[holder].send_signal(signal.SIGKILL)
        nodes[holder].wait(10)
        await wait_until(
            lambda: (
                db.execute(
                    "SELECT count(*) AS n FROM pgpulse_alert_deliveries WHERE status = 'delivered'"
                ).fetchone()["n"]
                == 3
            ),
            within=60,
        )
    finally:
        for proc in nodes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in nodes.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    rows = _deliveries(db)
    assert [r["status"] for r in rows] == ["delivered"] * 3  # one event per failing job
    keys = {f"alert/{r['id']}" for r in rows}
    assert set(receiver.by_key) == keys  # each event reached the receiver under its own key
    held_key = f"alert/{rows[2]['id']}"
    assert len(receiver.by_key[held_key]) == 2  # sent twice: once to the killed node's hold
    assert receiver.by_key[held_key][1].headers["x-pulse-delivery-attempt"] == "2"
    assert all(len(receiver.by_key[k]) == 1 for k in keys - {held_key})
    assert rows[1]["attempts"] >= 3  # retried while the receiver was down
    listed = pgpulse("alert", "list", "--json", dsn=dsn)
    assert [a["deliveries"][0]["status"] for a in json.loads(listed.stdout)] == ["delivered"] * 3


# aiosmtpd's controller leaves the socket of its start-up probe connection to the garbage
# collector (a ResourceWarning at aiosmtpd/smtp.py:396), which then failed whichever test ran
# next: collected here, inside this test, where the warning is expected.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_an_email_alert_reaches_a_real_smtp_server(
    store: Store, db: Any, smtp: SmtpReceiver
) -> None:
    """One message per event, on a node's alert loop in this process, with the job, the
    occurrence and the error."""
    alerts = AlertStore(store.pool)
    config = {
        "host": "127.0.0.1",
        "port": smtp.port,
        "security": "plain",
        "from": "Pulse <pulse@example.com>",
        "to": ["ops@example.com"],
        "retry_backoff": 0.1,
    }
    await alerts.add_notifier("mail", "email", config)
    [job_id] = await add(store, spec("nightly"))
    await alerts.set_rule("failures", ["mail"], job=("default", "nightly"))
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
        "finished_at, error) VALUES (%s, '2026-03-10T02:30:00Z', 3, 'failed', now(), now(), "
        "'exit status 2')",
        (job_id,),
    )
    loop = AlertLoop(alerts, "n1", leading=lambda: True, allow=HttpAllowList())
    assert await loop.tick() == 1
    await loop.wait_idle()
    [message] = smtp.messages
    assert message.rcpt_tos == ["ops@example.com"]
    assert " ".join(message.message["Subject"].split()) == (  # folded: a long line
        "[Pulse] Job failed: default/nightly, occurrence 2026-03-10T02:30:00+00:00"
    )
    assert "exit status 2" in message.message.get_content()
    assert await loop.tick() == 0  # delivered once, never again
    await loop.aclose()
    gc.collect()
    [row] = _deliveries(db)
    assert (row["status"], row["attempts"]) == ("delivered", 1)


async def test_an_unreachable_notifier_delays_no_other(store: Store, db: Any) -> None:
    """A webhook whose receiver never answers and one that does: the second is delivered while
    the first is still in flight."""
    alerts = AlertStore(store.pool)
    silent = CountingReceiver()
    silent.hold_next.set()
    silent.start()
    answering = CountingReceiver()
    answering.start()
    try:
        allow = HttpAllowList.parse(["127.0.0.1"])
        await alerts.add_notifier(
            "slow", "webhook", {"url": silent.url(), "timeout": 30}, allow=allow
        )
        await alerts.add_notifier("fast", "webhook", {"url": answering.url()}, allow=allow)
        [job_id] = await add(store, spec("nightly"))
        await alerts.set_rule("failures", ["slow", "fast"], job=("default", "nightly"))
        db.execute(
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, outcome, finished_at) "
            "VALUES (%s, now(), 'failed', now())",
            (job_id,),
        )
        loop = AlertLoop(alerts, "n1", leading=lambda: True, allow=allow)
        assert await loop.tick() == 2
        # the answering receiver has its delivery while the silent one holds its request (which
        # may reach it after the other's answer: the two are sent at once)
        await wait_until(lambda: len(answering.by_key) == 1 and silent.held.is_set(), within=10)
        statuses = {
            r["name"]: r["status"]
            for r in db.execute(
                "SELECT n.name, d.status FROM pgpulse_alert_deliveries d "
                "JOIN pgpulse_notifiers n ON n.id = d.notifier_id"
            ).fetchall()
        }
        await wait_until(
            lambda: (
                db.execute(
                    "SELECT count(*) AS n FROM pgpulse_alert_deliveries WHERE status = 'delivered'"
                ).fetchone()["n"]
                == 1
            )
        )
        assert statuses["slow"] == "pending"
        await loop.aclose()
    finally:
        silent.stop()
        answering.stop()


async def test_a_resolved_never_overtakes_the_firing_it_closes(
    store: Store, db: Any, receiver: CountingReceiver
) -> None:
    """Issue 30: with the receiver down a while, `recovered resolved` arrived first and
    `failures firing` 57 s later. One job's events reach one notifier in the order they fired,
    and each says the event's state when it is sent: the failure, delivered after its alert
    was resolved, says so."""
    alerts = AlertStore(store.pool)
    allow = HttpAllowList.parse(["127.0.0.1"])
    hook = {"url": receiver.url(), "retry_backoff": 0.5, "max_attempts": 50}
    await alerts.add_notifier("hook", "webhook", hook, allow=allow)
    [job_id] = await add(store, spec("nightly"))
    await alerts.set_rule("failures", ["hook"], job=("default", "nightly"))
    await alerts.set_rule("recovered", ["hook"], job=("default", "nightly"))

    def run(outcome: str) -> None:
        db.execute(
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
            "finished_at) VALUES (%s, now(), 1, %s, now(), now())",
            (job_id, outcome),
        )
        db.execute(
            "UPDATE pgpulse_jobs SET last_outcome = %s, last_finished_at = now() WHERE id = %s",
            (outcome, job_id),
        )

    loop = AlertLoop(alerts, "n1", leading=lambda: True, allow=allow, interval=0.2)
    run("failed")
    assert await loop.tick() == 1  # the receiver is down: the attempt fails, to be retried
    await loop.wait_idle()
    assert [(r["status"], r["attempts"]) for r in _deliveries(db)] == [("pending", 1)]
    run("succeeded")  # the job recovers while the failure still waits to be retried
    receiver.start()
    stopping = asyncio.Event()
    running = asyncio.create_task(loop.run(stopping))
    try:
        await wait_until(lambda: receiver.requests() == 2, within=30)
        await wait_until(
            lambda: [r["status"] for r in _deliveries(db)] == ["delivered", "delivered"]
        )
    finally:
        stopping.set()
        await running
    sent = sorted((seen for key in receiver.by_key.values() for seen in key), key=lambda r: r.at)
    said = [(r.json()["rule"], r.json()["state"]) for r in sent]
    assert said == [("failures", "resolved"), ("recovered", "resolved")]
    assert ", resolved " in sent[0].json()["text"]
