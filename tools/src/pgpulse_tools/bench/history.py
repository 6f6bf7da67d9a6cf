"""Scenario 11: the history as Pulse builds it (``pgpulse_runs`` partitioned by day, pruned by
dropping whole days) against the one table of schema 0019, pruned by ``DELETE``.

Both are the real table, made by the real migrations, in two databases of one server, in one
run: ``plain`` is a database migrated to 0019 (the last schema with one table), ``parted`` one
migrated to this release (migration 0023); its day partitions are made by the leader's own prune
(:func:`pgpulse.db.history.prune_history`), as a node makes them ahead of the rows.

* **insert**: :func:`rows_for` rows in batches of :data:`BATCH` (the recorder writes one row per
  firing, a batch per claim), spread over :data:`DAYS` days, the two databases taking turns batch
  by batch so that the machine's noise falls on both; time and WAL bytes (the server's
  ``pg_current_wal_lsn()`` differences) per row;
* **read**: the newest 20 runs of a job (the job page), p50 over :data:`READS` jobs each;
* **prune one day**: on ``plain``, the 0019 leader's ``DELETE`` of the runs finished before the
  cutoff, then the ``VACUUM`` it needs; on ``parted``, the leader's prune itself
  (``prune_history`` with a retention that leaves the oldest day behind: its partition locked,
  checked, detached and dropped, then the row-by-row passes that find nothing left). Time and
  WAL bytes; both leave the same rows.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgpulse.db.database import open_pool
from pgpulse.db.history import prune_history
from pgpulse.db.migrations import migrate
from pgpulse_tools.bench.common import (
    BENCH_SQL,
    Result,
    admin,
    drop_db,
    fresh_db,
    pct,
    q,
    with_db,
)

DB_NAMES: Final[dict[str, str]] = {
    "plain": "pgpulse_bench_history_plain",
    "parted": "pgpulse_bench_history_parted",
}
#: The last schema whose history is one table.
PLAIN_SCHEMA: Final[int] = 19
#: Days of history inserted in both tables (the partitioned one has a partition each).
DAYS: Final[int] = 8
#: Rows per insert statement.
BATCH: Final[int] = 100
#: Jobs whose newest runs are read, per table.
READS: Final[int] = 300
BASE: Final[datetime] = datetime(2026, 1, 1, tzinfo=UTC)
TABLES: Final[tuple[str, str]] = ("plain", "parted")
#: The prune's instant: the cutoff of a retention of DAYS - 1 days falls 1 ms after the first
#: day, so the first day's runs (each finished 5 ms after its occurrence) are all past it, and
#: none of the second's.
PRUNE_AT: Final[datetime] = BASE + timedelta(days=DAYS, milliseconds=1)
KEEP: Final[float] = (DAYS - 1) * 86400.0


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
    """Run bench statement ``name``; (seconds, WAL bytes)."""
    lsn = _wal(conn)
    start = time.perf_counter()
    conn.execute(BENCH_SQL[name], params or None)
    took = time.perf_counter() - start
    return took, _wal_since(conn, lsn)


async def _databases(server_dsn: str) -> dict[str, str]:
    """The two databases, fresh: ``plain`` migrated to :data:`PLAIN_SCHEMA`, ``parted`` to
    this release, its partitions of the :data:`DAYS` days (and the days after) made by the
    leader's prune as it makes them ahead of the rows."""
    drop_db(server_dsn, DB_NAMES["plain"])
    with admin(server_dsn) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB_NAMES["plain"])))
    plain = with_db(server_dsn, DB_NAMES["plain"])
    async with await psycopg.AsyncConnection.connect(plain, autocommit=True) as aconn:
        await migrate(aconn, target=PLAIN_SCHEMA)
    parted = await fresh_db(server_dsn, DB_NAMES["parted"])
    pool = await open_pool(parted, application_name="pgpulse-bench", max_size=2)
    try:
        for day in range(0, DAYS, 4):  # today and the next 3, as at each day's prunes
            await prune_history(pool, keep=KEEP, now=BASE + timedelta(days=day))
        await prune_history(pool, keep=100 * 86400.0, now=PRUNE_AT)  # the days ahead of it
    finally:
        await pool.close()
    return {"plain": plain, "parted": parted}


