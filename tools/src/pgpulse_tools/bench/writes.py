"""What a firing writes: tuples, index entries and WAL, metered over a cell of ``pgpulse bench``.

A :class:`WriteMeter` snapshots, before and after a measured span, the database's own table
counters (``pg_stat_all_tables``: ``n_tup_ins``, ``n_tup_upd``, ``n_tup_hot_upd``,
``n_tup_del`` of every user table) and the server's WAL position (``pg_current_wal_lsn()``) and
WAL counters (``pg_stat_wal``). Divided by the firings of the span they give, per firing:

* **tuples written**: inserted + updated + deleted row versions;
* **HOT updates**: updates that wrote no index entry (PostgreSQL's heap-only tuples);
* **index entries**: PostgreSQL 15 counts no index insertions (``pg_stat_all_indexes`` has no
  such column), so they are derived: every insert and every non-HOT update adds one entry to
  each index of its table whose predicate the new row version matches. For an index without a
  predicate that is exact; for a partial index it is an upper bound (a claim moves a job out of
  ``pgpulse_jobs_due``'s predicate and adds no entry there), so the two are kept apart:
  ``index_entries`` (full indexes, exact) and ``partial_index_entries_max``; a BRIN index,
  which summarises page ranges instead, counts in neither;
* **WAL bytes**: ``pg_current_wal_lsn()`` difference — the whole server's WAL, so a figure
  measured on a server others also write to is an upper bound (the benchmark's own server is
  best); ``pg_stat_wal`` gives the same bytes and its full-page images (``wal_fpi``).

Backends report table counters when a transaction ends (at most once a second while busy, and
when they exit): :meth:`WriteMeter.stop` is called after the measured sessions have closed.
"""

from __future__ import annotations

import math
import time
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgpulse_tools.bench.common import q

#: The per-firing figures, in the order the tables show them: (key, column header).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("db_cpu_ms", "DB CPU ms"),
    ("tuples", "tuples written"),
    ("inserts", "inserted"),
    ("updates", "updated"),
    ("hot_updates", "of them HOT"),
    ("index_entries", "index entries (full indexes)"),
    ("partial_index_entries_max", "partial-index entries ≤"),
    ("wal_bytes", "WAL bytes"),
    ("wal_fpi", "WAL full-page images"),
    ("row_bytes", "job row bytes"),
)


def _tables(conn: psycopg.Connection[dict[str, Any]]) -> dict[str, dict[str, int]]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {row["relname"]: row for row in q(conn, "table_writes")}


class WriteMeter:
    """Tuples, index entries and WAL written on database ``dsn`` between :meth:`start` and
    :meth:`stop` (see the module's docstring for what each counts).

    Args:
        dsn: the metered database (its own ``pg_stat_all_tables``; the server's WAL).
        settle: seconds :meth:`stop` waits for the backends' last counters to arrive.
    """

    def __init__(self, dsn: str, settle: float = 1.0) -> None:
        self.dsn = dsn
        self.settle = settle
        self._before: dict[str, dict[str, int]] = {}
        self._wal0: dict[str, Any] = {}
        self.totals: dict[str, float] = {}

    def start(self) -> WriteMeter:
        """Take the first snapshot; return the meter."""
        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            self._before = _tables(conn)
            self._wal0 = q(conn, "wal_position")[0]
        return self

    def stop(self) -> dict[str, float]:
        """Take the second snapshot and return the totals of the span (also kept in
        :attr:`totals`): ``inserts``, ``updates``, ``hot_updates``, ``deletes``, ``tuples``,
        ``index_entries``, ``partial_index_entries_max``, ``wal_bytes``, ``wal_fpi``."""
        time.sleep(self.settle)
        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            after = _tables(conn)
            wal1 = q(conn, "wal_position")[0]
            lsn_bytes = q(conn, "wal_diff", {"lsn0": self._wal0["lsn"], "lsn1": wal1["lsn"]})
        totals = dict.fromkeys(
            ("inserts", "updates", "hot_updates", "deletes", "index_entries"), 0.0
        )
        totals["partial_index_entries_max"] = 0.0
        for name, row in after.items():
            old = self._before.get(name, {})
            delta = {k: row[k] - old.get(k, 0) for k in ("ins", "upd", "hot", "del")}
            totals["inserts"] += delta["ins"]
            totals["updates"] += delta["upd"]
            totals["hot_updates"] += delta["hot"]
            totals["deletes"] += delta["del"]
            entries = delta["ins"] + delta["upd"] - delta["hot"]
            totals["index_entries"] += entries * row["full_indexes"]
            totals["partial_index_entries_max"] += entries * row["partial_indexes"]
        totals["tuples"] = totals["inserts"] + totals["updates"] + totals["deletes"]
        totals["wal_bytes"] = float(lsn_bytes[0]["bytes"])
        totals["wal_fpi"] = float(wal1["fpi"] - self._wal0["fpi"])
        self.totals = totals
        return totals


