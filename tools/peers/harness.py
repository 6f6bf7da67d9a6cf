"""The shared driver of the peer benchmarks (scenario 7 of ``pgpulse bench``).

Each peer script (``apscheduler_peer.py``, ``procrastinate_peer.py``, ``pgqueuer_peer.py``)
defines a :class:`Peer` and calls :func:`main`. Run from ``.venv-bench`` (the peers are never
Pulse dependencies). The controller process loads the database, starts ``--processes`` worker
processes (the same script with ``--worker``), measures, stops them and prints one JSON object
on its last stdout line:

* ``drain`` (scenario 2's equivalent): ``--jobs`` no-op jobs all due; firings/s over a window
  that opens 2 s after the first completion, counted from the peer's own history table;
* ``steady`` (scenario 4's equivalent): ``--jobs`` recurring (or, where a peer cannot express
  that, delayed one-shot) no-op jobs spread over each minute; every worker's handler notes
  (start instant, scheduled instant) and the lag percentiles are computed from them. Pulse's
  scenario 4 anchors its N jobs evenly over the minute at sub-second resolution, job k at
  ``base + k * 60 / N`` s to the microsecond (:func:`spread`); a peer that can hold such
  instants uses the same ones, a peer that cannot says so in its docstring and steady note.

Instants are Unix seconds; durations seconds; lags milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg

from pgpulse_tools.bench.common import DbCpu, cdf_points, lag_summary

#: Environment variable naming the file a worker writes its (start, scheduled) pairs to.
STARTS_ENV = "PGPULSE_PEER_STARTS"

_starts = array("d")


#: The steady jobs' period, seconds (``@every 60s``, as in scenario 4).
PERIOD = 60.0
_US = 1_000_000


def spread(k: int, jobs: int) -> float:
    """Offset from ``base``, seconds, of steady job ``k``'s (0-based) first occurrence:
    ``k * 60 / jobs``, as Pulse's scenario 4 anchors its jobs (``pgpulse_tools.bench.steady``: job
    ``i`` at ``(i mod jobs) * step`` with ``step = 60 / jobs``, the same set of offsets).
    Sub-second: hold it to the microsecond with :func:`offset_us`."""
    return k * (PERIOD / jobs)


def offset_us(seconds: float) -> int:
    """``seconds`` in whole microseconds, rounded half to even as PostgreSQL's
    ``make_interval`` stores Pulse's anchors (and as ``datetime`` arithmetic keeps them)."""
    return round(seconds * _US)


def steady_expected(jobs: int, duration: float, offset: Callable[[int], float]) -> int:
    """Occurrences within ``[base, base + duration]`` (both ends included) of ``jobs``
    every-60-s jobs whose first occurrence is ``base + offset(k)`` seconds
    (``0 <= offset(k) < 60``, fractional allowed).

    Offsets and ``duration`` are counted in whole microseconds (:func:`offset_us`), the
    resolution at which the peers store the instants, so an occurrence exactly at the window's
    end counts as the measurement (``base <= scheduled <= base + duration``) sees it."""
    window, period = offset_us(duration), offset_us(PERIOD)
    total = 0
    for k in range(jobs):
        first = offset_us(offset(k))
        if first <= window:
            total += (window - first) // period + 1
    return total


def note_start(scheduled: float) -> None:
    """Record, inside a handler, that a run of the occurrence ``scheduled`` starts now."""
    _starts.append(time.time())
    _starts.append(scheduled)


def _dump_starts() -> None:
    path = os.environ.get(STARTS_ENV)
    if path:
        Path(path).write_bytes(_starts.tobytes())


atexit.register(_dump_starts)


@dataclass
class Peer:
    """What a peer script provides.

    Attributes:
        name: the peer's name and version, for the tables.
        setup: ``setup(dsn)`` installs the peer's schema into an empty database.
        load_drain: ``load_drain(dsn, jobs)`` stores ``jobs`` no-op jobs, all due now.
        load_steady: ``load_steady(dsn, jobs, base, duration)`` stores the steady workload whose
            first occurrences are spread over ``[base, base + 60)`` (Unix seconds; at
            ``base + spread(k, jobs)`` where the peer can hold sub-second instants) and returns
            how many occurrences fall within ``[base, base + duration]``.
        worker: ``worker(dsn, mode, jobs, concurrency, stop)`` runs one worker until ``stop``
            is set (``jobs`` is for peers whose schedules live in code).
        done_sql: SQL counting finished no-op runs in the peer's history (``count`` column).
        drain_note / steady_note: how the scenario was expressed, for the tables.
    """

    name: str
    setup: Callable[[str], Coroutine[Any, Any, None]]
    load_drain: Callable[[str, int], Coroutine[Any, Any, None]]
    load_steady: Callable[[str, int, float, float], Coroutine[Any, Any, int]]
    worker: Callable[[str, str, int, int, Any], Coroutine[Any, Any, None]]
    done_sql: str
    drain_note: str
    steady_note: str


