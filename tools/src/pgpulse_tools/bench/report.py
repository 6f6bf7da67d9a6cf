"""``docs/benchmarks.md`` and its PNG plots, regenerated from ``docs/benchmarks/results.json``.

The page is generated: tables, the issue's targets with what was measured, the claim's plans and
the ceiling's pgbench script all come from the JSON the last ``pgpulse bench`` run wrote.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tabulate import tabulate

from pgpulse_tools.bench import report_compare, report_cost, report_targets
from pgpulse_tools.bench.report_targets import floor_rows, targets
from pgpulse_tools.bench.report_targets import fmt as _fmt

#: Plot files, relative to the docs folder.
PLOTS = {
    "claim": "benchmarks/claim_latency.png",
    "drain": "benchmarks/throughput.png",
    "lag": "benchmarks/lag.png",
}

HOW_TO_RUN = """\
```sh
./scripts/bench                    # all scenarios at --scale 0.1 (a few minutes)
./scripts/bench --scale 1          # the issue's sizes (1,000,000 jobs; long)
./scripts/bench --only 2,3         # some scenarios; the others keep their last figures here
./scripts/bench --report-only      # rewrite this page and the plots from results.json
./scripts/bench --scale 10 --only 8   # poll and claim at 1 M and 10 M stored (~5 GB of disk)
./scripts/bench --scale 0.05 --only 9 # 1 to 32 nodes (~7 min; 32 nodes need max_connections >= 170)
./scripts/bench --only 1,2,3,4,5 --compare-with ../before/.venv/bin/python   # before and after
```

`--compare-with PYTHON` names the interpreter of a second installation of Pulse (say, the last
release, installed editable from its own checkout); its nodes run this benchmark's no-op app and
its claims are timed by it, on the schema this Pulse migrates. Scenarios 1, 2, 4 and 5 then run
on both sides in interleaved rounds instead of as usual (their sections keep their earlier
figures), and the section "Before and after, one run" compares them.

`scripts/bench` creates `.venv-bench` (Pulse with the `bench` extra: the peers, matplotlib,
psutil, py-spy, pyinstrument — never Pulse dependencies) and runs `pgpulse bench` with the
global `--database-url` (or `PGPULSE_DATABASE_URL`; unset, the embedded server). The benchmark
creates and drops its own `pgpulse_bench_*` databases on that server. `pgbench` (Debian:
`postgresql-client`) is needed for the raw ceiling. Benchmarks print figures; they are not
tests."""


METHOD = """\
* Each scenario uses its own fresh database (`pgpulse_bench_*`) on the benchmarked server. Jobs
  are bulk-loaded with one `INSERT ... SELECT` per 100,000 rows, stored exactly as
  `upsert_jobs` stores them, then `VACUUM ANALYZE`.
* Nodes are real processes, as a user runs them:
  `python -m pgpulse node run --app pgpulse_tools.bench.noop_app:app --slots N` (an async no-op
  handler that can note its start instant). Measurement windows open once the nodes have split
  the 64 shards.
* A **firing** is a run whose fenced completion and `pgpulse_runs` history row have committed.
* **DB CPU** is the CPU time of this database's backends plus the WAL writer, checkpointer and
  background writer, sampled every 0.2 s from `/proc` (other databases on the server, e.g. other
  test suites, are not counted; a backend that lives less than 0.2 s is partly missed).
* **Lag** is the handler's start minus the occurrence's `scheduled_for` (the database and the
  nodes share this machine's clock); **claim lag** is the claim statement's `now()` minus
  `scheduled_for`.
* The **raw ceiling** drives Pulse's own claim step (`finish_jobs`, `claim_jobs`,
  `next_job_due`, generated from `queries.sql` at run time) with `pgbench -M prepared` and several
  clients, no Python. Each (batch, clients) cell runs briefly; the best one runs again for as long
  as the drain measures each node count, and that sustained rate is the ceiling (a short run from
  a fresh copy sees no checkpoint and few dead rows, and overstates it).
