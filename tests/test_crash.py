"""Crash recovery: a node killed with SIGKILL mid-run loses nothing and duplicates nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crash_app import app
from helpers import add, spec
from pgpulse.store import Store
from test_engine import node, running, wait_until

TESTS = Path(__file__).parent


@pytest.mark.slow
async def test_killed_node_run_is_taken_over_as_attempt_two(
    store: Store, dsn: str, db: Any
) -> None:
    await add(store, spec("billing", schedule="0 0 1 1 *", handler="slow"))
    occurrence = await store.trigger_job("default", "billing")
    env = {
        **os.environ,
        "PGPULSE_DATABASE_URL": dsn,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    # The node under test must be its own OS process to be killed; Popen returns at once.
    proc = subprocess.Popen(  # noqa: ASYNC220
        [
            sys.executable,
            "-m",
            "pgpulse",
            "--log-level",
            "WARNING",
            "node",
            "run",
            "--app",
            "crash_app:app",
            "--node-id",
            "node-a",
            "--lease",
            "3",
            "--heartbeat",
            "0.5",
            "--poll",
            "0.5",
        ],
        env=env,
    )
    try:
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs_live WHERE outcome = 'running' "
                "AND node_id = 'node-a'"
            ).fetchone()["n"],
            within=30,
        )
        first = db.execute("SELECT id, attempts FROM pgpulse_runs_live").fetchone()
        assert first["attempts"] == 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    b = node(store, dsn, app.handlers, node_id="node-b", lease=3.0, heartbeat_interval=0.5)
    async with running(b):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
            ).fetchone()["n"],
            within=30,
        )
        await asyncio.sleep(0)
    runs = db.execute(
        "SELECT id, scheduled_for, attempts, outcome, node_id, output FROM pgpulse_runs"
    ).fetchall()
    assert runs == [
        {
            "id": first["id"],
            "scheduled_for": occurrence,
            "attempts": 2,
            "outcome": "succeeded",
            "node_id": "node-b",
            "output": "done by node-b at attempt 2",
        }
    ]
    assert (
        db.execute("SELECT count(*) AS n FROM pgpulse_jobs WHERE status = 'running'").fetchone()[
            "n"
        ]
        == 0
    )
