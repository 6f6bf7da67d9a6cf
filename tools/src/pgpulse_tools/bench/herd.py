"""Scenario 5: thundering herd — ``50,000 × scale`` jobs due at the same second.

The jobs are stored with nothing due, ``nodes`` node processes start and split the shards, then
every job is given a once-an-hour cron schedule (``S M * * * *``, seconds first) whose occurrence
``T`` is a few seconds ahead, and the nodes are woken so they sleep until ``T``. Figures:

* time until all started: the last handler start minus ``T`` (seconds);
* lag: handler start minus ``scheduled_for`` per run (ms), recorded inside the handler — the
  database and the nodes share this machine's clock; claim lag: the claim's ``now()`` minus
  ``scheduled_for`` (ms), from ``pgpulse_runs``;
* the issue's bound: ``jobs / throughput + 1 s``, throughput from scenario 2 at the same number of
  nodes (filled in by the runner).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta

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
from pgpulse_tools.bench.nodes import NodeCluster, wake_nodes

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


async def run(
    server_dsn: str, scale: float, *, nodes: int = 2, slots: int = 50, lead: float = 4.0
) -> Result:
    """Run scenario 5 and return its table.

    Args:
        server_dsn: the benchmarked server.
        scale: fraction of the issue's sizes (1 = 50,000 jobs).
        nodes: node processes.
        slots: ``--slots`` of each node.
        lead: seconds between arming the herd and its instant.
    """
    jobs = jobs_for(scale)
    dsn = await fresh_db(server_dsn, DB_NAME)
    with admin(dsn) as conn:
        far = db_now(conn) + timedelta(days=1)
    load_jobs(dsn, jobs, schedule="@every 1h", kind="interval", base=far, modulo=3600, step=1.0)
    register_handler(dsn)
    result = Result(
        "5",
        f"thundering herd, {jobs:,} jobs due at the same second, {nodes} nodes of {slots} slots",
        [
            "all started after s",
            "bound s",
            "lag p50 ms",
            "lag p90 ms",
            "lag p99 ms",
            "lag max ms",
            "claim lag p99 ms",
            "started",
        ],
    )
    with NodeCluster(dsn, nodes, slots=slots, record_starts=True) as cluster:
        await asyncio.to_thread(cluster.wait_settled)
        with admin(dsn) as conn:
            at = q(conn, "herd_instant", {"lead": lead})[0]["at"]
            q(conn, "herd_arm", {"at": at, "schedule": f"{at.second} {at.minute} * * * *"})
            conn.execute("VACUUM (ANALYZE) pgpulse_jobs")
            armed_ahead = (at - db_now(conn)).total_seconds()
        wake_nodes(dsn)
        finished = await asyncio.to_thread(_wait_started, dsn, at, jobs, 120.0 + lead)
    starts = cluster.starts()
    cluster.remove_folder()
    lags = [(start - sched) * 1000 for start, sched in starts if sched == at.timestamp()]
    with admin(dsn) as conn:
        claim = [r["lag_ms"] for r in q(conn, "claim_lags", {"t0": at, "t1": at})]
    drop_db(server_dsn, DB_NAME)
    lag, claim_lag = lag_summary(lags), lag_summary(claim)
    all_started = lag["max"] / 1000
    result.rows.append(
        [
            all_started,
            None,
            lag["p50"],
            lag["p90"],
            lag["p99"],
            lag["max"],
            claim_lag["p99"],
            len(lags),
        ]
    )
    if not finished:
        result.notes.append(f"not every run started within {120 + lead:g} s")
    result.notes.append(
        f"armed {armed_ahead:.1f} s before the instant; lag = handler start "
        "minus scheduled_for (same clock: database and nodes share the machine)"
    )
    result.data.update(
        {
            "jobs": jobs,
            "nodes": nodes,
            "slots": slots,
            "lag": lag,
            "claim_lag": claim_lag,
            "all_started_s": all_started,
            "lags_ms": cdf_points(lags),
        }
    )
    return result
