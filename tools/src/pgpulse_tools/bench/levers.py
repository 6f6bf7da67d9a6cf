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
from pathlib import Path
from typing import Any, Final

from pgpulse_tools.bench import ceiling, checks, floor, serial
from pgpulse_tools.bench.common import BENCH_SQL, Result
from pgpulse_tools.bench.writes import comparison_rows, headers

#: The lever that changes the statement's input, not the schema.
ARRAYS: Final[str] = "outcomes as arrays, not JSON"
#: The lever that changes what the claim returns: the narrow-row design's cached definitions.
IDS_ONLY: Final[str] = "claim returns id, token, occurrence only (definitions cached)"
#: The lever that puts back what issue 22 took out of the step: the history row's claim values
#: (run id, occurrence, attempt, node, token, instant) read again from the job row, one
#: primary-key lookup per finished run, as the statement did before, instead of taken from the
#: outcome and from the fenced update's RETURNING. Its cell is the step before issue 22.
REREAD: Final[str] = "history row's claim values re-read from the job row (before issue 22)"
#: The lever that puts back the other part issue 22 took out: the claim returning each job's
#: spread offset from the database's ``pgpulse_spread_offset`` (a SQL function with a FROM
#: clause, so never inlined: a function call and a SHA-256 per claimed row) rather than its
#: ``spread``, from which the node computes the offset (``ClaimedJob.spread_offset``).
SPREAD_IN_SQL: Final[str] = "spread offset computed by the claim's SQL (before issue 22)"
#: The lever that puts back the rare parts (``pgpulse.sql.RARE_PARTS``: the skip summary and the
#: auto-pause's audit row) into every step, as before issue 22: a node now sends the step
#: without them unless its batch has such an outcome (``finish_and_claim_common``).
RARE_IN_EVERY_STEP: Final[str] = "skipped and auto-paused parts in every step (before issue 22)"
#: The history row's values as the step takes them (the pattern) and as it took them before
#: (the replacement): :data:`REREAD`.
_FROM_OUTCOME: Final[str] = (
    r"SELECT i\.run_id,\n\s*job\.id,\n\s*i\.run_scheduled_for,\n"
    r"\s*CASE WHEN i\.outcome <> 'skipped' THEN i\.attempt ELSE 0 END,\n\s*i\.outcome,\n"
    r"\s*i\.node,\n\s*job\.fencing_token,\n"
    r"\s*CASE WHEN i\.outcome <> 'skipped' THEN job\.claimed_at END,\n"
    r"(.*?)"
    r"FROM input AS i\n\s*JOIN job ON job\.id = i\.job_id\n\s*CROSS JOIN clock\n"
    r"(\s*ON CONFLICT \(job_id, scheduled_for\))"
)
_FROM_JOB_ROW: Final[str] = (
    "SELECT o.run_id,\no.id,\no.scheduled_for,\n"
    "CASE WHEN i.outcome <> 'skipped' THEN o.attempt ELSE 0 END,\ni.outcome,\n"
    "o.locked_by,\no.fencing_token,\n"
    "CASE WHEN i.outcome <> 'skipped' THEN o.claimed_at END,\n"
    "\\1"
    "FROM input AS i\nJOIN job ON job.id = i.job_id\nJOIN pgpulse_jobs AS o ON o.id = job.id\n"
    "CROSS JOIN clock\nWHERE o.id = ANY(ARRAY(SELECT job_id FROM input))\n"
    "\\2"
)
#: Statement levers that cut a part of the step (a pattern of the generated script and what
#: replaces it): what that part costs a firing that does not need it. Correct for the
#: benchmark's firings only (first attempts, no skips, no pauses).
CUTS: Final[dict[str, tuple[str, str]]] = {
    "history row by plain INSERT (no ON CONFLICT: first attempts)": (
        r"ON CONFLICT \(job_id, scheduled_for\) WHERE kind = 'scheduled' DO UPDATE\n.*?"
        r"(RETURNING 1\n\),\nroute AS)",
        r"\1",
    ),
}
#: Lever name -> the bench.sql block of its DDL (None: the schema as it is).
LEVERS: Final[dict[str, str | None]] = {
    "as is": None,
    "history: B-tree on every finished_at (before migration 0012)": "lever_history_btree",
    "history: no pgpulse_runs_recent": "lever_no_runs_recent",
    REREAD: None,
    SPREAD_IN_SQL: None,
    RARE_IN_EVERY_STEP: None,
    ARRAYS: None,
    IDS_ONLY: None,
    **dict.fromkeys(CUTS),
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
    ("run_id", "bigint", "run_id"),
    ("run_scheduled_for", "timestamptz", "scheduled_for"),
    ("attempt", "int", "attempt"),
    ("node", "text", "'ceiling-' || (:client_id)::text"),
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


def ids_only_script() -> str:
    """The ceiling's pgbench step with the claim returning only what a node that caches
    definitions by revision needs (id, fencing token, occurrence, attempt, run id, revision,
    the clock), not the definition's columns: the claim half of the narrow-row design.

    Raises:
        ValueError: the claim's RETURNING list no longer starts with ``j.id, j.tenant`` or no
            longer ends the ``claimed`` CTE (update this function).
    """
    script = ceiling.pgbench_script()
    narrow, found = re.subn(
        r"RETURNING j\.id, j\.tenant, .*?\n\), pulse_claim AS \(",
        "RETURNING j.id, j.fencing_token, j.scheduled_for, j.attempt, j.run_id, j.revision,\n"
        "clock.now AS db_now\n), pulse_claim AS (",
        script,
        count=1,
        flags=re.DOTALL,
    )
    if not found:
        raise ValueError("finish_and_claim's claim changed; update bench/levers.py")
    return narrow


#: The levers that put back a part of the step as it was before issue 22: a pattern of the
#: generated script and what replaces it, or ``None`` for the step with every part
#: (``finish_and_claim``: :data:`RARE_IN_EVERY_STEP`) (:func:`before_script`).
BEFORE: Final[dict[str, tuple[str, str] | None]] = {
    RARE_IN_EVERY_STEP: None,
    REREAD: (_FROM_OUTCOME, _FROM_JOB_ROW),
    SPREAD_IN_SQL: (
        r"(RETURNING j\.id, j\.tenant, .*?)\bj\.spread,\n",
        "\\1pgpulse_spread_offset(j.id, j.spread) AS spread_offset,\n",
    ),
}


def before_script(name: str) -> str:
    """The ceiling's pgbench step with the part lever ``name`` of :data:`BEFORE` names as it
    was before issue 22 (:data:`REREAD`: the history row's claim values read again from the job
    row; :data:`SPREAD_IN_SQL`: the spread offset computed by the claim;
    :data:`RARE_IN_EVERY_STEP`: the skip summary and auto-pause parts in every step).

    Raises:
        KeyError: ``name`` is not a lever of :data:`BEFORE`.
        ValueError: the part is no longer what the pattern looks for (update :data:`BEFORE`).
    """
    part = BEFORE[name]
    if part is None:
        return ceiling.pgbench_script("finish_and_claim")
    pattern, replacement = part
    script, found = re.subn(
        pattern, replacement, ceiling.pgbench_script(), count=1, flags=re.DOTALL
    )
    if not found:
        raise ValueError(f"finish_and_claim changed; update bench/levers.py's lever {name!r}")
    return script


def cut_script(name: str) -> str:
    """The ceiling's pgbench step with the part that lever ``name`` of :data:`CUTS` names cut.

    Raises:
        KeyError: ``name`` is not a lever of :data:`CUTS`.
        ValueError: the part is no longer where the pattern looks for it (update :data:`CUTS`).
    """
    pattern, replacement = CUTS[name]
    script, found = re.subn(
        pattern, replacement, ceiling.pgbench_script(), count=1, flags=re.DOTALL
    )
    if not found:
        raise ValueError(f"finish_and_claim changed; update bench/levers.py's cut {name!r}")
    return script


def _variables(name: str) -> dict[str, Any]:
    if name == ARRAYS:
        return {f"o_{field}": "{}" for field, _, _ in OUTCOME_FIELDS}
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
    scripts = {ARRAYS: folder / "arrays.sql", IDS_ONLY: folder / "ids.sql"}
    scripts[ARRAYS].write_text(array_script())
    scripts[IDS_ONLY].write_text(ids_only_script())
    for number, name in enumerate(BEFORE):
        scripts[name] = folder / f"before{number}.sql"
        scripts[name].write_text(before_script(name))
    for number, name in enumerate(CUTS):
        scripts[name] = folder / f"cut{number}.sql"
        scripts[name].write_text(cut_script(name))
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
