"""``pgpulse node run`` as a real process on a database that is not accepting connections at
start: it waits (a log line per try, with backoff) and starts once the database answers; a
refusal no retry cures (no such database) is one line and exit 3 at once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from helpers import PGPULSE, pgpulse
from test_node_healing import wait_until

TESTS = Path(__file__).parent


class Lines:
    """The lines a process writes on stderr, as they come (read by a thread)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stderr is not None
        stream = proc.stderr
        self._thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self._thread.start()

    def having(self, text: str) -> list[str]:
        return [line for line in list(self.lines) if text in line]


def allow_connections(server_dsn: str, name: str, allowed: bool) -> None:
    """``ALTER DATABASE name ALLOW_CONNECTIONS allowed``, from the server's maintenance
    database (a database cannot refuse the session that says so)."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                sql.Identifier(name), sql.Literal(allowed)
            )
        )


@pytest.mark.slow
def test_a_node_waits_for_a_database_not_accepting_connections(
    server_dsn: str, dsn: str, db: Any
) -> None:
    name = db.info.dbname
    allow_connections(server_dsn, name, False)
    proc = subprocess.Popen(
        [PGPULSE, "node", "run", "--app", "heal_app:app", "--node-id", "patient"],
        env={
            **os.environ,
            "PGPULSE_DATABASE_URL": dsn,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        },
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        err = Lines(proc)
        try:
            waiting = wait_until(
                lambda: err.having("database not ready at node start"), "a retry line"
            )
            assert "is not currently accepting connections" in waiting[0]
            assert proc.poll() is None
        finally:
            allow_connections(server_dsn, name, True)
        wait_until(
            lambda: err.having("node patient started with"),
            "the node's start once the database accepts connections",
        )
        alive = db.execute("SELECT state FROM pgpulse_nodes WHERE node_id = 'patient'").fetchone()
        assert alive["state"] == "alive"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()


def test_a_node_refused_for_good_exits_3_at_once(dsn: str) -> None:
    params = conninfo.conninfo_to_dict(dsn)
    wrong = conninfo.make_conninfo(dsn, dbname=f"{params['dbname']}_missing")
    done = pgpulse("node", "run", "--node-id", "hopeless", dsn=wrong, timeout=30)
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "does not exist" in lines[0] and "not ready" not in done.stderr
