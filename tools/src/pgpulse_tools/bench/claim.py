"""Scenario 1: poll and claim latency with many jobs stored.

Stores ``1,000,000 × scale`` jobs, then measures through :class:`pgpulse.db.store.Store` (exactly
the statements and driver settings a node uses, so psycopg's automatic prepared statements and
PostgreSQL's switch to a generic plan after five executions happen here too):

* the empty poll — ``claim_due`` finding nothing due (it also returns the next due instant,
  which is what an idle node sleeps until);
* ``claim_due`` of batches of 1, 25 and 100 when ``500 / 50,000 / 500,000 × scale`` are due, for a
  node owning all 64 shards and for one owning 16 (one node of four);
* the same claims at the largest backlog when half the due jobs (the older half) need a handler
  the claiming node lacks (capability routing, issue 18): a claim reads only the jobs of the
  handlers it has, so these cells should match the all-runnable ones beside them.

After each timed claim the claimed jobs are handed back unchanged (not timed), so the backlog
keeps its size. It also records ``EXPLAIN (ANALYZE, BUFFERS)`` of the claim at the largest
backlog, with the custom plan and with the generic plan PostgreSQL may switch to; and the
floor's claims of the same batches at each of the same backlogs, as many per cell
(:mod:`pgpulse_tools.bench.floor`: what no claim could beat here; the issue's claim target is
Pulse's p99 over the floor's per backlog and batch).
"""

from __future__ import annotations

import asyncio
import gc
import time
from datetime import timedelta

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgpulse.app import connect
from pgpulse.cli.report import tune_collector
from pgpulse.db.claims import CLAIM_SESSION_SETTINGS
from pgpulse.db.database import Session
from pgpulse.db.store import Store
from pgpulse.sql import QUERIES
from pgpulse_tools.bench import floor
from pgpulse_tools.bench.claim_probe import HANDLER, time_claims
from pgpulse_tools.bench.common import (
    Result,
    db_now,
    drop_db,
    fresh_db,
    load_jobs,
    pct,
    q,
)
from pgpulse_tools.bench.sqltext import dollar

ALL_SHARDS = tuple(range(64))
QUARTER_SHARDS = tuple(range(0, 64, 4))
BATCHES = (1, 25, 100)
DUE_LEVELS = (500, 50_000, 500_000)


#: The handler of the mixed cell's other half, which the claiming node lacks.
OTHER_HANDLER = "bench.elsewhere"


