"""Scenario 8: empty poll and claim latency against the number of jobs stored.

The issue asks that the poll and the claim cost the same however many jobs are stored: measured
at ``1,000,000 × scale / 10`` and at ``1,000,000 × scale`` stored (1 M and 10 M at ``--scale
10``), p99 within 20 % of each other. Each size has a database of its own, bulk-loaded, then
``VACUUM ANALYZE`` and a ``CHECKPOINT`` (so no load's dirty pages are being written while claims
are timed); the two are timed in :data:`ROUNDS` interleaved rounds, each round a share of every
cell's samples at both sizes, so a load that drifts over the minutes of the run falls on both
alike (timed one size after the other, a 10 M cell's p99 measured 1.44× the 1 M cell's with its
p50 lower: the tail was the machine's, not the size's). At each size, through a node's claim
session exactly as scenario 1 (:mod:`pgpulse_tools.bench.claim`):

* the empty poll: ``claim_due`` finding nothing due;
* ``claim_due`` of 1, 25 and 100 from all 64 shards with :data:`DUE` jobs due (the same due
  count at both sizes, so only the stored jobs differ), each claim handed back untimed.

Before loading it checks the free disk of the server's data folder against an estimate of what
both sizes take; when the disk cannot hold them, it measures the largest size that fits and says
so.
"""

from __future__ import annotations

import contextlib
import gc
import math
import shutil
import time
from datetime import timedelta
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row

from pgpulse.app import connect
from pgpulse.cli.report import tune_collector
from pgpulse.db.claims import CLAIM_SESSION_SETTINGS
from pgpulse.db.database import Session
from pgpulse.db.store import Store
from pgpulse_tools.bench.claim import ALL_SHARDS, BATCHES
from pgpulse_tools.bench.claim_probe import time_claims
from pgpulse_tools.bench.common import (
    Result,
    db_now,
    drop_db,
    fresh_db,
    load_jobs,
    pct,
    q,
    with_db,
)

DB_NAME: Final[str] = "pgpulse_bench_stored"
#: Interleaved rounds of every cell at both sizes (each a ``samples / ROUNDS`` share).
ROUNDS: Final[int] = 5
#: Jobs due at each size while the claims are timed.
DUE: Final[int] = 500
#: The p99 target: the larger size's at most this times the smaller's.
TARGET: Final[float] = 1.2
#: Bytes a stored job takes on disk with its indexes and name row (measured after the first
#: load; this is the estimate before it), and the margin kept free.
BYTES_PER_JOB: Final[int] = 700
DISK_MARGIN: Final[float] = 1.5


def sizes_for(scale: float) -> tuple[int, int]:
    """The two stored sizes at ``scale`` (1 M and 10 M at 10; never under 10,000 and 100,000)."""
    large = max(int(1_000_000 * scale), 100_000)
    return large // 10, large


