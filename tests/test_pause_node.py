"""Pausing a job while a real node process runs it (`pgpulse node run --app pause_app:app`):
`job pause` lets the run finish and be recorded, then nothing new starts though it is due;
`job pause --cancel` stops the handler at the node's next lease renewal, records the run
cancelled (not failed, not fenced) and moves the job past it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from helpers import add, apgpulse, spec
from pgpulse.core.schedule import parse_schedule
from pgpulse.db.store import Store
from test_engine import wait_until

TESTS = Path(__file__).parent


@contextlib.asynccontextmanager
async def node_process(dsn: str, folder: Path) -> AsyncIterator[Path]:
    """`pgpulse node run --app pause_app:app` as node n1 (lease 3 s, heartbeat 0.5 s), its
    handlers' events in ``folder``; yields the file its log goes to. Stopped with SIGKILL."""
    log = folder / "node.log"
    env = {
        **os.environ,
        "PGPULSE_DATABASE_URL": dsn,
        "PULSE_PAUSE_DIR": str(folder),
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pgpulse", "--log-level", "WARNING", "node", "run",
            "--app", "pause_app:app", "--node-id", "n1", "--lease", "3", "--heartbeat", "0.5",
            "--poll", "0.5",
            env=env, stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        try:
            yield log
        finally:
            proc.kill()
            await proc.wait()


def events(folder: Path) -> list[str]:
    path = folder / "events"
    return path.read_text().splitlines() if path.exists() else []


def job(db: Any, name: str) -> dict[str, Any]:
    row: dict[str, Any] = db.execute(
        "SELECT * FROM pgpulse_jobs WHERE name = %s", (name,)
    ).fetchone()
    return row


def runs(db: Any) -> list[dict[str, Any]]:
    return list(
        db.execute(
            "SELECT id, scheduled_for, outcome, attempts, node_id, error, output"
            " FROM pgpulse_runs ORDER BY id"
        ).fetchall()
    )


@pytest.mark.slow
async def test_pause_lets_the_run_finish_then_nothing_new_starts(
    store: Store, dsn: str, db: Any, tmp_path: Path
) -> None:
    # backfill: the occurrences due while it runs are its backlog (none skipped, none recorded)
    await add(store, spec("ticker", schedule="@every 1s", handler="until_go", catch_up="backfill"))
    async with node_process(dsn, tmp_path):
        await wait_until(lambda: events(tmp_path), within=30)
        [started] = events(tmp_path)
        held = job(db, "ticker")
        assert held["status"] == "running"
        paused = await apgpulse("job", "pause", "ticker", "--reason", "deploy", "--json", dsn=dsn)
        assert paused.returncode == 0, paused.stderr
        said = json.loads(paused.stdout)
        assert said["message"] == (
            f"ticker is running: pauses when this run ends (run {held['run_id']} on node n1) "
            "(deploy)"
        )
        assert (said["status"], said["pause_requested"], said["changed"]) == ("running", True, True)
        assert (said["run_id"], said["node_id"], said["cancelled_runs"]) == (
            held["run_id"],
            "n1",
            [],
        )
        shown = await apgpulse("job", "show", "ticker", dsn=dsn)
        assert "  status          running; pauses when its run ends: deploy\n" in shown.stdout
        assert "  none: it pauses when its run ends; the first comes after a resume" in shown.stdout
        status = await apgpulse("status", dsn=dsn)
        assert "1 running (1 to pause when its run ends)" in status.stdout, status.stdout
        (tmp_path / "go").touch()
        await wait_until(lambda: job(db, "ticker")["status"] == "paused", within=30)
        after = job(db, "ticker")
        # once its next occurrence, one second after the run's, is due, and a few polls later,
        # nothing has started it
        await wait_until(
            lambda: after["next_run_at"] <= db.execute("SELECT now() AS t").fetchone()["t"],
            within=5,
        )
        await asyncio.sleep(2.0)
        assert events(tmp_path) == [started, "ended"]
    [run] = runs(db)
    assert (run["id"], run["outcome"], run["node_id"], run["output"]) == (
        held["run_id"],
        "succeeded",
        "n1",
        "went",
    )
    assert (after["pause_requested"], after["pause_reason"]) == (False, "deploy")
    assert after["scheduled_for"] == held["scheduled_for"] + timedelta(seconds=1)


@pytest.mark.slow
async def test_pause_cancel_stops_the_handler_at_the_next_renewal(
    store: Store, dsn: str, db: Any, tmp_path: Path
) -> None:
    await add(store, spec("billing", schedule="0 * * * *", handler="hangs"))
    occurrence = await store.trigger_job("default", "billing")
    async with node_process(dsn, tmp_path) as log:
        await wait_until(lambda: events(tmp_path), within=30)
        held = job(db, "billing")
        paused = await apgpulse("job", "pause", "billing", "--cancel", dsn=dsn)
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout == (
            f"paused billing; run {held['run_id']} cancelled (node n1 stops it at its next lease "
            "renewal)\n"
        )
        # heartbeats every 0.5 s: the refused renewal cancels the handler well inside its
        # 3 s lease (its own deadline would come later)
        await wait_until(lambda: "cancelled" in events(tmp_path), within=2.5)
        await asyncio.sleep(1.0)  # the node records nothing of it: the row stays as written
        warned = log.read_text()
    [run] = runs(db)
    assert (run["id"], run["scheduled_for"], run["outcome"], run["attempts"]) == (
        held["run_id"],
        occurrence,
        "cancelled",
        1,
    )
    assert run["node_id"] == "n1" and run["error"].startswith("cancelled by os:")
    assert run["error"].endswith(" (cli): the job was paused, cancelling its run")
    after = job(db, "billing")
    expected = parse_schedule("0 * * * *", "UTC").next_after(occurrence)
    assert (after["status"], after["scheduled_for"], after["lease_expires_at"]) == (
        "paused",
        expected,
        None,
    )
    assert "lease of default/billing lost" in warned and "a pause that cancelled it" in warned
