"""Pulse node processes for the benchmark: start, wait until they share the shards, meter, stop.

Each node is a real ``python -m pgpulse node run --app pgpulse_tools.bench.noop_app:app``
process, as a user would run it. Durations are seconds; CPU is seconds of user + system time;
RSS is bytes.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

from pgpulse_tools.bench.common import admin, q
from pgpulse_tools.bench.noop_app import STARTS_ENV, read_starts

#: The ``--app`` every benchmark node runs.
NOOP_APP = "pgpulse_tools.bench.noop_app:app"


@dataclass(frozen=True)
class Runtime:
    """Which installation of Pulse a node process runs: ``python -m pgpulse`` of ``python``,
    with ``env`` added to the benchmark's environment (``pgpulse bench --compare-with`` runs
    a second installation's nodes this way).

    Attributes:
        python: the interpreter (this process's by default: the Pulse being benchmarked).
        env: variables set for the node process (``PYTHONPATH`` is put before any inherited).
        label: how the report names this installation.
        schema: the newest migration this installation knows, when it is older than the
            benchmark's: its databases are migrated only that far (a newer migration may stop
            its nodes); ``None``: as far as the benchmark's.
    """

    python: str = sys.executable
    env: Mapping[str, str] = field(default_factory=dict)
    label: str = "this"
    schema: int | None = None

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with :attr:`env` set (its ``PYTHONPATH`` first, then ``base``'s)."""
        out = dict(base)
        for name, value in self.env.items():
            if name == "PYTHONPATH" and base.get(name):
                value = value + os.pathsep + base[name]
            out[name] = value
        return out


#: The Pulse this benchmark runs in.
THIS = Runtime()


@dataclass
class NodeCluster:
    """``count`` node processes against ``dsn``; use as a context manager (stopped at exit).

    Args:
        dsn: the benchmark database.
        count: how many node processes.
        slots: ``--slots`` of each node.
        poll: ``--poll`` of each node (seconds).
        record_starts: have each node's handler note (start, scheduled_for) per run
            (see :mod:`pgpulse_tools.bench.noop_app`), read back by :meth:`starts` after
            :meth:`stop`.
        extra_args: more ``node run`` options.
        first: number of the first node (ids ``bench-<first>``...), so a second cluster can
            join the first under new ids.
        app: the nodes' ``--app``.
        runtime: the interpreter and environment of the node processes.
    """

    dsn: str
    count: int
    slots: int = 50
    poll: float = 5.0
    record_starts: bool = False
    extra_args: tuple[str, ...] = ()
    first: int = 1
    app: str = NOOP_APP
    runtime: Runtime = THIS
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pgpulse-bench-")))

    def node_ids(self) -> list[str]:
        """The nodes' ids (``bench-1``...)."""
        return [f"bench-{self.first + i}" for i in range(self.count)]

    def start(self) -> None:
        """Start every node process (their output goes to ``<folder>/<node>.log``)."""
        for node_id in self.node_ids():
            env = self.runtime.environ(os.environ)
            if self.record_starts:
                env[STARTS_ENV] = str(self.folder / f"{node_id}.starts")
            log = (self.folder / f"{node_id}.log").open("wb")
            self.procs.append(
                subprocess.Popen(
                    [
                        self.runtime.python,
                        "-m",
                        "pgpulse",
                        "--database-url",
                        self.dsn,
                        "--log-level",
                        "WARNING",
                        "node",
                        "run",
                        "--app",
                        self.app,
                        "--node-id",
                        node_id,
                        "--slots",
                        str(self.slots),
                        "--poll",
                        str(self.poll),
                        *self.extra_args,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )

    def wait_settled(self, timeout: float = 30.0) -> float:
        """Wait until every node is alive and the 64 shards are split among them, each shard
        owned by one node (as the nodes reported at their last heartbeat).

        Returns:
            Seconds waited.

        Raises:
            RuntimeError: a node exited, or ``timeout`` seconds passed (the message has the logs).
        """
        start = time.perf_counter()
        with admin(self.dsn) as conn:
            while True:
                self.check_alive()
                rows = q(conn, "nodes_alive")
                owned = [s for row in rows for s in row["shards"]]
                if len(rows) == self.count and sorted(owned) == list(range(64)):
                    return time.perf_counter() - start
                if time.perf_counter() - start > timeout:
                    raise RuntimeError(
                        f"{self.count} nodes did not settle in {timeout:g}s "
                        f"(alive: {len(rows)}, shards owned: {len(owned)})\n" + self.logs()
                    )
                time.sleep(0.2)

    def check_alive(self) -> None:
        """Raise :class:`RuntimeError` (with the logs) if a node process has exited."""
        dead = [p for p in self.procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"{len(dead)} node(s) exited early\n" + self.logs())

    def logs(self, tail: int = 2000) -> str:
        """The last ``tail`` characters of each node's log."""
        parts = []
        for node_id in self.node_ids():
            path = self.folder / f"{node_id}.log"
            if path.exists():
                parts.append(f"--- {node_id} ---\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)

    def cpu_seconds(self) -> list[float]:
        """CPU seconds (user + system) used so far by each node process; NaN once gone."""
        out = []
        for proc in self.procs:
            try:
                times = psutil.Process(proc.pid).cpu_times()
                out.append(times.user + times.system)
            except psutil.Error:
                out.append(math.nan)
        return out

    def rss_bytes(self) -> list[int]:
        """Resident memory of each node process, bytes (0 once gone)."""
        out = []
        for proc in self.procs:
            try:
                out.append(psutil.Process(proc.pid).memory_info().rss)
            except psutil.Error:
                out.append(0)
        return out

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every node (they drain and exit), then SIGKILL what is left after
        ``timeout`` seconds."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def starts(self) -> list[tuple[float, float]]:
        """Every recorded (handler start, scheduled_for) pair, Unix seconds (after stop)."""
        out: list[tuple[float, float]] = []
        for node_id in self.node_ids():
            out.extend(read_starts(self.folder / f"{node_id}.starts"))
        return out

    def remove_folder(self) -> None:
        """Delete the logs and start records (call once :meth:`starts` has been read)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> NodeCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def wake_nodes(dsn: str) -> None:
    """Send the wake-up notification every node listens for (all shards)."""
    with admin(dsn) as conn:
        q(conn, "wake")
