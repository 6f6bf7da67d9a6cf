"""``pgpulse bench``: run the scenarios in one go, print their tables, write JSON, plots, docs.

Scenarios (the issue's numbering): 1 claim latency, 2 backlog drain, 3 raw SQL ceiling,
4 steady state, 5 thundering herd, 6 idle cost, 7 peers, 8 latency against jobs stored,
9 alert latency.
10 scale-out (1 to 32 node processes: throughput, idle cost, lag, rebalancing, shard shares),
11 the history partitioned by day against DELETE,
12 occurrences sent per second through the celery handler to Redis beside the no-op's (2 nodes).
Cross-scenario figures — Pulse's throughput as a share of the ceiling, the herd's bound,
Pulse against each peer — are added once every scenario asked for has run, then
``<out>/benchmarks.md`` is regenerated from the JSON.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import platform
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

from pgpulse_tools.bench import (
    alerts,
    ceiling,
    celery_send,
    claim,
    compare,
    drain,
    herd,
    history,
    idle,
    levers,
    peers,
    report_compare,
    scaleout,
    steady,
    stored,
)
from pgpulse_tools.bench.checks import trusted
from pgpulse_tools.bench.common import (
    Result,
    drop_backlogs,
    machine_busy_seconds,
    server_settings,
)
from pgpulse_tools.bench.report import write_report

ALL = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12")

Scenario = Callable[[str, float, int], Awaitable[Result]]

SCENARIOS: dict[str, Scenario] = {
    "1": lambda dsn, scale, slots: claim.run(dsn, scale),
    "2": lambda dsn, scale, slots: drain.run(dsn, scale, slots=slots),
    "3": lambda dsn, scale, slots: _ceiling_and_levers(dsn, scale, slots),
    "4": lambda dsn, scale, slots: steady.run(dsn, scale, slots=slots),
    "5": lambda dsn, scale, slots: herd.run(dsn, scale, slots=slots),
    "6": lambda dsn, scale, slots: idle.run(dsn, scale, slots=slots),
    "7": lambda dsn, scale, slots: peers.run(dsn, scale),
    "8": lambda dsn, scale, slots: stored.run(dsn, scale),
    "9": lambda dsn, scale, slots: alerts.run(dsn, scale),
    "10": lambda dsn, scale, slots: scaleout.run(dsn, scale),
    "11": lambda dsn, scale, slots: history.run(dsn, scale),
    "12": lambda dsn, scale, slots: celery_send.run(dsn, scale, slots=slots),
}


async def _ceiling_and_levers(dsn: str, scale: float, slots: int) -> Result:
    """Scenario 3: the ceiling and the floor, then the levers on the ceiling's best cell."""
    return await levers.run(dsn, await ceiling.run(dsn, scale, batches=(1, slots)))


def background_busy(seconds: float = 2.0) -> float:
    """Percent of all cores busy over ``seconds`` before the benchmark starts (other work)."""
    before = machine_busy_seconds()
    time.sleep(seconds)
    return (machine_busy_seconds() - before) / seconds / (psutil.cpu_count() or 1) * 100


