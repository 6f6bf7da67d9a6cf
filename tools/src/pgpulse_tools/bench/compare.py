"""``pgpulse bench --compare-with PYTHON``: this Pulse (after) against another installation
(before, the interpreter ``PYTHON`` and the Pulse it imports), measured in one run.

The machine is shared and its load drifts, so a figure of another run is no baseline. Here
each measured unit — scenario 1's claims, scenario 2's drain with 2 nodes and with 4, scenario
4's steady state, scenario 5's herd — runs ``rounds`` times on each side, the two sides
interleaved and each round's pair in the other order than the round before (after before,
before after, ...; the first unit of a run starts with after, the next with before), on the
same server, each on a freshly populated database, at the newest migration that side knows
(a newer one may stop its nodes: 0023 does). Scenario 1 times
claims through :mod:`pgpulse_tools.bench.claim_probe`, run by each side's interpreter; the
other scenarios start node processes of each side's interpreter
(:class:`~pgpulse_tools.bench.nodes.Runtime`). Scenario 3's before and after come from its
levers (the frozen pre-issue-31 step against the unchanged step, same run:
:func:`lever_metrics`).

Each metric is reported as the median of each side's rounds, the ratio after ÷ before, and
the run's own noise: per side, the largest of its rounds over the smallest. A ratio is beyond
the noise when it lies further from 1 than the larger of the two sides' noise.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row

import pgpulse_tools
from pgpulse_tools.bench import checks, claim, drain, herd, levers, steady
from pgpulse_tools.bench.common import (
    admin,
    db_now,
    drop_db,
    fresh_db,
    load_jobs,
    pct,
    q,
)
from pgpulse_tools.bench.nodes import Runtime
from pgpulse_tools.bench.report_compare import AFTER, BEFORE, metric, order, side_line
from pgpulse_tools.bench.report_compare import number as _num

#: The scenarios measured on both sides by this module (3 compares through its levers).
COMPARED: Final[tuple[str, ...]] = ("1", "2", "4", "5")
#: The least rounds per side (the issue asks for at least three).
MIN_ROUNDS: Final[int] = 3
#: Where the benchmark's modules are: put on the path of both sides' processes, so the
#: before-code's nodes run this benchmark's no-op app and its claim probe.
TOOLS_SRC: Final[str] = str(Path(pgpulse_tools.__file__).resolve().parent.parent)
#: Scenario 2's node counts compared.
DRAIN_NODES: Final[tuple[int, ...]] = (2, 4)
#: Scenario 1's database while one side's claims are timed.
CLAIM_DB: Final[str] = "pgpulse_bench_claim"


def lever_metrics(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Scenario 3's before and after: DB CPU per firing of the step in pgbench, each round of
    the two unchanged databases (after) and of the frozen pre-issue-31 step (before) from its
    levers (``data`` is scenario 3's ``Result.data``; nothing when the levers did not run)."""
    found = data.get("levers") or {}
    after_cells = [cell for name, cell in found.items() if name.startswith("as is")]
    before_cell = found.get(levers.BEFORE_31)
    if not after_cells or before_cell is None:
        return []
    batch = (data.get("burst_cell") or {}).get("batch", "?")
    after = [v for cell in after_cells for v in cell.get("rounds_db_cpu_ms", [cell["db_cpu_ms"]])]
    before = before_cell.get("rounds_db_cpu_ms", [before_cell["db_cpu_ms"]])
    untrusted = sum(1 for cell in [*after_cells, before_cell] if not checks.trusted(cell))
    return [
        metric(
            f"DB CPU ms/firing, the step in pgbench, one client, batch {batch} (scenario 3)",
            "cpu",
            "lower",
            after,
            before,
            untrusted=untrusted,
        )
    ]


# -- the sides ----------------------------------------------------------------------------------

