"""A real node process through a real PgBouncer (Debian's ``pgbouncer``; the test skips, saying
so, without it): in transaction mode the node refuses to start, in one line saying why (its
claim session needs its state kept), exit 3; in session mode it starts. With
``--pool-database-url`` only its pool goes through transaction mode, its sessions direct."""

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
from typing import Any

import psycopg
import pytest
from psycopg import conninfo
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from helpers import PGPULSE, pgpulse
from pgpulse import App
from pgpulse.node.engine import NodeConfig
from test_node_healing import succeeded_since, wait_until
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
    host, port = str(params.get("host") or "127.0.0.1"), params.get("port") or "5432"
    folder = Path(tempfile.mkdtemp(prefix="pgpulse-pgbouncer-"))
    folder.chmod(0o755)
    listen = free_port()
    config = folder / "pgbouncer.ini"
    users = folder / "users.txt"
    user_name = params.get("user") or "postgres"
    users.write_text(f'"{user_name}" ""\n')
    config.write_text(
        "[databases]\n"
        f"* = host={host} port={port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {listen}\n"
        f"auth_type = trust\nauth_file = {users}\nadmin_users = {user_name}\n"
        f"pool_mode = {mode}\nunix_socket_dir =\nlogfile =\n"
    )
    for path in (users, config):
        path.chmod(0o644)
    user = []
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        user = ["-u", "postgres" if _has_user("postgres") else "nobody"]
        if host.startswith("/"):  # a socket folder (the embedded server's): only its owner enters
            user = ["-u", pwd.getpwuid(Path(host).stat().st_uid).pw_name]
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


def pgbouncer_clients(through: str) -> list[dict[str, object]]:
    """PgBouncer's ``SHOW CLIENTS`` (its admin console speaks the simple query protocol only)."""
    admin = conninfo.make_conninfo(through, dbname="pgbouncer")
    with psycopg.connect(
        admin, autocommit=True, cursor_factory=psycopg.ClientCursor, row_factory=dict_row
    ) as conn:
        return conn.execute("SHOW CLIENTS").fetchall()


@pytest.mark.slow
def test_a_node_pools_through_pgbouncer_in_transaction_mode(dsn: str, db: Any) -> None:
    with pgbouncer(dsn, "transaction") as through:
        start = db.execute("SELECT now() AS t").fetchone()["t"]
        proc = subprocess.Popen(
            [PGPULSE, "node", "run", "--app", "heal_app:app", "--node-id", "pooled"],
            env={
                **os.environ,
                "PGPULSE_DATABASE_URL": dsn,
                "PGPULSE_NODE_RUN_POOL_DATABASE_URL": through,
                "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            },
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            err = Lines(proc)
            wait_until(lambda: err.having("node pooled started with"), "the node's start")
            wait_until(lambda: succeeded_since(db, "every-second", start) >= 8, "8 runs")
            names = [str(c["application_name"]) for c in pgbouncer_clients(through)]
            # The pool (2 connections at least) goes through PgBouncer; the heartbeat, claim
            # and LISTEN sessions do not: they are connected to PostgreSQL directly.
            assert names.count("pgpulse:pooled") >= 2, names
            assert not [name for name in names if name.startswith("pgpulse:pooled:")], names
            direct = {
                row["application_name"]
                for row in db.execute(
                    "SELECT application_name FROM pg_stat_activity "
                    "WHERE application_name LIKE 'pgpulse:pooled:%'"
                )
            }
            assert direct >= {"pgpulse:pooled:beat", "pgpulse:pooled:claim"}, direct
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, err.lines
            stopped = db.execute(
                "SELECT state FROM pgpulse_nodes WHERE node_id = 'pooled'"
            ).fetchone()
            assert stopped is not None and stopped["state"] == "stopped", stopped
            failed = db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs r JOIN pgpulse_jobs j ON j.id = r.job_id "
                "WHERE j.name = 'every-second' AND r.outcome <> 'succeeded'"
            ).fetchone()
            assert failed["n"] == 0, err.lines
            assert not err.having("prepared statement"), err.lines
            assert not err.having("replacing the connection"), err.lines
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            assert proc.stderr is not None
            proc.stderr.close()


async def test_a_node_pool_through_pgbouncer_keeps_no_session_state(dsn: str) -> None:
    with pgbouncer(dsn, "transaction") as through:
        async with App().running(
            dsn, config=NodeConfig(node_id="pool-state"), pool_database_url=through
        ) as node:
            pool = node.store.pool
            assert isinstance(pool, AsyncConnectionPool)
            query = "SELECT pg_backend_pid() AS pid, current_setting('statement_timeout') AS t"
            async with pool.connection() as conn:
                for _ in range(8):  # psycopg would prepare it from the 6th on
                    first = await (await conn.execute(query)).fetchone()
                # A second client holds the server session conn just released (PgBouncer
                # lends it first): conn's next statement runs in another server session,
                # which does not have the statements the first one prepared.
                other = await psycopg.AsyncConnection.connect(through, autocommit=True)
                try:
                    async with other.transaction():
                        await other.execute("SELECT 1")
                        second = await (await conn.execute(query)).fetchone()
                finally:
                    await other.close()
    assert first is not None and second is not None
    assert first["pid"] != second["pid"]  # the case above did happen
    with psycopg.connect(dsn) as direct:
        own = direct.execute("SHOW statement_timeout").fetchone()
    assert own is not None
    # Nothing was SET on PgBouncer's shared server sessions: the database's own value.
    assert first["t"] == second["t"] == own[0]


def test_node_run_refuses_a_malformed_pool_dsn() -> None:
    done = pgpulse(
        "node", "run", "--pool-database-url", "host=x port=1 password=Hunter2 =", timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "--pool-database-url" in done.stderr and "is not a valid DSN" in done.stderr
    assert "Hunter2" not in done.stderr