def explain_claim(dsn: str, shards: tuple[int, ...], batch: int, *, generic: bool) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the claim, run and rolled back.

    The claim is ``PREPARE``d from ``QUERIES["claim_jobs"]`` (as
    :meth:`~pgpulse.db.store.Store.claim_due` sends it) and explained with ``EXECUTE``, as a
    node's prepared statement runs (a one-shot parameterised statement is always planned with
    its values, so it cannot show the generic plan).

    Args:
        dsn: the database.
        shards: the shards claimed from.
        batch: the claim's limit.
        generic: plan with ``plan_cache_mode = force_generic_plan`` (the plan a node's claim
            session uses, ``claims.CLAIM_SESSION_SETTINGS``) instead of a custom plan.
    """
    text, names = dollar(QUERIES["claim_jobs"])
    values = {
        "node": "bench-explain",
        "route_handlers": [HANDLER],
        "route_shards": ["{" + ",".join(map(str, shards)) + "}"],
        "limit": batch,
        "lease": 60.0,
        "now": None,
    }
    args = sql.SQL(", ").join(sql.Literal(values[name]) for name in names)
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        conn.execute(
            "SET plan_cache_mode = " + ("force_generic_plan" if generic else "force_custom_plan")
        )
        with conn.transaction(force_rollback=True):
            conn.execute(f"PREPARE bench_claim AS {text}")
            cur = conn.execute(
                sql.SQL("EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_claim({})").format(args)
            )
            plan = "\n".join(row["QUERY PLAN"] for row in cur.fetchall())
        conn.execute("DEALLOCATE bench_claim")
        return plan


async def run(server_dsn: str, scale: float, *, samples: int = 1000) -> Result:
    """Run scenario 1 and return its table.

    Args:
        server_dsn: the benchmarked server (any database; a fresh one is created).
        scale: fraction of the issue's sizes (1 = 1,000,000 stored).
        samples: timed claims per cell.
    """
    stored = max(int(1_000_000 * scale), 1000)
    dsn = await fresh_db(server_dsn, "pgpulse_bench_claim")
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        now = db_now(conn)
    loading = time.perf_counter()
    load_jobs(
        dsn,
        stored,
        schedule="@every 1h",
        kind="interval",
        base=now + timedelta(days=1),
        modulo=86400,
        step=1.0,
    )
    load_s = time.perf_counter() - loading
    result = Result(
        "1",
        f"poll and claim latency, {stored:,} jobs stored",
        ["due", "shards", "batch", "p50 ms", "p99 ms", "max ms", "claims"],
    )
    plans: dict[str, str] = {}
    samples_raw: dict[str, list[float]] = {}
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        first_id = q(conn, "first_id")[0]["first_id"]
    # As a node claims: over its claim session (generic plans, no JIT), statements prepared
    # after 5 uses; the claimed jobs are handed back through the pool.
    session = Session(dsn, "pgpulse:bench-claim:claim", CLAIM_SESSION_SETTINGS)
    # ... and with a node's garbage collection (this process has far more objects than a node,
    # plotting included: a full collection inside a timed claim is not what a node sees).
    threshold = gc.get_threshold()
    tune_collector()
    async with connect(dsn, max_size=2, migrate=False) as pooled:
        claimer = Store(session)
        claims = await time_claims(claimer, pooled, ALL_SHARDS, 10, samples)
        label = "claim_due (empty poll)"
        result.rows.append(
            [0, 64, label, pct(claims, 50), pct(claims, 99), max(claims), len(claims)]
        )
        samples_raw[f"empty/{label}"] = claims
        for level in DUE_LEVELS:
            due = max(int(level * scale), 1)
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
                q(conn, "make_due", {"due": due, "first_id": first_id})
                conn.execute("VACUUM (ANALYZE) pgpulse_jobs")
            for shards in (ALL_SHARDS, QUARTER_SHARDS):
                for batch in BATCHES:
                    values = await time_claims(claimer, pooled, shards, batch, samples)
                    result.rows.append(
                        [
                            due,
                            len(shards),
                            batch,
                            pct(values, 50),
                            pct(values, 99),
                            max(values),
                            len(values),
                        ]
                    )
                    samples_raw[f"{due}/{len(shards)}/{batch}"] = values
        for generic in (False, True):
            key = "generic" if generic else "custom"
            plans[key] = explain_claim(dsn, ALL_SHARDS, 100, generic=generic)
            plans[f"{key}_16_shards"] = explain_claim(dsn, QUARTER_SHARDS, 100, generic=generic)
        # The mixed cell: the older half of the backlog needs a handler this node lacks.
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            q(conn, "split_handlers", {"handler": OTHER_HANDLER})
            conn.execute("VACUUM (ANALYZE) pgpulse_jobs")
        for batch in BATCHES[1:]:
            values = await time_claims(claimer, pooled, ALL_SHARDS, batch, samples)
            label = f"{batch}, half for another handler"
            result.rows.append(
                [due, 64, label, pct(values, 50), pct(values, 99), max(values), len(values)]
            )
            samples_raw[f"{due}/64/{batch}/mixed"] = values
        plans["generic_mixed"] = explain_claim(dsn, ALL_SHARDS, 100, generic=True)
    await session.close()
    gc.unfreeze()
    gc.set_threshold(*threshold)
    result.notes.append(
        f"{stored:,} jobs loaded in {load_s:.1f} s (INSERT ... SELECT per "
        "100,000 rows, then VACUUM ANALYZE)"
    )
    result.notes.append(
        "claim latency seen by the node (round trip + building ClaimedJob), "
        "through a node's claim session: statements prepared after 5 uses, "
        "generic plans, no JIT (claims.CLAIM_SESSION_SETTINGS), with a node's "
        f"garbage collection (report.tune_collector); {samples:,} claims per "
        "cell"
    )
    result.notes.append(
        f"EXPLAIN (ANALYZE, BUFFERS) of the claim of 100 at {due:,} due is in "
        "the JSON (custom and generic plans) and in docs/benchmarks.md"
    )
    result.notes.append(
        f"'half for another handler': of the {due:,} due, the older half (even ids, an hour "
        f"earlier) have handler {OTHER_HANDLER!r}, which the claiming node lacks; it claims "
        f"only {HANDLER!r} jobs (capability routing): compare with the cells of the same "
        "batch above"
    )
    drop_db(server_dsn, "pgpulse_bench_claim")
    # The floor on the same server: the least claim any scheduler makes (bench/floor.sql), at
    # each backlog Pulse's claims were timed at (loaded once, the backlog raised in place).
    dues = [max(int(level * scale), 1) for level in DUE_LEVELS]
    floor_dsn = await asyncio.to_thread(floor.create, server_dsn, stored, dues[0])
    by_due = await asyncio.to_thread(floor.claim_latency_by_due, floor_dsn, dues, BATCHES, samples)
    drop_db(server_dsn, floor.DB_NAME)
    least = by_due[-1]["claims"]
    result.notes.append(
        f"floor (bench/floor.sql: one narrow table, one partial index, no shards, nothing "
        f"returned but ids and tokens; {stored:,} stored, a synchronous client, {samples:,} "
        "claims per cell): "
        + "; ".join(
            f"{level['due']:,} due: "
            + ", ".join(
                f"claim of {batch} p50 {cell['p50']:.2f} / p99 {cell['p99']:.2f} ms"
                for batch, cell in level["claims"].items()
            )
            for level in by_due
        )
    )
    result.data.update(
        {
            "stored": stored,
            "load_s": load_s,
            "plans": plans,
            "samples_ms": samples_raw,
            # "due" and "claims": the largest backlog's (the shape older results.json files
            # have, which the report still reads); "by_due": every backlog
            "floor": {"due": due, "claims": least, "by_due": by_due},
            "due_levels": dues,
        }
    )
    return result
