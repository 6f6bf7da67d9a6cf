"""The cost-per-firing part of ``docs/benchmarks.md``: the issue's DB CPU target against the
floor, and the design of the lever not built in Pulse's schema (a narrower hot row) with the
figures of its prototypes (scenario 3: :mod:`pgpulse_tools.bench.levers`)."""

from __future__ import annotations

import math
from typing import Any, Final

from pgpulse_tools.bench.checks import trusted

#: The issue's target: DB CPU per firing in the drain with 2 nodes at most this × the floor's.
CPU_TARGET = 1.3

NARROW_ROW = """\
A firing updates its job row twice (the claim, the completion) and PostgreSQL writes a whole
new row version each time, the definition (schedule, payload, policies, names) with it. The
design that would stop that:

* `pgpulse_jobs` keeps the definition (tenant, name, schedule, handler, payload, policies) and a
  `revision` bumped by every change of it; a new table of per-occurrence state (one row per job:
  `job_id`, `shard_id`, `status`, `scheduled_for`, `next_run_at`, `attempt`, `fencing_token`,
  `run_id`, `locked_by`, `lease_expires_at`, `claimed_at`) carries what a firing changes, with
  `pgpulse_jobs_due` and `pgpulse_jobs_leases` moved onto it.
* The claim stays one statement (`FOR UPDATE SKIP LOCKED` on the occurrence row, fenced by its
  token: invariants 2 and 3 unchanged) and returns the job's `revision`; the node keeps the
  definitions it has seen by `(job_id, revision)` and reads the ones it lacks in the same
  statement, so a steady node receives definitions only when they change.

It was prototyped before being built, in two halves, both in scenario 3 (tables "Levers" and
"The narrow-row prototype" above, same run): the narrow row itself is the floor with and
without a definition column as wide as Pulse's (`floor.sql` `widen`); the cached definitions
are Pulse's own step with a claim that returns ids, tokens and occurrences only (lever
"claim returns id, token, occurrence only"). A HOT-friendly occurrence row is prototyped too:
the floor whose due index has no status predicate, so the claim changes no indexed column
(`hot_claim`; the completion still moves `next_run_at`)."""

INDEX_ENTRIES = """\
Every index entry a succeeded firing writes, and why each index stays (migration 0009 took the
eighth, a B-tree on every run's `finished_at`):

* the claim (`UPDATE`, not HOT: `status` leaves the due index's predicate): `pgpulse_jobs_pkey`
  and `pgpulse_jobs_leases` (every node's heartbeat sweeps expired leases through it);
* the completion (`UPDATE`, not HOT: `next_run_at` is the due index's key): `pgpulse_jobs_pkey`
  and `pgpulse_jobs_due` (the claim's scan);
* the history row (`INSERT ... ON CONFLICT`): `pgpulse_runs_pkey` (the run id: the extra
  occurrences' `ON CONFLICT (id)`, the API's run lookups), `pgpulse_runs_occurrence` (one row
  per occurrence, invariant 4: the insert's arbiter) and `pgpulse_runs_recent` (a job's newest
  runs: the jobs page's last run and strip, `runs` of one job, `list_runs` by name, the alerts'
  last success);
* none in `pgpulse_runs_finished` (BRIN, for pruning: no entry while a page range is not yet
  summarised, as the table's tail is), `pgpulse_runs_unhappy` (failed and skipped runs only:
  the alerts), `pgpulse_runs_batch`, `pgpulse_jobs_pause_ends` or `pgpulse_occurrences_*`
  (their predicates leave a succeeded scheduled firing out).

Seven entries against the floor's four (its job key twice, its due index, its history key).
Neither update can be HOT while the due index's key or predicate holds what a firing changes;
the prototype below measures a due index that leaves the claim HOT."""

#: Floor variants (levers.py's table) and the lever whose figures the section quotes.
_QUOTED: Final[tuple[tuple[str, str, str], ...]] = (
    ("variant", "floor, Pulse's row width", "a job row as wide as Pulse's"),
    ("variant", "floor, Pulse's indexes", "Pulse's hot-path B-trees"),
    ("variant", "floor, fillfactor 70, HOT claim", "a HOT claim (beside fillfactor 70 alone)"),
    (
        "lever",
        "claim returns id, token, occurrence only (definitions cached)",
        "Pulse's claim returning no definitions",
    ),
)


