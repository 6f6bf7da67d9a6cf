"""Serial blocks: a per-firing cost measured without contention (scenario 3's levers and floor
variants).

A concurrent pgbench cell on a shared 2-core machine swings by ±14 % between two runs of the
same schema, more than a lever's effect. Measured serially the same schema agrees with itself
within ~2 %: each :class:`Variant` gets its own database, made once (a copy of the backlog, or
a floor, with the variant's DDL), and rounds interleave the variants, each a **block** of one
pgbench client running the variant's step a fixed number of times (``-t``). Over a block the
database's CPU is metered (:class:`~pgpulse_tools.bench.common.DbCpu`) and what it wrote
(:class:`~pgpulse_tools.bench.writes.WriteMeter`); the firings are the history rows the block
added. The number of steps comes from a calibration block, so that a block lasts at least
:data:`MIN_BLOCK_S`; each database's backlog outlasts all its rounds.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pgpulse_tools.bench import ceiling, checks, floor
from pgpulse_tools.bench.common import (
    BENCH_SQL,
    DbCpu,
    admin,
    backlog_template,
    drop_db,
    fresh_db,
)
from pgpulse_tools.bench.writes import WriteMeter, per_firing

#: The shortest block whose figures are trusted, seconds. A block is one client that connects
#: once and runs a fixed number of steps: the ramp-up :data:`checks.MIN_WINDOW_S` guards a
#: concurrent cell against (clients connecting, a burst of lock waits) is one connection here,
#: and a cold first block is one of the rounds the median leaves aside.
MIN_BLOCK_S: Final[float] = 2.0
#: Calibration blocks aim at this many times :data:`MIN_BLOCK_S`, so that a variant up to that
#: much faster than the one calibrated still runs blocks of at least the minimum.
BLOCK_HEADROOM: Final[float] = 1.5
#: Steps of a calibration block (enough to time a step within a few per cent).
CALIBRATION_STEPS: Final[int] = 100
#: The database CPU a one-client block may use, in cores: its one backend runs one statement
#: at a time, and the WAL writer, checkpointer, background writer and autovacuum (which
#: :class:`DbCpu` also counts) share one more core at most. A block above it measured its rate
#: and its CPU over different spans (see :mod:`pgpulse_tools.bench.checks`).
CORES_PER_BLOCK: Final[int] = 2
#: Seconds between the CPU meter's samples in a block: the block's one backend exits with
#: pgbench, and its CPU since the last sample is lost (at 0.2 s, the meter's default, up to
#: ~7 % of a 2 s block; at 0.05 s, under 2 %).
SAMPLE_S: Final[float] = 0.05
#: Database names of the variants: this prefix and the variant's position.
DB_PREFIX: Final[str] = "pgpulse_bench_serial_"


@dataclass(frozen=True, slots=True)
class Variant:
    """One schema and step to measure serially.

    Attributes:
        name: the row's label.
        script: the pgbench script of one step (complete the last claim, claim the next).
        variables: the script's first values (``-D``), its batch included.
        ddl: statements run on Pulse's backlog copy first (a lever's bench.sql block).
        floor_blocks: floor.sql blocks of a floor database (:data:`floor.VARIANTS`); ``None``
            for Pulse's schema.
    """

    name: str
    script: Path
    variables: dict[str, Any] = field(default_factory=dict)
    ddl: tuple[str, ...] = ()
    floor_blocks: tuple[str, ...] | None = None

    @property
    def span_sql(self) -> str:
        """The statement that reads back the firings so far (``fired``)."""
        return (floor.FLOOR_SQL if self.floor_blocks is not None else BENCH_SQL)["fired_span"]

    @property
    def hot_table(self) -> str:
        """The table of the rows a firing updates."""
        return "floor_jobs" if self.floor_blocks is not None else "pgpulse_jobs"


async def create(server_dsn: str, variant: Variant, name: str, jobs: int) -> str:
    """(Re)create database ``name`` for ``variant`` holding ``jobs`` due jobs; return its DSN.

    Raises:
        psycopg.Error: the server refused, or a DDL statement failed.
    """
    if variant.floor_blocks is not None:
        return await asyncio.to_thread(
            floor.create, server_dsn, jobs, jobs, name, variant.floor_blocks
        )
    dsn = await fresh_db(server_dsn, name, template=await backlog_template(server_dsn, jobs))
    with admin(dsn) as conn:
        for statement in variant.ddl:
            conn.execute(statement)
    return dsn


def _fired(dsn: str, variant: Variant) -> int:
    with admin(dsn) as conn:
        row = conn.execute(variant.span_sql).fetchone()
    assert row is not None
    return int(row["fired"])


def block(dsn: str, variant: Variant, steps: int) -> dict[str, Any]:
    """Run ``variant``'s step ``steps`` times from one pgbench client on ``dsn``, metered.

    Returns:
        The block's figures, judged (:func:`checks.judge`, window :data:`MIN_BLOCK_S`, CPU
        budget :data:`CORES_PER_BLOCK`): ``rate`` (firings/s over the block's wall seconds),
        ``db_cpu_ms`` per firing, ``seconds``, ``fired`` (history rows added), ``steps``,
        ``clients`` (1), ``drained`` (fewer firings than ``steps - 1`` full batches: the
        backlog ran out) and ``per_firing`` (:func:`pgpulse_tools.bench.writes.per_firing`
        with the hot row's width).
    """
    # Each block starts from a vacuumed table, not metered: a block leaves a dead index entry
    # per firing at the head of the due index, which the next block's claims would walk
    # (the floor's blocks rose from 0.036 to 0.094 ms per firing over five rounds without it).
    with admin(dsn) as conn:
        conn.execute("VACUUM")
    before = _fired(dsn, variant)
    written = WriteMeter(dsn).start()
    with DbCpu(dsn, interval=SAMPLE_S) as meter:
        start = time.perf_counter()
        ceiling.run_pgbench(
            dsn,
            variant.script,
            clients=1,
            seconds=math.nan,
            variables=variant.variables,
            transactions=steps,
        )
        wall = time.perf_counter() - start
    totals = written.stop()  # the client's session has closed: its counters are in
    with admin(dsn) as conn:
        width = ceiling.row_bytes(conn, variant.hot_table)
    fired = _fired(dsn, variant) - before
    db_cpu_ms = meter.seconds() / fired * 1000 if fired else math.nan
    # the first step completes nothing (its outcomes are empty): steps - 1 full batches
    full = (steps - 1) * int(variant.variables.get("batch", 1))
    cell = {
        "clients": 1,
        "steps": steps,
        "seconds": wall,
        "fired": fired,
        "rate": fired / wall if fired else 0.0,
        "db_cpu_ms": db_cpu_ms,
        "drained": fired < full,
        "per_firing": {**per_firing(totals, fired, db_cpu_ms), "row_bytes": width},
    }
    return checks.judge(cell, cores=CORES_PER_BLOCK, min_window_s=MIN_BLOCK_S)


async def steps_for(server_dsn: str, variant: Variant, block_s: float) -> int:
    """Steps of ``variant`` that last ``block_s`` × :data:`BLOCK_HEADROOM` seconds, from a
    calibration block of :data:`CALIBRATION_STEPS` on a database of its own (dropped after)."""
    batch = int(variant.variables.get("batch", 1))
    name = f"{DB_PREFIX}calibration"
    try:
        dsn = await create(server_dsn, variant, name, backlog_for(CALIBRATION_STEPS, batch, 1))
        cell = await asyncio.to_thread(block, dsn, variant, CALIBRATION_STEPS)
    finally:
        drop_db(server_dsn, name)
    per_step = float(cell["seconds"]) / CALIBRATION_STEPS
    return max(2, math.ceil(block_s * BLOCK_HEADROOM / per_step))


def backlog_for(steps: int, batch: int, rounds: int) -> int:
    """Jobs a variant's database needs for ``rounds`` blocks of ``steps`` steps of ``batch``:
    each step claims a full batch, so a block takes ``steps × batch`` jobs off the backlog;
    one block more is spare, and the total is rounded up to thousands."""
    return math.ceil(steps * batch * (rounds + 1) / 1_000) * 1_000


async def measure(
    server_dsn: str, variants: list[Variant], *, rounds: int, block_s: float = MIN_BLOCK_S
) -> dict[str, list[dict[str, Any]]]:
    """Measure every variant in ``rounds`` interleaved rounds of one block each.

    The Pulse variants share the steps calibrated on the first of them, the floor variants
    those calibrated on the first floor; each round starts further down ``variants``, so none
    always runs at the same point of a round. Every database is dropped at the end.

    Returns:
        Per variant name, its blocks' figures (:func:`block`) in round order.
    """
    steps: dict[bool, int] = {}
    for variant in variants:
        kind = variant.floor_blocks is not None
        if kind not in steps:
            steps[kind] = await steps_for(server_dsn, variant, block_s)
    names = [f"{DB_PREFIX}{number}" for number in range(len(variants))]
    dsns: list[str] = []
    out: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    try:
        for variant, name in zip(variants, names, strict=True):
            batch = int(variant.variables.get("batch", 1))
            jobs = backlog_for(steps[variant.floor_blocks is not None], batch, rounds)
            dsns.append(await create(server_dsn, variant, name, jobs))
        for turn in range(rounds):
            shift = turn * len(variants) // rounds
            order = list(range(len(variants)))
            for index in order[shift:] + order[:shift]:
                variant = variants[index]
                out[variant.name].append(
                    await asyncio.to_thread(
                        block, dsns[index], variant, steps[variant.floor_blocks is not None]
                    )
                )
    finally:
        for name in names:
            drop_db(server_dsn, name)
    return out
