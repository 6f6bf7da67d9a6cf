"""``pgpulse runs --follow`` prints attempts as they end, as a user watching a deploy runs it:
real node and follow processes on the event loop the CLI uses."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helpers import PGPULSE, pgpulse
from pgpulse.cli.follow import ended_attempts


@pytest.mark.slow
async def test_runs_follow_prints_runs_as_they_end(dsn: str, db: Any) -> None:
    made = pgpulse("job", "create", "tick", "--schedule", "@every 1s", "--catch-up", "backfill",
                   "--handler", "shell",
                   "--payload", '{"command": "echo tock"}', dsn=dsn)  # fmt: skip
    assert made.returncode == 0, made.stderr
    env = {**os.environ, "PGPULSE_DATABASE_URL": dsn}
    node = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pgpulse", "node", "run", "--allow-shell-jobs", "--node-id", "n1",
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    follow = await asyncio.create_subprocess_exec(
        PGPULSE, "runs", "tick", "--follow", "--json",
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert follow.stdout is not None
        lines: list[dict[str, Any]] = []
        async with asyncio.timeout(60):
            while len(lines) < 3:
                lines.append(json.loads(await follow.stdout.readline()))
        follow.send_signal(signal.SIGINT)
        async with asyncio.timeout(20):
            assert await follow.wait() == 0
    finally:
        for proc in (follow, node):
            if proc.returncode is None:
                proc.terminate()
                await proc.wait()
    assert [(r["name"], r["outcome"], r["node_id"]) for r in lines] == [
        ("tick", "succeeded", "n1")
    ] * 3
    assert [r["output"] for r in lines] == ["tock\n"] * 3
    assert [r["attempt"] for r in lines] == [1, 1, 1]
    ids = [r["run_id"] for r in lines]
    assert ids == sorted(set(ids))  # each run once, in the order they ended
    recorded = {
        r["id"] for r in db.execute("SELECT id FROM pgpulse_runs WHERE outcome = 'succeeded'")
    }
    assert set(ids) <= recorded


def _run(run_id: int, outcome: str, *attempts: tuple[int, str, int | None]) -> dict[str, Any]:
    """A run row as Store.list_runs gives it, with attempts (number, outcome, ended minute)."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return {
        "id": run_id, "tenant": "default", "name": "etl", "scheduled_for": at, "kind": "scheduled",
        "outcome": outcome, "finished_at": None, "error": None, "output": None,
        "attempt_log": [
            {"attempt": n, "node_id": "n", "outcome": o, "error": None, "output": None,
             "ended_at": None if minute is None else at + timedelta(minutes=minute)}
            for n, o, minute in attempts
        ],
    }  # fmt: skip


def test_each_attempt_is_printed_once_as_it_ends_a_take_over_too() -> None:
    seen: set[tuple[int, int]] = set()
    first = [_run(2, "running", (1, "running", None)), _run(1, "retrying", (1, "retrying", 1))]
    assert [(a["run_id"], a["attempt"]) for a in ended_attempts(first, seen)] == [(1, 1)]
    # run 2's node died: its lease expired (attempt 1 ends), another node took it over
    later = [
        _run(2, "running", (1, "retrying", 3), (2, "running", None)),
        _run(1, "failed", (1, "retrying", 1), (2, "failed", 2)),
    ]
    assert [(a["run_id"], a["attempt"], a["outcome"]) for a in ended_attempts(later, seen)] == [
        (1, 2, "failed"), (2, 1, "retrying")
    ]  # fmt: skip
    assert ended_attempts(later, seen) == []
    skipped = {**_run(3, "skipped"), "finished_at": datetime(2026, 1, 1, 0, 9, tzinfo=UTC)}
    assert [(a["run_id"], a["attempt"]) for a in ended_attempts([skipped], seen)] == [(3, 0)]
