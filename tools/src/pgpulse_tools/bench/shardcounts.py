"""Scenario 10's shard-count table: claim latency, empty-poll cost and rebalance time at 64, 128
and 1,024 shards, in one run against one database (docs/scaling.md, "The shard count").

On a fresh database holding ``200,000 × scale`` jobs, ``50,000 × scale`` of them due (handler
:data:`OTHER`, which no node has, so only the benchmark claims them) and the rest parked a day
away, with :data:`NODES` real ``pgpulse node run`` processes (``--heartbeat 2``), for each count
in turn:

1. ``pgpulse shards set COUNT`` (:func:`pgpulse.db.resharding.set_shard_count`): **build**
   seconds (its indexes, ``CONCURRENTLY``, and ``ANALYZE``), then **rebalance** seconds from
   publishing the count until every live node reports it and the nodes split its shards;
then, every count's indexes being there, with the counts taking turns claim by claim (the
machine's noise falls on all alike):

2. **claim** latency: claims of 25 due jobs by a node owning its share among 16 (the claim a node
   of a 16-node cluster sends), over a claim session as a node's (generic plan), each claim's
   jobs handed back untimed, and the buffers one claim touches (``EXPLAIN (ANALYZE, BUFFERS)``,
   rolled back);
3. **empty poll**: the same node's claim when none of its handler's jobs is due (the nodes'
   ``noop`` jobs, parked): latency and buffers.

Durations are seconds, latencies milliseconds, by the benchmark's monotonic clock.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgpulse.app import connect
from pgpulse.core.sharding import shards_for
from pgpulse.db.claims import CLAIM_SESSION_SETTINGS
from pgpulse.db.database import Session
from pgpulse.db.resharding import set_shard_count
from pgpulse.db.store import Store
from pgpulse.sql import at_shard_count
from pgpulse_tools.bench.common import (
    BENCH_SQL,
    admin,
    db_now,
    drop_db,
    fresh_db,
    load_jobs,
    pct,
    register_handler,
)
from pgpulse_tools.bench.nodes import NodeCluster
from pgpulse_tools.bench.sqltext import dollar

DB_NAME = "pgpulse_bench_shardcounts"
#: The counts, in the order they are set: each is a change (the database starts at 64).
COUNTS = (128, 1024, 64)
NODES = 4
#: The claiming node's cluster size: it owns its share of the shards among this many nodes.
OF_NODES = 16
BATCH = 25
HEARTBEAT = 2.0
#: The handler of the due jobs: no node has it, so only the benchmark's claims take them.
OTHER = "bench.elsewhere"


def _routes(handler: str, count: int) -> dict[str, tuple[int, ...]]:
    ids = [f"bench-of-{i}" for i in range(OF_NODES)]
    return {handler: shards_for(ids[0], ids, count)}


async def _claim(claimer: Store, pooled: Store, handler: str, count: int) -> tuple[float, int]:
    """One timed claim of :data:`BATCH` along the 1-of-16 route of ``handler`` at ``count``
    shards (ms), its jobs handed back untimed; and how many it claimed."""
    claimer.shard_count = count
    started = time.perf_counter()
    step = await claimer.finish_and_claim(
        (), "bench-shards", _routes(handler, count), BATCH, lease=60.0
    )
    took = (time.perf_counter() - started) * 1000
    if step.jobs:
        async with pooled.pool.connection() as conn:
            await conn.execute(BENCH_SQL["unclaim"], {"ids": [job.id for job in step.jobs]})
    return took, len(step.jobs)


def _buffers(dsn: str, count: int, handler: str) -> tuple[int, str]:
    """Shared buffers one claim along the 1-of-16 route of ``handler`` touches at ``count``
    shards (generic plan, as a node's claim session; rolled back), and the due scan's index."""
    text, names = dollar(at_shard_count("claim_jobs", count))
    routes = _routes(handler, count)
    values = {
        "node": "bench-shards",
        "route_handlers": list(routes),
        "route_shards": ["{" + ",".join(map(str, s)) + "}" for s in routes.values()],
        "limit": BATCH,
        "lease": 60.0,
        "now": None,
    }
    args = sql.SQL(", ").join(sql.Literal(values[name]) for name in names)
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        for name, value in CLAIM_SESSION_SETTINGS.items():
            conn.execute("SELECT set_config(%s, %s, false)", (name, value))
        with conn.transaction(force_rollback=True):
            conn.execute(f"PREPARE bench_claim AS {text}")
            cur = conn.execute(
                sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE bench_claim({})").format(
                    args
                )
            )
            row = cur.fetchone()
    assert row is not None
    plan = row["QUERY PLAN"][0]["Plan"]
    hit = int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))
    return hit, _due_index(plan)


def _due_index(plan: dict[str, Any]) -> str:
    """The index the claim's scan of pgpulse_jobs by due time reads (the first found)."""
    name = plan.get("Index Name", "")
    if plan.get("Relation Name") == "pgpulse_jobs" and str(name).startswith("pgpulse_jobs_due"):
        return str(name)
    for child in plan.get("Plans", []):
        found = _due_index(child)
        if found:
            return found
    return ""


def _split(dsn: str, ids: set[str], count: int) -> bool:
    with admin(dsn) as conn:
        rows = conn.execute(
            "SELECT node_id, shards, shard_count FROM pgpulse_nodes WHERE state = 'alive'"
            " AND last_heartbeat > now() - interval '6 seconds'"
        ).fetchall()
    seen = {r["node_id"]: r for r in rows if r["node_id"] in ids}
    owned = sorted(s for r in seen.values() for s in r["shards"])
    return (
        len(seen) == len(ids)
        and all(r["shard_count"] == count for r in seen.values())
        and owned == list(range(count))
    )


async def _rebalance(dsn: str, ids: set[str], count: int, since: float) -> float:
    """Seconds from ``since`` until the live nodes ``ids`` split ``count`` shards (NaN after
    60 s)."""
    while time.perf_counter() - since < 60:
        if await asyncio.to_thread(_split, dsn, ids, count):
            return time.perf_counter() - since
        await asyncio.sleep(0.05)
    return float("nan")


async def measure(
    server_dsn: str, scale: float, *, counts: tuple[int, ...] = COUNTS, samples: int = 300
) -> dict[str, Any]:
    """Run the module's steps for each of ``counts`` in turn; return the table (title, headers,
    rows, notes) as scenario 10's other tables."""
    stored, due = max(int(200_000 * scale), 4_000), max(int(50_000 * scale), 1_000)
    dsn = await fresh_db(server_dsn, DB_NAME)
    with admin(dsn) as conn:
        now = db_now(conn)
    load_jobs(
        dsn,
        due,
        schedule="@every 1d",
        kind="interval",
        base=now - timedelta(hours=1),
        modulo=3000,
        step=1.0,
        handler=OTHER,
    )
    load_jobs(
        dsn,
        stored - due,
        schedule="@every 1d",
        kind="interval",
        base=now + timedelta(days=1),
        modulo=3600,
        step=1.0,
        start=due + 1,
    )
    register_handler(dsn)
    cluster = NodeCluster(dsn, NODES, slots=4, poll=5.0, extra_args=("--heartbeat", str(HEARTBEAT)))
    rows: list[list[Any]] = []
    try:
        cluster.start()
        await asyncio.to_thread(cluster.wait_settled, 120.0)
        ids = set(cluster.node_ids())
        session = Session(dsn, "pgpulse:bench-shards:claim", CLAIM_SESSION_SETTINGS)
        async with connect(dsn, max_size=2, migrate=False) as pooled:
            claimer = Store(session)
            changes: dict[int, tuple[float, float]] = {}
            for count in counts:
                started = time.perf_counter()
                done = await set_shard_count(pooled.pool, count, wait=0, ttl=3 * HEARTBEAT)
                published = started + done.build_seconds
                changes[count] = (done.build_seconds, await _rebalance(dsn, ids, count, published))
            # Every count's indexes exist now (none dropped): the claims of each count take
            # turns, so the machine's noise falls on all of them alike.
            claims: dict[int, list[float]] = {count: [] for count in counts}
            polls: dict[int, list[float]] = {count: [] for count in counts}
            claimed = dict.fromkeys(counts, 0)
            for _ in range(samples):
                for count in counts:
                    took, got = await _claim(claimer, pooled, OTHER, count)
                    claims[count].append(took)
                    claimed[count] += got
                    polls[count].append((await _claim(claimer, pooled, "noop", count))[0])
            for count in counts:
                claim_buffers, index = await asyncio.to_thread(_buffers, dsn, count, OTHER)
                poll_buffers, _ = await asyncio.to_thread(_buffers, dsn, count, "noop")
                rows.append(
                    [
                        count,
                        *changes[count],
                        pct(claims[count], 50),
                        pct(claims[count], 99),
                        claimed[count] / samples,
                        claim_buffers,
                        pct(polls[count], 50),
                        pct(polls[count], 99),
                        poll_buffers,
                        index,
                    ]
                )
            await session.close()
    finally:
        cluster.stop()
        cluster.remove_folder()
        drop_db(server_dsn, DB_NAME)
    rows.sort(key=lambda row: int(row[0]))
    return {
        "title": f"Shard counts in one run ({stored:,} stored, {due:,} due, {NODES} nodes)",
        "headers": [
            "shards",
            "build s",
            "rebalance s",
            "claim p50 ms",
            "claim p99 ms",
            "claimed/claim",
            "claim buffers",
            "empty poll p50 ms",
            "empty poll p99 ms",
            "empty poll buffers",
            "due index",
        ],
        "rows": rows,
        "notes": [
            f"counts set in the order {', '.join(map(str, counts))} (each a change), online "
            "(pgpulse shards set) while the nodes run; "
            "build = its indexes CONCURRENTLY + ANALYZE (none at 64: the stored shard_id "
            "column's pgpulse_jobs_due); rebalance = publish → every live node reports the "
            f"count and they split its shards (--heartbeat {HEARTBEAT:g})",
            f"claim: {samples} claims of {BATCH} by a node owning its share of the shards among "
            f"{OF_NODES} (1/{OF_NODES} of the due jobs are its), over a claim session (generic "
            "plan), jobs handed back untimed, the counts taking turns claim by claim; empty "
            "poll: the same node's claim with none of its handler's jobs due (it also returns "
            "the next due instant); buffers: shared blocks one such claim touches (EXPLAIN "
            "ANALYZE BUFFERS, rolled back)",
        ],
    }
