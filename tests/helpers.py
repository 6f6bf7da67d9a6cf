"""Small builders shared by the database tests."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgpulse.core.jobs import JobSpec
from pgpulse.core.model import ClaimedJob, Outcome
from pgpulse.db.store import Store
from pgpulse.node.attempts import decide_claim
from pgpulse.node.dispatch import plan_finish
from pgpulse.node.handlers import NodeHandlers


def utc(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    microsecond: int = 0,
) -> datetime:
    """An aware UTC datetime: ``utc(2026, 1, 1, 0, 0, 30)``."""
    return datetime(year, month, day, hour, minute, second, microsecond, tzinfo=UTC)


def spec(name: str, schedule: str = "* * * * *", handler: str = "noop", **kw: Any) -> JobSpec:
    """A valid JobSpec with test defaults."""
    return JobSpec.create(name=name, schedule=schedule, handler=handler, **kw)


async def add(store: Store, *specs: JobSpec, now: datetime | None = None) -> list[int]:
    """Upsert ``specs`` (their handlers are accepted as the test's own) and return their ids."""
    rows = await store.upsert_jobs(list(specs), extra_handlers={s.handler for s in specs}, now=now)
    return [job_id for job_id, _ in rows]


ALL_SHARDS = list(range(64))


async def run_claim(job: ClaimedJob, handlers: NodeHandlers, now: datetime) -> Outcome:
    """One attempt of a claim played without a node, ended at the fixed instant ``now``: the
    claim-time decision (:func:`pgpulse.node.attempts.decide_claim`), the handler if it runs, and
    the outcome (:func:`pgpulse.node.dispatch.plan_finish`)."""
    decision = await decide_claim(job, handlers)
    if decision.outcome is not None:
        return decision.outcome
    return plan_finish(job, await handlers.run(job), now)


#: The ``pgpulse`` command of this environment, as a user types it.
PGPULSE = str(Path(sys.executable).with_name("pgpulse"))

#: The commands :func:`pgpulse` always runs as real processes: they take the process over
#: (signal handlers, garbage collection settings, servers they start) or run until stopped.
PROCESS_COMMANDS = frozenset({"node", "serve", "demo", "chaos", "bench", "db"})

#: One command in this process at a time: click's runner swaps the process's standard streams and
#: environment while a command runs.
_IN_PROCESS = threading.Lock()


def pgpulse(
    *args: str,
    dsn: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``pgpulse ARGS...`` (on ``dsn``'s database when given, through
    ``PGPULSE_DATABASE_URL``) and return its exit code, stdout and stderr.

    As a real process with ``process=True``, a ``cwd``, or one of :data:`PROCESS_COMMANDS`; else
    in this process through click's runner, on a thread of its own (the command runs its own
    event loop, as the real one does, while a test's loop goes on): the same command, options,
    environment and refusals, without the half second of CPU a new interpreter spends
    importing Pulse (the suite types about 500 commands through here). README's commands run as
    real processes in tests/test_readme.py and tests/test_demo.py.

    Raises:
        subprocess.TimeoutExpired: the command ran longer than ``timeout`` seconds.
    """
    environ = {**(env or {})}
    if dsn is not None:
        environ["PGPULSE_DATABASE_URL"] = dsn
    if process or cwd is not None or _command(args) in PROCESS_COMMANDS:
        return subprocess.run(
            [PGPULSE, *args],
            env={**os.environ, **environ},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return _in_process(args, environ, timeout)


def _command(args: tuple[str, ...]) -> str | None:
    """The top-level command ``args`` name (the first that is one), or ``None``."""
    from pgpulse.cli.main import main

    return next((a for a in args if a in main.commands), None)


def _in_process(
    args: tuple[str, ...], environ: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``pgpulse ARGS`` through click's runner on a new thread, as :func:`pgpulse` describes. An
    exception the command let out is printed on stderr as the interpreter would, exit 1."""
    from click.testing import CliRunner, Result

    from pgpulse.cli.main import main

    box: list[Result] = []

    def invoke() -> None:
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level  # the command configures logging
        try:
            box.append(CliRunner().invoke(main, list(args), env=environ, prog_name="pgpulse"))
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)

    with _IN_PROCESS:
        thread = threading.Thread(target=invoke, name=f"pgpulse {' '.join(args[:2])}")
        thread.start()
        thread.join(timeout)
    if thread.is_alive():
        raise subprocess.TimeoutExpired([PGPULSE, *args], timeout)
    [result] = box
    code, stderr = result.exit_code, result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
        code = 1
    return subprocess.CompletedProcess([PGPULSE, *args], code, result.stdout, stderr)


async def apgpulse(
    *args: str, dsn: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """:func:`pgpulse` for async tests: the command runs while the event loop goes on (for at
    most a minute)."""
    return await asyncio.to_thread(pgpulse, *args, dsn=dsn, env=env)


async def until_waiting_on_a_lock(db: Any, what: str = "the statement under test") -> None:
    """Return once a session of ``db``'s database waits on a row or transaction lock (the
    statement under test has reached another session's uncommitted write), so a race test's
    interleaving is real, not assumed from a sleep.

    Raises:
        AssertionError: no session waited within 10 s (the message names ``what``).
    """
    for _ in range(200):
        row = db.execute(
            "SELECT count(*) AS n FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
        if row["n"]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} never waited for the other session")


def cluster_pg_bin() -> Path | None:
    """The PostgreSQL programs of the replicated clusters the tests start: when the suite runs
    on the machine's server (``PGPULSE_TEST_DATABASE_URL``, CI's second run), that server's own
    programs if installed (``/usr/lib/postgresql/<major>/bin``), so two major versions are
    covered; else ``None``, the embedded server's."""
    url = os.environ.get("PGPULSE_TEST_DATABASE_URL")
    if not url:
        return None
    import psycopg

    with psycopg.connect(url, connect_timeout=5) as conn:
        folder = Path(f"/usr/lib/postgresql/{conn.info.server_version // 10000}/bin")
    return folder if (folder / "pg_rewind").is_file() else None
