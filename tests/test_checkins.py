"""Check-in pings and the ``no_live_node`` alert, with a real node process on a real PostgreSQL
and a real HTTP receiver on 127.0.0.1 (the check-in endpoint and the webhook): each attempt
pings its job's ``checkin`` notifiers at start and end, an unreachable monitor fails no run and
leaks no secret, and a node that comes back after the cluster had no live node says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from prometheus_client import REGISTRY

from helpers import add, pgpulse, spec
from notify_servers import HttpReceiver, free_port, run_http_receiver
from pgpulse.alerts.checkins import CheckinPinger
from pgpulse.alerts.store import AlertStore
from pgpulse.core.egress import HttpAllowList
from pgpulse.core.model import Outcome
from pgpulse.db.store import Store
from test_engine import TRIGGERED_ONLY, wait_until
from test_web_metrics import claimed_job

TESTS = Path(__file__).parent
#: A token-like path segment: secret, masked in every message (docs/alerts.md, "Secrets").
TOKEN = "5bf66975d4c74bf5bcc8b8d8a82ea278"


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    yield from run_http_receiver()


def _cli(*args: str, dsn: str) -> None:
    done = pgpulse(*args, dsn=dsn)
    assert done.returncode == 0, done.stderr


def _node(dsn: str, metrics_port: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PGPULSE_DATABASE_URL": dsn,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [
            sys.executable, "-m", "pgpulse", "--log-level", "WARNING", "node", "run",
            "--app", "alerts_app:app", "--node-id", "back", "--http-allow", "127.0.0.1",
            "--metrics", f"127.0.0.1:{metrics_port}",
            "--lease", "3", "--heartbeat", "0.5", "--poll", "0.5", "--alert-interval", "0.5",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _pings(receiver: HttpReceiver) -> list[tuple[str, str, str]]:
    """(job, phase, rid) of each check-in the receiver got, in order."""
    out = []
    for request in list(receiver.requests):
        parts = request.path.split("/")
        if parts[1] != "ping":
            continue
        phase = {"start": "start", "fail": "failure"}.get(parts[-1], "success")
        out.append((parts[3], phase, parse_qs(request.query)["rid"][0]))
    return out


def _metric(port: int, line_start: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.slow
async def test_attempts_ping_their_checkins_and_a_node_back_reports_the_outage(
    store: Store, dsn: str, db: Any, receiver: HttpReceiver
) -> None:
    fast = {"timeout": 1, "retry_backoff": 0.05}
    hc = {"url": receiver.url(f"/ping/{TOKEN}/{{job}}"), **fast}
    down = {"url": f"http://127.0.0.1:{free_port()}/ping/{TOKEN}", "max_attempts": 2, **fast}
    hook = {"url": receiver.url("/hook"), **fast}
    alerts = AlertStore(store.pool)
    allow = HttpAllowList.parse(["127.0.0.1"])
    await alerts.add_notifier("down", "checkin", down, allow=allow)
    await alerts.add_notifier("hook", "webhook", hook, allow=allow)
    _cli("notifier", "add", "hc", "--kind", "checkin", "--config", json.dumps(hc),
         "--http-allow", "127.0.0.1", dsn=dsn)  # fmt: skip
    await add(
        store,
        spec("good", schedule=TRIGGERED_ONLY, handler="ok"),
        spec("bad", schedule=TRIGGERED_ONLY, handler="boom", max_attempts=2, retry_backoff=0.05),
        spec("quiet", schedule=TRIGGERED_ONLY, handler="ok"),
    )
    _cli("alert", "rule", "set", "checkin", "--job", "good", "--notify", "hc", "--notify", "down",
         dsn=dsn)  # fmt: skip
    await alerts.set_rule("checkin", ["hc"], job=("default", "bad"))
    _cli("alert", "rule", "set", "no_live_node", "--threshold", "60", "--notify", "hook", dsn=dsn)
    # The cluster's last node stopped ten minutes ago.
    db.execute(
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, last_heartbeat, state, ttl) "
        "VALUES ('old', 'h', 1, now() - interval '10 minutes', 'stopped', 3)"
    )
    metrics_port = free_port()
    node = _node(dsn, metrics_port)
    try:
        await wait_until(lambda: any(r.path == "/hook" for r in receiver.requests), within=30)
        [outage] = [r.json() for r in receiver.requests if r.path == "/hook"]
        assert outage["rule"] == "no_live_node" and outage["job"] is None
        assert 595 < outage["details"]["gap_seconds"] < 660
        assert outage["details"]["threshold_seconds"] == 60

        for job in ("good", "bad", "quiet"):
            await store.trigger_job("default", job)
        await wait_until(lambda: len(_pings(receiver)) == 6, within=30)
        await wait_until(
            lambda: _metric(metrics_port, 'pgpulse_checkin_pings_total{result="failed"}') == 2,
            within=30,
        )
        runs = {
            r["name"]: r["outcome"]
            for r in db.execute(
                "SELECT j.name, r.outcome FROM pgpulse_runs r "
                "JOIN pgpulse_jobs j ON j.id = r.job_id"
            ).fetchall()
        }
        # The receiver has the sixth ping before the node has read its answer and counted it.
        await wait_until(
            lambda: _metric(metrics_port, 'pgpulse_checkin_pings_total{result="sent"}') == 6,
            within=10,
        )
    finally:
        node.send_signal(signal.SIGTERM)
        _, stderr = node.communicate(timeout=20)

    assert runs == {"good": "succeeded", "bad": "failed", "quiet": "succeeded"}
    pings = _pings(receiver)
    good = [(phase, rid) for job, phase, rid in pings if job == "good"]
    assert [phase for phase, _ in good] == ["start", "success"]
    assert good[0][1] == good[1][1]  # one attempt, one run id: the monitor pairs them
    # Each attempt its own run id, its end ping sent after its start ping's answer; the two
    # attempts' pings are sent concurrently, so attempt 2's start may overtake attempt 1's end.
    bad: dict[str, list[str]] = {}
    for job, phase, rid in pings:
        if job == "bad":
            bad.setdefault(rid, []).append(phase)
    assert list(bad.values()) == [["start", "failure"], ["start", "failure"]]
    # ... and either attempt's failure may arrive first: each carries its own error
    failures = sorted(r.body.decode() for r in receiver.requests if r.path.endswith("/bad/fail"))
    assert [("boom at attempt 1" in f, "boom at attempt 2" in f) for f in failures] == [
        (True, False),
        (False, True),
    ]
    # The unreachable monitor: a warning per start and end ping, its URL masked.
    assert stderr.count("check-in start of default/good to notifier down failed") == 1
    assert stderr.count("check-in success of default/good to notifier down failed") == 1
    assert TOKEN not in stderr


async def test_a_full_queue_drops_pings_without_waiting(store: Store) -> None:
    """Nothing sends (the pinger's task is not running): the attempts' offers return at once,
    the queue keeps its bound, and the rest are dropped and counted."""
    pinger = CheckinPinger(AlertStore(store.pool), max_queue=3)
    job = claimed_job()
    before = REGISTRY.get_sample_value("pgpulse_checkin_pings_total", {"result": "dropped"})
    for _ in range(5):
        pinger.started(job)
    pinger.ended(Outcome(job, "succeeded", ended_at=job.db_now + timedelta(seconds=1)))
    pinger.ended(Outcome(job, "skipped"))  # no handler ran: no ping
    assert pinger.dropped == 3
    after = REGISTRY.get_sample_value("pgpulse_checkin_pings_total", {"result": "dropped"})
    assert after == (before or 0) + 3
    await pinger.drain(1.0)  # no rule: the queued pings go nowhere
    assert pinger.dropped == 3
