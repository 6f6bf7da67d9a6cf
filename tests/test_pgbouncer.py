"""A real node process through a real PgBouncer (Debian's ``pgbouncer``; the test skips, saying
so, without it): in transaction mode the node refuses to start, in one line saying why (its
claim session needs its state kept), exit 3; in session mode it starts (issue 37, item 5)."""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from helpers import PGPULSE, pgpulse
from test_node_healing import wait_until
from test_node_start import Lines

PGBOUNCER = Path("/usr/sbin/pgbouncer")
TESTS = Path(__file__).parent

pytestmark = pytest.mark.skipif(
    not PGBOUNCER.is_file(), reason="pgbouncer is not installed (apt-get install pgbouncer)"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def pgbouncer(dsn: str, mode: str) -> Iterator[str]:
    """Run PgBouncer in ``mode`` in front of ``dsn``'s server; yield the DSN through it."""
    params = conninfo.conninfo_to_dict(dsn)
    host, port = params.get("host") or "127.0.0.1", params.get("port") or "5432"
    folder = Path(tempfile.mkdtemp(prefix="pgpulse-pgbouncer-"))
    folder.chmod(0o755)
    listen = free_port()
    config = folder / "pgbouncer.ini"
    users = folder / "users.txt"
    users.write_text(f'"{params.get("user") or "postgres"}" ""\n')
    config.write_text(
        "[databases]\n"
        f"* = host={host} port={port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {listen}\n"
        f"auth_type = trust\nauth_file = {users}\n"
        f"pool_mode = {mode}\nunix_socket_dir =\nlogfile =\n"
    )
    for path in (users, config):
        path.chmod(0o644)
    user = []
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        user = ["-u", "postgres" if _has_user("postgres") else "nobody"]
    proc = subprocess.Popen(
        [str(PGBOUNCER), *user, str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    through = conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(listen))
    try:
        wait_until(lambda: _answers(through), "PgBouncer listening", seconds=30)
        yield through
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        time.sleep(0.1)
        return False
    return True


def test_a_node_behind_pgbouncer_in_transaction_mode_refuses_to_start(dsn: str) -> None:
    with pgbouncer(dsn, "transaction") as through:
        done = pgpulse("node", "run", "--node-id", "pooled", dsn=through, timeout=60)
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "pooler in transaction mode" in lines[0] and "pgpulse:pooled:claim" in lines[0]


@pytest.mark.slow
def test_a_node_behind_pgbouncer_in_session_mode_starts(dsn: str) -> None:
    with pgbouncer(dsn, "session") as through:
        proc = subprocess.Popen(
            [PGPULSE, "node", "run", "--app", "heal_app:app", "--node-id", "sessioned"],
            env={
                **os.environ,
                "PGPULSE_DATABASE_URL": through,
                "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            },
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            err = Lines(proc)
            wait_until(lambda: err.having("node sessioned started with"), "the node's start")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, err.lines
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            assert proc.stderr is not None
            proc.stderr.close()
