"""Scenario 5: thundering herd — ``50,000 × scale`` jobs due at the same second.

The jobs are stored with nothing due, ``nodes`` node processes start and split the shards, then
every job is given a once-an-hour cron schedule (``S M * * * *``, seconds first) whose occurrence
``T`` is a few seconds ahead, and the nodes are woken so they sleep until ``T``. Figures:

* time until all started: the last handler start minus ``T`` (seconds);
* lag: handler start minus ``scheduled_for`` per run (ms), recorded inside the handler — the
  database and the nodes share this machine's clock; claim lag: the claim's ``now()`` minus
  ``scheduled_for`` (ms), from ``pgpulse_runs``;
* the issue's bound: ``jobs / throughput + 1 s``, throughput from scenario 2 at the same number of
  nodes (filled in by the runner);
* the database's load: the most claims made in one second (exact, from the history), and, sampled
  every 0.1 s, the most sessions running a statement at once and the most transactions in one
  second (pg_stat_database, which backends report with some delay: a rough figure).

It runs twice: the herd as it is, then the same jobs with ``spread`` (default 60 s: issue 19,
each job fires at its occurrence plus its stable offset in [0, spread)). With spread, the lag is
measured from each job's spread instant (the claim's ``now()`` minus ``scheduled_for`` plus the
offset, from the history), and "all started after" includes the window.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from pgpulse_tools.bench.common import (
    Result,
    admin,
    cdf_points,
    db_now,
    drop_db,
    fresh_db,
    lag_summary,
    load_jobs,
    q,
    register_handler,
)
from pgpulse_tools.bench.nodes import THIS, NodeCluster, Runtime, wake_nodes

DB_NAME = "pgpulse_bench_herd"


def jobs_for(scale: float) -> int:
    """Herd size at ``scale`` (the issue's 50,000 at scale 1)."""
    return max(int(50_000 * scale), 2_000)


def _wait_started(dsn: str, at: datetime, jobs: int, timeout: float) -> bool:
    """Poll until every run of occurrence ``at`` has started; ``False`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    with admin(dsn) as conn:
        while time.monotonic() < deadline:
            if q(conn, "started_at", {"at": at})[0]["started"] >= jobs:
                return True
            time.sleep(0.2)
    return False


class _LoadSampler(threading.Thread):
    """Samples the database's load every ``period`` seconds until stopped: the most sessions
    running a statement at once, and the most transactions counted in one second."""

    def __init__(self, dsn: str, period: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.dsn, self.period = dsn, period
        self.done = threading.Event()
        self.peak_active = 0
        self.peak_xacts_per_s = 0.0

    def run(self) -> None:
        """Sample until :attr:`done` is set."""
        window: list[tuple[float, int]] = []
        with admin(self.dsn) as conn:
            while not self.done.is_set():
                row = q(conn, "herd_load_sample")[0]
                now = time.monotonic()
                self.peak_active = max(self.peak_active, int(row["active"]))
                window = [(t, x) for t, x in window if now - t <= 1.0] + [(now, int(row["xacts"]))]
                if now - window[0][0] >= 0.5:
                    rate = (window[-1][1] - window[0][1]) / (now - window[0][0])
                    self.peak_xacts_per_s = max(self.peak_xacts_per_s, rate)
                self.done.wait(self.period)


async def _one_pass(
    server_dsn: str,
    jobs: int,
    *,
    nodes: int,
    slots: int,
    lead: float,
    spread: float,
    runtime: Runtime,
) -> dict[str, Any]:
    """One herd of ``jobs`` with ``spread`` seconds of spread; its figures."""
    dsn = await fresh_db(server_dsn, DB_NAME, schema=runtime.schema)
    with admin(dsn) as conn:
        far = db_now(conn) + timedelta(days=1)
    load_jobs(dsn, jobs, schedule="@every 1h", kind="interval", base=far, modulo=3600, step=1.0)
    register_handler(dsn)
    sampler = _LoadSampler(dsn)
    with NodeCluster(dsn, nodes, slots=slots, record_starts=True, runtime=runtime) as cluster:
        await asyncio.to_thread(cluster.wait_settled)
        with admin(dsn) as conn:
            at = q(conn, "herd_instant", {"lead": lead})[0]["at"]
            schedule = f"{at.second} {at.minute} * * * *"
            q(conn, "herd_arm", {"at": at, "schedule": schedule, "spread": spread})
            conn.execute("VACUUM (ANALYZE) pgpulse_jobs")
            armed_ahead = (at - db_now(conn)).total_seconds()
        sampler.start()
        wake_nodes(dsn)
        limit = 120.0 + lead + spread
        finished = await asyncio.to_thread(_wait_started, dsn, at, jobs, limit)
        sampler.done.set()
        sampler.join()
    starts = cluster.starts()
    cluster.remove_folder()
    lags = [(start - sched) * 1000 for start, sched in starts if sched == at.timestamp()]
    with admin(dsn) as conn:
        if spread:
            claim = [r["lag_ms"] for r in q(conn, "herd_spread_lags", {"at": at})]
        else:
            claim = [r["lag_ms"] for r in q(conn, "claim_lags", {"t0": at, "t1": at})]
        peak_claims = q(conn, "herd_peak_claims", {"at": at})[0]["peak"]
    drop_db(server_dsn, DB_NAME)
    return {
        "spread": spread,
        "finished": finished,
        "limit": limit,
        "armed_ahead": armed_ahead,
        # without spread, the lag is the handler's start; with it, the claim's, from the
        # spread instant (the start records do not carry the job's offset)
        "lag": lag_summary(claim if spread else lags),
        "claim_lag": lag_summary(claim),
        "all_started_s": (max(lags) / 1000) if lags else float("nan"),
        "started": len(lags),
        "peak_claims_per_s": int(peak_claims),
        "peak_active": sampler.peak_active,
        "peak_xacts_per_s": sampler.peak_xacts_per_s,
        "lags_ms": cdf_points(lags),
    }


async def run(
    server_dsn: str,
    scale: float,
    *,
    nodes: int = 2,
    slots: int = 50,
    lead: float = 4.0,
    spread: float = 60.0,
    runtime: Runtime = THIS,
) -> Result:
    """Run scenario 5, without and then with ``spread``, and return its table (row 1: without).

    Args:
        server_dsn: the benchmarked server.
        scale: fraction of the issue's sizes (1 = 50,000 jobs).
        nodes: node processes.
        slots: ``--slots`` of each node.
        lead: seconds between arming the herd and its instant.
        spread: seconds of spread of the second pass (0: one pass only).
        runtime: the node processes' Pulse.
    """
    jobs = jobs_for(scale)
    result = Result(
        "5",
        f"thundering herd, {jobs:,} jobs due at the same second, {nodes} nodes of {slots} slots"
        f"{f'; then with spread {spread:g} s' if spread else ''}",
        [
            "all started after s",
            "bound s",
            "lag p50 ms",
            "lag p90 ms",
            "lag p99 ms",
            "lag max ms",
            "claim lag p99 ms",
            "started",
            "spread s",
            "peak claims/s",
            "peak active sessions",
            "peak xacts/s",
        ],
    )
    passes = [0.0] + ([spread] if spread else [])
    figures = [
        await _one_pass(
            server_dsn, jobs, nodes=nodes, slots=slots, lead=lead, spread=s, runtime=runtime
        )
        for s in passes
    ]
    for f in figures:
        lag = f["lag"]
        result.rows.append(
            [
                f["all_started_s"],
                None,
                lag["p50"],
                lag["p90"],
                lag["p99"],
                lag["max"],
                f["claim_lag"]["p99"],
                f["started"],
                f["spread"],
                f["peak_claims_per_s"],
                f["peak_active"],
                round(f["peak_xacts_per_s"]),
            ]
        )
        if not f["finished"]:
            result.notes.append(
                f"spread {f['spread']:g} s: not every run started within {f['limit']:g} s"
            )
    result.notes.append(
        f"armed {figures[0]['armed_ahead']:.1f} s before the instant; lag = handler start "
        "minus scheduled_for (same clock: database and nodes share the machine); with spread, "
        "claim minus the job's spread instant (scheduled_for + its stable offset)"
    )
    base = figures[0]
    result.data.update(
        {
            "jobs": jobs,
            "nodes": nodes,
            "slots": slots,
            "lag": base["lag"],
            "claim_lag": base["claim_lag"],
            "all_started_s": base["all_started_s"],
            "lags_ms": base["lags_ms"],
            "passes": [{k: v for k, v in f.items() if k != "lags_ms"} for f in figures],
        }
    )
    return result