* The **floor** (`tools/src/pgpulse_tools/bench/floor.sql`) is the least SQL any PostgreSQL
  scheduler runs:
  a fenced claim, a fenced completion and a history row, on a narrow table with one partial
  index and a history table with one B-tree. Scenario 3 drives its step with pgbench like the
  ceiling's best cell (same batch, clients and seconds); scenario 1 times its claims at each
  backlog Pulse's claims are timed at (same batches, as many claims). It says which targets no
  design could meet on this machine, and the claim target is relative to it.
* **Peers** run from their scripts in `tools/peers/` (one docstring each says how the peer
  expresses the scenario and where it cannot), each on a fresh database of the same server,
  loaded and then `VACUUM ANALYZE`d as Pulse's jobs are.

To see where a node's time goes, run one against a backlog and sample it (both tools are in the
`bench` extra):

```sh
.venv-bench/bin/py-spy record -p <node pid> -d 15 -r 200 -f speedscope -o node.json
.venv-bench/bin/pyinstrument -r html -o node.html -m pgpulse --database-url ... node run \\
    --app pgpulse_tools.bench.noop_app:app --slots 50      # stop it with Ctrl-C after a while
```"""


def _table(headers: list[str], rows: Iterable[list[Any]]) -> str:
    return tabulate(
        [[_fmt(v) for v in row] for row in rows], headers, tablefmt="github", disable_numparse=True
    )


def _by_scenario(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["scenario"]: r for r in results}


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (imported late: an optional extra)."""
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def _plot_claims(result: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = [r for r in result["rows"] if isinstance(r[2], int) and r[1] == 64]
    least = report_targets.floor_claims_by_due(result["data"])
    factor = report_targets.CLAIM_FACTOR
    for batch in sorted({r[2] for r in rows}):
        cells = sorted((r[0], r[4]) for r in rows if r[2] == batch)
        (line,) = ax.plot(
            [c[0] for c in cells], [c[1] for c in cells], marker="o", label=f"claim of {batch}, p99"
        )
        limits = sorted((due, factor * p99s[batch]) for due, p99s in least.items() if batch in p99s)
        if limits:  # the target is the floor's p99 of the same batch and backlog, times factor
            ax.plot(
                [c[0] for c in limits],
                [c[1] for c in limits],
                color=line.get_color(),
                linestyle="--",
                marker="x",
                label=f"target: {factor:g}× the floor's p99, claim of {batch}",
            )
    empty = [r[4] for r in result["rows"] if r[2] == "claim_due (empty poll)"]
    if empty:
        ax.axhline(empty[0], color="grey", linestyle=":", label="empty poll, p99")
    ax.set_xscale("log")
    ax.set_xlabel("jobs due")
    ax.set_ylabel("ms")
    ax.set_title(f"Claim latency, {result['data']['stored']:,} stored, 64 shards")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_drain(results: dict[str, dict[str, Any]], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [
        f"Pulse, {r['nodes']} node{'s' if r['nodes'] > 1 else ''}"
        for r in results["2"]["data"]["runs"]
    ]
    values = [r["rate"] for r in results["2"]["data"]["runs"]]
    for run in results.get("7", {}).get("data", {}).get("runs", []):
        if run["mode"] == "drain":
            labels.append(f"{run['peer'].split()[0]}, {run['processes']} proc")
            values.append(run["rate"])
    colors = ["tab:blue" if label.startswith("Pulse") else "tab:orange" for label in labels]
    ax.barh(labels, values, color=colors)
    best = results.get("3", {}).get("data", {}).get("best")
    share = report_targets.CEILING_SHARE
    if best:  # None when the sustained ceiling failed its checks
        ax.axvline(best, color="black", linestyle="--", label=f"raw SQL ceiling {best:,.0f}")
        ax.axvline(share * best, color="red", linestyle=":", label=f"{share:.0%} of the ceiling")
    peer = report_targets.best_peer(results)
    if not isinstance(peer, str):
        factor = report_targets.PEER_FACTOR
        ax.axvline(factor * peer[1], color="purple", linestyle=":", label=f"{factor:g}× {peer[0]}")
    if best or not isinstance(peer, str):
        ax.legend(fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("firings per second (no-op handler, history written)")
    ax.set_title("Backlog drain")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_lags(
    series: list[tuple[str, list[float]]], path: Path, previous: dict[str, Any] | None
) -> None:
    """The lag CDFs of ``series`` (name, lags in ms); with scenario 4's ``previous``
    measurement, the p99 the steady state may reach (:data:`report_targets.LAG_NOISE` × it)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, lags in series:
        ordered = sorted(lags)
        ax.plot(
            [max(v, 0.01) for v in ordered],
            [i / len(ordered) for i in range(1, len(ordered) + 1)],
            label=name,
        )
    if previous and previous.get("p99"):
        limit = report_targets.LAG_NOISE * previous["p99"]
        ax.axvline(
            limit,
            color="red",
            linestyle="--",
            label=f"target: steady p99 ≤ {limit:,.3g} ms "
            f"({report_targets.LAG_NOISE:g}× rev {previous['revision']}'s)",
        )
    ax.axhline(0.99, color="grey", linestyle=":")
    ax.set_xscale("log")
    ax.set_xlabel("lag: handler start minus scheduled_for (ms)")
    ax.set_ylabel("fraction of runs")
    ax.set_title("Firing lag (cumulative)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(results: dict[str, dict[str, Any]], docs: Path) -> list[str]:
    """Write the PNG plots that the results allow; return their paths relative to ``docs``."""
    written: list[str] = []
    if "1" in results:
        _plot_claims(results["1"], docs / PLOTS["claim"])
        written.append(PLOTS["claim"])
    if "2" in results:
        _plot_drain(results, docs / PLOTS["drain"])
        written.append(PLOTS["drain"])
    series: list[tuple[str, list[float]]] = []
    if "4" in results:
        series.append(("Pulse, steady state", results["4"]["data"].get("lags_ms", [])))
    if "5" in results:
        series.append(("Pulse, thundering herd", results["5"]["data"].get("lags_ms", [])))
    series.extend(
        (f"{run['peer']}, steady state", run.get("lags_ms", []))
        for run in results.get("7", {}).get("data", {}).get("runs", [])
        if run["mode"] == "steady"
    )
    series = [(name, lags) for name, lags in series if lags]
    if series:
        _plot_lags(
            series, docs / PLOTS["lag"], results.get("4", {}).get("data", {}).get("previous")
        )
        written.append(PLOTS["lag"])
    return written


def _scenario_section(result: dict[str, Any], plots: dict[str, str]) -> list[str]:
    out = [f"## Scenario {result['scenario']}: {result['title']}", ""]
    run = result["data"].get("run")
    if run:
        out += [
            f"*Measured {run['started']} at scale {run['scale']:g}, revision "
            f"`{run['revision']}`; {result['data'].get('elapsed_s', math.nan):.0f} s.*",
            "",
        ]
    out += [_table(result["headers"], result["rows"]), ""]
    out += [f"* {note}" for note in result["notes"]]
    for extra in result.get("tables", []):
        out += ["", f"### {extra['title']}", "", _table(extra["headers"], extra["rows"]), ""]
        out += [f"* {note}" for note in extra["notes"]]
    plot_key = {"1": "claim", "2": "drain", "4": "lag"}.get(result["scenario"])
    if plot_key and plot_key in plots:
        out += ["", f"![{plot_key}]({plots[plot_key]})"]
    out.append("")
    return out


def render(payload: dict[str, Any], plots: dict[str, str]) -> str:
    """The whole page as Markdown."""
    meta = payload["meta"]
    results = _by_scenario(payload["results"])
    lines = [
        "# Benchmarks",
        "",
        "Generated by `pgpulse bench` — do not edit by hand; rerun it (see below). Every "
        "figure is from this machine; the database, the nodes and the benchmark share it.",
        "",
        "## How to run",
        "",
        HOW_TO_RUN,
        "",
        "## Method",
        "",
        METHOD,
        "",
        "## Machine and server",
        "",
    ]
    machine = meta.get("machine", {})
    lines += [
        f"* {machine.get('cpus')} CPUs, {machine.get('memory_gb')} GB, "
        f"{machine.get('platform')}, Python {machine.get('python')}",
        f"* last run {meta.get('started')} → {meta.get('finished')}, scale "
        f"{meta.get('scale')}, node slots {meta.get('slots')}, revision "
        f"`{meta.get('revision')}`",
        f"* other work on the machine kept {meta.get('background_busy_pct', math.nan):.0f}%"
        " of its cores busy just before the run (a shared machine adds noise: compare "
        "figures within one run)",
        "* server: " + ", ".join(f"{k} = {v}" for k, v in meta.get("server", {}).items()),
        "",
        "## The issue's targets",
        "",
        "Issue 22's targets. Each is a ratio of two figures measured in the same run (the "
        "machine is shared and noisy: an absolute figure of one run says little about the "
        "next): throughput against the sustained ceiling and the best peer, claim p99 against "
        "the floor's at the same backlog and batch, poll and claim at 10 M stored against "
        "1 M, DB CPU per firing against the floor's. The steady-state lag alone is compared "
        "with the previous run's, with an allowance for that noise. A figure that failed its "
        "self-check is shown n/a, with the reason, and used in no ratio.",
        "",
        _table(["target", "measured", "met"], targets(results)),
        "",
    ]
    lines += report_compare.section(payload.get("compare"))
    floors = floor_rows(results)
    if floors:
        lines += [
            "### What this machine allows: the floor",
            "",
            "The least SQL any PostgreSQL scheduler runs per firing (`bench/floor.sql`: one "
            "narrow table, one partial index, a history table with one B-tree; a fenced "
            "claim, a fenced completion and its history row; no definitions, shards, "
            "retries or sweeper index), measured on the same server in the same run. A "
            "target the floor misses is out of reach of any design on this machine. The "
            "claim target is relative to the floor (its p99 at the same backlog and batch), "
            "so it is judged in the table above, each row naming the floor's figure.",
            "",
            _table(["target", "Pulse", "the floor", "floor meets it"], floors),
            "",
        ]
    for key in sorted(results):
        lines += _scenario_section(results[key], plots)
        if key == "1":
            plans = results[key]["data"].get("plans", {})
            for name in ("custom", "generic"):
                if name in plans:
                    due = max(results[key]["data"].get("due_levels", [0]))
                    lines += [
                        f"### `EXPLAIN (ANALYZE, BUFFERS)` of the claim of 100 at "
                        f"{due:,} due, 64 shards, {name} plan",
                        "",
                        "```",
                        plans[name],
                        "```",
                        "",
                    ]
        if key == "3" and results[key]["data"].get("script"):
            lines += [
                "### The ceiling's pgbench script (generated from `queries.sql`)",
                "",
                "```sql",
                results[key]["data"]["script"].rstrip(),
                "```",
                "",
            ]
        if key == "5" and "lag" in plots:
            lines += [f"![lag]({plots['lag']})", ""]
    if "3" in results:
        lines += report_cost.section(results)
    return "\n".join(lines).rstrip() + "\n"


def write_report(json_path: Path, docs: Path) -> Path:
    """Regenerate ``<docs>/benchmarks.md`` and the plots from ``json_path``; return the page."""
    payload = json.loads(json_path.read_text())
    (docs / "benchmarks").mkdir(parents=True, exist_ok=True)
    written = plot(_by_scenario(payload["results"]), docs)
    plots = {key: path for key, path in PLOTS.items() if path in written}
    page = docs / "benchmarks.md"
    page.write_text(render(payload, plots))
    return page
