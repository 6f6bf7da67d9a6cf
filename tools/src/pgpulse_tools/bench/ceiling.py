"""Scenario 3: the raw ceiling — Pulse's own claim + completion + history SQL driven by pgbench.

The pgbench script is generated from ``QUERIES`` at run time (never a copy), so it is exactly
what a node's claim loop sends in one step
(:meth:`pgpulse.db.claims.ClaimStore.finish_and_claim`), minus Python — one transaction that

1. ends the batch the previous step claimed (``finish_jobs``), each run ``succeeded`` and its
   job moved to its next occurrence (``scheduled_for + 1 h``, what the planner computes for
   these ``@every 1h`` jobs) — fenced writes of the job rows and their history rows;
2. claims the next batch (``claim_jobs``), its final ``UPDATE`` made a CTE whose rows become
   the outcomes of the next step, as a JSON array (``\\gset`` keeps it in a pgbench variable of
   the client);
3. reads when the next job is due (``next_job_due``).

A node sends the three in one pipeline, one implicit transaction; pgbench sends them one at a
time between ``BEGIN`` and ``COMMIT`` (it cannot ``\\gset`` inside a pipeline): two statements
more per step, a few microseconds of the database's CPU per step.

``-M prepared`` plans them as psycopg's prepared statements do, with the settings of a node's
claim session (``claims.CLAIM_SESSION_SETTINGS``: generic plans, no JIT). Several clients run at
once against a fresh copy of the scenario-2 backlog; firings/s counts succeeded history rows over
the span from the first claim to the last completion (the database's clock). The ceiling is the
best cell run again for as long as scenario 2 measures Pulse (see :func:`run`). The floor
(:mod:`pgpulse_tools.bench.floor`) then runs with the best cell's batch, clients and seconds.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgpulse.db.claims import CLAIM_SESSION_SETTINGS
from pgpulse.sql import QUERIES
from pgpulse_tools.bench import checks, floor
from pgpulse_tools.bench.common import (
    BENCH_SQL,
    DbCpu,
    Result,
    admin,
    backlog_template,
    drop_db,
    fresh_db,
    machine_busy_seconds,
)
from pgpulse_tools.bench.drain import CORES, jobs_for, window_for
from pgpulse_tools.bench.sqltext import split_final, substitute
from pgpulse_tools.bench.writes import WriteMeter, floor_table, per_firing

DB_NAME = "pgpulse_bench_ceiling"
CLIENTS = (2, 4, 8)

#: pgbench expressions for the claim step's parameters (``:name`` are pgbench variables):
#: the outcomes are the previous step's claim, as JSON.
STEP_VALUES = {
    "now": "NULL",
    "outcomes": ":outcomes",
    "node": "'ceiling-' || (:client_id)::text",
    "route_handlers": "'{noop}'",
    "route_shards": "ARRAY['{" + ",".join(str(s) for s in range(64)) + "}']",
    "limit": ":batch",
    "lease": "60",
}

#: The outcome of each claimed job as ``finish_jobs`` reads it (see the store).
OUTCOME = (
    "json_build_object('job_id', id, 'token', fencing_token, "
    "'status', 'idle', 'scheduled_for', scheduled_for + interval '1 hour', "
    "'next_run_at', scheduled_for + interval '1 hour', 'retry_in', 0, "
    "'reset_attempt', true, 'outcome', 'succeeded', 'error', NULL, 'output', NULL, "
    "'skips', 0, 'skip_from', NULL, 'skip_to', NULL, 'skip_reason', NULL, "
    "'counts_run', true, 'failures', 0, 'pause_reason', NULL, "
    "'run_id', run_id, 'run_scheduled_for', scheduled_for, 'attempt', attempt, "
    "'node', 'ceiling-' || (:client_id)::text)"
)


def pgbench_script(*, rare: bool = False, next_due: bool = False) -> str:
    """The pgbench script: one claim step, ending the batch the client claimed last time and
    claiming the next (its outcomes kept with ``\\gset``), in one transaction. Run it with
    ``-D outcomes=[]`` for the first step. The step is what a node sends while its batches
    come back full, as the ceiling's always do: the finish and the claim.

    Args:
        rare: send ``record_skips_and_auto_pauses`` too, as a node does only for a batch with a
            skipped occurrence or an auto-pause (the benchmark's firings have neither).
        next_due: send ``next_job_due`` too, as a node does only after a short batch.

    Raises:
        KeyError: ``queries.sql`` changed the statements' parameters or names (the message says
            which); update :data:`STEP_VALUES`.
    """
    names = ["record_skips_and_auto_pauses"] if rare else []
    names += ["finish_jobs", "claim_jobs", *(["next_job_due"] if next_due else [])]
    for name in names:
        if name not in QUERIES:
            raise KeyError(f"queries.sql has no {name} statement; update bench/ceiling.py")
    steps = [substitute(QUERIES[name], STEP_VALUES) for name in names]
    claim = names.index("claim_jobs")
    ctes, final = split_final(steps[claim], "UPDATE")
    steps[claim] = (
        f"{ctes}, claimed AS (\n{final}\n)\n"
        f"SELECT coalesce(json_agg({OUTCOME}) FILTER (WHERE id IS NOT NULL), '[]')"
        " AS outcomes\nFROM claimed"
    )
    body = "".join(
        f"{_one_line_comments(step)} \\gset\n"
        if step is steps[claim]
        else f"{_one_line_comments(step)};\n"
        for step in steps
    )
    return f"BEGIN;\n{body}COMMIT;\n"


def _one_line_comments(statement: str) -> str:
    """Drop ``--`` comment lines (pgbench ends a command at ``;`` and would keep them)."""
    return "\n".join(line for line in statement.splitlines() if not line.lstrip().startswith("--"))


def run_pgbench(
    dsn: str,
    script: Path,
    *,
    clients: int,
    seconds: float,
    variables: dict[str, Any],
    transactions: int | None = None,
) -> dict[str, Any]:
    """Run pgbench for ``seconds`` with ``clients`` clients, each starting with ``variables``
    (``-D name=value``); return its ``tps`` and average ``latency_ms`` (per script execution).
    With ``transactions``, each client runs the script that many times instead (``-t``) and
    ``seconds`` is ignored.

    Raises:
        RuntimeError: pgbench failed (the message has its output).
    """
    cmd = [
        "pgbench",
        "-n",
        "-M",
        "prepared",
        "-c",
        str(clients),
        "-j",
        str(min(clients, CORES)),
        *(
            ("-t", str(transactions))
            if transactions is not None
            else ("-T", str(max(int(seconds), 1)))
        ),
        *(arg for name, value in variables.items() for arg in ("-D", f"{name}={value}")),
        "-f",
        str(script),
        dsn,
    ]
    # The settings of a node's claim session (generic plans, no JIT), as PGOPTIONS.
    options = " ".join(f"-c {name}={value}" for name, value in CLAIM_SESSION_SETTINGS.items())
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env={**os.environ, "PGOPTIONS": options}
    )
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    tps = re.search(r"tps = ([\d.]+)", proc.stdout)
    latency = re.search(r"latency average = ([\d.]+) ms", proc.stdout)
    return {
        "tps": float(tps.group(1)) if tps else float("nan"),
        "latency_ms": float(latency.group(1)) if latency else float("nan"),
    }


async def measure_cell(
    server_dsn: str,
    jobs: int,
    script: Path,
    *,
    batch: int,
    clients: int,
    seconds: float,
    ddl: Sequence[str] = (),
    variables: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run Pulse's step with pgbench for ``seconds`` on a fresh copy of a backlog of ``jobs``
    due jobs; return the cell's figures (see :func:`_metered`), judged by
    :func:`pgpulse_tools.bench.checks.judge`. ``ddl`` statements run on the copy first (one
    at a time, autocommit: a lever of :mod:`pgpulse_tools.bench.levers`); ``variables`` are the
    script's first values (default: no outcomes, as JSON).

    A cell whose backlog ran out inside its window measured a draining queue: it runs once
    more on a backlog sized from its own rate to outlast the window.
    """
    cell: dict[str, Any] = {}
    for _ in range(2):
        template = await backlog_template(server_dsn, jobs)
        dsn = await fresh_db(server_dsn, DB_NAME, template=template)
        with admin(dsn) as conn:
            for statement in ddl:
                conn.execute(statement)
        cell = await _metered(
            dsn,
            script,
            clients=clients,
            seconds=seconds,
            variables={"batch": batch, **(variables or {"outcomes": "[]"})},
            span=BENCH_SQL["fired_span"],
            hot_table="pgpulse_jobs",
        )
        drop_db(server_dsn, DB_NAME)
        cell.update({"batch": batch, "jobs": jobs, "drained": cell["fired"] >= jobs})
        if not cell["drained"]:
            break
        jobs = checks.backlog_to_outlast(cell["rate"], seconds, jobs)
    return checks.judge(cell)


