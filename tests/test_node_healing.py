"""Real node processes on a real PostgreSQL whose settings an operator changes under them: a
node's sessions set what Pulse needs as they connect (``statement_timeout`` and the other
timeouts), so ``ALTER DATABASE ... SET statement_timeout = '1ms'`` never starves them, and a
session that fails with an error a fresh connection can cure is replaced."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers import PGPULSE

TESTS = Path(__file__).parent
ROLES = (":beat", ":claim", ":listen")


@contextmanager
def node(dsn: str, node_id: str, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """``pgpulse node run --app heal_app:app`` as its own process (SIGKILLed at the end if
    still running); its stderr is captured."""
    proc = subprocess.Popen(
        [
            *(PGPULSE, "--log-level", "info", "node", "run", "--app", "heal_app:app"),
            *("--node-id", node_id, "--heartbeat", "0.5", *extra),
        ],
        env={
            **os.environ,
            "PGPULSE_DATABASE_URL": dsn,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        },
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def wait_until(check: Callable[[], Any], what: str, seconds: float = 60) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what`` after ``seconds``
    (a bound on an event that either comes or never does, not a timing margin)."""
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.2)
    return found


def succeeded_since(db: Any, job: str, since: Any) -> int:
    row = db.execute(
        "SELECT count(*) AS n FROM pgpulse_runs r JOIN pgpulse_jobs j ON j.id = r.job_id "
        "WHERE j.name = %s AND r.outcome = 'succeeded' AND r.finished_at > %s",
        (job, since),
    ).fetchone()
    return int(row["n"])


def sessions_since(db: Any, node_id: str, since: Any) -> set[str]:
    """The node's dedicated sessions (their roles) opened after ``since``."""
    rows = db.execute(
        "SELECT application_name FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name LIKE %s "
        "AND backend_start > %s",
        (f"pgpulse:{node_id}:%", since),
    ).fetchall()
    return {row["application_name"].removeprefix(f"pgpulse:{node_id}") for row in rows}


def terminate(db: Any, node_id: str) -> Any:
    """``pg_terminate_backend`` every session of the node; return the database's ``now()``."""
    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name LIKE %s",
        (f"pgpulse:{node_id}%",),
    )
    return db.execute("SELECT clock_timestamp() AS t").fetchone()["t"]


def set_statement_timeout(db: Any, value: str | None) -> None:
    name = sql.Identifier(db.info.dbname)
    if value is None:
        db.execute(sql.SQL("ALTER DATABASE {} RESET statement_timeout").format(name))
    else:
        db.execute(
            sql.SQL("ALTER DATABASE {} SET statement_timeout = {}").format(name, sql.Literal(value))
        )


@pytest.mark.slow
def test_nodes_keep_firing_through_a_1ms_database_statement_timeout(dsn: str, db: Any) -> None:
    with node(dsn, "healer") as proc:
        start = db.execute("SELECT now() AS t").fetchone()["t"]
        wait_until(lambda: succeeded_since(db, "every-second", start) >= 2, "a first run")

        # Every new session of the database now gets a 1 ms statement timeout, and the node's
        # sessions are killed, so all of them (pool and dedicated) are new ones.
        set_statement_timeout(db, "1ms")
        try:
            killed_at = terminate(db, "healer")
            wait_until(
                lambda: set(ROLES) <= sessions_since(db, "healer", killed_at),
                "the node's reconnection",
            )
            # Runs go on meanwhile: the node's sessions set their own statement_timeout.
            wait_until(
                lambda: succeeded_since(db, "every-second", killed_at) >= 3,
                "a run under the database's 1 ms statement timeout",
            )
            fresh = psycopg.connect(dsn, autocommit=True)
            with fresh, pytest.raises(psycopg.errors.QueryCanceled):
                fresh.execute("SELECT pg_sleep(0.05)")  # the setting is in force for others
        finally:
            set_statement_timeout(db, None)
        reset_at = db.execute("SELECT now() AS t").fetchone()["t"]
        wait_until(lambda: succeeded_since(db, "every-second", reset_at) >= 3, "a run after RESET")
        alive = db.execute(
            "SELECT state, last_heartbeat > %s AS beating FROM pgpulse_nodes "
            "WHERE node_id = 'healer'",
            (reset_at,),
        ).fetchone()
        assert (alive["state"], alive["beating"]) == ("alive", True)
        assert proc.poll() is None


def rollbacks(db: Any) -> int:
    """The database's transactions rolled back so far (a failed statement counts)."""
    db.execute("SELECT pg_stat_clear_snapshot()")
    row = db.execute(
        "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return int(row["xact_rollback"])


def set_search_path(db: Any, value: str | None) -> None:
    name = sql.Identifier(db.info.dbname)
    if value is None:
        db.execute(sql.SQL("ALTER DATABASE {} RESET search_path").format(name))
    else:
        db.execute(
            sql.SQL("ALTER DATABASE {} SET search_path = {}").format(name, sql.Literal(value))
        )


@pytest.mark.slow
def test_sessions_opened_under_a_wrong_setting_are_replaced_after_its_reset(
    dsn: str, db: Any
) -> None:
    """A setting Pulse does not set itself (``search_path``) reaches the sessions opened while
    it is in force; once it is reset, the errors it caused (no such table) make each session
    open a fresh one, and the node fires again without anyone killing its sessions."""
    with node(dsn, "mender") as proc:
        start = db.execute("SELECT now() AS t").fetchone()["t"]
        wait_until(lambda: succeeded_since(db, "every-second", start) >= 2, "a first run")
        set_search_path(db, "nowhere")
        try:
            failed = rollbacks(db)
            terminate(db, "mender")
            # The node's new sessions meet the wrong path: their statements fail.
            wait_until(lambda: rollbacks(db) >= failed + 5, "a failure under the wrong path")
        finally:
            set_search_path(db, None)
        reset_at = db.execute("SELECT now() AS t").fetchone()["t"]
        wait_until(lambda: succeeded_since(db, "every-second", reset_at) >= 3, "a run after RESET")
        beat = db.execute(
            "SELECT last_heartbeat > %s AS beating FROM pgpulse_nodes WHERE node_id = 'mender'",
            (reset_at,),
        ).fetchone()
        assert beat["beating"]
        assert proc.poll() is None