def cost_targets(results: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """``[target, measured, met]`` for DB CPU per firing in the drain with 2 nodes against the
    floor's step (scenario 3); none when either is missing, ``n/a`` and why when either failed
    its checks or the two were measured in different runs."""
    floor = results.get("3", {}).get("data", {}).get("floor")
    runs = results.get("2", {}).get("data", {}).get("runs", [])
    two = [run for run in runs if run.get("nodes") == 2]
    if not floor or not two:
        return []
    run = two[0]
    target = f"DB CPU per firing, drain with 2 nodes ≤ {CPU_TARGET}× the floor's"
    started = {results[key].get("data", {}).get("run", {}).get("started") for key in ("2", "3")}
    if len(started) > 1:  # figures of two runs are never compared (a shared, noisy machine)
        return [[target, "n/a (the floor is of another run)", "n/a"]]
    for what, cell in (("the 2-node drain", run), ("the floor", floor)):
        if not trusted(cell):
            found = "; ".join(cell["problems"])
            return [[target, f"n/a ({what} failed its checks: {found})", "n/a"]]
    if not floor.get("db_cpu_ms"):
        return [[target, "n/a (the floor's DB CPU was not metered)", "n/a"]]
    ratio = run["db_cpu_ms"] / floor["db_cpu_ms"]
    if math.isnan(ratio):
        return []
    return [
        [
            f"DB CPU per firing, drain with 2 nodes ≤ {CPU_TARGET}× the floor's "
            f"({run['db_cpu_ms']:.3f} vs {floor['db_cpu_ms']:.3f} ms)",
            f"{ratio:.2f}×",
            "yes" if ratio <= CPU_TARGET else "**no**",
        ]
    ]


def _ratio(cell: dict[str, Any] | None, base: dict[str, Any] | None) -> str | None:
    if not cell or not base or not (trusted(cell) and trusted(base)) or not base["db_cpu_ms"]:
        return None
    return f"{cell['db_cpu_ms'] / base['db_cpu_ms']:.2f}×"


def prototype_lines(results: dict[str, dict[str, Any]]) -> list[str]:
    """One line per prototype figure of scenario 3 (DB CPU per firing over its baseline in the
    same run: the plain floor, or the floor with fillfactor 70 for the HOT claim, or the mean of
    Pulse's unchanged runs); none when scenario 3 measured no floor variants."""
    data = results.get("3", {}).get("data", {})
    variants, levers = data.get("floor_variants") or {}, data.get("levers") or {}
    if not variants:
        return []
    lines = []
    for kind, name, what in _QUOTED:
        if kind == "variant":
            base = variants.get("floor, fillfactor 70" if "HOT" in name else "floor")
            ratio = _ratio(variants.get(name), base)
        else:  # over the mean of the unchanged runs, as the levers' table divides
            base = [
                c["db_cpu_ms"] for k, c in levers.items() if k.startswith("as is") and trusted(c)
            ]
            mean = {"db_cpu_ms": sum(base) / len(base), "problems": []} if base else None
            ratio = _ratio(levers.get(name), mean)
        shown = ratio or "n/a (not measured, or a cell failed its checks)"
        lines.append(f"* {what}: {shown} its baseline's DB CPU per firing")
    return lines


#: The levers (levers.py) that price a concurrency key and a priority per claim.
_KEY_LEVERS: Final[tuple[tuple[str, str], ...]] = (
    ("every job keyed: one concurrency key, limit 100,000", "a concurrency key with a limit"),
    ("every job of priority 5", "a priority"),
)


def keys_lines(results: dict[str, dict[str, Any]]) -> list[str]:
    """The section on what a concurrency key and a priority cost per claim (scenario 3's
    levers, each over the mean of the unchanged runs); none when they were not measured."""
    levers = results.get("3", {}).get("data", {}).get("levers") or {}
    if not any(name in levers for name, _ in _KEY_LEVERS):
        return []
    base = [c["db_cpu_ms"] for k, c in levers.items() if k.startswith("as is") and trusted(c)]
    mean = {"db_cpu_ms": sum(base) / len(base), "problems": []} if base else None
    lines = ["## Concurrency keys and priority", ""]
    for name, what in _KEY_LEVERS:
        cell = levers.get(name)
        ratio = _ratio(cell, mean) or "n/a (not measured, or a cell failed its checks)"
        cpu = f"{cell['db_cpu_ms']:.4f} ms" if cell else "n/a"
        lines.append(f"* {what} on every job: {cpu} of DB CPU per firing, {ratio} as is")
    lines += [
        "",
        "Scenario 3's levers, serial blocks of Pulse's step (finish and claim, batch as the "
        "best cell's): every job keyed (one key, limit far above the batch, so the claim locks, "
        "bumps and counts its limit row and none waits) and every job of priority 5 (the claim's "
        "second scan reads as many rows as its first), each against the schema as is, where no "
        "job has either. A job without a key and of priority 0 pays neither; what it pays "
        "for the features existing is the before/after of the unchanged step "
        "(`--compare-with`).",
        "",
    ]
    return lines


def section(results: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """The page's lines on the narrower hot row, with scenario 3's prototype figures, and on
    what a concurrency key and a priority cost (:func:`keys_lines`)."""
    measured = prototype_lines(results or {})
    keys = keys_lines(results or {})
    head = [
        "## Index entries per firing",
        "",
        INDEX_ENTRIES,
        "",
        "## A narrower hot row (designed, prototyped, not built)",
        "",
        NARROW_ROW,
        "",
    ]
    if not measured:
        return [*head, *keys]
    return [
        *head,
        "Measured in scenario 3 (same run, each over its baseline):",
        "",
        *measured,
        "",
        *keys,
    ]
