"""Scenario 12: occurrences sent per second through the ``celery`` handler to Redis, 2 nodes,
beside the no-op handler's firings per second in the same run.

The same backlog as scenario 2 (``@every 1h`` jobs, all due once) is drained twice by two real
node processes: once as scenario 2's no-op jobs, once as ``celery`` jobs whose nodes send each
occurrence to Redis with Celery's client (``--celery-broker``, a queue of this run's own that
no worker consumes; it is deleted afterwards). The window and its figures are scenario 2's
(:func:`pgpulse_tools.bench.drain.measure`); ``sent`` is the length of the Redis queue after
the run, which must be at least the runs recorded as succeeded.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

from psycopg.types.json import Jsonb

from pgpulse_tools.bench import checks, drain
from pgpulse_tools.bench.common import Result, admin, backlog_template, drop_db, fresh_db, q
from pgpulse_tools.bench.nodes import NOOP_APP, NodeCluster

DB_NAME = "pgpulse_bench_celery"
NODES = 2
#: The broker sent to (Redis on this machine unless ``PGPULSE_BENCH_CELERY_BROKER`` says).
BROKER = os.environ.get("PGPULSE_BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/0")


def _queue_length(queue: str, *, delete: bool) -> int:
    """Messages in Redis list ``queue`` (the kombu Redis transport's queue); deleted after."""
    from redis import Redis

    client = Redis.from_url(BROKER)
    try:
        length = int(client.llen(queue))
        if delete:
            client.delete(queue)
        return length
    finally:
        client.close()


async def _drain(
    server_dsn: str, jobs: int, *, slots: int, window: float, celery: bool
) -> dict[str, Any]:
    template = await backlog_template(server_dsn, jobs)
    dsn = await fresh_db(server_dsn, DB_NAME, template=template)
    queue = f"pgpulse-bench-{uuid.uuid4().hex[:10]}"
    extra: tuple[str, ...] = ()
    app = NOOP_APP
    if celery:
        app = "pgpulse_tools.bench.noop_app:builtins_app"
        with admin(dsn) as conn:
            q(conn, "celery_handler", {"payload": Jsonb({"task": "bench.noop", "queue": queue})})
        extra = ("--celery-broker", BROKER)
    try:
        with NodeCluster(dsn, NODES, slots=slots, extra_args=extra, app=app) as cluster:
            settle = await asyncio.to_thread(cluster.wait_settled)
            figures = await asyncio.to_thread(drain.measure, dsn, cluster, window)
        with admin(dsn) as conn:
            duplicates = q(conn, "duplicates")[0]["duplicates"]
        cluster.remove_folder()
    finally:
        drop_db(server_dsn, DB_NAME)
        sent = await asyncio.to_thread(_queue_length, queue, delete=True) if celery else None
    figures.update({"nodes": NODES, "jobs": jobs, "settle": settle, "duplicates": duplicates})
    figures["handler"] = "celery → Redis" if celery else "no-op"
    figures["sent"] = sent
    return figures


async def run(server_dsn: str, scale: float, *, slots: int = 50) -> Result:
    """Run scenario 12 and return its table: one row per handler, the same backlog and nodes.

    Args:
        server_dsn: the benchmarked server.
        scale: fraction of the issue's sizes (scenario 2's backlog, :func:`drain.jobs_for`).
        slots: ``--slots`` of every node.
    """
    jobs = drain.jobs_for(scale)
    window = drain.window_for(scale)
    result = Result(
        "12",
        f"celery handler to Redis against the no-op handler, {jobs:,} due jobs, "
        f"{NODES} nodes of {slots} slots",
        ["handler", "occurrences/s", "DB CPU ms/firing", "node CPU %/node", "machine busy %",
         "fired in window", "sent to Redis", "duplicates", "check"],
    )  # fmt: skip
    runs = []
    for celery in (False, True):
        figures = await _drain(server_dsn, jobs, slots=slots, window=window, celery=celery)
        checks.judge(figures)
        runs.append(figures)
        result.rows.append(
            [
                figures["handler"],
                figures["rate"],
                figures["db_cpu_ms"],
                figures["node_cpu_pct"],
                figures["busy_pct"],
                figures["fired"],
                "-" if figures["sent"] is None else figures["sent"],
                figures["duplicates"],
                checks.verdict(figures),
            ]
        )
    noop, sent = runs
    if noop["rate"]:
        result.notes.append(
            f"celery sends at {sent['rate'] / noop['rate']:.0%} of the no-op rate "
            "(same run, same backlog and nodes); each send is one publish to Redis from a "
            "worker thread of the node"
        )
    result.data["runs"] = runs
    return result
