"""Crash recovery: a node killed with SIGKILL mid-run loses nothing and duplicates nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from crash_app import app
from helpers import add, spec
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from test_engine import node, running, wait_until

TESTS = Path(__file__).parent


def _node_process(dsn: str, node_id: str, *options: str) -> subprocess.Popen[bytes]:
    """Start ``pgpulse node run --app crash_app:app`` as its own OS process (to be signalled);
    Popen returns at once."""
    env = {
        **os.environ,
        "PGPULSE_DATABASE_URL": dsn,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
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
            node_id,
            "--lease",
            "3",
            "--heartbeat",
            "0.5",
            "--poll",
            "0.5",
            *options,
        ],
        env=env,
    )


async def _running_on(db: Any, node_id: str) -> None:
    await wait_until(
        lambda: db.execute(
            "SELECT count(*) AS n FROM pgpulse_runs_live WHERE outcome = 'running' "
            "AND node_id = %s",
            (node_id,),
        ).fetchone()["n"],
        within=30,
    )


async def _finished_by_node_b(
    store: Store, dsn: str, db: Any, ended: str = "outcome = 'succeeded'"
) -> list[dict[str, Any]]:
    """Run node B until a run row's outcome matches ``ended`` (SQL); return every run row."""
    b = node(store, dsn, app.handlers, node_id="node-b", lease=3.0, heartbeat_interval=0.5)
    async with running(b):
        await wait_until(
            lambda: db.execute(f"SELECT count(*) AS n FROM pgpulse_runs WHERE {ended}").fetchone()[
                "n"
            ],
            within=30,
        )
    rows: list[dict[str, Any]] = db.execute(
        "SELECT id, scheduled_for, attempts, outcome, node_id, output FROM pgpulse_runs"
    ).fetchall()
    return rows


@pytest.mark.slow
async def test_killed_node_run_is_taken_over_as_attempt_two(
    store: Store, dsn: str, db: Any
) -> None:
    await add(store, spec("billing", schedule="0 0 1 1 *", handler="slow"))
    occurrence = await store.trigger_job("default", "billing")
    proc = _node_process(dsn, "node-a")
    try:
        await _running_on(db, "node-a")
        first = db.execute("SELECT id, attempts FROM pgpulse_runs_live").fetchone()
        assert first["attempts"] == 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    assert await _finished_by_node_b(store, dsn, db) == [
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


@pytest.mark.slow
async def test_an_attempt_a_drain_cancelled_stays_in_the_history(
    store: Store, dsn: str, db: Any
) -> None:
    """SIGTERM, a drain shorter than the run: node A cancels the attempt and hands it back at
    once. The history keeps A's attempt and why it ended; node B runs attempt 2 of the run."""
    await add(store, spec("billing", schedule="0 0 1 1 *", handler="slow"))
    occurrence = await store.trigger_job("default", "billing")
    proc = _node_process(dsn, "node-a", "--drain-timeout", "1")
    try:
        await _running_on(db, "node-a")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    reason = "handed back by node node-a at shutdown: unfinished after the drain timeout (1 s)"
    run = db.execute("SELECT id, attempts, outcome, node_id, error FROM pgpulse_runs").fetchone()
    assert {k: v for k, v in run.items() if k != "id"} == {
        "attempts": 1,
        "outcome": "retrying",
        "node_id": "node-a",
        "error": reason,
    }
    job = db.execute("SELECT status, attempt, locked_by FROM pgpulse_jobs").fetchone()
    assert job == {"status": "idle", "attempt": 1, "locked_by": None}  # handed back at once
    assert db.execute("SELECT state FROM pgpulse_nodes").fetchone() == {"state": "stopped"}

    assert await _finished_by_node_b(store, dsn, db) == [
        {
            "id": run["id"],
            "scheduled_for": occurrence,
            "attempts": 2,
            "outcome": "succeeded",
            "node_id": "node-b",
            "output": "done by node-b at attempt 2",
        }
    ]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [False, True], ids=["job_row", "extra_occurrence"])
