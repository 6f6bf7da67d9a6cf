"""A private PostgreSQL cluster for one part of ``pgpulse bench``: initdb, start, stop by pid.

Some peers need server settings no shared server should be restarted for (pg_cron needs
``shared_preload_libraries = 'pg_cron'``, set only at server start). The benchmark then starts a
server of its own from the machine's PostgreSQL programs (``/usr/lib/postgresql/<v>/bin``,
Debian's layout), in a temporary folder, on a free TCP port of 127.0.0.1 and a Unix socket in
that folder, with trust authentication (reachable only from this machine), and stops it by its
postmaster's pid when done. PostgreSQL refuses to run as root: when the benchmark runs as root
the cluster belongs to the ``postgres`` user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Final

import psutil

#: Where Debian's packages put each PostgreSQL major version's programs.
BIN_ROOT: Final[Path] = Path("/usr/lib/postgresql")


class ClusterUnavailable(RuntimeError):
    """The private cluster cannot be made here (no programs, no user, initdb or start failed);
    the message says which."""


def bin_dir(version: int = 15) -> Path:
    """The folder of PostgreSQL ``version``'s programs.

    Raises:
        ClusterUnavailable: they are not installed.
    """
    folder = BIN_ROOT / str(version) / "bin"
    if not (folder / "initdb").exists():
        raise ClusterUnavailable(f"no PostgreSQL {version} programs in {folder}")
    return folder


def free_port() -> int:
    """A TCP port of 127.0.0.1 free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_of(proc: psutil.Process, *, children_done: bool) -> float:
    times = proc.cpu_times()
    used = times.user + times.system
    if children_done:  # every child the postmaster has reaped (exited backends)
        used += times.children_user + times.children_system
    return float(used)


class PrivateCluster:
    """A PostgreSQL server of the benchmark's own, alive inside a ``with`` block.

    Args:
        settings: ``postgresql.conf`` lines to add, ``{name: value}`` (values as written in the
            file, quoted where PostgreSQL needs quotes).
        version: the PostgreSQL major version whose programs run it.

    Attributes:
        port: its TCP port on 127.0.0.1.
        folder: its temporary folder (data in ``data/``, the socket in ``socket/``).
        pid: the postmaster's pid once started.
    """

    def __init__(self, settings: dict[str, str] | None = None, version: int = 15) -> None:
        self.bin = bin_dir(version)
        self.settings = settings or {}
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="pgpulse-private-pg-"))
        self.pid: int | None = None
        self._user = "postgres" if os.geteuid() == 0 else None

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq DSN to ``dbname`` over TCP as the cluster's superuser ``postgres``."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self._user:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=False)

    def start(self) -> PrivateCluster:
        """initdb, write the settings, start the server and wait until it accepts connections.

        Raises:
            ClusterUnavailable: initdb or the start failed (with the server's last log lines).
        """
        data, sock = self.folder / "data", self.folder / "socket"
        sock.mkdir()
        if self._user:
            try:
                entry = pwd.getpwnam(self._user)
            except KeyError:
                raise ClusterUnavailable("running as root and no 'postgres' user") from None
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
            os.chown(sock, entry.pw_uid, entry.pw_gid)
        done = self._run(
            str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E",
            "UTF8", "--no-sync",
        )  # fmt: skip
        if done.returncode != 0:
            raise ClusterUnavailable(f"initdb failed: {done.stderr.strip()[-300:]}")
        conf = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{sock}'",
            **self.settings,
        }
        with (data / "postgresql.conf").open("a") as out:
            out.writelines(f"{name} = {value}\n" for name, value in conf.items())
        log = self.folder / "server.log"
        done = self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "start")
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-600:] if log.exists() else done.stderr
            self.stop()
            raise ClusterUnavailable(f"the private server did not start: {tail.strip()}")
        self.pid = int((data / "postmaster.pid").read_text().split()[0])
        return self

    def cpu_seconds(self) -> float:
        """CPU seconds every process of the server has used so far: the postmaster, the
        children it has reaped (each short-lived backend of a connection that ended) and the
        children alive now. NaN when the server is not running."""
        if self.pid is None:
            return float("nan")
        try:
            postmaster = psutil.Process(self.pid)
            total = _cpu_of(postmaster, children_done=True)
            for child in postmaster.children(recursive=True):
                try:
                    total += _cpu_of(child, children_done=False)
                except psutil.Error:
                    continue  # exited between the listing and the reading
        except psutil.Error:
            return float("nan")
        return total

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server by its pid (a fast shutdown, then SIGKILL after ``timeout``
        seconds) and remove its folder."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
                deadline = time.monotonic() + timeout
                while psutil.pid_exists(self.pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if psutil.pid_exists(self.pid):
                    os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.pid = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PrivateCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
