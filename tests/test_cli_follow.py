"""``pgpulse runs --follow`` prints attempts as they end, as a user watching a deploy runs it:
real node and follow processes on the event loop the CLI uses."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from helpers import PGPULSE, pgpulse
from pgpulse.follow import fresh


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
    ids = [r["id"] for r in lines]
    assert ids == sorted(set(ids))  # each run once, in the order they ended
    recorded = {
        r["id"] for r in db.execute("SELECT id FROM pgpulse_runs WHERE outcome = 'succeeded'")
    }
    assert set(ids) <= recorded


def test_an_attempt_is_printed_once_and_a_retry_again() -> None:
    seen: set[tuple[int, int, str]] = set()
    first = [{"id": 2, "attempts": 1, "outcome": "running"},
             {"id": 1, "attempts": 1, "outcome": "retrying"}]  # fmt: skip
    assert [r["id"] for r in fresh(first, seen)] == [1]
    later = [{"id": 2, "attempts": 1, "outcome": "succeeded"},
             {"id": 1, "attempts": 2, "outcome": "failed"}]  # fmt: skip
    assert [(r["id"], r["outcome"]) for r in fresh(later, seen)] == [
        (1, "failed"),
        (2, "succeeded"),
    ]
    assert fresh(later, seen) == []