async def measure_floor(
    server_dsn: str,
    jobs: int,
    script: Path,
    *,
    batch: int,
    clients: int,
    seconds: float,
    variant: Sequence[str] = (),
) -> dict[str, Any]:
    """Run the floor's step (:mod:`pgpulse_tools.bench.floor`) with pgbench for ``seconds`` on
    ``jobs`` due jobs; return its figures (see :func:`_metered`), judged, run once more on a
    larger backlog when the first ran out inside the window (as :func:`measure_cell`).
    ``variant`` names floor.sql blocks added to the floor's schema (a value of
    :data:`pgpulse_tools.bench.floor.VARIANTS`)."""
    cell: dict[str, Any] = {}
    for _ in range(2):
        dsn = await asyncio.to_thread(
            floor.create, server_dsn, jobs, jobs, floor.DB_NAME, tuple(variant)
        )
        cell = await _metered(
            dsn,
            script,
            clients=clients,
            seconds=seconds,
            variables={"batch": batch, "ids": "{}", "tokens": "{}"},
            span=floor.FLOOR_SQL["fired_span"],
            hot_table="floor_jobs",
        )
        drop_db(server_dsn, floor.DB_NAME)
        cell.update({"batch": batch, "jobs": jobs, "drained": cell["fired"] >= jobs})
        if not cell["drained"]:
            break
        jobs = checks.backlog_to_outlast(cell["rate"], seconds, jobs)
    return checks.judge(cell)


