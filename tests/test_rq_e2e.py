"""The ``rq`` handler end to end: a real node enqueues into Redis with the occurrence's id, a
second send of an occurrence finds it enqueued and sends nothing, and a real ``rq worker``
runs each occurrence once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from helpers import pgpulse
from pgpulse.node.handlers import RunContext
from pgpulse.node.rq_handler import RqSender, rq_handler
from pgpulse.node.task_queues import TASK_ID_NAMESPACE

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parent
REDIS = "redis://127.0.0.1:6379/0"


async def test_a_node_enqueues_each_occurrence_once_for_an_rq_worker(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    queue = f"pulse-rq-{uuid.uuid4().hex[:12]}"
    record = tmp_path / "executed.jsonl"
    env = {
        **os.environ,
        "PGPULSE_DATABASE_URL": dsn,
        "PULSE_TEST_RQ_RECORD": str(record),
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    payload = {"func": "rq_tasks.record", "args": ["tick"], "queue": queue}
    made = pgpulse(
        "job", "create", "tick", "--schedule", "@every 1s", "--handler", "rq",
        "--payload", json.dumps(payload), dsn=dsn,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    node = subprocess.Popen(  # noqa: ASYNC220 - a node runs beside the test, not awaited
        [sys.executable, "-m", "pgpulse", "--log-level", "WARNING", "node", "run",
         "--rq-redis", REDIS, "--heartbeat", "0.3", "--poll", "0.5"],
        env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 40
        while True:
            done = db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
            ).fetchone()["n"]
            if done >= 3:
                break
            assert time.monotonic() < deadline, "the node did not run 3 occurrences"
            time.sleep(0.1)  # noqa: ASYNC251 - polls another process's writes
    finally:
        node.terminate()
        node.wait(20)
    runs = db.execute(
        "SELECT r.job_id, r.id, r.scheduled_for, r.output FROM pgpulse_runs r "
        "WHERE r.outcome = 'succeeded' ORDER BY r.scheduled_for"
    ).fetchall()
    expected = [
        str(uuid.uuid5(TASK_ID_NAMESPACE, f"{r['job_id']}/{r['scheduled_for'].isoformat()}"))
        for r in runs
    ]
    for job_id, run in zip(expected, runs, strict=True):
        assert run["output"] == (
            f"enqueued job {job_id} (rq_tasks.record) to queue {queue} via {REDIS}"
        )
    redis = Redis.from_url(REDIS)
    waiting = redis.llen(f"rq:queue:{queue}")
    # The next attempt of an occurrence already enqueued (its node died before recording).
    again = RunContext(
        job_id=runs[0]["job_id"], job_name="tick", tenant="default", payload=payload,
        scheduled_for=runs[0]["scheduled_for"], attempt=2, run_id=runs[0]["id"],
        fencing_token=9, timeout=None, node_id="other", options={"rq": RqSender(REDIS)},
    )  # fmt: skip
    assert await rq_handler(again) == (
        f"job {expected[0]} (rq_tasks.record) was already enqueued to queue {queue} via "
        f"{REDIS}; not sent again"
    )
    assert redis.llen(f"rq:queue:{queue}") == waiting
    # The test waits for what it means, every enqueued job executed, not for the burst
    # worker's exit: RQ 3.0's worker has been seen here to print "done, quitting" and then not
    # exit for over a minute.
    worker = subprocess.Popen(  # noqa: ASYNC220 - a worker runs beside the test
        [str(Path(sys.executable).with_name("rq")), "worker", "--burst", "--url", REDIS,
         "-w", "rq.worker.SimpleWorker", queue],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not set(expected) <= _executed_ids(record):
            assert worker.poll() in (None, 0), "the rq worker failed"
            assert time.monotonic() < deadline, "the rq worker did not run every job"
            time.sleep(0.1)  # noqa: ASYNC251 - polls another process's writes
    finally:
        if worker.poll() is None:  # a worker that hangs at its exit may hang at SIGTERM too
            worker.kill()
        worker.wait(20)
    executed = [json.loads(line) for line in record.read_text().splitlines()]
    ids = [line["id"] for line in executed]
    assert len(ids) == len(set(ids))  # once each
    assert set(expected) <= set(ids)
    assert {line["args"][0] for line in executed} == {"tick"}
    first = next(line for line in executed if line["id"] == expected[0])
    assert first["meta"]["pulse_job"] == "default/tick"
    assert first["meta"]["pulse_scheduled_for"] == runs[0]["scheduled_for"].isoformat()


def _executed_ids(record: Path) -> set[str]:
    """The job ids the worker recorded so far."""
    if not record.exists():
        return set()
    complete = record.read_text().split("\n")[:-1]  # a line being written has no newline yet
    return {json.loads(line)["id"] for line in complete}
