"""Pulse as celery beat, end to end: real ``pgpulse node run`` processes send to a real broker
(Redis, RabbitMQ on 127.0.0.1) and a real ``celery worker`` executes what they send; one node
is SIGKILLed right after a publish and before its run is recorded (deterministically: the test
app's ``after_task_publish`` hook, :mod:`celery_worker_app`), and the occurrence's repeat carries
the same task id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from helpers import pgpulse
from pgpulse.node.task_queues import TASK_ID_NAMESPACE

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parent
CELERY = str(Path(sys.executable).with_name("celery"))
BROKERS = {
    "redis": "redis://127.0.0.1:6379/0",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672//",
}


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }


def _node(dsn: str, node_id: str, *options: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``pgpulse node run`` with sub-second heartbeats and a 2 s lease; Popen returns at once."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pgpulse",
            "--log-level",
            "WARNING",
            "node",
            "run",
            "--node-id",
            node_id,
            "--lease",
            "2",
            "--heartbeat",
            "0.3",
            "--poll",
            "0.5",
            "--drain-timeout",
            "5",
            *options,
        ],
        env=_env({"PGPULSE_DATABASE_URL": dsn, **env}),
        cwd=TESTS,
        stderr=subprocess.DEVNULL,
    )


@contextmanager
def _processes(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    """SIGTERM every process on the way out (a node drains, a worker warm-shuts down)."""
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


def _until(predicate: Callable[[], bool], what: str, within: float = 40.0) -> None:
    """Wait on a condition of the outside world (files, rows, processes), polled; fail naming
    ``what`` after ``within`` seconds (a bound for a stuck run, not a timing margin)."""
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _expected_id(job_id: int, scheduled_for: Any) -> str:
    """The task id an occurrence must carry, derived here from its definition (job id and
    scheduled_for in UTC), not read from the code under test."""
    return str(uuid.uuid5(TASK_ID_NAMESPACE, f"{job_id}/{scheduled_for.isoformat()}"))


def _create(dsn: str, name: str, queue: str) -> None:
    payload = {"task": "pulse_test.record", "args": [name], "kwargs": {"n": 1}, "queue": queue}
    made = pgpulse(
        "job", "create", name, "--schedule", "@every 1s", "--handler", "celery",
        "--payload", json.dumps(payload), "--retry-backoff", "1", dsn=dsn,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_two_nodes_feed_a_celery_worker_once_per_occurrence(
    broker: str, dsn: str, db: Any, tmp_path: Path
) -> None:
    url = BROKERS[broker]
    queue = f"pulse-e2e-{uuid.uuid4().hex[:12]}"
    record = tmp_path / "executed.jsonl"
    marker = tmp_path / "killed-after-publish"
    app_env = {
        "PULSE_TEST_CELERY_BROKER": url,
        "PULSE_TEST_CELERY_RECORD": str(record),
        "PULSE_TEST_CELERY_QUEUE": queue,
    }
    worker = subprocess.Popen(
        [CELERY, "-A", "celery_worker_app", "worker", "--pool", "solo", "-c", "1", "-Q", queue,
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"],
        env=_env(app_env), cwd=TESTS, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    with _processes(worker):
        _create(dsn, "killed", queue)
        # Node a sends through the team's app; its hook SIGKILLs it right after its first
        # publish, before the run is recorded.
        victim = _node(
            dsn, "a", "--celery-app", "celery_worker_app:app",
            env={**app_env, "PULSE_TEST_KILL_AFTER_PUBLISH": str(marker)},
        )  # fmt: skip
        with _processes(victim):
            _until(lambda: victim.poll() is not None, "node a never published")
        assert victim.returncode == -signal.SIGKILL
        killed_id = marker.read_text()
        _create(dsn, "steady", queue)
        one = _node(dsn, "b", "--celery-broker", url, env={})
        two = _node(dsn, "c", "--celery-app", "celery_worker_app:app", env=app_env)
        with _processes(one, two):

            def enough() -> bool:
                runs = db.execute(
                    "SELECT j.name, count(*) AS n FROM pgpulse_runs r "
                    "JOIN pgpulse_jobs j ON j.id = r.job_id WHERE r.outcome = 'succeeded' "
                    "GROUP BY j.name"
                ).fetchall()
                done = {row["name"]: row["n"] for row in runs}
                return min(done.get("killed", 0), done.get("steady", 0)) >= 3  # type: ignore[no-any-return]

            _until(enough, "the two nodes did not run 3 occurrences of each job")
        runs = db.execute(
            "SELECT r.job_id, j.name, r.scheduled_for, r.attempts, r.output, r.node_id "
            "FROM pgpulse_runs r JOIN pgpulse_jobs j ON j.id = r.job_id "
            "WHERE r.outcome = 'succeeded' ORDER BY r.scheduled_for"
        ).fetchall()
        expected = {_expected_id(r["job_id"], r["scheduled_for"]): r for r in runs}
        # The worker drains what was sent; then it is stopped (warm shutdown).
        _until(
            lambda: set(expected) <= {line["id"] for line in _records(record)},
            "the worker did not execute every occurrence sent",
        )
    executed = _records(record)
    ids_by_occurrence: dict[tuple[str, str], set[str]] = defaultdict(set)
    times_by_id: dict[str, int] = defaultdict(int)
    for line in executed:
        ids_by_occurrence[(line["pulse_job"], line["pulse_scheduled_for"])].add(line["id"])
        times_by_id[line["id"]] += 1
    # No occurrence with two different ids; every id is its occurrence's derived id.
    assert all(len(ids) == 1 for ids in ids_by_occurrence.values()), ids_by_occurrence
    for (job, at), ids in ids_by_occurrence.items():
        run = expected.get(next(iter(ids)))
        if run is not None:
            assert (f"default/{run['name']}", run["scheduled_for"].isoformat()) == (job, at)
    assert set(times_by_id) - set(expected) <= set()  # nothing executed that Pulse did not run
    # The killed occurrence: sent by a, then again by b or c with the same id; run once more.
    retried = [run for run in runs if run["attempts"] > 1]
    assert [run["name"] for run in retried] == ["killed"]
    assert _expected_id(retried[0]["job_id"], retried[0]["scheduled_for"]) == killed_id
    assert times_by_id[killed_id] == 2
    # Every other occurrence: one attempt, one execution.
    assert {times_by_id[task_id] for task_id in expected if task_id != killed_id} == {1}
    assert {run["node_id"] for run in runs} <= {"b", "c"}
    for task_id, run in expected.items():
        assert run["output"].startswith(f"sent task {task_id} (pulse_test.record) to queue {queue}")
    assert "guest:guest" not in "".join(run["output"] for run in runs)
    print(
        f"{broker}: {len(runs)} occurrences, {len(executed)} tasks executed, "
        f"{times_by_id[killed_id] - 1} repeat with the same id after the kill"
    )
