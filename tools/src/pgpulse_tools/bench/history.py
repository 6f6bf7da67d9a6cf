"""Scenario 11: the history table partitioned by day against one table pruned by ``DELETE``.

Issue 23 asks what a team does when the history's pruning becomes the limit: partition
``pgpulse_runs`` by time and prune by dropping partitions. Before building it, this measures it,
in one run on one server, on two copies of the history's shape and hot indexes
(``bench.sql``, ``history_tables``): ``plain`` (as today) and ``parted`` (one partition a day
on ``scheduled_for``, :data:`DAYS` days).

* **insert**: :func:`rows_for` rows in batches of :data:`BATCH` (the recorder writes one row per
  firing, a batch per claim), the two tables taking turns batch by batch so that the machine's
  noise falls on both; time and WAL bytes (``pg_current_wal_lsn()`` differences) per row;
* **read**: the newest 20 runs of a job (the job page), p50 over :data:`READS` jobs each;
* **prune one day**: ``DELETE`` of the oldest day then the ``VACUUM`` it needs, against
  ``DETACH PARTITION ... CONCURRENTLY`` then ``DROP TABLE``: time and WAL bytes.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row

from pgpulse_tools.bench.common import BENCH_SQL, Result, drop_db, fresh_db, pct, q

DB_NAME: Final[str] = "pgpulse_bench_history"
#: Days of history kept in both tables (the partitioned one has a partition each).
DAYS: Final[int] = 8
#: Rows per insert statement.
BATCH: Final[int] = 100
#: Jobs whose newest runs are read, per table.
READS: Final[int] = 300
BASE: Final[datetime] = datetime(2026, 1, 1, tzinfo=UTC)
TABLES: Final[tuple[str, str]] = ("plain", "parted")


def rows_for(scale: float) -> int:
    """Rows inserted into each table at ``scale`` (1,000,000 at 1; at least 50,000)."""
    return max(int(1_000_000 * scale) // BATCH * BATCH, 50_000)


def _wal(conn: psycopg.Connection[dict[str, Any]]) -> str:
    return str(q(conn, "wal_position")[0]["lsn"])


def _wal_since(conn: psycopg.Connection[dict[str, Any]], lsn: str) -> float:
    lsn1 = _wal(conn)
    return float(q(conn, "wal_diff", {"lsn0": lsn, "lsn1": lsn1})[0]["bytes"])


def _timed(
    conn: psycopg.Connection[dict[str, Any]], name: str, **params: Any
) -> tuple[float, float]:
    """Run bench statement ``name`` (``{table}`` filled from ``params``); (seconds, WAL bytes)."""
    table = params.pop("table", None)
    text = BENCH_SQL[name].replace("{table}", table) if table else BENCH_SQL[name]
    lsn = _wal(conn)
    start = time.perf_counter()
    if params:
        conn.execute(text, params)
    else:
        conn.execute(text)
    took = time.perf_counter() - start
    return took, _wal_since(conn, lsn)


def measure(dsn: str, rows: int) -> dict[str, dict[str, float]]:
    """The figures of both tables (see the module docstring), by table and figure."""
    step = DAYS * 86_400 / rows  # seconds between consecutive rows' occurrences
    figures: dict[str, dict[str, float]] = {t: {"insert_s": 0.0, "insert_wal": 0.0} for t in TABLES}
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(BENCH_SQL["history_tables"])
        for day in range(DAYS):
            ddl = q(conn, "history_partition", {"day": day, "base": BASE})[0]["ddl"]
            conn.execute(ddl)
        for first in range(0, rows, BATCH):
            for table in TABLES:
                took, wal = _timed(
                    conn,
                    "history_insert",
                    table=table,
                    first=first,
                    last=first + BATCH - 1,
                    step=step,
                    base=BASE,
                )
                figures[table]["insert_s"] += took
                figures[table]["insert_wal"] += wal
        conn.execute("ANALYZE bench_history.plain")
        conn.execute("ANALYZE bench_history.parted")
        for table in TABLES:
            reads = []
            for job in range(1, READS + 1):
                start = time.perf_counter()
                conn.execute(
                    BENCH_SQL["history_recent"].replace("{table}", table),
                    {"job": job * 31 % 10_000 + 1},
                ).fetchall()
                reads.append(time.perf_counter() - start)
            figures[table]["read_p50_ms"] = pct(reads, 50) * 1000
        delete = _timed(conn, "history_delete_day", base=BASE)
        vacuum = _timed(conn, "history_vacuum")
        detach = _timed(conn, "history_drop_day")
        drop = _timed(conn, "history_drop_table")
        for table in TABLES:  # what each prune left: the same seven days in both
            left = conn.execute(f"SELECT count(*) AS n FROM bench_history.{table}").fetchone()
            figures[table]["rows_left"] = float(left["n"] if left else -1)
    figures["plain"].update(prune_s=delete[0] + vacuum[0], prune_wal=delete[1] + vacuum[1])
    figures["plain"].update(delete_s=delete[0], vacuum_s=vacuum[0])
    figures["parted"].update(prune_s=detach[0] + drop[0], prune_wal=detach[1] + drop[1])
    return figures


async def run(server_dsn: str, scale: float) -> Result:
    """Run scenario 11 and return its table (one row per table, then the ratios).

    Args:
        server_dsn: the benchmarked server.
        scale: :func:`rows_for` rows per table.
    """
    rows = rows_for(scale)
    result = Result(
        "11",
        f"history: one table pruned by DELETE against daily partitions, {rows:,} rows each, "
        f"{DAYS} days",
        [
            "table",
            "insert µs/row",
            "insert WAL B/row",
            "newest 20 of a job p50 ms",
            "prune 1 day s",
            "prune WAL MB",
        ],
    )
    dsn = await fresh_db(server_dsn, DB_NAME)
    try:
        figures = await asyncio.to_thread(measure, dsn, rows)
    finally:
        drop_db(server_dsn, DB_NAME)
    for table, label in (("plain", "plain: DELETE + VACUUM"), ("parted", "by day: DETACH + DROP")):
        f = figures[table]
        result.rows.append(
            [
                label,
                round(f["insert_s"] / rows * 1e6, 1),
                round(f["insert_wal"] / rows),
                round(f["read_p50_ms"], 3),
                round(f["prune_s"], 3),
                round(f["prune_wal"] / 1e6, 2),
            ]
        )
    plain, parted = figures["plain"], figures["parted"]
    result.notes += [
        "partitioned / plain, same run: insert time "
        f"{parted['insert_s'] / plain['insert_s']:.2f}×, insert WAL "
        f"{parted['insert_wal'] / plain['insert_wal']:.2f}×, newest-20 read "
        f"{parted['read_p50_ms'] / plain['read_p50_ms']:.2f}×, prune time "
        f"{parted['prune_s'] / plain['prune_s']:.3f}×, prune WAL "
        f"{parted['prune_wal'] / max(plain['prune_wal'], 1):.4f}×",
        f"the plain prune: DELETE {plain['delete_s']:.2f} s + VACUUM {plain['vacuum_s']:.2f} s "
        f"for {rows // DAYS:,} rows; the partition's: no dead row left, nothing to vacuum",
        "the tables take turns batch by batch, so the machine's noise falls on both",
    ]
    result.data = {"rows": rows, "days": DAYS, "batch": BATCH, "figures": figures}
    return result