async def test_a_sigterm_during_the_only_attempt_does_not_use_it_up(
    store: Store, dsn: str, db: Any, extra: bool
) -> None:
    """Issue 37: with max_attempts 1, a graceful stop during the run hands the attempt back as
    an interruption, not a failure: node B runs it to success (attempt 2), and the history keeps
    node A's interrupted attempt. The same for an extra occurrence (a trigger with a payload)."""
    await add(store, spec("billing", schedule="0 0 1 1 *", handler="slow", max_attempts=1))
    if extra:
        await RunControl(store.pool).trigger("default", "billing", {"n": 1})
    else:
        await store.trigger_job("default", "billing")
    proc = _node_process(dsn, "node-a", "--drain-timeout", "1")
    try:
        await _running_on(db, "node-a")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    [done] = await _finished_by_node_b(store, dsn, db, ended="outcome <> 'retrying'")
    assert (done["attempts"], done["outcome"], done["output"]) == (
        2,
        "succeeded",
        "done by node-b at attempt 2",
    )
    [kept] = db.execute("SELECT earlier_attempts FROM pgpulse_runs").fetchone()["earlier_attempts"]
    assert (kept["attempt"], kept["node_id"], kept["outcome"]) == (1, "node-a", "retrying")
    assert kept["error"].startswith("handed back by node node-a at shutdown")


@pytest.mark.slow
async def test_a_shell_command_dies_with_its_node(
    store: Store, dsn: str, db: Any, tmp_path: Path
) -> None:
    """SIGKILL of the node (no cancellation, no drain) ends its shell command and the children
    the command started: none writes its effect after the node is gone, so the sweeper's retry
    on another node is the only run (before, the command ran on, reparented to PID 1)."""
    effects = tmp_path / "effects"
    command = (
        f"(sleep 2; echo child >> {effects}) & echo started >> {effects}; sleep 2; "
        f"echo effect >> {effects}; wait"
    )
    await add(store, spec("billing", schedule="0 0 1 1 *", handler="shell",
                          payload={"command": command}))  # fmt: skip
    await store.trigger_job("default", "billing")
    proc = _node_process(dsn, "node-a", "--allow-shell-jobs")
    try:
        await _running_on(db, "node-a")
        await wait_until(lambda: effects.exists(), within=10)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    await asyncio.sleep(3)  # past the command's and its child's sleeps
    assert effects.read_text() == "started\n"


@pytest.mark.slow
async def test_deleting_a_running_job_says_its_node_cancels_the_attempt(
    store: Store, dsn: str, db: Any
) -> None:
    """`job delete` of a running job names the node whose attempt stops (a trial read only
    "deleted", and found the cancellation in the node's log)."""
    from helpers import pgpulse

    await add(store, spec("billing", schedule="0 0 1 1 *", handler="slow"))
    await store.trigger_job("default", "billing")
    proc = _node_process(dsn, "node-a")
    try:
        await _running_on(db, "node-a")
        deleted = await asyncio.to_thread(pgpulse, "job", "delete", "billing", dsn=dsn)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert (deleted.returncode, deleted.stdout) == (
        0,
        "deleted billing while it ran on node node-a: that node cancels the attempt (its "
        "writes change nothing)\n",
    )


@pytest.mark.slow
async def test_an_upstream_node_killed_before_its_outcome_commits_flows_down_once(
    store: Store, dsn: str, db: Any
) -> None:
    """The downstream's occurrence is written in the transaction of the upstream's fenced
    outcome (docs/chains.md): a node killed with that transaction open (its flow_down held up by
    a lock this test takes) writes neither; the takeover's attempt succeeds and flows down
    once."""
    await add(
        store,
        spec("extract", schedule="0 0 1 1 *", handler="extract"),
        spec("load", schedule="@after", handler="load", after=["extract"]),
    )
    holder = await psycopg.AsyncConnection.connect(dsn)
    await holder.execute("LOCK TABLE pgpulse_flows IN ACCESS EXCLUSIVE MODE")
    occurrence = await store.trigger_job("default", "extract")
    proc = _node_process(dsn, "node-a")
    try:
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%%pgpulse_flows%%'"
            ).fetchone()["n"],
            within=30,
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query LIKE '%%pgpulse_flows%%'"
    )
    await holder.rollback()
    await holder.close()
    assert db.execute("SELECT count(*) AS n FROM pgpulse_runs").fetchone()["n"] == 0
    rows = await _finished_by_node_b(store, dsn, db, ended="kind = 'after'")
    by_kind = sorted((r["output"], r["scheduled_for"], r["attempts"]) for r in rows)
    assert by_kind == [
        ("extracted at attempt 2", occurrence, 2),
        (f"loaded {occurrence:%H:%M}", occurrence, 1),
    ]
    flows = db.execute("SELECT count(*) AS n FROM pgpulse_flows").fetchone()["n"]
    assert flows == 1