def data_folder_free(dsn: str) -> tuple[str, int] | None:
    """The server's data folder and its free bytes, or ``None`` when it is not readable from
    here (a remote server, or not a superuser)."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT current_setting('data_directory')").fetchone()
        folder = str(row[0]) if row else ""
        return folder, shutil.disk_usage(folder).free
    except (psycopg.Error, OSError):
        return None


def _database_bytes(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


async def _cells(dsn: str, first_id: int, samples: int) -> list[tuple[str, list[float]]]:
    """Timed empty polls, then claims of each batch with :data:`DUE` due, as scenario 1."""
    session = Session(dsn, "pgpulse:bench-stored:claim", CLAIM_SESSION_SETTINGS)
    out: list[tuple[str, list[float]]] = []
    threshold = gc.get_threshold()
    tune_collector()
    try:
        async with connect(dsn, max_size=2, migrate=False) as pooled:
            claimer = Store(session)
            for due in (0, DUE):
                with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
                    q(conn, "make_due", {"due": due, "first_id": first_id})
                    conn.execute("VACUUM (ANALYZE) pgpulse_jobs")
                for batch in BATCHES if due else (10,):
                    label = f"claim of {batch}" if due else "empty poll"
                    values = await time_claims(claimer, pooled, ALL_SHARDS, batch, samples)
                    out.append((label, values))
    finally:
        await session.close()
        gc.unfreeze()
        gc.set_threshold(*threshold)
    return out


def _checkpoint(dsn: str) -> None:
    """Write every dirty page now (skipped without the right to: not a superuser)."""
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        contextlib.suppress(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("CHECKPOINT")


async def run(
    server_dsn: str,
    scale: float,
    *,
    samples: int = 1000,
    sizes: tuple[int, int] | None = None,
) -> Result:
    """Run scenario 8 and return its table (one row per cell and size, then the ratios).

    Args:
        server_dsn: the benchmarked server.
        scale: the larger size is ``1,000,000 × scale`` stored jobs, the smaller a tenth of it.
        samples: timed claims per cell.
        sizes: the two sizes instead of :func:`sizes_for`'s (each more than :data:`DUE`).
    """
    small, large = sizes or sizes_for(scale)
    result = Result(
        "8",
        f"empty poll and claim latency at {small:,} and {large:,} jobs stored, {DUE} due",
        ["stored", "cell", "p50 ms", "p99 ms", "max ms", "claims"],
    )
    free = data_folder_free(server_dsn)
    if free is not None:
        folder, free_bytes = free
        fits = int(free_bytes / DISK_MARGIN / BYTES_PER_JOB) - small
        result.notes.append(
            f"free disk before loading: {free_bytes / 2**30:.1f} GiB in {folder} "
            f"(estimate {BYTES_PER_JOB} bytes per job, ×{DISK_MARGIN} margin, both sizes)"
        )
        if fits < large:
            result.notes.append(
                f"the disk cannot take {large:,} jobs: measured at {max(fits, small):,}"
            )
            large = max(fits, small)
    names = {small: f"{DB_NAME}_small", large: f"{DB_NAME}_large"}
    per_size: dict[int, dict[str, dict[str, float]]] = {}
    try:
        first_ids: dict[int, int] = {}
        for size in (small, large):
            dsn = await fresh_db(server_dsn, names[size])
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
                now = db_now(conn)
            started = time.perf_counter()
            load_jobs(
                dsn,
                size,
                schedule="@every 1h",
                kind="interval",
                base=now + timedelta(days=1),
                modulo=86400,
                step=1.0,
            )
            took = time.perf_counter() - started
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
                first_ids[size] = q(conn, "first_id")[0]["first_id"]
            on_disk = _database_bytes(dsn)
            result.notes.append(
                f"{size:,} stored: loaded in {took:.0f} s; its database takes "
                f"{on_disk / 2**30:.2f} GiB ({on_disk / size:.0f} bytes per job)"
            )
        values: dict[int, dict[str, list[float]]] = {small: {}, large: {}}
        share = max(samples // ROUNDS, 1)
        for turn in range(ROUNDS):
            for size in (small, large) if turn % 2 == 0 else (large, small):
                dsn = with_db(server_dsn, names[size])
                _checkpoint(dsn)
                for label, timed in await _cells(dsn, first_ids[size], share):
                    values[size].setdefault(label, []).extend(timed)
        for size in (small, large):
            cells = per_size[size] = {}
            for label, timed in values[size].items():
                cells[label] = {"p50": pct(timed, 50), "p99": pct(timed, 99), "max": max(timed)}
                result.rows.append(
                    [size, label, cells[label]["p50"], cells[label]["p99"], max(timed), len(timed)]
                )
    finally:
        for name in names.values():
            drop_db(server_dsn, name)
    ratios = {
        label: per_size[large][label]["p99"] / per_size[small][label]["p99"]
        for label in per_size[small]
        if large in per_size and per_size[small][label]["p99"]
    }
    for label, ratio in ratios.items():
        result.rows.append([f"{large:,} ÷ {small:,}", label, "", f"{ratio:.2f}×", "", ""])
    result.notes.append(
        f"target: p99 at {large:,} stored within {TARGET - 1:.0%} of p99 at {small:,} "
        f"(a node's claim session, as scenario 1; claims handed back untimed; {ROUNDS} "
        "interleaved rounds, one database per size)"
    )
    result.data.update(
        {
            "sizes": [small, large],
            "due": DUE,
            "cells": {str(size): cells for size, cells in per_size.items()},
            "p99_ratios": ratios,
            "met": all(r <= TARGET for r in ratios.values()) if ratios else math.nan,
        }
    )
    return result


def target_rows(data: dict[str, Any]) -> list[tuple[str, float, bool]]:
    """``(target, p99 ratio, met)`` per cell, for the report's targets table."""
    small, large = data["sizes"]
    return [
        (
            f"{label}: p99 at {large:,} stored ≤ {TARGET:.1f}× p99 at {small:,}",
            ratio,
            ratio <= TARGET,
        )
        for label, ratio in data.get("p99_ratios", {}).items()
    ]
