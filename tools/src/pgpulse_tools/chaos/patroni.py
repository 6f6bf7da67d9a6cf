"""A Patroni-managed PostgreSQL for the harness, as users run one: etcd and two Patroni members
on 127.0.0.1, the primary moved by ``patronictl``.

It answers the same protocol as :class:`~pgpulse_tools.chaos.replication.ReplicatedServer`, so
``pgpulse chaos --cluster --patroni`` checks a Patroni cluster with the same workload, faults
and verdict. Needs ``patroni``, ``patronictl`` and ``etcd`` on the PATH (Debian: ``apt-get
install patroni etcd-server``; or PyPI's ``patroni[etcd3,psycopg3]``). The recipe, and what
each setting is for, is in ``docs/ha.md``.

* etcd: one member, v3 API (Patroni's ``etcd3`` section talks to its JSON gateway: no v2).
* Each member: Patroni runs initdb (the first to take the initialize key) or pg_basebackup from
  the leader, and pg_rewind on a demoted leader; ``synchronous_mode`` with ``sync``.
* ``failover`` is ``patronictl failover --candidate <the replica> --force`` and ``switchover``
  ``patronictl switchover``: planned moves (Patroni demotes the leader cleanly first). A crash
  failover waits for the leader key to expire (``ttl``, at least 20 s with Patroni 4): a slow
  run's fault, not this one's.
* Every process runs as PostgreSQL's user (``embedded_postgres`` when root), in a session of its
  own; it is stopped by its pid: SIGTERM to Patroni (which stops its PostgreSQL), then etcd; a
  postmaster that outlives its Patroni is killed with its children.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from pgpulse.core.errors import DatabaseUnavailable, InvalidInput
from pgpulse_tools.chaos.postgres import Binaries, RunAs, free_port, kill_tree
from pgpulse_tools.chaos.proxy import Upstream
from pgpulse_tools.chaos.replication import Promotion, Replication, multi_host_dsn

Clock = Callable[[], datetime]
PROGRAMS = ("patroni", "patronictl", "etcd")
#: Seconds the cluster may take to bootstrap, or to be healthy again after a move.
SETTLE_TIMEOUT = 90.0


def missing_programs() -> list[str]:
    """The programs a Patroni cluster needs that are not on the PATH."""
    return [name for name in PROGRAMS if shutil.which(name) is None]


def member_config(
    name: str, folder: Path, etcd_port: int, api_port: int, pg_port: int, bins: Binaries, sync: bool
) -> dict[str, Any]:
    """One member's Patroni configuration (written as JSON, which is YAML).

    ``ttl`` 20 is Patroni 4's minimum; ``loop_wait`` 1 makes a planned move and a replica's
    first start quick; ``wal_retrieve_retry_interval`` bounds how long a promotion may wait.
    """
    return {
        "scope": "pulse",
        "namespace": "/service/",
        "name": name,
        "log": {"level": "INFO", "dir": str(folder), "file_num": 2},
        "restapi": {"listen": f"127.0.0.1:{api_port}", "connect_address": f"127.0.0.1:{api_port}"},
        "etcd3": {"hosts": [f"127.0.0.1:{etcd_port}"]},
        "bootstrap": {
            "dcs": {
                "ttl": 20,
                "loop_wait": 1,
                "retry_timeout": 5,
                "maximum_lag_on_failover": 1048576,
                "synchronous_mode": sync,
                "synchronous_mode_strict": False,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {
                        "max_connections": 300,
                        "wal_level": "replica",
                        "hot_standby": "on",
                        "wal_log_hints": "on",
                        "max_wal_senders": 10,
                        "max_replication_slots": 10,
                        "wal_keep_size": "128MB",
                        "fsync": "off",
                        "wal_retrieve_retry_interval": "200ms",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
            "pg_hba": [
                "local all all trust",
                "host replication all 127.0.0.1/32 trust",
                "host all all 127.0.0.1/32 trust",
            ],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{pg_port}",
            "connect_address": f"127.0.0.1:{pg_port}",
            "data_dir": str(folder / "data"),
            "bin_dir": str(bins.folder),
            "pgpass": str(folder / "pgpass"),
            "authentication": {
                "superuser": {"username": "postgres", "password": "postgres"},
                "replication": {"username": "postgres", "password": "postgres"},
                "rewind": {"username": "postgres", "password": "postgres"},
            },
            "parameters": {"unix_socket_directories": str(folder)},
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
    }


@dataclass(slots=True)
class _Process:
    """A program the harness runs, in a session of its own, output to ``log``."""

    name: str
    proc: subprocess.Popen[bytes]

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    async def stop(self, grace: float) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds. Never raises."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.running:
                return
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            deadline = time.monotonic() + grace
            while True:
                if not self.running or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)


class PatroniServer:
    """etcd and two Patroni members of the harness's own, in a temporary folder.

    Args:
        parent: folder to create the temporary folder in (default: the system's temp).
        replication: ``sync`` (Patroni's ``synchronous_mode``) or ``async``.
        bin_dir: the PostgreSQL programs Patroni runs (default: the embedded server's).
    """

    restartable = False

    def __init__(
        self,
        parent: Path | None = None,
        replication: Replication = "async",
        bin_dir: Path | None = None,
    ) -> None:
        self.parent = parent
        self.replication: Replication = replication
        self.bin_dir = bin_dir
        self.folder: Path | None = None
        self.names = ("pg1", "pg2")
        self.pg_ports: dict[str, int] = {}
        self.api_ports: dict[str, int] = {}
        self._etcd: _Process | None = None
        self._members: dict[str, _Process] = {}
        self._runas = RunAs()

    @property
    def endpoints(self) -> list[Upstream]:
        """Both members' PostgreSQL addresses."""
        return [Upstream("127.0.0.1", self.pg_ports[name]) for name in self.names]

    @property
    def upstream(self) -> Upstream:
        """The first member's address."""
        return self.endpoints[0]

    def admin_dsn(self, dbname: str = "postgres") -> str:
        """A DSN that reaches the leader, whichever member it is."""
        return multi_host_dsn([self.pg_ports[name] for name in self.names], dbname)

    async def start(self) -> None:
        """Start etcd, then both members at once (one bootstraps, the other copies it); wait
        until the cluster is healthy. A failed start stops everything and leaves no folder.

        Raises:
            InvalidInput: a program is missing.
            DatabaseUnavailable: the cluster did not come up.
        """
        missing = missing_programs()
        if missing:
            raise InvalidInput(
                f"a Patroni cluster needs {', '.join(missing)} on the PATH "
                "(apt-get install patroni etcd-server)",
                field="patroni",
                value=missing[0],
            )
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        bins = Binaries.resolve(self.bin_dir)
        self._runas = await asyncio.to_thread(RunAs.for_postgres)
        self.folder = Path(tempfile.mkdtemp(prefix="pgpulse-patroni-", dir=self.parent))
        self._runas.own(self.folder)
        etcd_port = free_port()
        self._etcd = self._spawn("etcd", self._etcd_args(etcd_port))
        await self._until("etcd answers", lambda: _etcd_healthy(etcd_port), 30)
        for name in self.names:
            folder = self.folder / name
            folder.mkdir()
            self._runas.own(folder)
            self.pg_ports[name], self.api_ports[name] = free_port(), free_port()
            config = member_config(
                name,
                folder,
                etcd_port,
                self.api_ports[name],
                self.pg_ports[name],
                bins,
                self.replication == "sync",
            )
            (folder / "patroni.yml").write_text(json.dumps(config, indent=1), encoding="utf-8")
            self._members[name] = self._spawn(
                name, [_which("patroni"), str(folder / "patroni.yml")]
            )
        await self._until("the Patroni cluster is healthy", self._healthy, SETTLE_TIMEOUT)

    def _etcd_args(self, client: int) -> list[str]:
        assert self.folder is not None
        peer, metrics = free_port(), free_port()
        (self.folder / "etcd").mkdir()
        self._runas.own(self.folder / "etcd")
        return [
            _which("etcd"),
            *("--name", "e1", "--data-dir", str(self.folder / "etcd" / "data")),
            *("--listen-client-urls", f"http://127.0.0.1:{client}"),
            *("--advertise-client-urls", f"http://127.0.0.1:{client}"),
            *("--listen-peer-urls", f"http://127.0.0.1:{peer}"),
            *("--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}"),
            *("--initial-cluster", f"e1=http://127.0.0.1:{peer}"),
            *("--initial-cluster-state", "new", "--initial-cluster-token", "pulse-chaos"),
            *("--listen-metrics-urls", f"http://127.0.0.1:{metrics}"),
        ]

    def _spawn(self, name: str, args: list[str]) -> _Process:
        assert self.folder is not None
        home = self.folder / name if (self.folder / name).is_dir() else self.folder
        with (home / f"{name}.out").open("ab") as sink:
            proc = subprocess.Popen(
                args,
                cwd=home,
                env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(home)},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
                **self._runas.popen_kwargs(),
            )
        return _Process(name, proc)

    async def restart(self, downtime: float, mode: str) -> None:
        """Not offered: Patroni moves the primary.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("a Patroni cluster is failed over, not restarted")

    async def fail_over(self, kind: str, *, down: float, window: float, clock: Clock) -> Promotion:
        """``patronictl failover`` or ``switchover`` to the replica; return when the old leader
        stopped taking writes, when the new one took them, and when the cluster was healthy
        again (the old leader streaming from the new one). ``down`` and ``window`` do not apply
        to a planned move.

        Raises:
            DatabaseUnavailable: patronictl failed, or the cluster did not recover.
            ValueError: an unknown kind.
        """
        if kind not in ("failover", "switchover"):
            raise ValueError(f"unknown cluster fault {kind!r}")
        old = await self.leader()
        new = next(name for name in self.names if name != old)
        args = ["--candidate", new, "--force"]
        if kind == "switchover":
            args = ["--leader", old, *args]
        began = clock()
        died = asyncio.create_task(self._instant(lambda: self._writable(old, False), clock))
        promoted = asyncio.create_task(self._instant(lambda: self._writable(new, True), clock))
        try:
            await self.patronictl(kind, *args)
            async with asyncio.timeout(SETTLE_TIMEOUT):
                died_at, promoted_at = await died, await promoted
        finally:
            died.cancel()
            promoted.cancel()
        await self._until(f"the cluster is healthy after the {kind}", self._healthy, SETTLE_TIMEOUT)
        return Promotion(kind, old, new, None, max(died_at, began), promoted_at, clock(), "patroni")

    async def patronictl(self, *args: str) -> str:
        """Run ``patronictl -c <pg1's config> ARGS`` as PostgreSQL's user; return its output.

        Raises:
            DatabaseUnavailable: it failed.
        """
        assert self.folder is not None
        command = [_which("patronictl"), "-c", str(self.folder / "pg1" / "patroni.yml"), *args]

        def run() -> subprocess.CompletedProcess[str]:
            assert self.folder is not None
            return subprocess.run(
                command,
                cwd=self.folder,
                env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(self.folder)},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                **self._runas.popen_kwargs(),
            )

        done = await asyncio.to_thread(run)
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-2:])
            raise DatabaseUnavailable(f"patronictl {args[0]} failed: {tail}", field="patroni")
        return done.stdout

    async def leader(self) -> str:
        """The leader's member name (from Patroni's REST API).

        Raises:
            DatabaseUnavailable: no member reports a leader.
        """
        for member in await self._cluster():
            if member.get("role") == "leader":
                return str(member["name"])
        raise DatabaseUnavailable("the Patroni cluster has no leader", field="patroni")

    async def close(self) -> None:
        """Stop the members (SIGTERM: each stops its PostgreSQL), then etcd, by their pids; kill
        any postmaster that outlived its Patroni, with its children; delete the folder. Never
        raises."""
        await asyncio.gather(*(member.stop(30) for member in self._members.values()))
        if self._etcd is not None:
            await self._etcd.stop(10)
        if self.folder is not None:
            for name in self.names:
                pid = _postmaster(self.folder / name / "data")
                if pid is not None:
                    kill_tree(pid)
            await asyncio.to_thread(shutil.rmtree, self.folder, True)
            self.folder = None

    # -- state -----------------------------------------------------------------------------

    async def _cluster(self) -> list[dict[str, Any]]:
        for name in self.names:
            with contextlib.suppress(OSError, ValueError):
                data = await asyncio.to_thread(_get_json, self.api_ports[name], "/cluster")
                return list(data.get("members", []))
        return []

    async def _healthy(self) -> bool:
        """One running leader, the other member streaming (sync: as the sync standby)."""
        members = await self._cluster()
        leaders = [m for m in members if m.get("role") == "leader" and m.get("state") == "running"]
        replicas = [
            m
            for m in members
            if m.get("role") in ("replica", "sync_standby")
            and m.get("state") in ("running", "streaming")
            and isinstance(m.get("lag", 0), int)
        ]
        if self.replication == "sync" and not any(m["role"] == "sync_standby" for m in replicas):
            return False
        return len(leaders) == 1 and len(replicas) == 1

    async def _writable(self, name: str, wanted: bool) -> bool:
        dsn = f"host=127.0.0.1 port={self.pg_ports[name]} user=postgres connect_timeout=2"
        try:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                row = await (await conn.execute("SELECT NOT pg_is_in_recovery()")).fetchone()
                return bool(row and row[0]) == wanted
        except psycopg.Error:
            return not wanted

    @staticmethod
    async def _instant(check: Callable[[], Any], clock: Clock) -> datetime:
        while True:
            if await check():
                return clock()
            await asyncio.sleep(0.01)

    @staticmethod
    async def _until(what: str, check: Callable[[], Any], within: float) -> None:
        deadline = time.monotonic() + within
        while not await check():
            if time.monotonic() > deadline:
                raise DatabaseUnavailable(f"not within {within:g}s: {what}", field="patroni")
            await asyncio.sleep(0.1)


def _which(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise InvalidInput(f"{program} is not on the PATH", field="patroni", value=program)
    return found


def _get_json(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
        return json.loads(reply.read() or b"null")


async def _etcd_healthy(port: int) -> bool:
    try:
        data = await asyncio.to_thread(_get_json, port, "/health")
    except (OSError, ValueError):
        return False
    return bool(data and data.get("health") == "true")


def _postmaster(pgdata: Path) -> int | None:
    """The pid in ``postmaster.pid`` if that process still runs (not a zombie)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return None
    return None if state == "Z" else pid
