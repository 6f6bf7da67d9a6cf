"""Scenario 7: the peers — APScheduler 4, Procrastinate, PgQueuer, pg_cron — in the same run.

Each peer is driven by its script in ``tools/peers/`` (run with this interpreter, so from
``.venv-bench`` where the ``bench`` extra installs them; they are never Pulse dependencies). For
every peer: the drain (scenario 2's equivalent) with 1 and 2 processes on ``1,000,000 × scale``
due jobs, and the steady state (scenario 4's equivalent) with 2 processes and
``100,000 × scale`` jobs every 60 s. Each run gets a fresh database. Each script's docstring says
how the peer expresses the scenario and where it cannot. pg_cron runs on a private server of the
benchmark's own (it needs ``shared_preload_libraries``): :mod:`pgpulse_tools.bench.pgcron`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import conninfo

import pgpulse_tools
from pgpulse_tools.bench import drain, pgcron, steady
from pgpulse_tools.bench.checks import trusted
from pgpulse_tools.bench.common import Result, drop_db, fresh_db
from pgpulse_tools.bench.private_pg import ClusterUnavailable

DB_NAME = "pgpulse_bench_peer"
#: script file -> module that must be importable to run it
PEERS = {
    "apscheduler_peer.py": "apscheduler",
    "procrastinate_peer.py": "procrastinate",
    "pgqueuer_peer.py": "pgqueuer",
}
DRAIN_PROCESSES = (1, 2)
STEADY_PROCESSES = 2


def peers_folder() -> Path:
    """``tools/peers`` of the source tree pgpulse-tools is installed from (editable install)."""
    return Path(pgpulse_tools.__file__).resolve().parents[2] / "peers"


def as_url(dsn: str) -> str:
    """``dsn`` (URI or ``key=value``) as a ``postgresql://`` URI: SQLAlchemy and asyncpg, which
    the peers use, take only URIs."""
    params = conninfo.conninfo_to_dict(dsn)
    auth = quote(str(params.get("user", "")), safe="")
    if params.get("password"):
        auth += ":" + quote(str(params["password"]), safe="")
    host = str(params.get("host", "localhost"))
    query = ""
    if host.startswith("/"):  # a Unix socket folder
        query, host = f"?host={quote(host, safe='')}", ""
    port = f":{params['port']}" if params.get("port") and host else ""
    at = "@" if auth else ""
    return f"postgresql://{auth}{at}{host}{port}/{params.get('dbname', '')}{query}"


async def _empty_db(server_dsn: str) -> str:
    """A fresh empty database (no Pulse schema) for one peer run; returns its URI."""
    return as_url(await fresh_db(server_dsn, DB_NAME, template="template0"))


def _run_script(script: Path, dsn: str, args: list[str], timeout: float) -> dict[str, Any]:
    """Run one peer script (in its own process group, so a timeout also ends its workers)
    and return the JSON object of its last output line.

    Raises:
        RuntimeError: the script failed or ran past ``timeout`` seconds.
    """
    proc = subprocess.Popen(
        [sys.executable, str(script), "--dsn", dsn, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(
            f"{script.name} {' '.join(args)}: no result within {timeout:g} s"
        ) from None
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (stderr or stdout).strip().splitlines()[-6:]
        raise RuntimeError(f"{script.name} {' '.join(args)} failed: " + " | ".join(tail))
    return json.loads(lines[-1])  # type: ignore[no-any-return]


async def run(server_dsn: str, scale: float) -> Result:
    """Run scenario 7 and return its table (ratios to Pulse are added by the runner).

    Args:
        server_dsn: the benchmarked server.
        scale: fraction of the issue's sizes (drain: 1,000,000 due; steady: 100,000 jobs).
    """
    result = Result(
        "7",
        "peers on the same server: drain (scenario 2) and steady state (scenario 4)",
        [
            "peer",
            "scenario",
            "processes",
            "firings/s",
            "DB CPU ms/firing",
            "lag p50 ms",
            "lag p99 ms",
            "lag max ms",
            "missed",
        ],
    )
    folder = peers_folder()
    drain_jobs, window = drain.jobs_for(scale), drain.window_for(scale)
    steady_jobs, duration = steady.jobs_for(scale), steady.duration_for(scale)
    runs: list[dict[str, Any]] = []
    for script_name, module in PEERS.items():
        script = folder / script_name
        if not script.exists() or importlib.util.find_spec(module) is None:
            result.notes.append(
                f"{script_name}: skipped ({module} is not installed here: run "
                "./scripts/bench, which uses .venv-bench)"
            )
            continue
        plan = [
            (
                [
                    "--mode",
                    "drain",
                    "--jobs",
                    str(drain_jobs),
                    "--processes",
                    str(n),
                    "--seconds",
                    str(window),
                ],
                240.0 + drain_jobs / 500,
            )
            for n in DRAIN_PROCESSES
        ]
        # the lead covers loading: the first occurrence must still lie ahead once it is done
        plan.append(
            (
                [
                    "--mode",
                    "steady",
                    "--jobs",
                    str(steady_jobs),
                    "--processes",
                    str(STEADY_PROCESSES),
                    "--seconds",
                    str(duration),
                    "--lead",
                    str(round(8 + steady_jobs / 4000)),
                ],
                120.0 + duration + steady_jobs / 200,
            )
        )
        for args, timeout in plan:
            dsn = await _empty_db(server_dsn)
            try:
                figures = await asyncio.to_thread(_run_script, script, dsn, args, timeout)
            except RuntimeError as exc:
                result.notes.append(f"{script_name} {args[1]}: {exc}")
                continue
            finally:
                drop_db(server_dsn, DB_NAME)
            runs.append(figures)
            lag = figures.get("lag", {})
            result.rows.append(
                [
                    figures["peer"],
                    figures["mode"],
                    figures["processes"],
                    figures.get("rate"),
                    figures.get("db_cpu_ms"),
                    lag.get("p50"),
                    lag.get("p99"),
                    lag.get("max"),
                    figures.get("missed"),
                ]
            )
    runs.extend(_pg_cron(result, scale))
    for name in sorted({r["peer"] for r in runs}):
        notes = {r["mode"]: r["note"] for r in runs if r["peer"] == name}
        result.notes.append(
            f"{name}: drain = {notes.get('drain', '-')}; steady = {notes.get('steady', '-')}"
        )
    result.data.update({"drain_jobs": drain_jobs, "steady_jobs": steady_jobs, "runs": runs})
    return result


def pg_cron_jobs(scale: float) -> int:
    """pg_cron's jobs at ``scale`` (1,000 at 0.1): enough for some 20 s of runs a minute."""
    return min(2_000, max(500, int(10_000 * scale)))


