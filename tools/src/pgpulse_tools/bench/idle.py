"""Scenario 6: idle cost — 4 nodes, ``1,000,000 × scale`` jobs stored, nothing due.

Once the nodes split the shards, for ``window`` seconds (60 at scale 1):

* statements/s per node: transactions this database saw (``pg_stat_database``; every autocommit
  statement is one) over the window, divided by the nodes — LISTEN sessions idle in between;
* sessions/s: connections opened to the database per second (all nodes);
* node CPU (% of one core, mean per node) and RSS (MB, mean per node);
* database CPU (% of one core) for this database's backends and WAL/checkpoint writers.

The window opens once the nodes' start-up is over, so nothing of it is counted:

* backends report their counters to ``pg_stat_database`` up to 1 s late (10 s when idle);
* psycopg prepares a statement once it has run ``prepare_threshold`` times (Pulse keeps the
  driver's default, 5: the Parse goes with the sixth execution), in a message of its own, which
  the server counts as one more transaction. The heartbeat's is sent ~10 s after a node starts,
  the claim's only after six polls (~30 s at ``--poll 5``): one transaction per session, once,
  not a steady-state cost.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from pgpulse_tools.bench.common import (
    DbCpu,
    Result,
    admin,
    db_now,
    drop_db,
    fresh_db,
    load_jobs,
    q,
    register_handler,
)
from pgpulse_tools.bench.nodes import NodeCluster

DB_NAME = "pgpulse_bench_idle"


def jobs_for(scale: float) -> int:
    """Stored jobs at ``scale`` (the issue's 1,000,000 at scale 1)."""
    return max(int(1_000_000 * scale), 10_000)


def window_for(scale: float) -> float:
    """Measured seconds at ``scale`` (the issue's minute at scale 1, 20 s when quick)."""
    return min(60.0, max(20.0, 60.0 * scale))


async def run(
    server_dsn: str, scale: float, *, nodes: int = 4, slots: int = 50, poll: float = 5.0
) -> Result:
    """Run scenario 6 and return its table.

    Args:
        server_dsn: the benchmarked server.
        scale: fraction of the issue's sizes.
        nodes: node processes.
        slots: ``--slots`` of each node.
        poll: ``--poll`` of each node (seconds): the longest sleep with nothing due.
    """
    jobs = jobs_for(scale)
    window = window_for(scale)
    dsn = await fresh_db(server_dsn, DB_NAME)
    with admin(dsn) as conn:
        far = db_now(conn) + timedelta(days=1)
        prepared_after = conn.prepare_threshold or 0  # the driver's default, as nodes have it
    load_jobs(dsn, jobs, schedule="@every 1d", kind="interval", base=far, modulo=3600, step=1.0)
    register_handler(dsn)
    result = Result(
        "6",
        f"idle cost, {nodes} nodes, {jobs:,} jobs stored, nothing due for "
        f"{window:g} s (--poll {poll:g}, --heartbeat 2)",
        [
            "statements/s per node",
            "sessions opened/s",
            "node CPU % per node",
            "node RSS MB",
            "DB CPU %",
        ],
    )
    with NodeCluster(dsn, nodes, slots=slots, poll=poll) as cluster:
        await asyncio.to_thread(cluster.wait_settled)
        # A backend reports its counts when it goes idle, or up to 10 s later if it reported
        # less than a second before (PostgreSQL's PGSTAT_IDLE_INTERVAL); and a claim session
        # prepares its statement at its (prepared_after + 1)th poll. Wait both out, or start-up
        # transactions land in the window.
        await asyncio.sleep(max(12.0, (prepared_after + 1) * poll + 2.0))
        with admin(dsn) as conn, DbCpu(dsn) as meter:
            before = q(conn, "db_activity")[0]
            cpu0, wall0 = cluster.cpu_seconds(), time.perf_counter()
            await asyncio.sleep(window)
            after = q(conn, "db_activity")[0]
            cpu1, wall = cluster.cpu_seconds(), time.perf_counter() - wall0
            rss = cluster.rss_bytes()
    cluster.remove_folder()
    drop_db(server_dsn, DB_NAME)
    # the two pg_stat_database reads are statements of this database too
    xacts = after["xacts"] - before["xacts"] - 1
    per_node = xacts / wall / nodes
    node_cpu = sum(b - a for a, b in zip(cpu0, cpu1, strict=True)) / nodes / wall * 100
    result.rows.append(
        [
            per_node,
            (after["sessions"] - before["sessions"]) / wall,
            node_cpu,
            sum(rss) / len(rss) / 2**20,
            meter.seconds() / wall * 100,
        ]
    )
    budget = 1 / poll + 1 / 2.0
    result.notes.append(
        f"the issue's budget: one claim per poll interval plus the heartbeat = "
        f"{budget:.2f} statements/s per node, under 2% of a core per node"
    )
    result.data.update(
        {
            "jobs": jobs,
            "nodes": nodes,
            "window": window,
            "poll": poll,
            "statements_per_node_s": per_node,
            "node_cpu_pct": node_cpu,
            "budget": budget,
        }
    )
    return result
