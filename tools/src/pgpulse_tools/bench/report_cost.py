"""The cost-per-firing part of ``docs/benchmarks.md``: the issue's DB CPU target against the
floor, and the design of the lever not measured on Pulse's schema (a narrower hot row)."""

from __future__ import annotations

import math
from typing import Any

from pgpulse_tools.bench.checks import trusted

#: The issue's target: DB CPU per firing in the drain with 2 nodes at most this × the floor's.
CPU_TARGET = 1.3

NARROW_ROW = """\
A firing updates its job row twice (the claim, the completion) and PostgreSQL writes a whole
new row version each time, the definition (schedule, payload, policies, names) with it. The
design that would stop that, not made here because it reshapes `pgpulse_jobs` under five other
branches in flight:

* `pgpulse_jobs` keeps the definition (tenant, name, schedule, handler, payload, policies) and a
  `revision` bumped by every change of it; a new table, `pgpulse_occurrences` (one row per job:
  `job_id`, `shard_id`, `status`, `scheduled_for`, `next_run_at`, `attempt`, `fencing_token`,
  `run_id`, `locked_by`, `lease_expires_at`, `claimed_at`), carries what a firing changes, with
  `pgpulse_jobs_due` and `pgpulse_jobs_leases` moved onto it.
* The claim stays one statement (`FOR UPDATE SKIP LOCKED` on the occurrence row, fenced by its
  token: invariants 2 and 3 unchanged) and returns the job's `revision`; the node keeps the
  definitions it has seen by `(job_id, revision)` and reads the ones it lacks in the same
  statement (a join for the claimed rows whose revision differs from the node's cache, passed
  as an array), so a steady node receives definitions only when they change.
* What it would save per firing: the two updated row versions shrink from the width of a job row
  (the table "Pulse against the floor, per firing" shows it beside the floor's, whose row is
  this narrow row) to about the floor's, and the WAL and heap pages written with them; the
  index entries stay the same (the due index's columns change on every firing, so no update is
  HOT whatever the width or the fill factor). The floor's step measures this shape's cost on
  this machine: the figure to reach is its DB CPU per firing plus what Pulse's history and
  shards add."""


def cost_targets(results: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """``[target, measured, met]`` for DB CPU per firing in the drain with 2 nodes against the
    floor's step (scenario 3); none when either is missing, ``n/a`` when either failed its
    checks or the two were measured in different runs."""
    floor = results.get("3", {}).get("data", {}).get("floor")
    runs = results.get("2", {}).get("data", {}).get("runs", [])
    two = [run for run in runs if run.get("nodes") == 2]
    if not floor or not two:
        return []
    run = two[0]
    started = {results[key].get("data", {}).get("run", {}).get("started") for key in ("2", "3")}
    if len(started) > 1:  # figures of two runs are never compared (a shared, noisy machine)
        return [
            [f"DB CPU per firing, drain with 2 nodes ≤ {CPU_TARGET}× the floor's", "n/a", "n/a"]
        ]
    if not (trusted(run) and trusted(floor)) or not floor.get("db_cpu_ms"):
        return [
            [f"DB CPU per firing, drain with 2 nodes ≤ {CPU_TARGET}× the floor's", "n/a", "n/a"]
        ]
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


def section() -> list[str]:
    """The page's lines on the narrower hot row."""
    return ["## A narrower hot row (designed, not built)", "", NARROW_ROW, ""]
