"""Scenario 8: alert latency — 3 nodes, a webhook receiver on 127.0.0.1.

* failing run → webhook arrival: ``100 × scale`` jobs (at least 20) that fail at their one
  attempt, triggered one every 0.2 s; each run's failure is an event of the cluster-wide
  ``failures`` rule. Latency = the receiver's arrival instant minus the run's ``finished_at``
  (the database's clock; the same host's clock as the receiver's).
* silence window passing → alert: 10 jobs whose ``silence`` window passes 2, 4 ... 20 s after
  the start (their creation instant set back by the window); latency = arrival minus the instant
  the window passed. The leader evaluates every ``--alert-interval`` (10 s by default), so this
  is at most that interval plus a delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pgpulse.alerts.store import AlertStore
from pgpulse.app import connect
from pgpulse.core.egress import HttpAllowList
from pgpulse.core.jobs import JobSpec
from pgpulse_tools.bench.common import Result, admin, drop_db, fresh_db
from pgpulse_tools.bench.nodes import NodeCluster

DB_NAME = "pgpulse_bench_alerts"
SILENT_JOBS = 10
WINDOW = 86400.0


class _Receiver:
    """Records the arrival instant (Unix seconds) of each Idempotency-Key's first request."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}
        self.bodies: dict[str, dict[str, Any]] = {}
        lock = threading.Lock()
        state = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                at = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = self.headers.get("Idempotency-Key", "")
                with lock:
                    if key not in state.arrivals:
                        state.arrivals[key] = at
                        state.bodies[key] = json.loads(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def _wait_for(predicate: Any, within: float) -> None:
    """Return once ``predicate()`` holds, or after ``within`` seconds (the figures say what
    arrived)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while True:
                if predicate():
                    return
                await asyncio.sleep(0.1)


async def run(server_dsn: str, scale: float) -> Result:
    """Run scenario 9 and return its table."""
    failures = max(int(100 * scale), 20)
    dsn = await fresh_db(server_dsn, DB_NAME)
    receiver = _Receiver()
    url = f"http://127.0.0.1:{receiver.port}/hook"
    try:
        async with connect(dsn) as store:
            alerts = AlertStore(store.pool)
            await alerts.add_notifier(
                "bench", "webhook", {"url": url}, allow=HttpAllowList.parse(["127.0.0.1"])
            )
            await alerts.set_rule("failures", ["bench"])
            specs = [
                JobSpec.create(
                    name=f"fail-{i}", schedule="0 0 1 1 *", handler="fail", max_attempts=1
                )
                for i in range(failures)
            ] + [
                JobSpec.create(name=f"silent-{i}", schedule="@every 1d", handler="noop")
                for i in range(SILENT_JOBS)
            ]
            await store.upsert_jobs(specs, extra_handlers={"fail", "noop"})
            for i in range(SILENT_JOBS):
                await alerts.set_rule(
                    "silence", ["bench"], threshold=WINDOW, job=("default", f"silent-{i}")
                )
            extra = ("--http-allow", "127.0.0.1", "--heartbeat", "1", "--lease", "10")
            with NodeCluster(dsn, 3, slots=10, poll=5.0, extra_args=extra) as cluster:
                await asyncio.to_thread(cluster.wait_settled)
                with admin(dsn) as conn:
                    # windows pass 2, 4 ... 20 s from now
                    conn.execute(
                        "UPDATE pgpulse_jobs j SET created_at = now() "
                        "- make_interval(secs => %s) + make_interval(secs => 2 * (s.k + 1)) "
                        "FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k "
                        "FROM pgpulse_jobs WHERE name LIKE 'silent-%%') s WHERE j.id = s.id",
                        (WINDOW,),
                    )
                for i in range(failures):
                    await store.trigger_job("default", f"fail-{i}")
                    await asyncio.sleep(0.2)
                await _wait_for(lambda: len(receiver.arrivals) >= failures + SILENT_JOBS, 60)
            with admin(dsn) as conn:
                rows = conn.execute(
                    "SELECT e.id, e.rule, extract(epoch FROM r.finished_at)::float8 AS ended, "
                    "extract(epoch FROM j.created_at)::float8 + %s AS window_passed "
                    "FROM pgpulse_alert_events e JOIN pgpulse_jobs j ON j.id = e.job_id "
                    "LEFT JOIN pgpulse_runs r ON r.job_id = e.job_id "
                    "AND r.scheduled_for = e.scheduled_for AND e.rule = 'failures'",
                    (WINDOW,),
                ).fetchall()
    finally:
        receiver.close()
        drop_db(server_dsn, DB_NAME)
    fail_lat, silence_lat = [], []
    for row in rows:
        arrived = receiver.arrivals.get(f"alert/{row['id']}")
        if arrived is None:
            continue
        if row["rule"] == "failures" and row["ended"] is not None:
            fail_lat.append((arrived - row["ended"]) * 1000)
        elif row["rule"] == "silence":
            silence_lat.append((arrived - row["window_passed"]) * 1000)
    result = Result(
        "9",
        f"alert latency, 3 nodes: {failures} failing runs, {SILENT_JOBS} silence windows "
        "(--alert-interval 10)",
        ["what", "events", "delivered", "p50 ms", "p99 ms", "max ms"],
    )
    for what, values, expected in (
        ("failing run → webhook", fail_lat, failures),
        ("silence window passed → webhook", silence_lat, SILENT_JOBS),
    ):
        result.rows.append(
            [
                what,
                expected,
                len(values),
                statistics.median(values) if values else float("nan"),
                _pct(values, 99) if values else float("nan"),
                max(values) if values else float("nan"),
            ]
        )
    result.notes.append(
        "a failure is evaluated at once by the node that recorded it; a silence window by the "
        "leader's evaluation every --alert-interval seconds"
    )
    result.data.update(
        {
            "failures": failures,
            "fail_p50_ms": statistics.median(fail_lat) if fail_lat else None,
            "fail_p99_ms": _pct(fail_lat, 99) if fail_lat else None,
            "silence_p50_ms": statistics.median(silence_lat) if silence_lat else None,
            "silence_max_ms": max(silence_lat) if silence_lat else None,
            "delivered": len(fail_lat) + len(silence_lat),
        }
    )
    return result
