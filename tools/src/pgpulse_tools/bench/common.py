"""Shared pieces of ``pgpulse bench``: databases, bulk loads, percentiles, CPU meters, tables.

Each scenario gets its own database on the benchmarked server (``pgpulse_bench_<scenario>``),
created fresh and dropped at the end. Instants are the database's; durations are seconds unless
a name ends in ``_ms``.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import psutil
import psycopg
from psycopg import conninfo, sql
from psycopg.rows import dict_row
from tabulate import tabulate

from pgpulse.db.migrations import migrate
from pgpulse.sql import load_queries  # the same "-- name:" block format as queries.sql

#: Statements of the benchmark itself (loading and reading results), by name.
BENCH_SQL: Final[dict[str, str]] = load_queries("bench.sql", __package__)

#: Rows per bulk-load statement (keeps one statement's memory and WAL burst modest).
LOAD_CHUNK = 100_000


@dataclass
class Result:
    """One scenario's figures: a printed table plus everything else for the JSON file.

    Attributes:
        scenario: ``"1"``..``"7"``.
        title: one line naming the scenario.
        headers: table column names (units in the names).
        rows: table rows.
        notes: lines printed under the table (caveats, what a figure means).
        data: raw figures for JSON and plots (samples, plans, settings).
        tables: further tables under the main one, each a dict with ``title``, ``headers``,
            ``rows`` and ``notes``.
    """

    scenario: str
    title: str
    headers: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    tables: list[dict[str, Any]] = field(default_factory=list)

    def table(self, fmt: str = "github") -> str:
        """The table as text (``github`` markdown by default)."""
        return tabulate(self.rows, self.headers, tablefmt=fmt, floatfmt=".4g")

    def print(self) -> None:
        """Print title, table and notes to stdout."""
        print(f"\n## Scenario {self.scenario}: {self.title}\n")
        print(self.table())
        for note in self.notes:
            print(f"  * {note}")
        for extra in self.tables:
            print(f"\n### {extra['title']}\n")
            rows = [[f"{v:.4g}" if isinstance(v, float) else v for v in r] for r in extra["rows"]]
            print(tabulate(rows, extra["headers"], tablefmt="github", disable_numparse=True))
            for note in extra["notes"]:
                print(f"  * {note}")
        print(flush=True)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict of everything."""
        return {
            "scenario": self.scenario,
            "title": self.title,
            "headers": self.headers,
            "rows": self.rows,
            "notes": self.notes,
            "data": self.data,
            "tables": self.tables,
        }


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` by linear interpolation; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def with_db(server_dsn: str, dbname: str) -> str:
    """``server_dsn`` pointed at database ``dbname``."""
    return conninfo.make_conninfo(server_dsn, dbname=dbname)


def admin(server_dsn: str) -> psycopg.Connection[dict[str, Any]]:
    """An autocommit connection to the server's maintenance database (dict rows)."""
    return psycopg.connect(server_dsn, autocommit=True, row_factory=dict_row)


def drop_db(server_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, disconnecting its sessions."""
    with admin(server_dsn) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


async def fresh_db(
    server_dsn: str, name: str, template: str | None = None, *, schema: int | None = None
) -> str:
    """(Re)create database ``name`` — empty and migrated (up to migration ``schema``; ``None``:
    every one), or a copy of ``template`` — and return its DSN. ``FILE_COPY`` makes a
    1,000,000-job template copy in seconds."""
    drop_db(server_dsn, name)
    with admin(server_dsn) as conn:
        if template is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        else:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )
    dsn = with_db(server_dsn, name)
    if template is None:
        aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row)
        async with aconn:
            await migrate(aconn, target=schema)
    return dsn


def q(
    conn: psycopg.Connection[dict[str, Any]], name: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Run bench statement ``name`` and return its rows (``[]`` for no result set)."""
    cur = conn.execute(BENCH_SQL[name], params or {})
    return list(cur.fetchall()) if cur.description else []


def db_now(conn: psycopg.Connection[dict[str, Any]]) -> datetime:
    """The database's current instant."""
    return q(conn, "now")[0]["now"]  # type: ignore[no-any-return]


def load_jobs(
    dsn: str,
    count: int,
    *,
    schedule: str,
    kind: str,
    base: datetime,
    modulo: int,
    step: float,
    catch_up: str = "backfill",
    misfire_grace: float = 86400.0,
    handler: str = "noop",
    start: int = 1,
) -> None:
    """Insert ``count`` jobs with one statement per :data:`LOAD_CHUNK`, then VACUUM ANALYZE.

    Job i (numbered from ``start``, so a second load adds to the first) holds the occurrence
    ``base + (i mod modulo) * step`` seconds, which is also its interval anchor.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        for first in range(start, start + count, LOAD_CHUNK):
            conn.execute(
                BENCH_SQL["load_jobs"],
                {
                    "first": first,
                    "last": min(start + count - 1, first + LOAD_CHUNK - 1),
                    "schedule": schedule,
                    "kind": kind,
                    "handler": handler,
                    "catch_up": catch_up,
                    "misfire_grace": misfire_grace,
                    "base": base,
                    "modulo": max(modulo, 1),
                    "step": step,
                },
            )
        conn.execute("VACUUM (ANALYZE) pgpulse_jobs")


def register_handler(dsn: str, handler: str = "noop") -> None:
    """Record a stopped pseudo-node that knows ``handler`` (as a real node would)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(BENCH_SQL["register_handler"], {"handler": handler})


class DbCpu:
    """CPU seconds the database server spends on one database, metered while in a ``with``.

    Counts the client backends (and autovacuum workers) of database ``dsn`` names, plus the
    server's WAL writer, checkpointer and background writer — not other databases' sessions,
    so engineers' tests running on the same server do not pollute the figure. A sampler thread
    reads ``pg_stat_activity`` (from the maintenance database, so it does not count itself) and
    each process's CPU time every ``interval`` seconds; a backend that exits between two samples
    loses at most its last ``interval`` of CPU. Needs the server's processes to be readable (a
    local server, as root or as its user); otherwise :meth:`seconds` is NaN.

    Args:
        dsn: DSN of the metered database (the sampler connects to ``postgres`` on that server).
        interval: seconds between samples.
    """

    AUX = ("walwriter", "checkpointer", "background writer")

    def __init__(self, dsn: str, interval: float = 0.2) -> None:
        self.dbname = conninfo.conninfo_to_dict(dsn).get("dbname") or ""
        self.admin_dsn = with_db(dsn, "postgres")
        self.interval = interval
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._readable = True

    def _sample(self, conn: psycopg.Connection[dict[str, Any]], initial: bool) -> None:
        for row in q(conn, "db_processes", {"dbname": self.dbname, "aux": list(self.AUX)}):
            pid = row["pid"]
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.AccessDenied:
                self._readable = False
                continue
            except psutil.Error:
                continue
            used = times.user + times.system
            if pid not in self._first:
                self._first[pid] = used if initial else 0.0
            self._last[pid] = used

    def _run(self) -> None:
        with admin(self.admin_dsn) as conn:
            while not self._stop.wait(self.interval):
                self._sample(conn, initial=False)
            self._sample(conn, initial=False)

    def __enter__(self) -> DbCpu:
        with admin(self.admin_dsn) as conn:
            self._sample(conn, initial=True)
        self._thread = threading.Thread(target=self._run, name="db-cpu", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def seconds(self) -> float:
        """CPU seconds used by the metered processes since entering (so far, or in all)."""
        if not self._readable:
            return math.nan
        return sum(self._last[pid] - first for pid, first in self._first.items())


def server_settings(dsn: str) -> dict[str, str]:
    """The server settings that shape the figures (version, memory, durability)."""
    with admin(dsn) as conn:
        return {row["name"]: f"{row['setting']}{row['unit'] or ''}" for row in q(conn, "settings")}


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t:`` ... ``t[0]`` is the elapsed seconds afterwards."""
    box = [0.0]
    start = time.perf_counter()
    try:
        yield box
    finally:
        box[0] = time.perf_counter() - start


def write_json(path: Path, results: list[Result], meta: dict[str, Any]) -> None:
    """Write every result and the run's metadata to ``path`` (created with its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "results": [r.to_json() for r in results]}
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")


def seconds(td: timedelta) -> float:
    """A timedelta in seconds."""
    return td.total_seconds()


def machine_busy_seconds() -> float:
    """CPU seconds all cores of this machine spent not idle, since boot (every process, the
    database, the nodes, the benchmark and anything else running)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def database_exists(server_dsn: str, name: str) -> bool:
    """Whether database ``name`` exists on the server."""
    with admin(server_dsn) as conn:
        return bool(q(conn, "database_exists", {"name": name})[0]["found"])


#: Backlog templates made by this process: (server DSN, jobs) -> database name.
_BACKLOGS: dict[tuple[str, int, int | None], str] = {}


async def backlog_template(server_dsn: str, jobs: int, *, schema: int | None = None) -> str:
    """The name of a template database holding ``jobs`` idle jobs, all due now (created once
    per process, size and ``schema``, the newest migration applied, ``None`` for all;
    scenarios 2, 3 and 7 copy it for each run; :func:`drop_backlogs` drops them).

    The jobs are ``@every 1h`` no-op jobs whose current occurrence lies in the last 30 minutes,
    so each fires once and then waits an hour: draining a copy is ``jobs`` firings.
    """
    key = (server_dsn, jobs, schema)
    if key not in _BACKLOGS:
        name = f"pgpulse_bench_backlog_{jobs}" + (f"_at_{schema}" if schema else "")
        dsn = await fresh_db(server_dsn, name, schema=schema)
        with admin(dsn) as conn:
            now = db_now(conn)
        load_jobs(
            dsn,
            jobs,
            schedule="@every 1h",
            kind="interval",
            base=now - timedelta(minutes=30),
            modulo=1800,
            step=1.0,
        )
        register_handler(dsn)
        _BACKLOGS[key] = name
    return _BACKLOGS[key]


def drop_backlogs(server_dsn: str) -> None:
    """Drop every backlog template :func:`backlog_template` made on ``server_dsn``."""
    for key, name in list(_BACKLOGS.items()):
        if key[0] == server_dsn:
            drop_db(server_dsn, name)
            del _BACKLOGS[key]


def lag_summary(lags_ms: Sequence[float]) -> dict[str, float]:
    """``n``, ``p50``, ``p90``, ``p99`` and ``max`` of lags in milliseconds (NaN when empty)."""
    return {
        "n": len(lags_ms),
        "p50": pct(lags_ms, 50),
        "p90": pct(lags_ms, 90),
        "p99": pct(lags_ms, 99),
        "max": max(lags_ms) if lags_ms else math.nan,
    }


def cdf_points(values: Sequence[float], points: int = 1000) -> list[float]:
    """At most ``points`` evenly spaced order statistics of ``values`` (the first and last
    included): enough to plot a distribution without storing every sample."""
    ordered = sorted(values)
    if len(ordered) <= points:
        return ordered
    step = (len(ordered) - 1) / (points - 1)
    return [ordered[round(i * step)] for i in range(points)]