def _pg_cron(result: Result, scale: float) -> list[dict[str, Any]]:
    """pg_cron's runs (:mod:`pgpulse_tools.bench.pgcron`: a private server, 2 minutes each way
    of running its jobs), appended to ``result``'s rows; none, with a note, when it cannot run
    here."""
    runs: list[dict[str, Any]] = []
    for background in (False, True):
        try:
            figures = pgcron.run_peer(pg_cron_jobs(scale), 2, background_workers=background)
        except (ClusterUnavailable, psycopg.Error) as exc:
            result.notes.append(f"pg_cron: skipped ({exc})")
            break
        for run in figures:
            lag = run.get("lag", {})
            result.rows.append(
                [
                    run["peer"],
                    run["mode"],
                    f"1 launcher, {run['concurrency']} runs at once",
                    run.get("rate"),
                    run.get("db_cpu_ms"),
                    lag.get("p50"),
                    lag.get("p99"),
                    lag.get("max"),
                    run.get("missed"),
                ]
            )
        runs.extend(figures)
    return runs


def add_pulse_ratios(
    peers: Result, pulse_drain: Result | None, pulse_steady: Result | None
) -> None:
    """Append Pulse's best drain rate over each peer's best, and lag p99 side by side (a peer
    whose steady state started no run has an unbounded lag: ``inf``). Replaces the notes of an
    earlier call (``--report-only`` recomputes them). ``pulse_drain`` / ``pulse_steady`` are
    ``None`` when not measured in the peers' run: the ratio is then n/a, never one across runs."""
    peers.notes[:] = [note for note in peers.notes if not note.startswith("Pulse vs ")]
    pulse_rate = (
        max((r["rate"] for r in pulse_drain.data["runs"] if trusted(r)), default=math.nan)
        if pulse_drain
        else math.nan
    )
    pulse_p99 = pulse_steady.data["lag"]["p99"] if pulse_steady else math.nan
    ratios: dict[str, dict[str, float]] = {}
    for name in sorted({r["peer"] for r in peers.data["runs"]}):
        rates = [
            r["rate"]
            for r in peers.data["runs"]
            if r["peer"] == name and r["mode"] == "drain" and trusted(r)
        ]
        lags = [
            r["lag"]["p99"] if r["runs"] else math.inf  # none started: unbounded lag
            for r in peers.data["runs"]
            if r["peer"] == name and r["mode"] == "steady"
        ]
        best = max(rates, default=math.nan)
        p99 = lags[0] if lags else math.nan
        ratios[name] = {
            "peer_rate": best,
            "pulse_rate": pulse_rate,
            "throughput_ratio": pulse_rate / best if best else math.nan,
            "peer_p99": p99,
            "pulse_p99": pulse_p99,
        }
        peer_lag = (
            "none started"
            if p99 == math.inf
            else (f"{p99:,.1f} ms" if math.isfinite(p99) else "n/a")
        )
        ratio = pulse_rate / best if best else math.nan
        shown = (
            f"{ratio:.1f}× the firings/s ({pulse_rate:,.0f} vs {best:,.0f})"
            if math.isfinite(ratio)
            else f"n/a (Pulse's drain not measured in this run or untrusted; {name} {best:,.0f}/s)"
        )
        pulse_lag = f"{pulse_p99:,.1f} ms" if math.isfinite(pulse_p99) else "n/a"
        peers.notes.append(f"Pulse vs {name}: {shown}; lag p99 {pulse_lag} vs {peer_lag}")
    peers.data["ratios"] = ratios
