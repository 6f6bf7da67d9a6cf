"""Scenario 10: scale-out — 1, 2, 4, 8, 16, 32 node processes of few slots against one database.

For each node count N, on a fresh database holding ``100,000 × scale`` ``@every 60s`` jobs (the
steady set, spread over the minute as scenario 4 spreads them) and ``100,000 × scale`` backlog
jobs (``@every 1d``, made due at once for the drain), with real ``pgpulse node run`` processes
on 127.0.0.1 (``--slots 4``, ``--poll 5``, ``--heartbeat 2``, so a dead node is dead after
``node_ttl`` = 6 s):

1. start N nodes and wait until they split the 64 shards: **settle** seconds, and the **share**
   of the shards each owns (max/min shards per node, as the nodes reported at a heartbeat);
2. **steady state** for ``window`` seconds: lag p50/p99 (handler start minus scheduled_for, from
   the no-op handler's records);
3. **idle**: every job parked a day away, 12 s for the backends' statistics to settle (they
   report up to 10 s late when idle), then ``idle_window`` seconds: transactions this database
   committed (``pg_stat_database.xact_commit + xact_rollback`` delta; every autocommit statement
   is one; the LISTEN sessions idle in between) per second, per node and in all; sessions open
   (``pg_stat_activity``) per node; database CPU (% of one core);
4. **drain**: the backlog made due at once; firings/s = firings / (last history write − first
   claim) by the database's clock; DB CPU ms per firing over the drain;
5. **join**: one more node starts; seconds until the N + 1 live nodes split the 64 shards again
   with the new node owning some (N + 1 ≤ 64);
6. **kill**: the joined node gets SIGKILL; seconds until the N others split the 64 shards again
   without it (an original node would lose its handler's start records, written at exit).

A node count whose nodes do not settle within :data:`SETTLE_TIMEOUT` (the machine cannot hold
them) ends the curve: it is reported as not fitting and larger counts are not tried.
Durations are seconds; times are by the benchmark's monotonic clock unless said.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from pgpulse.core import sharding
from pgpulse_tools.bench import shardcounts
from pgpulse_tools.bench.common import (
    DbCpu,
    Result,
    admin,
    db_now,
    drop_db,
    fresh_db,
    lag_summary,
    load_jobs,
    q,
    register_handler,
)
from pgpulse_tools.bench.nodes import NodeCluster

DB_NAME = "pgpulse_bench_scaleout"
NODE_COUNTS = (1, 2, 4, 8, 16, 32)
SHARDS = 64
#: Slots of each node (few, so the machine holds many nodes).
SLOTS = 4
POLL = 5.0
HEARTBEAT = 2.0
#: Seconds a node count may take to settle before it is judged not to fit on the machine.
SETTLE_TIMEOUT = 120.0
#: Seconds a rebalance (join or kill) may take before it is reported as not done.
REBALANCE_TIMEOUT = 60.0
PERIOD = 60.0
#: What the sessions per node mean for the largest node count (pgpulse_tools docs/scaling.md).
SESSIONS_NOTE = (
    "an idle node holds 5 sessions (claim, heartbeat, LISTEN and a pool of 2), so N nodes need "
    "5 N connections (32 nodes: 160; max_connections 100 holds about 18 beside the benchmark's own)"
)


def steady_jobs_for(scale: float) -> int:
    """``@every 60s`` jobs at ``scale`` (the issue's 100,000 at scale 1; at least 600)."""
    return max(int(100_000 * scale), 600)


def backlog_for(scale: float) -> int:
    """Backlog jobs drained at ``scale`` (100,000 at scale 1; at least 2,000)."""
    return max(int(100_000 * scale), 2_000)


def window_for(scale: float) -> float:
    """Steady-state seconds at ``scale`` (60 at scale 1, at least 12)."""
    return min(60.0, max(12.0, 60.0 * scale))


def share(shards_by_node: dict[str, list[int]]) -> tuple[int, int]:
    """(max, min) shards owned per node; (0, 0) for no nodes."""
    counts = [len(s) for s in shards_by_node.values()]
    return (max(counts), min(counts)) if counts else (0, 0)


def partitioned(shards_by_node: dict[str, list[int]], shards: int = SHARDS) -> bool:
    """Whether the nodes' shards are each of ``range(shards)`` exactly once."""
    owned = Counter(s for ss in shards_by_node.values() for s in ss)
    return sorted(owned) == list(range(shards)) and all(c == 1 for c in owned.values())


def _alive(conn: Any, ids: set[str]) -> dict[str, list[int]]:
    return {r["node_id"]: list(r["shards"]) for r in q(conn, "nodes_alive") if r["node_id"] in ids}


def wait_split(
    dsn: str, ids: set[str], *, must_own: str | None = None, timeout: float = REBALANCE_TIMEOUT
) -> tuple[float, dict[str, list[int]]]:
    """Wait until the live nodes ``ids`` (all reporting) split the 64 shards, ``must_own``
    owning at least one; return (seconds waited, shards by node), or (NaN, last seen) after
    ``timeout`` seconds. Nodes outside ``ids`` (a killed one still within the TTL) are ignored."""
    start = time.perf_counter()
    seen: dict[str, list[int]] = {}
    with admin(dsn) as conn:
        while time.perf_counter() - start < timeout:
            seen = _alive(conn, ids)
            if (
                len(seen) == len(ids)
                and partitioned(seen)
                and (must_own is None or seen.get(must_own))
            ):
                return time.perf_counter() - start, seen
            time.sleep(0.1)
    return float("nan"), seen


async def one_count(
    server_dsn: str, nodes: int, scale: float, *, slots: int = SLOTS
) -> dict[str, Any]:
    """Measure one node count (see the module's steps); ``fits`` False if it did not settle."""
    steady, backlog, window = steady_jobs_for(scale), backlog_for(scale), window_for(scale)
    idle_window = max(10.0, window / 2)
    dsn = await fresh_db(server_dsn, DB_NAME)
    with admin(dsn) as conn:
        far = db_now(conn) + timedelta(days=1)
    load_jobs(dsn, backlog, schedule="@every 1d", kind="interval", base=far, modulo=3600, step=1.0)
    register_handler(dsn)
    args = ("--heartbeat", str(HEARTBEAT))
    out: dict[str, Any] = {"nodes": nodes, "fits": True}
    t0 = t1 = 0.0
    cluster = NodeCluster(dsn, nodes, slots=slots, poll=POLL, record_starts=True, extra_args=args)
    joiner = NodeCluster(dsn, 1, slots=slots, poll=POLL, extra_args=args, first=nodes + 1)
    try:
        cluster.start()
        try:
            out["settle_s"] = await asyncio.to_thread(cluster.wait_settled, SETTLE_TIMEOUT)
        except RuntimeError as exc:
            text = str(exc)
            why = " (too many clients: the server's max_connections)" if "too many" in text else ""
            out.update(fits=False, error=text.splitlines()[0] + why)
            return out
        ids = set(cluster.node_ids())
        _, seen = await asyncio.to_thread(wait_split, dsn, ids)
        out["share_max"], out["share_min"] = share(seen)
        # steady state: anchors spread over the minute from a base a few seconds away
        with admin(dsn) as conn:
            base = db_now(conn).replace(microsecond=0) + timedelta(seconds=4 + steady / 20_000)
        step = PERIOD / steady
        load_jobs(
            dsn,
            steady,
            schedule="@every 60s",
            kind="interval",
            base=base,
            modulo=steady,
            step=step,
            catch_up="skip",
            misfire_grace=60.0,
            start=backlog + 1,
        )
        with admin(dsn) as conn:
            q(conn, "wake")  # the nodes sleep up to --poll: have them see the new jobs now
            ahead = (base - db_now(conn)).total_seconds()
        await asyncio.sleep(max(ahead, 0) + window + 1.0)
        t0, t1 = base.timestamp(), base.timestamp() + window
        # idle: nothing due for a day; wait out the statistics' reporting delay
        with admin(dsn) as conn:
            q(conn, "park_all")
            await asyncio.sleep(1.0)
            q(conn, "park_all")
        await asyncio.sleep(12.0)
        with admin(dsn) as conn, DbCpu(dsn) as meter:
            before = q(conn, "db_activity")[0]
            wall0 = time.perf_counter()
            await asyncio.sleep(idle_window)
            after = q(conn, "db_activity")[0]
            wall = time.perf_counter() - wall0
            sessions = q(conn, "scaleout_sessions")[0]["sessions"]
            idle_cpu = meter.seconds()
        xacts = after["xacts"] - before["xacts"] - 1  # the second read is one of them
        out.update(
            idle_stmts_node_s=xacts / wall / nodes,
            idle_stmts_s=xacts / wall,
            idle_db_cpu_pct=idle_cpu / wall * 100,
            sessions_per_node=sessions / nodes,  # DbCpu's sampler is on database postgres
        )
        # drain
        with DbCpu(dsn) as meter, admin(dsn) as conn:
            q(conn, "scaleout_backlog", {"backlog": backlog})
            q(conn, "wake")
            deadline = time.perf_counter() + 300
            while True:
                row = q(conn, "scaleout_drain", {"backlog": backlog})[0]
                if row["fired"] >= backlog or time.perf_counter() > deadline:
                    break
                await asyncio.sleep(0.2)
            drain_cpu = meter.seconds()
        out.update(
            drained=row["fired"],
            firings_s=row["fired"] / row["span"] if row["span"] else float("nan"),
            db_cpu_ms_firing=drain_cpu / row["fired"] * 1000 if row["fired"] else float("nan"),
        )
        with admin(dsn) as conn:
            out["sizes"] = q(conn, "scaleout_sizes")
        # join, then kill
        joiner.start()
        new_id = joiner.node_ids()[0]
        ids_join = ids | {new_id}
        out["join_s"], _ = await asyncio.to_thread(
            wait_split, dsn, ids_join, must_own=new_id if nodes + 1 <= SHARDS else None
        )
        # the joined node dies: an original would lose its start records (written at exit)
        victim = joiner.procs[0]
        victim.kill()  # SIGKILL: no drain, no goodbye; its heartbeat stops
        victim.wait()
        out["kill_s"], _ = await asyncio.to_thread(wait_split, dsn, ids)
    finally:
        joiner.stop()
        cluster.stop()
        lags = [(s - sched) * 1000 for s, sched in cluster.starts() if t0 <= sched <= t1]
        cluster.remove_folder()
        joiner.remove_folder()
        drop_db(server_dsn, DB_NAME)
    lag = lag_summary(lags)
    out.update(lag_p50_ms=lag["p50"], lag_p99_ms=lag["p99"], steady_runs=len(lags))
    return out


HEADERS = [
    "nodes",
    "firings/s",
    "DB CPU ms/firing",
    "idle stmts/s/node",
    "idle stmts/s all",
    "idle DB CPU %",
    "sessions/node",
    "lag p50 ms",
    "lag p99 ms",
    "settle s",
    "join s",
    "kill s",
    "shards max/min",
]


def row_of(m: dict[str, Any]) -> list[Any]:
    """One table row of a node count's measures."""
    if not m["fits"]:
        return [m["nodes"], "did not fit", *[""] * (len(HEADERS) - 2)]
    return [
        m["nodes"],
        m["firings_s"],
        m["db_cpu_ms_firing"],
        m["idle_stmts_node_s"],
        m["idle_stmts_s"],
        m["idle_db_cpu_pct"],
        m["sessions_per_node"],
        m["lag_p50_ms"],
        m["lag_p99_ms"],
        m["settle_s"],
        m["join_s"],
        m["kill_s"],
        f"{m['share_max']}/{m['share_min']}",
    ]


#: Node counts and shard counts of the placement table (pure: no database, no processes).
PLACEMENT_NODES = (16, 64, 256, 1000)
PLACEMENT_SHARDS = (64, 128, 1024, 4096)


def placement_table(
    nodes_counts: tuple[int, ...] = PLACEMENT_NODES,
    shard_counts: tuple[int, ...] = PLACEMENT_SHARDS,
) -> dict[str, Any]:
    """Where :func:`pgpulse.core.sharding.placement` puts the shards for many nodes: shards per node
    (max/min), nodes owning none, the CPU milliseconds one node spends placing them for a new
    set of live nodes (first: no node's ring points hashed yet; join: one node more, the others'
    points cached, as a running node sees a join), and the shards a join moves."""
    rows: list[list[Any]] = []
    for count in nodes_counts:
        ids = [f"bench-{count}-{i}" for i in range(count)]
        for shards in shard_counts:
            sharding.forget()
            started = time.process_time()
            before = sharding.placement(frozenset(ids), shards)
            first_ms = (time.process_time() - started) * 1000
            started = time.process_time()
            after = sharding.placement(frozenset([*ids, "joining"]), shards)
            join_ms = (time.process_time() - started) * 1000
            moved = sum(len(set(before[n]) - set(after[n])) for n in ids)
            owned = [len(mine) for mine in before.values()]
            rows.append(
                [
                    count,
                    shards,
                    max(owned),
                    min(owned),
                    sum(1 for o in owned if o == 0),
                    first_ms,
                    join_ms,
                    moved,
                ]
            )
    return {
        "title": "Shard placement for more nodes (pgpulse.core.sharding, no database)",
        "headers": [
            "nodes",
            "shards",
            "max/node",
            "min/node",
            "owning none",
            "first placement ms",
            "placement after a join ms",
            "shards moved by the join",
        ],
        "rows": rows,
        "notes": [
            f"consistent hashing with bounded loads, {sharding.POINTS} ring points per node: "
            "every node owns ⌊S/N⌋ or ⌈S/N⌉ shards; ms = CPU of one placement in the "
            "benchmark's process (a node computes it in a thread, once per membership or count "
            "change; an unchanged cluster's heartbeat reuses it)",
            "the shard count is a setting of the database (pgpulse shards set; 64 by default)",
        ],
    }


def size_table(m: dict[str, Any]) -> dict[str, Any]:
    """The extra table of bytes per row of each relation, from one node count's measures."""
    rows = [
        [
            r["relation"],
            r["of_table"],
            r["bytes"],
            r["table_rows"],
            r["bytes"] / r["table_rows"] if r["table_rows"] else float("nan"),
        ]
        for r in m["sizes"]
    ]
    return {
        "title": f"Bytes per row on disk after the {m['nodes']}-node run",
        "headers": ["relation", "table", "bytes", "rows", "bytes/row"],
        "rows": rows,
        "notes": [
            "pg_relation_size (main fork, no TOAST or free-space map) after the steady state and "
            "the drain, before the join; the jobs' row versions and the history's rows as "
            "written by the runs, no VACUUM since (dead versions are counted: a live system "
            "keeps some too)"
        ],
    }


async def run(
    server_dsn: str, scale: float, *, counts: tuple[int, ...] = NODE_COUNTS, slots: int = SLOTS
) -> Result:
    """Run scenario 10 over ``counts`` node counts (stopping at the first that does not fit).

    Args:
        server_dsn: the benchmarked server.
        scale: fraction of the issue's sizes (jobs stored, backlog, windows).
        counts: node counts, ascending.
        slots: ``--slots`` of each node (the runner's ``--slots`` is for the other scenarios).
    """
    steady, backlog, window = steady_jobs_for(scale), backlog_for(scale), window_for(scale)
    result = Result(
        "10",
        f"scale-out, {'/'.join(map(str, counts))} nodes of {slots} slots: {steady:,} @every 60s "
        f"jobs ({steady / PERIOD:,.0f} firings/s) for {window:g} s, a {backlog:,}-job drain, "
        "join and SIGKILL",
        HEADERS,
    )
    with admin(server_dsn) as conn:
        shown = conn.execute("SHOW max_connections").fetchone()
        max_connections = int(shown["max_connections"]) if shown else 0
    measures: list[dict[str, Any]] = []
    for nodes in counts:
        m = await one_count(server_dsn, nodes, scale, slots=slots)
        measures.append(m)
        result.rows.append(row_of(m))
        if not m["fits"]:
            break
    fitted = [m["nodes"] for m in measures if m["fits"]]
    result.tables.append(placement_table())
    result.tables.append(await shardcounts.measure(server_dsn, scale))
    sized = next((m for m in measures if m.get("sizes")), None)
    if sized:
        result.tables.append(size_table(sized))
    misfit = "" if measures[-1]["fits"] else f" ({measures[-1]['nodes']}: {measures[-1]['error']})"
    result.notes += [
        f"largest node count that settled on this machine: {max(fitted, default=0)}{misfit}",
        "firings/s: the backlog's firings over first claim → last history write (database clock);"
        " DB CPU per firing over the drain (the database's backends and WAL/checkpoint writers)",
        "idle statements: pg_stat_database xact_commit + xact_rollback delta over "
        f"{max(10.0, window / 2):g} s with every job parked a day away (each autocommit "
        "statement is one transaction), after 12 s for the statistics to settle; "
        "sessions/node from pg_stat_activity",
        f"lag: handler start minus scheduled_for in the {window:g} s steady window",
        f"join: one node more starts, until the N + 1 live nodes split the {SHARDS} shards "
        "with the new one owning some; kill: SIGKILL of that node, until the N others "
        f"split them again (--heartbeat {HEARTBEAT:g}: node_ttl 6 s)",
        f"shards max/min: shards per node once the N nodes settled ({SHARDS} fixed shards on a "
        "consistent-hash ring: beyond 64 nodes some node owns none, and one may well before; "
        "see the placement table)",
        f"server's max_connections {max_connections}: {SESSIONS_NOTE}",
    ]
    result.data.update(
        {
            "counts": list(counts),
            "slots": slots,
            "steady_jobs": steady,
            "backlog": backlog,
            "window": window,
            "measures": measures,
            "largest_fit": max(fitted, default=0),
            "max_connections": max_connections,
        }
    )
    return result
