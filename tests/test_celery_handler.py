"""The celery handler's parts that need no worker: the stable task id, a broker that is down,
and which nodes advertise the task-queue handlers."""

from __future__ import annotations

import dataclasses
import socket
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from pgpulse.core.routing import waiting_reason
from pgpulse.db.store import Store
from pgpulse.node.builtins import BUILTIN_HANDLERS
from pgpulse.node.celery_handler import CelerySender, celery_handler
from pgpulse.node.engine import Node, NodeConfig
from pgpulse.node.handlers import HandlerFailed, RunContext
from pgpulse.node.rq_handler import RqSender
from pgpulse.node.task_queues import occurrence_task_id, redacted_url, scrub_url


def _ctx(**overrides: Any) -> RunContext:
    base = RunContext(
        job_id=7, job_name="report", tenant="acme", payload={"task": "proj.tasks.report"},
        scheduled_for=datetime(2026, 10, 25, 1, 30, tzinfo=UTC), attempt=1, run_id=40,
        fencing_token=3, timeout=None, node_id="a",
    )  # fmt: skip
    return dataclasses.replace(base, **overrides)


def test_task_id_is_the_occurrences_not_the_attempts() -> None:
    first = occurrence_task_id(_ctx())
    assert occurrence_task_id(_ctx(attempt=2, fencing_token=9, node_id="b")) == first
    assert occurrence_task_id(_ctx(scheduled_for=datetime(2026, 10, 25, 1, 31, tzinfo=UTC))) != (
        first
    )
    assert occurrence_task_id(_ctx(job_id=8)) != first
    # a deliberate re-run (trigger, backfill) is a new task, the same over its own attempts
    rerun = occurrence_task_id(_ctx(kind="backfill", run_id=41))
    assert rerun != first
    assert occurrence_task_id(_ctx(kind="backfill", run_id=41, attempt=3)) == rerun


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("scheme", ["redis://", "amqp://guest:guest@"])
async def test_a_broker_that_is_down_fails_the_attempt_in_seconds(scheme: str) -> None:
    url = f"{scheme}127.0.0.1:{_closed_port()}/0"
    ctx = _ctx(options={"celery": CelerySender.for_broker(url)})
    started = time.monotonic()
    with pytest.raises(HandlerFailed) as failed:
        await celery_handler(ctx)
    assert time.monotonic() - started < 25  # bounded retries, not Celery's retry-forever
    message = str(failed.value)
    assert message.startswith(f"sending task {occurrence_task_id(ctx)} via ")
    assert "OperationalError" in message and "refused" in message
    assert "guest:guest" not in message


def test_a_broker_url_is_shown_without_its_password() -> None:
    assert redacted_url("amqp://guest:s3cret@mq:5672//") == "amqp://guest:***@mq:5672//"
    assert redacted_url("redis://:pw@r:6379/0;redis://r2") == "redis://:***@r:6379/0;redis://r2"
    # redis-py and kombu also read credentials from the query
    shown = redacted_url("rediss://r:6380/0?password=Hunter2x&ssl_cert_reqs=required")
    assert shown == "rediss://r:6380/0?password=***&ssl_cert_reqs=***"
    said = "cannot connect to rediss://r:6380/0?password=Hunter2x&ssl_cert_reqs=required: AUTH "
    url = "rediss://r:6380/0?password=Hunter2x&ssl_cert_reqs=required"
    assert scrub_url(said + "Hunter2x refused", url) == (
        "cannot connect to rediss://r:6380/0?password=***&ssl_cert_reqs=***: AUTH *** refused"
    )


async def test_only_a_node_with_a_broker_advertises_the_queue_handlers(store: Store) -> None:
    plain = Node(store, "", BUILTIN_HANDLERS, NodeConfig())
    assert {"celery", "rq"} & set(plain.handlers) == set()
    options = {
        "celery": CelerySender.for_broker("redis://127.0.0.1:6379/0"),
        "rq": RqSender("redis://127.0.0.1:6379/0"),
    }
    sending = Node(store, "", BUILTIN_HANDLERS, NodeConfig(handler_options=options))
    assert {"celery", "rq"} <= set(sending.handlers)
    assert waiting_reason("celery") == (
        "no live node has a Celery broker (node run --celery-broker or --celery-app)"
    )