def _done(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def _analyze(dsn: str) -> None:
    """VACUUM ANALYZE the loaded database, as Pulse's loader does after its bulk insert: a
    peer's queue must not be measured on a planner that still believes its tables are empty."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


def _spawn(
    script: str, args: argparse.Namespace, index: int, folder: Path
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env[STARTS_ENV] = str(folder / f"worker-{index}.starts")
    log = (folder / f"worker-{index}.log").open("wb")
    return subprocess.Popen(
        [
            sys.executable,
            script,
            "--worker",
            "--dsn",
            args.dsn,
            "--mode",
            args.mode,
            "--jobs",
            str(args.jobs),
            "--concurrency",
            str(args.concurrency),
            "--base",
            str(args.base),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )


def _stop(procs: list[subprocess.Popen[bytes]], timeout: float = 20.0) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cpu(procs: list[subprocess.Popen[bytes]]) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = psutil.Process(proc.pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def _logs(folder: Path) -> str:
    return "\n".join(
        f"--- {p.name} ---\n{p.read_text(errors='replace')[-1500:]}"
        for p in sorted(folder.glob("worker-*.log"))
    )


def _drain(peer: Peer, script: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    started = time.perf_counter()
    asyncio.run(peer.load_drain(args.dsn, args.jobs))
    _analyze(args.dsn)
    load_s = time.perf_counter() - started
    procs = [_spawn(script, args, i, folder) for i in range(args.processes)]
    try:
        deadline = time.monotonic() + 60
        while _done(args.dsn, peer.done_sql) == 0:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("no run completed within 60 s\n" + _logs(folder))
            time.sleep(0.2)
        time.sleep(2.0)  # warm-up: every worker has started fetching
        with DbCpu(args.dsn) as meter:
            count0, cpu0, wall0 = _done(args.dsn, peer.done_sql), _cpu(procs), time.perf_counter()
            count1 = count0
            while time.perf_counter() - wall0 < args.seconds and count1 < args.jobs:
                time.sleep(1.0)
                count1 = _done(args.dsn, peer.done_sql)
            cpu1, wall = _cpu(procs), time.perf_counter() - wall0
    finally:
        _stop(procs)
    if count0 >= args.jobs:
        raise RuntimeError(f"all {args.jobs} jobs ran during the 2 s warm-up: raise --jobs")
    fired = count1 - count0
    return {
        "fired": fired,
        "seconds": wall,
        "rate": fired / wall,
        "load_s": load_s,
        "db_cpu_ms": meter.seconds() / fired * 1000 if fired else float("nan"),
        "worker_cpu_pct": (cpu1 - cpu0) / wall / args.processes * 100,
        "drained": count1 >= args.jobs,
    }


def _steady(peer: Peer, script: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    base = args.base
    started = time.perf_counter()
    expected = asyncio.run(peer.load_steady(args.dsn, args.jobs, base, args.seconds))
    _analyze(args.dsn)
    load_s = time.perf_counter() - started
    if time.time() > base - 1:
        raise RuntimeError(f"loading took {load_s:.1f} s, past the lead of {args.lead:g} s")
    procs = [_spawn(script, args, i, folder) for i in range(args.processes)]
    try:
        while time.time() < base + args.seconds + 1.0:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a worker exited early\n" + _logs(folder))
            time.sleep(0.5)
    finally:
        _stop(procs)
    lags: list[float] = []
    for path in folder.glob("worker-*.starts"):
        values = array("d")
        values.frombytes(path.read_bytes())
        lags.extend(
            (start - sched) * 1000
            for start, sched in zip(values[0::2], values[1::2], strict=True)
            if base <= sched <= base + args.seconds
        )
    return {
        "lag": lag_summary(lags),
        "runs": len(lags),
        "expected": expected,
        "missed": expected - len(lags),
        "load_s": load_s,
        "lags_ms": cdf_points(lags),
    }


def main(peer: Peer) -> None:
    """Command line of a peer script: controller by default, ``--worker`` for a worker."""
    parser = argparse.ArgumentParser(description=f"{peer.name} in pgpulse bench scenario 7")
    parser.add_argument("--dsn", required=True, help="an empty database (libpq URI)")
    parser.add_argument("--mode", choices=["drain", "steady"], required=True)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=50, help="jobs at once per worker")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window")
    parser.add_argument(
        "--lead",
        type=float,
        default=8.0,
        help="steady: seconds from loading to the first occurrence",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.base:  # a whole second (the peers' sub-second spread is added to it)
        args.base = float(int(time.time()) + math.ceil(args.lead))
    if args.worker:
        stop = asyncio.Event()

        async def work() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await peer.worker(args.dsn, args.mode, args.jobs, args.concurrency, stop)

        asyncio.run(work())
        return
    folder = Path(tempfile.mkdtemp(prefix="pgpulse-peer-"))
    script = os.path.abspath(sys.argv[0])

    asyncio.run(peer.setup(args.dsn))
    run = _drain if args.mode == "drain" else _steady
    try:
        figures = run(peer, script, args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    note = peer.drain_note if args.mode == "drain" else peer.steady_note
    print(
        json.dumps(
            {
                "peer": peer.name,
                "mode": args.mode,
                "jobs": args.jobs,
                "processes": args.processes,
                "concurrency": args.concurrency,
                "note": note,
                **figures,
            }
        )
    )