_DESCRIBE = (
    "import importlib.metadata, json, sys, pgpulse, pgpulse_tools.bench.noop_app as app, "
    "pgpulse_tools.bench.claim_probe; from pgpulse.sql import migration_files; "
    "print(json.dumps({'pgpulse': pgpulse.__file__, "
    "'app': app.__file__, 'python': sys.executable, "
    "'version': importlib.metadata.version('pgpulse'), "
    "'schema': migration_files()[-1][0]}))"
)


def runtime(python: str, label: str) -> Runtime:
    """A side: ``python`` with this benchmark's modules first on its path."""
    return Runtime(python=python, env={"PYTHONPATH": TOOLS_SRC}, label=label)


def describe(side: Runtime) -> dict[str, Any]:
    """Where ``side``'s processes import Pulse and the benchmark's node app from, its version
    and the git revision of its source (``unknown`` outside a checkout).

    Raises:
        RuntimeError: the interpreter cannot import Pulse or the benchmark's node app.
    """
    try:
        done = subprocess.run(
            [side.python, "-c", _DESCRIBE],
            capture_output=True,
            text=True,
            env=side.environ(os.environ),
            cwd="/",
            check=False,
        )
    except OSError as exc:
        raise RuntimeError(f"{side.python!r} cannot be run: {exc.strerror}") from exc
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["it exited with an error"])[-1]
        raise RuntimeError(f"{side.python!r} cannot run Pulse's benchmark nodes: {last}")
    try:
        found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as exc:
        raise RuntimeError(f"{side.python!r} is not a Python that describes its Pulse") from exc
    where = Path(found["pgpulse"]).parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        found["revision"] = rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        found["revision"] = "unknown"
    return found


# -- the measured units -------------------------------------------------------------------------


async def claim_round(
    server_dsn: str, scale: float, side: Runtime, samples: int
) -> dict[str, float]:
    """Scenario 1 on one side: ``1,000,000 × scale`` jobs loaded afresh, the empty poll (a claim
    of 10 with nothing due), then claims of each batch of :data:`claim.BATCHES` with the largest
    backlog of scenario 1 due, all from the 64 shards, timed by ``side``'s interpreter.

    Returns:
        The p99 (ms) of each cell: ``empty`` and each batch.
    """
    stored = max(int(1_000_000 * scale), 1000)
    dsn = await fresh_db(server_dsn, CLAIM_DB, schema=side.schema)
    try:
        with admin(dsn) as conn:
            now = db_now(conn)
        load_jobs(
            dsn,
            stored,
            schedule="@every 1h",
            kind="interval",
            base=now + timedelta(days=1),
            modulo=86400,
            step=1.0,
        )
        empty = _probe(side, dsn, [10], samples)["10"]
        due = max(int(claim.DUE_LEVELS[-1] * scale), 1)
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            first_id = q(conn, "first_id")[0]["first_id"]
            q(conn, "make_due", {"due": due, "first_id": first_id})
            conn.execute("VACUUM (ANALYZE) pgpulse_jobs")
        cells = _probe(side, dsn, list(claim.BATCHES), samples)
    finally:
        drop_db(server_dsn, CLAIM_DB)
    return {"empty": pct(empty, 99), **{b: pct(v, 99) for b, v in cells.items()}}


def _probe(side: Runtime, dsn: str, batches: list[int], samples: int) -> dict[str, list[float]]:
    """Run :mod:`pgpulse_tools.bench.claim_probe` with ``side``'s interpreter."""
    done = subprocess.run(
        [
            side.python,
            "-m",
            "pgpulse_tools.bench.claim_probe",
            dsn,
            str(samples),
            *map(str, batches),
        ],
        capture_output=True,
        text=True,
        env=side.environ(os.environ),
        cwd="/",
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"the claim probe of {side.label} failed: {done.stderr[-2000:]}")
    found: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])["ms"]
    return found


