"""The floor: the least SQL any PostgreSQL-backed scheduler must run per firing (``floor.sql``),
measured in the same run as Pulse, on the same server.

Pulse's raw ceiling (scenario 3) is Pulse's own statement without Python; the floor is what no
design could beat on this machine: a narrow table with one partial index, a history table with
one B-tree, a fenced claim and a fenced completion that records the run — no definitions
returned, no shards, no retries sharing a history row, no skipped occurrences, no sweeper
index. Two measures:

* :func:`claim_latency_by_due` (scenario 1): a claim of 1, 25 and 100 at each backlog Pulse's
  claims are timed at, timed as Pulse's claim is (1,000 claims per batch, each handed back
  untimed), from a synchronous client;
* the step rate (scenario 3, :func:`pgbench_script`): claim + complete + record via pgbench,
  as the ceiling is measured.

A target that the floor itself misses on this machine cannot be met here by any design.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from typing import Any, Final

import psycopg
from psycopg import sql

from pgpulse.db.claims import CLAIM_SESSION_SETTINGS
from pgpulse.sql import load_queries  # the same "-- name:" block format as queries.sql
from pgpulse_tools.bench.common import admin, drop_db, pct, with_db

FLOOR_SQL: Final[dict[str, str]] = load_queries("floor.sql", __package__)

DB_NAME = "pgpulse_bench_floor"


#: Bytes of definition the ``widen`` variant adds to a floor job row: Pulse's job row (252 bytes
#: in scenario 3, pg_column_size) less the floor's (66).
PULSE_ROW_PAD: Final[int] = 186

#: The floor's variants (scenario 3's narrow-row prototype): name -> the floor.sql blocks added.
VARIANTS: Final[dict[str, tuple[str, ...]]] = {
    "floor": (),
    "floor, Pulse's row width": ("widen",),
    "floor, Pulse's indexes": ("pulse_indexes",),
    "floor, Pulse's row width and indexes": ("widen", "pulse_indexes"),
    "floor, fillfactor 70": ("fillfactor",),
    "floor, fillfactor 70, HOT claim": ("fillfactor", "hot_claim"),
}


def _run_block(conn: psycopg.Connection[Any], block: str, params: dict[str, Any]) -> None:
    """Run floor.sql block ``block`` one statement at a time (VACUUM runs in none)."""
    text = "\n".join(
        line for line in FLOOR_SQL[block].splitlines() if not line.lstrip().startswith("--")
    )
    for statement in (part.strip() for part in text.split(";")):
        if statement:
            conn.execute(statement, params if "%(" in statement else None)


def create(
    server_dsn: str, jobs: int, due: int, name: str = DB_NAME, variant: Sequence[str] = ()
) -> str:
    """(Re)create database ``name`` holding the floor's tables with ``jobs`` jobs, the first
    ``due`` of them due now, indexed and ``VACUUM ANALYZE``d; return its DSN.

    Args:
        variant: floor.sql blocks to add (a value of :data:`VARIANTS`): ``widen`` (a job row
            as wide as Pulse's), ``pulse_indexes`` (Pulse's hot-path B-trees), ``fillfactor``
            (pages 30 % free), ``hot_claim`` (a due index the claim's update leaves alone).

    Raises:
        psycopg.Error: the server refused (no right to create databases, say).
        KeyError: ``variant`` names no floor.sql block.
    """
    drop_db(server_dsn, name)
    with admin(server_dsn) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = with_db(server_dsn, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FLOOR_SQL["schema"])
        conn.execute(FLOOR_SQL["load"], {"jobs": jobs, "due": due})
        if "widen" in variant:
            _run_block(conn, "widen", {"pad": PULSE_ROW_PAD})
        conn.execute(FLOOR_SQL["index"])
        for block in variant:
            if block != "widen":
                _run_block(conn, block, {})
        conn.execute("VACUUM (ANALYZE) floor_jobs")
    return dsn


def pgbench_script() -> str:
    """The floor's step as a pgbench script: complete the batch claimed last time, claim the next
    (its ids and tokens kept with ``\\gset``). Run it with ``-D ids={} -D tokens={}`` and
    ``-D batch=N``."""
    return f"{FLOOR_SQL['step']} \\gset\n"


def claim_latency(dsn: str, batches: Sequence[int], samples: int) -> dict[int, dict[str, Any]]:
    """Time ``samples`` floor claims of each size in ``batches`` (ms, round trip included), each
    claim's jobs handed back untimed; the claiming session has a node's claim settings
    (``claims.CLAIM_SESSION_SETTINGS``: generic plans, no JIT) and prepares the statement at once.

    Returns:
        ``{batch: {"p50": ms, "p99": ms, "max": ms, "claims": samples, "claimed": jobs in the
        last claim}}``.

    Raises:
        psycopg.Error: a claim failed (``dsn`` holds no floor tables: see :func:`create`).
    """
    out: dict[int, dict[str, Any]] = {}
    with (
        psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as claimer,
        psycopg.connect(dsn, autocommit=True) as other,
    ):
        for setting, value in CLAIM_SESSION_SETTINGS.items():
            claimer.execute(
                sql.SQL("SELECT set_config({}, {}, false)").format(
                    sql.Literal(setting), sql.Literal(value)
                )
            )
        gc.disable()  # no collection inside a timed claim (Pulse's claims run with a node's)
        try:
            for batch in batches:
                times: list[float] = []
                claimed = 0
                for _ in range(samples):
                    start = time.perf_counter()
                    rows = claimer.execute(FLOOR_SQL["claim"], {"limit": batch}).fetchall()
                    times.append((time.perf_counter() - start) * 1000)
                    claimed = len(rows)
                    other.execute(FLOOR_SQL["unclaim"], {"ids": [row[0] for row in rows]})
                out[batch] = {
                    "p50": pct(times, 50),
                    "p99": pct(times, 99),
                    "max": max(times),
                    "claims": samples,
                    "claimed": claimed,
                }
        finally:
            gc.enable()
    return out


def claim_latency_by_due(
    dsn: str, dues: Sequence[int], batches: Sequence[int], samples: int
) -> list[dict[str, Any]]:
    """:func:`claim_latency` at each backlog of ``dues`` (jobs due), in that order: before each,
    the first ``due`` jobs by id are made due (``floor.sql`` ``make_due``) and the table is
    ``VACUUM ANALYZE``d, as scenario 1 does for Pulse's jobs.

    Args:
        dsn: a floor database from :func:`create` holding at least ``max(dues)`` jobs.
        dues: backlogs, jobs due (ascending writes the fewest rows).
        batches: claim sizes.
        samples: timed claims per batch and backlog.

    Returns:
        ``[{"due": jobs due, "claims": {batch: cell}}]``, one per backlog, cells as
        :func:`claim_latency` returns them.

    Raises:
        psycopg.Error: a statement failed (``dsn`` holds no floor tables).
    """
    out: list[dict[str, Any]] = []
    for due in dues:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(FLOOR_SQL["make_due"], {"due": due})
            conn.execute("VACUUM (ANALYZE) floor_jobs")
        out.append({"due": due, "claims": claim_latency(dsn, batches, samples)})
    return out
