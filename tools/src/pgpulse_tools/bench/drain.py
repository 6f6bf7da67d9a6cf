"""Scenario 2: backlog drain — firings per second of 1, 2 and 4 node processes.

``1,000,000 × scale`` no-op jobs are all due. For each node count, a fresh copy of the backlog
is drained by real node processes (``pgpulse node run``, see :mod:`pgpulse_tools.bench.nodes`). The
figure is measured over a window that opens once the nodes share the 64 shards (the start-up
ramp is excluded) and closes after ``window`` seconds or when the backlog is empty:

* firings/s: runs whose fenced completion *and* history write committed in the window
  (``pgpulse_runs.finished_at``, the database's clock), divided by the window;
* database CPU per firing: CPU seconds of every server process over the window / firings (ms);
* node CPU: per node process, percent of one core; machine busy: percent of all cores.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psutil

from pgpulse_tools.bench import checks
from pgpulse_tools.bench.common import (
    DbCpu,
    Result,
    admin,
    backlog_template,
    drop_db,
    fresh_db,
    machine_busy_seconds,
    q,
)
from pgpulse_tools.bench.nodes import THIS, NodeCluster, Runtime

DB_NAME = "pgpulse_bench_drain"
NODE_COUNTS = (1, 2, 4)
#: Logical CPUs of this machine.
CORES = psutil.cpu_count() or 1


def jobs_for(scale: float) -> int:
    """Backlog size at ``scale`` (the issue's 1,000,000 at scale 1; never under 100,000, which
    four nodes need to still have work once they have split the shards, ~5 s after start)."""
    return max(int(1_000_000 * scale), 100_000)


def window_for(scale: float) -> float:
    """Seconds each node count is measured at ``scale`` (about 10 s quick, 60 s at scale 1)."""
    return min(60.0, 5.0 + 55.0 * scale)


def measure(dsn: str, cluster: NodeCluster, window: float) -> dict[str, Any]:
    """Measure a running, settled cluster for ``window`` seconds or until the backlog drains.

    Returns:
        ``fired``, ``seconds``, ``rate`` (firings/s), ``db_cpu_ms`` (per firing),
        ``node_cpu_pct`` (mean per node, % of one core), ``busy_pct`` (% of all cores),
        ``drained`` (the backlog ran out inside the window).
    """
    with admin(dsn) as conn, DbCpu(dsn) as meter:
        t0 = q(conn, "now")[0]["now"]
        nodes0, busy0 = cluster.cpu_seconds(), machine_busy_seconds()
        wall0 = time.perf_counter()
        drained = False
        while time.perf_counter() - wall0 < window:
            time.sleep(0.25)
            state = q(conn, "backlog_state")[0]
            if not state["due"] and not state["running"]:
                drained = True
                break
        t1 = q(conn, "now")[0]["now"]
        nodes1, busy1 = cluster.cpu_seconds(), machine_busy_seconds()
        wall = time.perf_counter() - wall0
    db_cpu = meter.seconds()
    with admin(dsn) as conn:
        row = q(conn, "fired_between", {"t0": t0, "t1": t1})[0]
    fired = row["fired"]
    end = row["last_finished"] if drained and row["last_finished"] else t1
    span = max((end - t0).total_seconds(), 1e-3)
    node_cpu = [b - a for a, b in zip(nodes0, nodes1, strict=True)]
    return {
        "fired": fired,
        "seconds": span,
        "rate": fired / span,
        "db_cpu_ms": db_cpu / fired * 1000 if fired else float("nan"),
        "node_cpu_pct": sum(node_cpu) / len(node_cpu) / wall * 100,
        "busy_pct": (busy1 - busy0) / wall / CORES * 100,
        "drained": drained,
    }


async def drain_once(
    server_dsn: str,
    jobs: int,
    count: int,
    *,
    slots: int,
    window: float,
    runtime: Runtime = THIS,
) -> dict[str, Any]:
    """Drain a fresh copy of a ``jobs`` backlog with ``count`` node processes of ``runtime``;
    return :func:`measure`'s figures plus ``nodes``, ``jobs``, ``settle`` (seconds until the
    nodes split the shards) and ``duplicates``."""
    template = await backlog_template(server_dsn, jobs, schema=runtime.schema)
    dsn = await fresh_db(server_dsn, DB_NAME, template=template)
    with NodeCluster(dsn, count, slots=slots, runtime=runtime) as cluster:
        settle = await asyncio.to_thread(cluster.wait_settled)
        figures = await asyncio.to_thread(measure, dsn, cluster, window)
    with admin(dsn) as conn:
        duplicates = q(conn, "duplicates")[0]["duplicates"]
    cluster.remove_folder()
    drop_db(server_dsn, DB_NAME)
    figures.update({"nodes": count, "jobs": jobs, "settle": settle, "duplicates": duplicates})
    return figures


async def run(
    server_dsn: str, scale: float, *, slots: int = 50, node_counts: tuple[int, ...] = NODE_COUNTS
) -> Result:
    """Run scenario 2 and return its table (the ceiling ratio is added by the runner).

    Args:
        server_dsn: the benchmarked server.
        scale: fraction of the issue's sizes (1 = 1,000,000 due jobs).
        slots: ``--slots`` of every node.
        node_counts: how many node processes, one measurement each.
    """
    jobs = jobs_for(scale)
    window = window_for(scale)
    result = Result(
        "2",
        f"backlog drain, {jobs:,} due no-op jobs, nodes of {slots} slots",
        [
            "nodes",
            "firings/s",
            "DB CPU ms/firing",
            "node CPU %/node",
            "machine busy %",
            "fired in window",
            "window s",
            "settle s",
            "duplicates",
            "check",
        ],
    )
    runs: list[dict[str, Any]] = []
    for count in node_counts:
        figures = await drain_once(server_dsn, jobs, count, slots=slots, window=window)
        if figures["drained"]:  # a draining rate: once more, on a backlog that outlasts it
            bigger = checks.backlog_to_outlast(
                figures["rate"], window + figures["settle"], 2 * jobs
            )
            figures = await drain_once(server_dsn, bigger, count, slots=slots, window=window)
        checks.judge(figures)
        if not figures["fired"]:
            result.notes.append(
                f"{count} nodes: the backlog ran out before they had split the "
                "shards; use a larger --scale"
            )
        runs.append(figures)
        result.rows.append(
            [
                count,
                figures["rate"],
                figures["db_cpu_ms"],
                figures["node_cpu_pct"],
                figures["busy_pct"],
                figures["fired"],
                figures["seconds"],
                figures["settle"],
                figures["duplicates"],
                checks.verdict(figures),
            ]
        )
    result.notes.append(
        "firings = runs whose fenced completion and history row committed inside "
        "the window; the window opens once the nodes split the 64 shards "
        "(start-up excluded)"
    )
    result.notes.append(
        f"each node: `pgpulse node run --slots {slots}` with a no-op async "
        "handler; database, nodes and benchmark share this machine's "
        f"{CORES} cores"
    )
    result.data.update({"jobs": jobs, "slots": slots, "window": window, "runs": runs})
    return result
