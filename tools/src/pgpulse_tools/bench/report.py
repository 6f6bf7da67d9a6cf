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

from pgpulse_tools.bench import report_cost
from pgpulse_tools.bench.stored import target_rows as stored_targets

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
```

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
* The **raw ceiling** drives Pulse's own `finish_and_claim` statement (generated from
  `queries.sql` at run time) with `pgbench -M prepared` and several clients, no Python. Each
  (batch, clients) cell runs briefly; the best one runs again for as long as the drain measures
  each node count, and that sustained rate is the ceiling (a short run from a fresh copy sees no
  checkpoint and few dead rows, and overstates it).
* The **floor** (`tools/src/pgpulse_tools/bench/floor.sql`) is the least SQL any PostgreSQL
  scheduler runs:
  a fenced claim, a fenced completion and a history row, on a narrow table with one partial
  index and a history table with one B-tree. Scenario 3 drives its step with pgbench like the
  ceiling's best cell (same batch, clients and seconds); scenario 1 times its claims at the
  largest backlog. It says which targets no design could meet on this machine.
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


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "" if value is None else str(value)


def _table(headers: list[str], rows: Iterable[list[Any]]) -> str:
    return tabulate(
        [[_fmt(v) for v in row] for row in rows], headers, tablefmt="github", disable_numparse=True
    )


def _by_scenario(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["scenario"]: r for r in results}


def _worst_claim_p99(rows: list[list[Any]], batch: int) -> float:
    """The highest p99 (ms) of scenario 1's claims of ``batch`` over every backlog and shard
    count (NaN when none was measured)."""
    return max((r[4] for r in rows if r[2] == batch), default=math.nan)


def _stored_rows(results: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """Scenario 8's targets: p99 at the larger size over p99 at the smaller, per cell."""
    if "8" not in results:
        return []
    return [
        [target, f"{ratio:.2f}×", "yes" if met else "**no**"]
        for target, ratio, met in stored_targets(results["8"]["data"])
    ]


def targets(results: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """The issue's figures to reach, with what was measured and whether it was met."""
    rows: list[list[Any]] = []

    def add(target: str, measured: float, ok: bool, unit: str = "") -> None:
        rows.append(
            [
                target,
                "n/a" if math.isnan(measured) else f"{measured:,.3g}{unit}",
                "n/a" if math.isnan(measured) else ("yes" if ok else "**no**"),
            ]
        )

    if "2" in results and "3" in results and results["3"]["data"].get("best"):
        # "with 2-4 nodes": each of those node counts, not the best of them
        for run in results["2"]["data"]["runs"]:
            if 2 <= run["nodes"] <= 4:
                share = run.get("ceiling_share", math.nan)
                add(
                    f"throughput ≥ 70% of the raw ceiling, {run['nodes']} nodes",
                    share * 100,
                    share >= 0.7,
                    "%",
                )
    if "1" in results:
        rows1 = results["1"]["rows"]
        for batch in sorted({r[2] for r in rows1 if isinstance(r[2], int)}):
            worst = _worst_claim_p99(rows1, batch)
            add(
                f"claim of {batch}: p99 < 2 ms at every backlog (worst cell)",
                worst,
                worst < 2,
                " ms",
            )
        empty = [r[4] for r in rows1 if r[2] == "claim_due (empty poll)"]
        poll = empty[0] if empty else math.nan
        add(
            f"empty poll p99 < 1 ms with {results['1']['data']['stored']:,} stored",
            poll,
            poll < 1,
            " ms",
        )
    if "4" in results:
        p99 = results["4"]["data"]["lag"]["p99"]
        add("steady-state lag p99 < 50 ms", p99, p99 < 50, " ms")
    if "5" in results:
        data = results["5"]["data"]
        bound = data.get("bound_s", math.nan)
        add(
            f"herd fully started within jobs/throughput + 1 s ({_fmt(bound)} s)",
            data["all_started_s"],
            data["all_started_s"] <= bound,
            " s",
        )
    if "6" in results:
        data = results["6"]["data"]
        add(
            f"idle: ≤ {data['budget']:.2f} statements/s per node (poll + heartbeat)",
            data["statements_per_node_s"],
            data["statements_per_node_s"] <= data["budget"],
        )
        add("idle: < 2% of a core per node", data["node_cpu_pct"], data["node_cpu_pct"] < 2, "%")
        added = data.get("alerting_added", math.nan)
        add("idle: alerting adds ≤ 10 % statements per node", added * 100, added <= 0.10, " %")
    rows.extend(_stored_rows(results))
    rows.extend(report_cost.cost_targets(results))
    if "7" in results:
        for name, ratio in results["7"]["data"].get("ratios", {}).items():
            add(
                f"≥ 3× the firings/s of {name}",
                ratio["throughput_ratio"],
                ratio["throughput_ratio"] >= 3,
                "×",
            )
            peer_p99 = ratio["peer_p99"]
            add(
                f"lower lag p99 than {name} ("
                + (
                    "none of its steady-state runs started"
                    if peer_p99 == math.inf
                    else f"{_fmt(peer_p99)} ms"
                )
                + ")",
                ratio["pulse_p99"],
                ratio["pulse_p99"] < peer_p99,
                " ms",
            )
    return rows


def floor_rows(results: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """The targets that the floor (``bench/floor.sql``: the least SQL any scheduler runs per
    firing, measured in the same run) puts out of this machine's reach, or not: ``[target,
    Pulse, the floor, whether the floor itself meets it]``.

    A throughput target asks for a rate; the floor's row gives the rate the floor reached with
    no Python at all, and the cores its database work alone takes at the asked rate (DB CPU per
    firing × rate). A latency target compares the floor's claim p99 at the largest backlog.
    """
    rows: list[list[Any]] = []
    least = results.get("1", {}).get("data", {}).get("floor")
    if least:
        for batch, cell in sorted(least["claims"].items(), key=lambda kv: int(kv[0])):
            pulse = _worst_claim_p99(results["1"]["rows"], int(batch))
            rows.append(
                [
                    f"claim of {batch}: p99 < 2 ms",
                    f"{_fmt(pulse)} ms (worst cell)",
                    f"{_fmt(cell['p99'])} ms ({least['due']:,} due)",
                    "yes" if cell["p99"] < 2 else "**no**",
                ]
            )
    step = results.get("3", {}).get("data", {}).get("floor")
    ratios = results.get("7", {}).get("data", {}).get("ratios", {})
    if step and ratios:
        name, ratio = max(ratios.items(), key=lambda kv: kv[1]["peer_rate"])
        asked = 3 * ratio["peer_rate"]
        cores = asked * step["db_cpu_ms"] / 1000
        rows.append(
            [
                f"≥ 3× the firings/s of {name}: {_fmt(asked)}/s",
                f"{_fmt(ratio['pulse_rate'])}/s",
                f"{_fmt(step['rate'])}/s with no Python; its database alone would need "
                f"{cores:.2f} cores at {_fmt(asked)}/s",
                "yes" if step["rate"] >= asked else "**no**",
            ]
        )
    return rows


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (imported late: an optional extra)."""
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def _plot_claims(result: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = [r for r in result["rows"] if isinstance(r[2], int) and r[1] == 64]
    for batch in sorted({r[2] for r in rows}):
        cells = sorted((r[0], r[4]) for r in rows if r[2] == batch)
        ax.plot(
            [c[0] for c in cells], [c[1] for c in cells], marker="o", label=f"claim of {batch}, p99"
        )
    empty = [r[4] for r in result["rows"] if r[2] == "claim_due (empty poll)"]
    if empty:
        ax.axhline(empty[0], color="grey", linestyle=":", label="empty poll, p99")
    ax.axhline(2.0, color="red", linestyle="--", label="target: 2 ms")
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
    if best:
        ax.axvline(best, color="black", linestyle="--", label=f"raw SQL ceiling {best:,.0f}")
        ax.axvline(0.7 * best, color="red", linestyle=":", label="70% of the ceiling")
        ax.legend(fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("firings per second (no-op handler, history written)")
    ax.set_title("Backlog drain")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_lags(series: list[tuple[str, list[float]]], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, lags in series:
        ordered = sorted(lags)
        ax.plot(
            [max(v, 0.01) for v in ordered],
            [i / len(ordered) for i in range(1, len(ordered) + 1)],
            label=name,
        )
    ax.axvline(50, color="red", linestyle="--", label="target p99: 50 ms")
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
        _plot_lags(series, docs / PLOTS["lag"])
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
        _table(["target", "measured", "met"], targets(results)),
        "",
    ]
    floors = floor_rows(results)
    if floors:
        lines += [
            "### What this machine allows: the floor",
            "",
            "The least SQL any PostgreSQL scheduler runs per firing (`bench/floor.sql`: one "
            "narrow table, one partial index, a history table with one B-tree; a fenced "
            "claim, a fenced completion and its history row; no definitions, shards, "
            "retries or sweeper index), measured on the same server in the same run. A "
            "target the floor misses is out of reach of any design on this machine.",
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
