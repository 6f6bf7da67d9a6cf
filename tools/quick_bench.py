"""Quick figures for one node on this machine: claim latency and firings per second.

    .venv/bin/python tools/quick_bench.py [--jobs 5000] [--due 20000] [--database-url DSN]

Prints (1) claim latency p50/p99 for batches of 1, 25 and 100 with ``--jobs`` stored and all due,
and (2) how many no-op firings per second one node sustains draining ``--due`` due jobs,
including the run-history writes. A benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import timedelta

import psycopg

from pgpulse.app import connect
from pgpulse.core.jobs import JobSpec
from pgpulse.db.database import resolve_dsn
from pgpulse.db.store import Store
from pgpulse.node.engine import Node, NodeConfig
from pgpulse.node.handlers import RunContext

ALL = list(range(64))


def fresh(server: str, name: str) -> str:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return psycopg.conninfo.make_conninfo(server, dbname=name)


async def load(store: Store, n: int) -> None:
    """Store ``n`` hourly jobs created two hours ago, so each is due now (one occurrence)."""
    past = await store.db_now() - timedelta(hours=2)
    batch = 2000
    for start in range(0, n, batch):
        specs = [
            JobSpec.create(
                name=f"job-{i}", schedule="@every 1h", handler="noop", catch_up="coalesce"
            )
            for i in range(start, min(n, start + batch))
        ]
        await store.upsert_jobs(specs, extra_handlers={"noop"}, now=past)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


async def claim_latency(dsn: str, jobs: int) -> None:
    async with connect(dsn, max_size=2) as store:
        await load(store, jobs)
        for limit in (1, 25, 100):
            samples = []
            for _ in range(max(50, min(200, jobs // limit // 3))):
                t = time.perf_counter()
                got = await store.claim_due("bench", ALL, limit, lease=60)
                samples.append((time.perf_counter() - t) * 1000)
                if len(got) < limit:
                    break
            print(
                f"claim batch {limit:>3} with {jobs} stored: p50 {pct(samples, 50):.2f} ms, "
                f"p99 {pct(samples, 99):.2f} ms ({len(samples)} claims)"
            )


async def firing_rate(dsn: str, due: int, slots: int) -> None:
    async with connect(dsn, max_size=slots // 4 + 2) as store:
        await load(store, due)
        fired = 0
        done = asyncio.Event()

        async def noop(ctx: RunContext) -> None:
            nonlocal fired
            fired += 1
            if fired >= due:
                done.set()

        node = Node(store, dsn, {"noop": noop}, NodeConfig(slots=slots, poll_interval=0.5))
        t = time.perf_counter()
        task = asyncio.create_task(node.run())
        await asyncio.wait_for(done.wait(), 600)
        elapsed = time.perf_counter() - t
        node.stop()
        await task
        print(
            f"one node, {slots} slots, no-op handler: {due} firings in {elapsed:.1f} s = "
            f"{due / elapsed:.0f} firings/s (claim + run + fenced completion + history)"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--due", type=int, default=20000)
    parser.add_argument("--slots", type=int, default=50)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    server = resolve_dsn(args.database_url)
    await claim_latency(fresh(server, "pgpulse_bench_claim"), args.jobs)
    await firing_rate(fresh(server, "pgpulse_bench_fire"), args.due, args.slots)


if __name__ == "__main__":
    asyncio.run(main())