class Comparison:
    """One run's before-and-after measurements (see the module's docstring).

    Args:
        server_dsn: the benchmarked server.
        scale: the run's ``--scale``.
        slots: ``--slots`` of every node.
        before_python: the before side's interpreter.
        rounds: rounds per side of each unit (at least :data:`MIN_ROUNDS`).
        echo: where progress lines go.
        claim_samples: timed claims per cell and round of scenario 1.
    """

    def __init__(
        self,
        server_dsn: str,
        *,
        scale: float,
        slots: int,
        before_python: str,
        rounds: int = MIN_ROUNDS,
        echo: Callable[[str], None] = print,
        claim_samples: int = 1000,
    ) -> None:
        self.server_dsn, self.scale, self.slots = server_dsn, scale, slots
        self.rounds, self.echo, self.claim_samples = rounds, echo, claim_samples
        self.sides = {
            AFTER: runtime(sys.executable, AFTER),
            BEFORE: runtime(before_python, BEFORE),
        }
        self.metrics: list[dict[str, Any]] = []
        self.sequence: list[dict[str, Any]] = []
        self.scenarios: list[str] = []
        self.about: dict[str, dict[str, Any]] = {}
        self.units = 0
        self.started = time.perf_counter()

    def check_sides(self) -> None:
        """Learn (and print) which Pulse each side's processes run.

        Raises:
            RuntimeError: a side cannot import Pulse or the benchmark's node app.
        """
        for name, side in self.sides.items():
            self.about[name] = describe(side)
            self.echo(f"compare: {side_line(name, self.about[name])}")
        ours, theirs = self.about[AFTER].get("schema"), self.about[BEFORE].get("schema")
        if (
            isinstance(ours, int) and isinstance(theirs, int) and theirs < ours
        ):  # the before's nodes may refuse the newer schema: theirs only
            self.sides[BEFORE] = dataclasses.replace(self.sides[BEFORE], schema=theirs)
            self.echo(f"compare: the before's databases are migrated to {theirs}, not {ours}")
        if self.about[AFTER]["pgpulse"] == self.about[BEFORE]["pgpulse"]:
            self.echo("compare: both sides import the same Pulse (an A/A run: noise only)")

    async def _rounds(
        self, unit: str, measure: Callable[[Runtime], Awaitable[dict[str, Any]]]
    ) -> dict[str, list[dict[str, Any]]]:
        """Measure ``unit`` on both sides, :func:`order`'s sequence; each side's figures by
        round."""
        found: dict[str, list[dict[str, Any]]] = {AFTER: [], BEFORE: []}
        for number, side in order(self.rounds, self.units):
            started = time.perf_counter()
            figures = await measure(self.sides[side])
            found[side].append(figures)
            self.sequence.append({"unit": unit, "round": number + 1, "side": side})
            shown = ", ".join(
                f"{k} {_num(v)}"
                for k, v in figures.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            )
            if figures.get("untrusted"):
                shown += ", failed a self-check"
            self.echo(
                f"    {unit}, round {number + 1}, {side}: {shown} "
                f"({time.perf_counter() - started:.0f} s)"
            )
        self.units += 1
        return found

    def _add(
        self,
        name: str,
        group: str,
        better: str,
        found: dict[str, list[dict[str, Any]]],
        key: str,
    ) -> None:
        untrusted = sum(1 for side in found.values() for f in side if f.get("untrusted"))
        self.metrics.append(
            metric(
                name,
                group,
                better,
                [f[key] for f in found[AFTER]],
                [f[key] for f in found[BEFORE]],
                untrusted=untrusted,
            )
        )

    async def scenario(self, key: str) -> None:
        """Measure scenario ``key`` (one of :data:`COMPARED`) on both sides."""
        self.scenarios.append(key)
        await {"1": self._claims, "2": self._drains, "4": self._steady, "5": self._herd}[key]()

    async def _claims(self) -> None:
        found = await self._rounds(
            "scenario 1",
            lambda side: claim_round(self.server_dsn, self.scale, side, self.claim_samples),
        )
        due = max(int(claim.DUE_LEVELS[-1] * self.scale), 1)
        self._add("claim p99 ms, empty poll (scenario 1)", "claim", "lower", found, "empty")
        for batch in claim.BATCHES:
            self._add(
                f"claim p99 ms, batch {batch}, {due:,} due (scenario 1)",
                "claim",
                "lower",
                found,
                str(batch),
            )

    async def _drains(self) -> None:
        jobs = drain.jobs_for(self.scale)
        window = drain.window_for(self.scale)
        for count in DRAIN_NODES:

            async def once(side: Runtime, count: int = count) -> dict[str, Any]:
                nonlocal jobs
                figures = await drain.drain_once(
                    self.server_dsn, jobs, count, slots=self.slots, window=window, runtime=side
                )
                if figures["drained"]:  # a draining rate: again, on a backlog that outlasts it
                    jobs = checks.backlog_to_outlast(
                        figures["rate"], window + figures["settle"], 2 * jobs
                    )
                    figures = await drain.drain_once(
                        self.server_dsn, jobs, count, slots=self.slots, window=window, runtime=side
                    )
                checks.judge(figures)
                return {
                    "firings/s": figures["rate"],
                    "DB CPU ms/firing": figures["db_cpu_ms"],
                    "jobs": figures["jobs"],
                    "untrusted": not checks.trusted(figures),
                }

            found = await self._rounds(f"scenario 2, {count} nodes", once)
            self._add(
                f"DB CPU ms/firing, drain, {count} nodes (scenario 2)",
                "cpu",
                "lower",
                found,
                "DB CPU ms/firing",
            )
            self._add(
                f"firings/s, {count} nodes (scenario 2)", "rate", "higher", found, "firings/s"
            )

    async def _steady(self) -> None:
        async def once(side: Runtime) -> dict[str, Any]:
            result = await steady.run(self.server_dsn, self.scale, slots=self.slots, runtime=side)
            row = result.rows[0]
            return {
                "lag p50 ms": result.data["lag"]["p50"],
                "lag p99 ms": result.data["lag"]["p99"],
                "DB CPU %": row[8],
                "missed": row[7],
                "untrusted": bool(row[7]),
            }

        found = await self._rounds("scenario 4", once)
        self._add("lag p50 ms, steady state (scenario 4)", "lag", "lower", found, "lag p50 ms")
        self._add("lag p99 ms, steady state (scenario 4)", "lag", "lower", found, "lag p99 ms")
        self._add("DB CPU %, steady state (scenario 4)", "cpu", "lower", found, "DB CPU %")

    async def _herd(self) -> None:
        async def once(side: Runtime) -> dict[str, Any]:
            result = await herd.run(
                self.server_dsn, self.scale, slots=self.slots, spread=0.0, runtime=side
            )
            first = result.data["passes"][0]
            return {
                "all started after s": result.data["all_started_s"],
                "lag p99 ms": result.data["lag"]["p99"],
                "untrusted": not first["finished"],
            }

        found = await self._rounds("scenario 5", once)
        jobs = herd.jobs_for(self.scale)
        self._add(
            f"herd: all of {jobs:,} started after s (scenario 5)",
            "herd",
            "lower",
            found,
            "all started after s",
        )
        self._add("herd: lag p99 ms (scenario 5)", "herd", "lower", found, "lag p99 ms")

    def add_levers(self, data: dict[str, Any]) -> None:
        """Add scenario 3's before and after (:func:`lever_metrics`) from its result's data."""
        found = lever_metrics(data)
        if found:
            self.scenarios.append("3")
        self.metrics.extend(found)

    def payload(self, started: str) -> dict[str, Any]:
        """What results.json keeps of this comparison (``compare``)."""
        return {
            "started": started,
            "scale": self.scale,
            "rounds": self.rounds,
            "scenarios": sorted(self.scenarios, key=int),
            AFTER: self.about.get(AFTER, {}),
            BEFORE: self.about.get(BEFORE, {}),
            "metrics": self.metrics,
            "sequence": self.sequence,
            "elapsed_s": time.perf_counter() - self.started,
        }
