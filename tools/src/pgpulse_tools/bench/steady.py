"""Scenario 4: steady state — ``100,000 × scale`` ``@every 60s`` jobs spread over the minute.

Pulse keeps an interval job's anchor to the microsecond (``schedule.py``; ``upsert_jobs``
anchors a job at the database's now when it is created), so jobs created at different instants
fall due at different instants. The scenario loads them that way: job ``i`` (1-based) is anchored
at ``base + (i mod jobs) * 60 / jobs`` s — evenly over the minute at sub-second resolution (one
every 0.6 ms at scale 1, 1,667 a second but never two at once), with ``anchor_at``,
``scheduled_for`` and ``next_run_at`` all at that instant. ``nodes`` node processes start and
split the shards before ``base``; every occurrence scheduled within ``[base, base + duration]``
is measured:

* lag: handler start minus ``scheduled_for`` (ms), recorded inside the no-op handler (the
  database and the nodes share this machine's clock);
* claim lag: the claim's ``now()`` minus ``scheduled_for`` (ms), from ``pgpulse_runs``;
* missed: occurrences in the window with no run by the end (should be 0).

Issue 22 asks that the lag p99 be no worse than the previous measurement's, which is a figure
of another run: :func:`carry_previous` keeps it in the new result when ``pgpulse bench``
replaces the old one.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from pgpulse_tools.bench.common import (
    DbCpu,
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
from pgpulse_tools.bench.nodes import THIS, NodeCluster, Runtime

DB_NAME = "pgpulse_bench_steady"
#: The jobs' period, seconds (``@every 60s``).
PERIOD = 60.0


def jobs_for(scale: float) -> int:
    """Job count at ``scale`` (the issue's 100,000 at scale 1)."""
    return max(int(100_000 * scale), 2_000)


def duration_for(scale: float) -> float:
    """Measured seconds at ``scale`` (the issue's 3 minutes at scale 1, 30 s when quick)."""
    return min(180.0, max(30.0, 180.0 * scale))


def expected_runs(jobs: int, duration: float, step: float) -> int:
    """Occurrences within ``[base, base + duration]`` of ``jobs`` jobs every :data:`PERIOD` s,
    job ``i`` (1-based) first at ``base + (i mod jobs) * step`` s.

    The offsets are rounded to microseconds as PostgreSQL's ``make_interval`` stores them, so
    an occurrence exactly at the window's end is counted the same way as the database sees it.
    """
    window = timedelta(seconds=duration)
    period = timedelta(seconds=PERIOD)
    total = 0
    for i in range(1, jobs + 1):
        offset = timedelta(microseconds=round((i % jobs) * step * 1_000_000))
        if offset <= window:
            total += (window - offset) // period + 1
    return total


async def run(
    server_dsn: str,
    scale: float,
    *,
    nodes: int = 2,
    slots: int = 50,
    lead: float = 8.0,
    runtime: Runtime = THIS,
) -> Result:
    """Run scenario 4 and return its table.

    Args:
        server_dsn: the benchmarked server.
        scale: fraction of the issue's sizes (1 = 100,000 jobs for 3 minutes).
        nodes: node processes.
        slots: ``--slots`` of each node.
        lead: seconds from loading to the first occurrence (nodes start and settle meanwhile).
        runtime: the node processes' Pulse.
    """
    jobs = jobs_for(scale)
    duration = duration_for(scale)
    dsn = await fresh_db(server_dsn, DB_NAME, schema=runtime.schema)
    with admin(dsn) as conn:
        now = db_now(conn)
    # base itself is a whole second (only for readable logs); the anchors are spread from it
    base = now.replace(microsecond=0) + timedelta(seconds=round(lead + jobs / 100_000))
    step = PERIOD / jobs  # seconds between two consecutive jobs' anchors
    load_jobs(
        dsn,
        jobs,
        schedule="@every 60s",
        kind="interval",
        base=base,
        modulo=jobs,
        step=step,
        catch_up="skip",
        misfire_grace=60.0,
    )
    register_handler(dsn)
    end = base + timedelta(seconds=duration)
    result = Result(
        "4",
        f"steady state, {jobs:,} @every 60s jobs ({jobs / 60:,.0f} firings/s), "
        f"{nodes} nodes of {slots} slots, {duration:g} s",
        [
            "lag p50 ms",
            "lag p90 ms",
            "lag p99 ms",
            "lag max ms",
            "claim lag p50 ms",
            "claim lag p99 ms",
            "runs",
            "missed",
            "DB CPU %",
        ],
    )
    with NodeCluster(dsn, nodes, slots=slots, record_starts=True, runtime=runtime) as cluster:
        settle = await asyncio.to_thread(cluster.wait_settled)
        with admin(dsn) as conn:
            ahead = (base - db_now(conn)).total_seconds()
        with DbCpu(dsn) as meter:
            wall0 = time.perf_counter()
            await asyncio.sleep(max(ahead, 0) + duration + 1.0)
            wall = time.perf_counter() - wall0
    t0, t1 = base.timestamp(), end.timestamp()
    lags = [(s - sched) * 1000 for s, sched in cluster.starts() if t0 <= sched <= t1]
    cluster.remove_folder()
    with admin(dsn) as conn:
        claim = [r["lag_ms"] for r in q(conn, "claim_lags", {"t0": base, "t1": end})]
    drop_db(server_dsn, DB_NAME)
    expected = expected_runs(jobs, duration, step)
    lag, claim_lag = lag_summary(lags), lag_summary(claim)
    result.rows.append(
        [
            lag["p50"],
            lag["p90"],
            lag["p99"],
            lag["max"],
            claim_lag["p50"],
            claim_lag["p99"],
            len(lags),
            expected - len(claim),
            meter.seconds() / wall * 100,
        ]
    )
    result.notes.append(
        f"nodes settled {ahead:.1f} s before the first occurrence (settling took {settle:.1f} s)"
    )
    result.notes.append(
        "lag = handler start minus scheduled_for; claim lag = the claim "
        "statement's now() minus scheduled_for"
    )
    result.notes.append(
        f"anchors spread evenly over the minute, one job every "
        f"{step * 1000:.3g} ms (interval anchors keep their microseconds, so no "
        "two jobs fall due at the same instant)"
    )
    result.data.update(
        {
            "jobs": jobs,
            "nodes": nodes,
            "slots": slots,
            "duration": duration,
            "lag": lag,
            "claim_lag": claim_lag,
            "lags_ms": cdf_points(lags),
        }
    )
    return result


def carry_previous(result: Result, replaced: Result | None) -> None:
    """Keep the measurement ``result`` replaces in ``result.data["previous"]``: its lag p99 (ms),
    revision, start and scale, so the report can judge "lag p99 not worse than the previous
    run's". Nothing is kept when there is no earlier result or it measured no lag p99.

    Args:
        result: this run's scenario-4 result (changed in place).
        replaced: the scenario-4 result of the results.json being replaced, or ``None``.
    """
    if replaced is None:
        return
    p99 = replaced.data.get("lag", {}).get("p99")
    if p99 is None:
        return
    run: dict[str, Any] = replaced.data.get("run", {})
    result.data["previous"] = {
        "p99": p99,
        "revision": run.get("revision", "unknown"),
        "started": run.get("started"),
        "scale": run.get("scale"),
    }
