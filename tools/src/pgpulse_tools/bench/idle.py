"""Scenario 6: idle cost — 4 nodes, ``1,000,000 × scale`` jobs stored, nothing due.

Once the nodes split the shards, for ``window`` seconds (60 at scale 1):

* statements/s per node: transactions this database saw (``pg_stat_database``; every autocommit
  statement is one) over the window, divided by the nodes — LISTEN sessions idle in between;
* sessions/s: connections opened to the database per second (all nodes);
* node CPU (% of one core, mean per node) and RSS (MB, mean per node);
* database CPU (% of one core) for this database's backends and WAL/checkpoint writers.

Measured twice in the same run, on the same jobs: with alerting off (``--alert-interval 0``)
and on (the default interval, with cluster-wide ``failures`` and ``late`` rules set), so the
cost alerting adds while nothing fires is a ratio within one run.

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
            "alerting",
            "statements/s per node",
            "sessions opened/s",
            "node CPU % per node",
            "node RSS MB",
            "DB CPU %",
        ],
    )
    with admin(dsn) as conn:
        conn.execute(
            "INSERT INTO pgpulse_notifiers (name, kind, config) "
            "VALUES ('bench', 'webhook', '{\"url\": \"https://93.184.215.14/hook\"}')"
        )
        conn.execute(
            "INSERT INTO pgpulse_alert_rules (rule, threshold, notifiers) "
            "SELECT r, t, ARRAY[(SELECT id FROM pgpulse_notifiers)] "
            "FROM (VALUES ('failures', 1), ('late', 60)) AS v (r, t)"
        )
    per_node: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for label, extra in (("off", ("--alert-interval", "0")), ("on", ())):
        per_node[label], row = await _measure(
            dsn, nodes, slots, poll, window, prepared_after, extra
        )
        cpu[label] = row[2]
        result.rows.append([label, *row])
    drop_db(server_dsn, DB_NAME)
    added = per_node["on"] / per_node["off"] - 1 if per_node["off"] else 0.0
    result.notes.append(
        f"alerting on adds {added * 100:+.1f} % statements per node "
        f"({per_node['on'] - per_node['off']:+.3f}/s: the leader's evaluation every 10 s)"
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
            # the budget is that of the engine: alerting is held to +10 % of it
            "statements_per_node_s": per_node["off"],
            "statements_per_node_s_alerting_on": per_node["on"],
            "alerting_added": added,
            "node_cpu_pct": cpu["on"],
            "budget": budget,
        }
    )
    return result


async def _measure(
    dsn: str,
    nodes: int,
    slots: int,
    poll: float,
    window: float,
    prepared_after: int,
    extra: tuple[str, ...],
) -> tuple[float, list[float]]:
    """One measurement of the idle cluster: (statements/s per node, the table's row)."""
    with NodeCluster(dsn, nodes, slots=slots, poll=poll, extra_args=extra) as cluster:
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
    # the two pg_stat_database reads are statements of this database too
    xacts = after["xacts"] - before["xacts"] - 1
    per_node = xacts / wall / nodes
    node_cpu = sum(b - a for a, b in zip(cpu0, cpu1, strict=True)) / nodes / wall * 100
    return per_node, [
        per_node,
        (after["sessions"] - before["sessions"]) / wall,
        node_cpu,
        sum(rss) / len(rss) / 2**20,
        meter.seconds() / wall * 100,
    ]