def measure(dsns: dict[str, str], rows: int) -> dict[str, dict[str, float]]:
    """The insert and read figures of both tables (see the module docstring), by table."""
    step = DAYS * 86_400 / rows  # seconds between consecutive rows' occurrences
    figures: dict[str, dict[str, float]] = {t: {"insert_s": 0.0, "insert_wal": 0.0} for t in TABLES}
    conns = {t: psycopg.connect(dsns[t], autocommit=True, row_factory=dict_row) for t in TABLES}
    try:
        for first in range(0, rows, BATCH):
            for table in TABLES:
                took, wal = _timed(
                    conns[table],
                    "history_insert",
                    first=first,
                    last=first + BATCH - 1,
                    step=step,
                    base=BASE,
                )
                figures[table]["insert_s"] += took
                figures[table]["insert_wal"] += wal
        for table in TABLES:
            conns[table].execute("ANALYZE pgpulse_runs")
            reads = []
            for job in range(1, READS + 1):
                start = time.perf_counter()
                conns[table].execute(
                    BENCH_SQL["history_recent"], {"job": job * 31 % 10_000 + 1}
                ).fetchall()
                reads.append(time.perf_counter() - start)
            figures[table]["read_p50_ms"] = pct(reads, 50) * 1000
        delete = _timed(
            conns["plain"], "history_delete_before", cutoff=PRUNE_AT - timedelta(seconds=KEEP)
        )
        vacuum = _timed(conns["plain"], "history_vacuum")
        figures["plain"].update(prune_s=delete[0] + vacuum[0], prune_wal=delete[1] + vacuum[1])
        figures["plain"].update(delete_s=delete[0], vacuum_s=vacuum[0])
        figures["parted"]["partitions"] = float(
            q(conns["parted"], "history_partition_count")[0]["n"]
        )
    finally:
        for conn in conns.values():
            conn.close()
    return figures


async def _prune_parted(dsn: str, figures: dict[str, float]) -> None:
    """The leader's prune of the partitioned history, timed, with its WAL."""
    pool = await open_pool(dsn, application_name="pgpulse-bench", max_size=2)
    try:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            lsn = _wal(conn)
            start = time.perf_counter()
            pruned = await prune_history(pool, keep=KEEP, now=PRUNE_AT)
            took = time.perf_counter() - start
            figures.update(prune_s=took, prune_wal=_wal_since(conn, lsn), pruned=float(pruned))
    finally:
        await pool.close()


def _left(dsns: dict[str, str], figures: dict[str, dict[str, float]]) -> None:
    for table in TABLES:  # what each prune left: the same seven days in both
        with psycopg.connect(dsns[table], autocommit=True, row_factory=dict_row) as conn:
            figures[table]["rows_left"] = float(q(conn, "history_count")[0]["n"])


async def measure_all(server_dsn: str, rows: int) -> dict[str, dict[str, float]]:
    """Both databases made, ``rows`` rows inserted into each, read and pruned (see the module
    docstring), then dropped: the figures by table (``rows_left`` the rows each prune left)."""
    dsns = await _databases(server_dsn)
    try:
        figures = await asyncio.to_thread(measure, dsns, rows)
        await _prune_parted(dsns["parted"], figures["parted"])
        await asyncio.to_thread(_left, dsns, figures)
    finally:
        for name in DB_NAMES.values():
            drop_db(server_dsn, name)
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
        f"history: pgpulse_runs as built (0023, by day) against 0019's one table, "
        f"{rows:,} rows each, {DAYS} days",
        [
            "table",
            "insert µs/row",
            "insert WAL B/row",
            "newest 20 of a job p50 ms",
            "prune 1 day s",
            "prune WAL MB",
        ],
    )
    figures = await measure_all(server_dsn, rows)
    for table, label in (
        ("plain", "0019, one table: DELETE + VACUUM"),
        ("parted", "0023, by day: the leader's prune"),
    ):
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
        f"for {rows - plain['rows_left']:,.0f} rows; the leader's prune of the partitioned table: "
        f"{parted['pruned']:,.0f} runs by dropping a day, nothing to vacuum",
        f"rows left: {plain['rows_left']:,.0f} (0019) and {parted['rows_left']:,.0f} (0023)",
        "both are the real table, made by the migrations; the databases take turns batch by "
        "batch, so the machine's noise falls on both",
    ]
    result.data = {"rows": rows, "days": DAYS, "batch": BATCH, "figures": figures}
    return result
