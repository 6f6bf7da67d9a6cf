"""A real node process stopped (SIGTERM) while its database hangs the shutdown's writes (a
lock on ``pgpulse_nodes`` held by the test): the drain, the hand-back and the deregistration
each have a deadline, so the process exits within ``--drain-timeout`` and a bounded margin,
saying in one line what it gave up."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers import PGPULSE
from test_node_healing import wait_until

TESTS = Path(__file__).parent
DRAIN = 2
#: What the shutdown may take past the drain: the loops' last step, the hand-back and the
#: deregistration get 5 s each (engine.STOP_STEP_TIMEOUT), the pool's close 5 s more.
MARGIN = 25


@pytest.mark.slow
def test_a_stop_is_bounded_while_pgpulse_nodes_is_locked(dsn: str, db: Any) -> None:
    proc = subprocess.Popen(
        [
            PGPULSE,
            "--log-level",
            "info",
            "node",
            "run",
            "--app",
            "heal_app:app",
            "--node-id",
            "stopper",
            "--heartbeat",
            "0.5",
            "--drain-timeout",
            str(DRAIN),
        ],
        env={
            **os.environ,
            "PGPULSE_DATABASE_URL": dsn,
            "HEAL_APP_HANG": "1",
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        },
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: db.execute(
                "SELECT 1 FROM pgpulse_jobs WHERE name = 'hang' AND status = 'running'"
            ).fetchone(),
            "the hanging job's run",
        )
        with psycopg.connect(dsn) as holder:  # one transaction: the lock is held until the end
            holder.execute("LOCK TABLE pgpulse_nodes IN ACCESS EXCLUSIVE MODE")
            wait_until(  # the node's heartbeat is stuck behind the lock, as its stop will be
                lambda: db.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'pgpulse:stopper%' "
                    "AND wait_event_type = 'Lock'"
                ).fetchone(),
                "a heartbeat waiting on the lock",
            )
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=DRAIN + MARGIN + 60)
            took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate(timeout=10)
    assert took < DRAIN + MARGIN, f"the node took {took:.1f} s to stop: {err}"
    gave_up = [line for line in err.splitlines() if "did not finish within 5 s" in line]
    assert gave_up, err
    assert "node stopper: the deregistration did not finish within 5 s" in "\n".join(gave_up)
