"""The node processes of a chaos run: start, SIGKILL, SIGSTOP/SIGCONT, SIGTERM, watch.

Each node is ``python -m pgpulse node run --app pgpulse_tools.chaos.workload:app`` with its own
``--database-url`` (its proxies), in a session of its own (a Ctrl-C at the harness does not reach
it), its output appended to ``<log_dir>/<node id>.log``, its handlers' journal to
``<log_dir>/<node id>.journal``. A node that exits although the harness
neither killed nor stopped it is recorded as a :class:`~pgpulse_tools.chaos.history.NodeExit` and
started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pgpulse.node.engine import STOP_STEP_TIMEOUT
from pgpulse_tools.chaos.history import NodeExit
from pgpulse_tools.chaos.journal import JOURNAL_ENV

log = logging.getLogger(__name__)
#: Exit code of ``pgpulse`` when the database does not answer (see :mod:`pgpulse.cli.main`).
_DATABASE_UNAVAILABLE = 3
#: Seconds a node's pool may take to close as the process ends (psycopg_pool's default).
_POOL_CLOSE = 5.0


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """Options every node runs with (seconds, except ``slots``, ``seed`` and ``guard``: the
    workload's effect guard: ``lease``, the token must hold a live lease, or ``token``, the
    newest token seen wins)."""

    lease: float = 4.0
    heartbeat: float = 0.5
    poll: float = 1.0
    slots: int = 32
    drain_timeout: float = 3.0
    seed: int = 0
    guard: str = "lease"

    @property
    def stop_grace(self) -> float:
        """Seconds a node may take to exit after its SIGTERM before the harness counts it as
        hung: what Pulse's bounded stop allows (README, engine.Node._drain) — the loops' last
        step, then ``drain_timeout`` (overrun by up to two heartbeats), then the hand-back and
        the deregistration; each step gets :data:`~pgpulse.node.engine.STOP_STEP_TIMEOUT`, and one
        given up as long again to end once cancelled (a database that is failing over may not
        answer the cancel) — then the pool's close, and a second to exit. Less would count a
        node that keeps every deadline as hung whenever the database is slow at its stop (a
        switchover under load, seed 7: aborted 18 s after its SIGTERM, inside the hand-back's
        cancellation)."""
        steps = 3 * 2 * STOP_STEP_TIMEOUT
        return self.drain_timeout + 2 * self.heartbeat + steps + _POOL_CLOSE + 1.0


class Cluster:
    """The node processes, by index (node ``i`` is ``node-{i+1}`` and uses DSN ``dsn_for(i)``).

    Args:
        settings: the node options.
        dsn_for: the DSN node ``i`` connects with (its proxy).
        log_dir: where node output goes.
        clock: the database's current instant, as the harness estimates it.
    """

    def __init__(
        self,
        settings: NodeSettings,
        dsn_for: Callable[[int], str],
        log_dir: Path,
        clock: Callable[[], datetime],
    ) -> None:
        self.settings = settings
        self.dsn_for = dsn_for
        self.log_dir = log_dir
        self.clock = clock
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.exits: list[NodeExit] = []
        self._expected: set[int] = set()  # pids the harness killed or stopped on purpose
        self._watchers: set[asyncio.Task[None]] = set()
        self._closing = False

    @staticmethod
    def node_id(index: int) -> str:
        """The id of node ``index``."""
        return f"node-{index + 1}"

    def running(self, index: int) -> bool:
        """Whether node ``index`` has a live process."""
        proc = self.procs.get(index)
        return proc is not None and proc.returncode is None

    async def start(self, index: int) -> None:
        """Start node ``index`` (a no-op if it runs).

        Raises:
            OSError: the process could not be spawned.
        """
        if self.running(index):
            return
        s = self.settings
        dsn = self.dsn_for(index)
        # PYTHONFAULTHANDLER: a node that hangs on SIGTERM gets SIGABRT, which makes Python print
        # every thread's stack into its log before it dies.
        env = {
            **os.environ,
            "PGPULSE_DATABASE_URL": dsn,
            "PGPULSE_CHAOS_SEED": str(s.seed),
            "PGPULSE_CHAOS_GUARD": s.guard,
            JOURNAL_ENV: str(self.log_dir),
            "PYTHONFAULTHANDLER": "1",
        }
        node_id = self.node_id(index)
        with (self.log_dir / f"{node_id}.log").open("ab") as sink:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "pgpulse",
                "--database-url",
                dsn,
                "--log-level",
                "WARNING",
                "node",
                "run",
                "--app",
                "pgpulse_tools.chaos.workload:app",
                "--node-id",
                node_id,
                "--lease",
                str(s.lease),
                "--heartbeat",
                str(s.heartbeat),
                "--poll",
                str(s.poll),
                "--slots",
                str(s.slots),
                "--drain-timeout",
                str(s.drain_timeout),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
            )
        self.procs[index] = proc
        watcher = asyncio.create_task(self._watch(index, proc), name=f"watch:{node_id}")
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, index: int, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if proc.pid in self._expected or self._closing:
            return
        node_id = self.node_id(index)
        if code == _DATABASE_UNAVAILABLE:
            # The documented refusal to start without a database (a restart that met a
            # restarting server or a cut network): a supervisor starts it again; not a crash.
            log.warning(
                "%s could not reach the database at start; starting it again",
                node_id,
                extra={"action": "chaos_node_retry", "node": node_id},
            )
        else:
            self.exits.append(NodeExit(node_id, self.clock(), code))
            log.error(
                "%s exited on its own with code %s; restarting it",
                node_id,
                code,
                extra={"action": "chaos_node_crashed", "node": node_id},
            )
        await asyncio.sleep(1.0)
        if not self._closing and self.procs.get(index) is proc:
            await self.start(index)

    async def kill(self, index: int) -> bool:
        """SIGKILL node ``index`` and wait for it; ``False`` if it was not running."""
        proc = self.procs.get(index)
        if proc is None or proc.returncode is not None:
            return False
        self._expected.add(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)  # a stopped process dies at once either way
            proc.kill()
        await proc.wait()
        return True

    def pause(self, index: int) -> bool:
        """SIGSTOP node ``index``; ``False`` if it was not running."""
        return self._signal(index, signal.SIGSTOP)

    def resume(self, index: int) -> bool:
        """SIGCONT node ``index``; ``False`` if it was not running."""
        return self._signal(index, signal.SIGCONT)

    def _signal(self, index: int, sig: signal.Signals) -> bool:
        proc = self.procs.get(index)
        if proc is None or proc.returncode is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        return True

    async def terminate(self, index: int, grace: float | None = None) -> int | None:
        """SIGTERM node ``index`` and wait ``grace`` seconds (default: the settings'
        :attr:`NodeSettings.stop_grace`) for it to drain and exit; if it hangs, SIGABRT it (its
        stacks go to its log), then SIGKILL. A hang or a non-zero exit is recorded as a
        :class:`NodeExit`. Returns its exit code (negative: the signal that ended it), or
        ``None`` if it was not running."""
        proc = self.procs.get(index)
        if proc is None or proc.returncode is not None:
            return None
        grace = self.settings.stop_grace if grace is None else grace
        self._expected.add(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
        try:
            async with asyncio.timeout(grace):
                code = await proc.wait()
            # -SIGTERM: it died of the signal itself, i.e. before it had installed its handler
            # (still starting, nothing claimed yet) — the CLI's documented behaviour.
            if code not in (0, -signal.SIGTERM):
                self.exits.append(
                    NodeExit(
                        self.node_id(index), self.clock(), code, "failed to stop cleanly on SIGTERM"
                    )
                )
            return code
        except TimeoutError:
            node_id = self.node_id(index)
            log.error(
                "%s did not stop within %.0fs of SIGTERM; aborting it (stacks in %s.log)",
                node_id,
                grace,
                node_id,
                extra={"action": "chaos_node_hung"},
            )
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGABRT)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await proc.wait()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            code = await proc.wait()
            self.exits.append(NodeExit(node_id, self.clock(), code, "hung on SIGTERM"))
            return code

    async def stop_all(self, grace: float | None = None) -> dict[str, int | None]:
        """SIGTERM every node at once and wait (as :meth:`terminate`); return each node's exit
        code."""
        self._closing = True
        indexes = sorted(self.procs)
        codes = await asyncio.gather(*(self.terminate(i, grace) for i in indexes))
        for watcher in list(self._watchers):
            watcher.cancel()
        return {self.node_id(i): code for i, code in zip(indexes, codes, strict=True)}
