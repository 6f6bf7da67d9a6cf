"""Levers on the cost of a firing, each measured before and after in one run (scenario 3).

A lever is a change of the schema Pulse's step runs on, applied to the benchmark's copy of the
backlog only (its DDL is a named block of ``bench.sql``): the ceiling's best cell (same batch,
clients and seconds) runs once per lever, between two runs of the unchanged schema (the first
and the last cell: their spread is the noise of this run). A lever pays when its DB CPU per
firing is below both unchanged runs'. Each cell also shows what a firing wrote
(:mod:`pgpulse_tools.bench.writes`), so a lever's effect on HOT updates, index entries and WAL
is seen beside its CPU.
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

from pgpulse_tools.bench import ceiling, checks
from pgpulse_tools.bench.common import BENCH_SQL, Result

#: The lever that changes the statement's input, not the schema.
ARRAYS: Final[str] = "outcomes as arrays, not JSON"
#: Lever name -> the bench.sql block of its DDL (None: the schema as it is).
LEVERS: Final[dict[str, str | None]] = {
    "as is": None,
    "fillfactor 70 on pgpulse_jobs": "lever_fillfactor",
    "BRIN pgpulse_runs_finished": "lever_brin_finished",
    "no pgpulse_runs_recent": "lever_no_runs_recent",
    ARRAYS: None,
    "as is (again)": None,
}

#: The outcome batch's fields (finish_and_claim's ``input``), their types, and the value the
#: ceiling's step gives each for a claimed job (``c`` is the claim's row).
OUTCOME_FIELDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("job_id", "bigint", "id"),
    ("token", "bigint", "fencing_token"),
    ("status", "text", "'idle'"),
    ("scheduled_for", "timestamptz", "scheduled_for + interval '1 hour'"),
    ("next_run_at", "timestamptz", "scheduled_for + interval '1 hour'"),
    ("retry_in", "float8", "0"),
    ("reset_attempt", "bool", "true"),
    ("outcome", "text", "'succeeded'"),
    ("error", "text", "NULL"),
    ("output", "text", "NULL"),
    ("skips", "bigint", "0"),
    ("skip_from", "timestamptz", "NULL"),
    ("skip_to", "timestamptz", "NULL"),
    ("skip_reason", "text", "NULL"),
    ("counts_run", "bool", "true"),
    ("failures", "int", "0"),
    ("pause_reason", "text", "NULL"),
)


def array_script() -> str:
    """The ceiling's pgbench step with the outcome batch as one array per field (``unnest``)
    instead of one JSON array of objects: the same statement otherwise, its outcomes kept in
    ``:o_<field>`` variables (start them at ``{}``).

    Raises:
        ValueError: finish_and_claim's ``input`` is no longer ``json_to_recordset`` of the
            outcomes (update :data:`OUTCOME_FIELDS` and this function).
    """
    script = ceiling.pgbench_script()
    json_input = re.compile(
        r"input AS \(\s*SELECT \*\s*FROM json_to_recordset"
        r"\(\(:outcomes\)::json\) AS i \(.*?\)\s*\)",
        re.DOTALL,
    )
    arrays = ", ".join(f"(:o_{name})::{kind}[]" for name, kind, _ in OUTCOME_FIELDS)
    columns = ", ".join(name for name, _, _ in OUTCOME_FIELDS)
    script, found = json_input.subn(
        f"input AS (\nSELECT *\nFROM unnest({arrays}) AS i ({columns})\n)", script, count=1
    )
    head, sep, _ = script.rpartition("SELECT coalesce(json_agg(")
    if not found or not sep:
        raise ValueError("finish_and_claim's outcome batch changed; update bench/levers.py")
    aggregates = ",\n".join(
        f"coalesce(array_agg(({value})::{kind}) FILTER (WHERE id IS NOT NULL), '{{}}') AS o_{name}"
        for name, kind, value in OUTCOME_FIELDS
    )
    return f"{head}SELECT {aggregates}\nFROM pulse_claim \\gset\n"


def _variables(name: str) -> dict[str, Any]:
    if name == ARRAYS:
        return {f"o_{field}": "{}" for field, _, _ in OUTCOME_FIELDS}
    return {"outcomes": "[]"}


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


async def run(server_dsn: str, result: Result) -> Result:
    """Measure every lever on scenario 3's best burst cell and add the table to ``result``
    (scenario 3's, which has run); nothing when it has no trusted burst cell.

    Args:
        server_dsn: the benchmarked server.
        result: scenario 3's result (its ``data["burst_cell"]``: batch, clients, jobs).
    """
    burst = result.data.get("burst_cell")
    if not burst:
        return result
    folder = Path(tempfile.mkdtemp(prefix="pgpulse-levers-"))
    script, arrays = folder / "pulse.sql", folder / "arrays.sql"
    script.write_text(ceiling.pgbench_script())
    arrays.write_text(array_script())
    seconds = float(result.data["seconds"])
    jobs = checks.backlog_to_outlast(burst["rate"], seconds, int(burst["jobs"]))
    cells: list[tuple[str, dict[str, Any]]] = []
    try:
        for name, block in LEVERS.items():
            cell = await ceiling.measure_cell(
                server_dsn,
                jobs,
                arrays if name == ARRAYS else script,
                batch=burst["batch"],
                clients=burst["clients"],
                seconds=seconds,
                ddl=statements(block),
                variables=_variables(name),
            )
            cells.append((name, cell))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result.tables.append(
        {
            "title": "Levers, before and after (same cell, same run)",
            "headers": HEADERS,
            "rows": rows(cells),
            "notes": [
                f"Pulse's step, batch {burst['batch']}, {burst['clients']} clients, "
                f"{seconds:g} s per cell, each on a fresh copy of the backlog with the lever's "
                "DDL applied (bench.sql lever_* blocks; nothing of it is in Pulse's schema)",
                "÷ as is = DB CPU per firing over the mean of the two unchanged runs, the first "
                "and the last (their spread is this run's noise)",
            ],
        }
    )
    result.data["levers"] = {name: cell for name, cell in cells}
    return result