async def _metered(
    dsn: str,
    script: Path,
    *,
    clients: int,
    seconds: float,
    variables: dict[str, Any],
    span: str,
    hot_table: str,
) -> dict[str, Any]:
    """Run ``script`` with pgbench on ``dsn`` while metering the database's CPU; ``span`` reads
    back how many fired (``fired``) between the first claim (``first_started``) and the last
    completion (``last_finished``); ``hot_table`` is the table of the rows a firing updates
    (its mean row width is ``per_firing["row_bytes"]``). Returns ``rate`` in firings/s over
    that span, ``db_cpu_ms`` per firing, ``busy_pct`` of all cores, ``fired``, ``per_firing``
    (what each firing wrote: :func:`pgpulse_tools.bench.writes.per_firing`) and pgbench's own
    figures."""
    written = WriteMeter(dsn).start()
    with DbCpu(dsn) as meter:
        busy0, wall0 = machine_busy_seconds(), time.perf_counter()
        bench = await asyncio.to_thread(
            run_pgbench, dsn, script, clients=clients, seconds=seconds, variables=variables
        )
        busy1, wall = machine_busy_seconds(), time.perf_counter() - wall0
    totals = await asyncio.to_thread(written.stop)  # pgbench's sessions have closed
    with admin(dsn) as conn:
        row = conn.execute(span).fetchone()
        width = row_bytes(conn, hot_table)
    assert row is not None
    fired = row["fired"]
    secs = (row["last_finished"] - row["first_started"]).total_seconds() if fired else float("nan")
    db_cpu_ms = meter.seconds() / fired * 1000 if fired else float("nan")
    return {
        "clients": clients,
        "seconds": secs,
        "asked_s": seconds,
        "fired": fired,
        "rate": fired / secs if fired else 0.0,
        "db_cpu_ms": db_cpu_ms,
        "busy_pct": (busy1 - busy0) / wall / CORES * 100,
        "per_firing": {**per_firing(totals, fired, db_cpu_ms), "row_bytes": width},
        **bench,
    }


def row_bytes(conn: psycopg.Connection[dict[str, Any]], table: str) -> float:
    """The mean ``pg_column_size`` of ``table``'s rows (the rows a firing updates)."""
    width = conn.execute(
        sql.SQL("SELECT avg(pg_column_size(t.*))::float8 AS width FROM {} t").format(
            sql.Identifier(table)
        )
    ).fetchone()
    assert width is not None
    return float(width["width"])