def git_revision() -> str:
    """``<commit>`` (``+dirty`` when the tree has changes), or ``unknown``."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


CEILING_SHARE = "÷ ceiling"
#: Notes that cross_figures writes (removed before it writes them again).
_DERIVED_NOTES = ("bound = ", "Pulse vs ")


def same_run(a: Result, b: Result) -> bool:
    """Whether two results were measured in one run (the machine's load differs between runs,
    so a ratio of figures from two runs says nothing: the issue's "same run" rule)."""
    return bool(a.data.get("run", {}).get("started") == b.data.get("run", {}).get("started"))


def cross_figures(results: dict[str, Result]) -> None:
    """Add the figures that need two scenarios — ceiling share (2 with 3), the herd's bound
    (5 with 2), Pulse's ratio to each peer (7 with 2 and 4) — replacing earlier ones, so it can
    run again over results merged from several runs. Two scenarios of different runs give no
    ratio (n/a)."""
    for result in results.values():
        result.notes = [n for n in result.notes if not n.startswith(_DERIVED_NOTES)]

    def along(key: str, other: str) -> Result | None:
        """Scenario ``other``'s result if it was measured in the same run as ``key``'s."""
        found = results.get(other)
        return found if found is not None and same_run(results[key], found) else None

    third = along("2", "3") if "2" in results else None
    best = third.data.get("best") if third is not None else None
    if "2" in results:
        drain_result = results["2"]
        if CEILING_SHARE in drain_result.headers:
            column = drain_result.headers.index(CEILING_SHARE)
            drain_result.headers.pop(column)
            for row in drain_result.rows:
                row.pop(column)
        drain_result.headers.append(CEILING_SHARE)
        for row, run in zip(drain_result.rows, drain_result.data["runs"], strict=True):
            usable = best and trusted(run)
            run["ceiling_share"] = run["rate"] / best if usable else math.nan
            row.append(f"{run['ceiling_share']:.0%}" if usable else "n/a")
    if "5" in results and along("5", "2") is not None:
        herd_result = results["5"]
        rates = {run["nodes"]: run["rate"] for run in results["2"].data["runs"] if trusted(run)}
        rate = rates.get(herd_result.data["nodes"])
        if rate:
            bound = herd_result.data["jobs"] / rate + 1
            herd_result.data["bound_s"] = bound
            herd_result.rows[0][1] = bound
            herd_result.notes.append(
                f"bound = {herd_result.data['jobs']:,} jobs / "
                f"{rate:,.0f} firings/s (scenario 2, "
                f"{herd_result.data['nodes']} nodes) + 1 s"
            )
    if "7" in results:
        peers.add_pulse_ratios(results["7"], along("7", "2"), along("7", "4"))


def load_results(path: Path) -> dict[str, Result]:
    """The results of an earlier run's JSON, by scenario (empty if there is none)."""
    if not path.exists():
        return {}
    return {r["scenario"]: Result(**r) for r in json.loads(path.read_text())["results"]}


def load_comparison(path: Path) -> dict[str, Any] | None:
    """The before-and-after comparison of an earlier run's JSON (``None`` if it has none)."""
    if not path.exists():
        return None
    found: dict[str, Any] | None = json.loads(path.read_text()).get("compare")
    return found


def save_results(
    path: Path,
    results: dict[str, Result],
    meta: dict[str, Any],
    comparison: dict[str, Any] | None = None,
) -> None:
    """Write every result (this run's and the kept earlier ones), the run's metadata and the
    latest before-and-after comparison (:mod:`pgpulse_tools.bench.compare`), if any."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "meta": meta,
        "results": [results[key].to_json() for key in sorted(results)],
    }
    if comparison:
        payload["compare"] = comparison
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")


def report_only(out: Path = Path("docs")) -> Path:
    """Recompute the cross-scenario figures of ``<out>/benchmarks/results.json`` and rewrite
    ``<out>/benchmarks.md`` and the plots from it.

    Raises:
        FileNotFoundError: no results yet.
    """
    path = out / "benchmarks" / "results.json"
    meta = json.loads(path.read_text())["meta"]
    results = load_results(path)
    cross_figures(results)
    save_results(path, results, meta, load_comparison(path))
    return write_report(path, out)


async def run_bench(
    server_dsn: str,
    *,
    scale: float,
    only: tuple[str, ...] = ALL,
    slots: int = 50,
    out: Path = Path("docs"),
    echo: Callable[[str], None] = print,
    compare_with: str | None = None,
    compare_rounds: int = compare.MIN_ROUNDS,
) -> list[Result]:
    """Run the scenarios in ``only`` against the server of ``server_dsn``, print each table,
    then write ``<out>/benchmarks/results.json``, the PNG plots and ``<out>/benchmarks.md``.

    The scenarios not run keep their earlier figures; a scenario-4 result keeps the lag p99 of
    the one it replaces (:func:`pgpulse_tools.bench.steady.carry_previous`).

    Args:
        server_dsn: DSN of the benchmarked server; the benchmark creates and drops its own
            ``pgpulse_bench_*`` databases there.
        scale: fraction of the issue's sizes (1 = 1,000,000 jobs stored).
        only: scenario numbers to run.
        slots: ``--slots`` of every Pulse node (and the ceiling's claim batch).
        out: the docs folder.
        echo: where progress lines go.
        compare_with: the interpreter of another installation of Pulse (the "before"): then
            scenarios 1, 2, 4 and 5 of ``only`` are measured on both, interleaved
            (:mod:`pgpulse_tools.bench.compare`), instead of as usual (their earlier figures
            stay), and scenario 3 adds its levers' before and after to the comparison.
        compare_rounds: rounds per side of each compared unit.
    """
    meta: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "scale": scale,
        "slots": slots,
        "scenarios": list(only),
        "revision": git_revision(),
        "machine": {
            "cpus": psutil.cpu_count(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "background_busy_pct": background_busy(),
        "server": server_settings(server_dsn),
    }
    echo(
        f"pgpulse bench: scale {scale:g}, scenarios {','.join(only)}, revision "
        f"{meta['revision']}; other work kept {meta['background_busy_pct']:.0f}% of the "
        f"machine's {meta['machine']['cpus']} cores busy just before"
    )
    results: dict[str, Result] = {}
    comparison = None
    if compare_with:
        comparison = compare.Comparison(
            server_dsn,
            scale=scale,
            slots=slots,
            before_python=compare_with,
            rounds=compare_rounds,
            echo=echo,
        )
        comparison.check_sides()
    try:
        for key in only:
            started = time.perf_counter()
            if comparison is not None and key in compare.COMPARED:
                echo(f"... scenario {key}, before and after ({compare_rounds} rounds each)")
                await comparison.scenario(key)
                continue
            echo(f"... scenario {key}")
            result = await SCENARIOS[key](server_dsn, scale, slots)
            result.data["elapsed_s"] = time.perf_counter() - started
            result.data["run"] = {
                "started": meta["started"],
                "scale": scale,
                "revision": meta["revision"],
            }
            results[key] = result
            result.print()
            if comparison is not None and key == "3":
                comparison.add_levers(result.data)
    finally:
        drop_backlogs(server_dsn)
    json_path = out / "benchmarks" / "results.json"
    earlier = load_results(json_path)
    if "4" in results:  # its target compares with the measurement it replaces
        steady.carry_previous(results["4"], earlier.get("4"))
    combined = {**earlier, **results}  # scenarios not run keep their figures
    cross_figures(combined)
    for key in ("2", "5", "7"):
        if key in results:
            results[key].print()  # again, with the figures that need other scenarios
    meta["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    compared = comparison.payload(meta["started"]) if comparison is not None else None
    if compared is not None:
        report_compare.print_table(compared)
    save_results(json_path, combined, meta, compared or load_comparison(json_path))
    doc = write_report(json_path, out)
    echo(f"wrote {json_path} and {doc}")
    return [results[key] for key in only if key in results]
