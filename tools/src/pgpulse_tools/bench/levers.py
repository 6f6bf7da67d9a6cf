"""Levers on the cost of a firing, each measured before and after in one run (scenario 3).

A lever is a change of the schema Pulse's step runs on, applied to the benchmark's copy of the
backlog only (its DDL is a named block of ``bench.sql``), or of the step itself. Each lever, and
each floor variant of the narrow-row prototype (:data:`pgpulse_tools.bench.floor.VARIANTS`), is
measured serially at the ceiling's best cell's batch (:mod:`pgpulse_tools.bench.serial`: its
own database, one pgbench client, interleaved rounds, the median block), between two unchanged
databases (the first and the last row: their spread is the noise of this run). A lever pays
when its DB CPU per firing is below both unchanged rows'. Each row also shows what a firing
wrote (:mod:`pgpulse_tools.bench.writes`), so a lever's effect on HOT updates, index entries and
WAL is seen beside its CPU.
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pgpulse.sql import split_named_blocks
from pgpulse_tools.bench import ceiling, checks, floor, serial
from pgpulse_tools.bench.common import BENCH_SQL, Result
from pgpulse_tools.bench.sqltext import split_final_select, substitute
from pgpulse_tools.bench.writes import comparison_rows, headers

#: The lever that puts back into every step what a node sends only for a batch that needs it:
#: ``record_skips_and_auto_pauses`` (the skip summary and the auto-pause's audit row).
RARE_IN_EVERY_STEP: Final[str] = "skips and auto-pauses recorded in every step"
#: The lever that prices issue 31's one lease-holding table as the job-row claim would pay it:
#: each claimed job also opens a row of ``pgpulse_occurrences`` holding the lease (its run id,
#: token, attempt, node), and each finished one deletes it; the job row is claimed and moved on
#: as today. An upper bound of that design's cost per firing (its job row would also lose the
#: lease columns' writes).
ONE_TABLE: Final[str] = "every lease on an occurrence row (one table, issue 31)"
#: The lever that is the step before issue 31: one statement (finish and claim, its rare parts
#: cut out by a regular expression), as a node sent it until the step became finish_jobs,
#: claim_jobs and next_job_due in one pipeline (``before_issue_31.sql``, a frozen copy).
BEFORE_31: Final[str] = "the step as one statement (before issue 31)"
#: The lever that puts back into every step the next due instant, which a node asks only after
#: a short batch (until issue 31's last change it asked it in every step).
NEXT_DUE_IN_EVERY_STEP: Final[str] = "next due instant asked in every step"
#: The statement levers: their pgbench step (:func:`script_of`).
STATEMENT_LEVERS: Final[tuple[str, ...]] = (
    RARE_IN_EVERY_STEP,
    ONE_TABLE,
    BEFORE_31,
    NEXT_DUE_IN_EVERY_STEP,
)
#: Lever name -> the bench.sql block of its DDL (None: the schema as it is).
LEVERS: Final[dict[str, str | None]] = {
    "as is": None,
    "history: B-tree on every finished_at (before migration 0012)": "lever_history_btree",
    "history: no pgpulse_runs_recent": "lever_no_runs_recent",
    BEFORE_31: None,
    NEXT_DUE_IN_EVERY_STEP: None,
    RARE_IN_EVERY_STEP: None,
    ONE_TABLE: "lever_one_table",
    "every job keyed: one concurrency key, limit 100,000": "lever_keyed",
    "every job of priority 5": "lever_priority",
    "as is (again)": None,
}


def one_table_script() -> str:
    """The ceiling's pgbench step as :data:`ONE_TABLE` prices it: a claim opens an occurrence
    row per claimed job, a finish deletes the finished ones'.

    Raises:
        ValueError: the step no longer has the parts this hooks onto (update this function).
    """
    script = ceiling.pgbench_script()
    opened = (
        "), opened AS (\nINSERT INTO pgpulse_occurrences (id, job_id, kind, scheduled_for, "
        "next_run_at, attempt, fencing_token, locked_by, lease_expires_at, claimed_at)\n"
        "SELECT c.run_id, c.id, 'scheduled', c.scheduled_for, c.db_now, c.attempt, "
        "c.fencing_token, 'ceiling', c.db_now + interval '60 seconds', c.db_now\n"
        "FROM claimed AS c\nRETURNING 1\n)\nSELECT coalesce(json_agg("
    )
    closed = (
        "), closed AS (\nDELETE FROM pgpulse_occurrences AS o\n"
        "WHERE o.id = ANY(ARRAY(SELECT run_id FROM input))\nRETURNING 1\n), run AS ("
    )
    script, found = re.subn(r"\)\nSELECT coalesce\(json_agg\(", lambda _: opened, script, count=1)
    script, also = re.subn(r"\), run AS \(", lambda _: closed, script, count=1)
    if not (found and also):
        raise ValueError("the claim step changed; update bench/levers.py's one_table_script")
    return script


def before_31_script() -> str:
    """The pgbench step of :data:`BEFORE_31`: the frozen one-statement step, its final
    ``SELECT`` wrapped to return the batch's outcomes for the next step (``\\gset``), as the
    ceiling ran it before issue 31."""
    statement = split_named_blocks(
        "-- name: step\n" + (Path(__file__).parent / "before_issue_31.sql").read_text()
    )["step"]
    ctes, final = split_final_select(substitute(statement, ceiling.STEP_VALUES))
    step = (
        f"{ctes}, pulse_claim AS (\n{final}\n)\n"
        f"SELECT coalesce(json_agg({ceiling.OUTCOME}) FILTER (WHERE id IS NOT NULL), '[]')"
        " AS outcomes\nFROM pulse_claim"
    )
    return f"{step} \\gset\n"


def script_of(name: str) -> str:
    """The pgbench step of statement lever ``name`` (:data:`STATEMENT_LEVERS`).

    Raises:
        KeyError: ``name`` is no statement lever.
    """
    scripts: dict[str, Callable[[], str]] = {
        RARE_IN_EVERY_STEP: lambda: ceiling.pgbench_script(rare=True),
        ONE_TABLE: one_table_script,
        BEFORE_31: before_31_script,
        NEXT_DUE_IN_EVERY_STEP: lambda: ceiling.pgbench_script(next_due=True),
    }
    return scripts[name]()


def _variables(name: str) -> dict[str, Any]:
    return {"outcomes": "[]"}


#: Rounds of every lever (and floor variant), interleaved: a shared machine's load drifts over a
#: minute, so each figure is the median block's, not one block's.
ROUNDS: Final[int] = 5


def median_cell(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell of median DB CPU per firing among ``cells``' trusted ones (all of them when none
    is), with ``rounds_db_cpu_ms``: every round's DB CPU per firing, in order.

    Raises:
        ValueError: ``cells`` is empty.
    """
    if not cells:
        raise ValueError("no cells to take the median of")
    pool = [c for c in cells if checks.trusted(c)] or cells
    ranked = sorted(pool, key=lambda c: float(c["db_cpu_ms"]))
    return {**ranked[(len(ranked) - 1) // 2], "rounds_db_cpu_ms": [c["db_cpu_ms"] for c in cells]}


HEADERS: Final[list[str]] = [
    "schema",
    "firings/s",
    "DB CPU ms/firing",
    "÷ as is",
    "HOT updates",
    "index entries (full)",
    "partial-index entries ≤",
    "WAL bytes",
    "check",
]


def statements(block: str | None) -> list[str]:
    """The DDL statements of bench.sql block ``block`` (none for ``None``), one per ``;``."""
    if block is None:
        return []
    text = "\n".join(
        line for line in BENCH_SQL[block].splitlines() if not line.lstrip().startswith("--")
    )
    return [part.strip() for part in text.split(";") if part.strip()]


def rows(cells: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    """The levers' table: each cell's figures and its DB CPU over the mean of the unchanged
    schema's trusted cells (``n/a`` when a cell, or both unchanged ones, failed its checks)."""
    base = [c["db_cpu_ms"] for name, c in cells if name.startswith("as is") and checks.trusted(c)]
    mean = sum(base) / len(base) if base else math.nan
    out: list[list[Any]] = []
    for name, cell in cells:
        each = cell.get("per_firing", {})
        usable = checks.trusted(cell) and not math.isnan(mean)
        out.append(
            [
                name,
                cell["rate"],
                cell["db_cpu_ms"],
                f"{cell['db_cpu_ms'] / mean:.2f}×" if usable else "n/a",
                each.get("hot_updates", math.nan),
                each.get("index_entries", math.nan),
                each.get("partial_index_entries_max", math.nan),
                each.get("wal_bytes", math.nan),
                checks.verdict(cell),
            ]
        )
    return out


def variant_rows(cells: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    """The floor's variants' table: each cell's per-firing figures, and each variant's DB CPU
    over the plain floor's (``n/a`` when either failed its checks) as the last column."""
    plain = dict(cells).get("floor", {})
    out: list[list[Any]] = []
    for name, cell in cells:
        row = comparison_rows([(name, cell)])
        usable = checks.trusted(cell) and checks.trusted(plain) and plain.get("db_cpu_ms")
        ratio = f"{cell['db_cpu_ms'] / plain['db_cpu_ms']:.2f}×" if usable else "n/a"
        out.extend([*r, ratio, checks.verdict(cell)] for r in row)
    return out


def _variant_table(burst: dict[str, Any], method: str, cells: list[Any]) -> dict[str, Any]:
    return {
        "title": "The narrow-row prototype: the floor with Pulse's width and indexes",
        "headers": [*headers(), "÷ floor", "check"],
        "rows": variant_rows(cells),
        "notes": [
            f"the floor's step (bench/floor.sql), batch {burst['batch']}, same run, measured "
            "as the levers above; a variant adds only what it names",
            method,
            "DB CPU ms is per firing at one client's serial rate (no contention)",
            f"Pulse's row width: a {floor.PULSE_ROW_PAD}-byte definition column no firing "
            "writes (floor.sql `widen`), so a floor job row is as wide as a pgpulse_jobs row",
            "Pulse's indexes: a lease index on the jobs, and the history's unique occurrence "
            "key, per-job listing and pruning B-trees (floor.sql `pulse_indexes`)",
            "the width row against the floor is what a narrower hot row "
            "(pgpulse_occurrences apart from the definition: section below) would save; the "
            "indexes row is what the index lever works on",
        ],
    }


def _variants(folder: Path, batch: int) -> list[serial.Variant]:
    """Every lever of :data:`LEVERS`, then every floor variant of :data:`floor.VARIANTS`, as a
    serial variant of batch ``batch`` whose script is written to ``folder``."""
    script = folder / "pulse.sql"
    script.write_text(ceiling.pgbench_script())
    scripts = {}
    for number, name in enumerate(STATEMENT_LEVERS):
        scripts[name] = folder / f"statement{number}.sql"
        scripts[name].write_text(script_of(name))
    floor_script = folder / "floor.sql"
    floor_script.write_text(floor.pgbench_script())
    return [
        *(
            serial.Variant(
                name,
                scripts.get(name, script),
                {"batch": batch, **_variables(name)},
                ddl=tuple(statements(block)),
            )
            for name, block in LEVERS.items()
        ),
        *(
            serial.Variant(
                name,
                floor_script,
                {"batch": batch, "ids": "{}", "tokens": "{}"},
                floor_blocks=blocks,
            )
            for name, blocks in floor.VARIANTS.items()
        ),
    ]


def _method_note(blocks: list[dict[str, Any]], rounds: int) -> str:
    """How the rows of a table were measured, from their blocks' figures."""
    steps = sorted({int(b["steps"]) for b in blocks})
    shortest = min((float(b["seconds"]) for b in blocks), default=math.nan)
    return (
        f"serial: each row on its own database (a copy of the backlog with the row's DDL, "
        f"made once), {rounds} rounds interleaving every row of both tables, each a block of "
        f"one pgbench client running the step {'/'.join(map(str, steps))} times (-t; "
        f"shortest block {shortest:.1f} s); DB CPU metered over the block, firings = the "
        "history rows it added; each row is its median block (by DB CPU per firing)"
    )


async def run(
    server_dsn: str, result: Result, rounds: int = ROUNDS, block_s: float = serial.MIN_BLOCK_S
) -> Result:
    """Measure every lever and floor variant serially (:mod:`pgpulse_tools.bench.serial`) at
    scenario 3's best burst cell's batch, ``rounds`` interleaved blocks each, and add their
    tables (median blocks) to ``result`` (scenario 3's, which has run); nothing when it has no
    burst cell.

    Args:
        server_dsn: the benchmarked server.
        result: scenario 3's result (its ``data["burst_cell"]``: batch).
        rounds: how many blocks each variant runs (at least 1).
        block_s: the seconds a block should last at least (a shorter one is untrusted).
    """
    burst = result.data.get("burst_cell")
    if not burst:
        return result
    folder = Path(tempfile.mkdtemp(prefix="pgpulse-levers-"))
    try:
        measured = await serial.measure(
            server_dsn, _variants(folder, int(burst["batch"])), rounds=rounds, block_s=block_s
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    cells = [(name, median_cell(measured[name])) for name in LEVERS]
    variants = [(name, median_cell(measured[name])) for name in floor.VARIANTS]
    method = _method_note([b for blocks in measured.values() for b in blocks], rounds)
    result.tables.append(
        {
            "title": "Levers, before and after (same run, serial blocks)",
            "headers": HEADERS,
            "rows": rows(cells),
            "notes": [
                f"Pulse's step, batch {burst['batch']}; each lever's DDL applied to its "
                "database's copy of the backlog only (bench.sql lever_* blocks; nothing of it "
                "is in Pulse's schema)",
                method,
                "firings/s is the serial rate of one client (no contention), not a "
                "throughput: scenario 3's cells above measure that",
                "÷ as is = DB CPU per firing over the mean of the two unchanged databases, "
                "the first and the last row (their spread is this run's noise)",
                f"check: a block under {serial.MIN_BLOCK_S:g} s, or using more than "
                f"{serial.CORES_PER_BLOCK} cores of DB CPU (one client), or outrun by its "
                "backlog, is untrusted and no median candidate",
            ],
        }
    )
    result.tables.append(_variant_table(burst, method, variants))
    result.data["levers"] = {name: cell for name, cell in cells}
    result.data["floor_variants"] = {name: cell for name, cell in variants}
    return result