def per_firing(totals: dict[str, float], fired: int, db_cpu_ms: float) -> dict[str, float]:
    """``totals`` (a :meth:`WriteMeter.stop` result) divided by ``fired`` firings, with the
    cell's ``db_cpu_ms`` (already per firing); NaN everywhere when nothing fired."""
    out = {key: (value / fired if fired else math.nan) for key, value in totals.items()}
    out["db_cpu_ms"] = db_cpu_ms
    return out


def comparison_rows(cells: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    """Rows of the table "Pulse against the floor, per firing": one per ``(label, cell)``
    whose cell holds ``per_firing`` (see :func:`per_firing`), then one row of ratios of the
    first to the last (``n/a`` where the last is zero or a cell failed its checks)."""
    rows: list[list[Any]] = []
    measured = [(label, cell) for label, cell in cells if cell.get("per_firing")]
    for label, cell in measured:
        rows.append([label, *(cell["per_firing"].get(key, math.nan) for key, _ in COLUMNS)])
    if len(measured) >= 2:
        first, last = measured[0][1], measured[-1][1]
        usable = not first.get("problems") and not last.get("problems")
        ratios: list[Any] = [f"{measured[0][0]} ÷ {measured[-1][0]}"]
        for key, _ in COLUMNS:
            a, b = first["per_firing"].get(key, math.nan), last["per_firing"].get(key, math.nan)
            ratios.append(f"{a / b:.2f}×" if usable and b and not math.isnan(a / b) else "n/a")
        rows.append(ratios)
    return rows


def headers() -> list[str]:
    """The table's column names."""
    return ["step", *(header for _, header in COLUMNS)]


def floor_table(pulse: dict[str, Any], least: dict[str, Any]) -> dict[str, Any]:
    """Scenario 3's table "Pulse against the floor, per firing" from Pulse's cell and the
    floor's (same batch, clients and seconds), as a :class:`~pgpulse_tools.bench.common.Result`
    extra table."""
    return {
        "title": "Pulse against the floor, per firing",
        "headers": headers(),
        "rows": comparison_rows(
            [
                (f"Pulse (batch {pulse['batch']}, {pulse['clients']} clients)", pulse),
                (f"floor (batch {least['batch']}, {least['clients']} clients)", least),
            ]
        ),
        "notes": [
            "same cell (batch, clients, seconds), same run: Pulse's claim step "
            "and the floor's step, each driven by pgbench",
            "index entries: PostgreSQL 15 counts none, so each insert and non-HOT update "
            "counts one per index of its table (exact for full indexes; an upper bound for "
            "partial ones, which a row leaving their predicate skips)",
            "WAL bytes: pg_current_wal_lsn() difference over the cell, the whole server's "
            "WAL (an upper bound when other sessions write to the same server)",
            "job row bytes: mean pg_column_size of the rows a firing updates twice "
            "(pgpulse_jobs, floor_jobs) after the cell",
        ],
    }