async def run(
    server_dsn: str,
    scale: float,
    *,
    batches: tuple[int, ...] = (1, 50),
    clients: tuple[int, ...] = CLIENTS,
) -> Result:
    """Run scenario 3 and return its table; ``data["best"]`` is the ceiling in firings/s.

    Every (batch, clients) cell runs for a short ``seconds`` (15 at scale 1); the best of them
    then runs again for as long as scenario 2 measures each node count (60 s at scale 1), and
    that sustained rate is the ceiling. A short run overstates it: the first seconds after a
    fresh copy see no checkpoint and few dead rows (one 2-core machine: 22,400-26,900 firings/s
    over 15 s, 20,100-22,200 over 60 s, the same cell), while Pulse's figure is a 60 s window.

    Args:
        server_dsn: the benchmarked server.
        scale: fraction of the issue's sizes (the backlog is scenario 2's).
        batches: claim sizes (jobs per claim and per completion statement).
        clients: concurrent pgbench clients, one measurement each.
    """
    result = Result(
        "3",
        "raw SQL ceiling: Pulse's claim step (finish_jobs, claim_jobs, next_job_due) via pgbench",
        [
            "SQL",
            "batch",
            "clients",
            "seconds",
            "firings/s",
            "DB CPU ms/firing",
            "machine busy %",
            "script latency ms",
            "fired",
            "check",
        ],
    )
    if shutil.which("pgbench") is None:
        result.notes.append("skipped: pgbench is not installed (Debian: postgresql-client)")
        result.data["best"] = None
        return result
    jobs = jobs_for(scale)
    seconds = min(15.0, 6.0 + 9.0 * scale)
    sustained_s = window_for(scale)
    folder = Path(tempfile.mkdtemp(prefix="pgpulse-ceiling-"))
    script = folder / "pulse.sql"
    script.write_text(pgbench_script())
    cells = [
        await measure_cell(server_dsn, jobs, script, batch=batch, clients=count, seconds=seconds)
        for batch in batches
        for count in clients
    ]
    burst = checks.best_trusted(cells) or max(cells, key=lambda c: c["rate"])
    best = await measure_cell(
        server_dsn,
        checks.backlog_to_outlast(burst["rate"], sustained_s, jobs),
        script,
        batch=burst["batch"],
        clients=burst["clients"],
        seconds=sustained_s,
    )
    floor_script = folder / "floor.sql"
    floor_script.write_text(floor.pgbench_script())
    least = await measure_floor(
        server_dsn,
        # the floor has run up to 3x Pulse's rate: size it to outlast the cell at 4x
        checks.backlog_to_outlast(4 * burst["rate"], seconds, jobs),
        floor_script,
        batch=burst["batch"],
        clients=burst["clients"],
        seconds=seconds,
    )
    for label, cell in [*(("Pulse", c) for c in [*cells, best]), ("floor", least)]:
        result.rows.append(
            [
                label,
                cell["batch"],
                cell["clients"],
                cell["seconds"],
                cell["rate"],
                cell["db_cpu_ms"],
                cell["busy_pct"],
                cell["latency_ms"],
                cell["fired"],
                checks.verdict(cell),
            ]
        )
    result.notes.append(
        f"ceiling = the best cell (batch {burst['batch']}, {burst['clients']} "
        f"clients: {burst['rate']:,.0f} firings/s over {seconds:g} s) run "
        f"again for scenario 2's window, {sustained_s:g} s: "
        f"{best['rate']:,.0f} firings/s"
    )
    if not checks.trusted(best):
        result.notes.append(
            "the sustained run failed its checks (" + "; ".join(best["problems"]) + "): "
            "no ceiling share is computed from it"
        )
    result.notes.append(
        "script generated from queries.sql at run time (docs/benchmarks.md "
        "shows it); DB CPU counts every server process, not pgbench itself"
    )
    floor_ratio = (
        burst["db_cpu_ms"] / least["db_cpu_ms"]
        if checks.trusted(burst) and checks.trusted(least)
        else math.nan
    )
    result.notes.append(
        f"floor = the least SQL any PostgreSQL scheduler runs per firing (bench/floor.sql: "
        f"narrow rows, one B-tree on the history, no definitions, shards or retries), same "
        f"batch, clients and seconds as the best cell: {least['rate']:,.0f} firings/s at "
        f"{least['db_cpu_ms']:.3f} ms DB CPU per firing; "
        + (
            f"Pulse's statement costs {floor_ratio:.2f}× its DB CPU per firing"
            if not math.isnan(floor_ratio)
            else "no ratio: a cell failed its checks"
        )
    )
    result.tables.append(floor_table(burst, least))
    result.data.update(
        {
            "jobs": jobs,
            "seconds": seconds,
            "cells": cells,
            "best": best["rate"] if checks.trusted(best) else None,
            "floor_cpu_ratio": floor_ratio,
            "best_cell": best,
            "burst_best": burst["rate"],
            "floor": least,
            "script": script.read_text(),
            "burst_cell": burst,
        }
    )
    shutil.rmtree(folder, ignore_errors=True)
    return result
