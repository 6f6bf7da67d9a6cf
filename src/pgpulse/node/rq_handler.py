"""The ``rq`` built-in handler: enqueue one occurrence into an RQ queue, with RQ's own client.

RQ takes a job id from the caller, so every attempt of an occurrence enqueues the same id
(:func:`pgpulse.node.task_queues.occurrence_task_id`), and an attempt that finds that job already
in Redis (the previous attempt's node died after enqueueing, before recording) does not enqueue
it again. The payload names the function (``{"func": "proj.jobs.report", "args"?: [...],
"kwargs"?: {...}, "queue"?: "default", "timeout"?: seconds}``); Redis is the node's
(``node run --rq-redis URL``), never the payload's. A node without it claims no ``rq`` job.
The client is blocking: each enqueue runs in a worker thread, bounded in time.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Any

from pgpulse.core.errors import InvalidPayload
from pgpulse.core.payloads import RQ_FIELDS, validate_rq_payload
from pgpulse.node.handlers import HandlerFailed, RunContext
from pgpulse.node.task_queues import (
    check_url,
    occurrence_task_id,
    pulse_headers,
    redacted_url,
    scrub_url,
    send_bounded,
)

__all__ = ["RQ_FIELDS", "RqSender", "rq_handler", "validate_rq_payload"]

#: Connect and read timeout of the node's Redis connection, seconds: a Redis that is down
#: fails the attempt within seconds.
CONNECT_TIMEOUT = 5.0
_SCHEMES = frozenset({"redis", "rediss", "unix"})


class RqSender:
    """One node's Redis connection for RQ (made at the first enqueue; thread-safe).

    Raises:
        InvalidInput: on construction, ``field="rq_redis"``: the URL does not parse.
    """

    def __init__(self, url: str) -> None:
        check_url("rq_redis", url, _SCHEMES)
        self._url = url
        self._redis: Any = None
        self._lock = threading.Lock()
        #: How runs name the Redis: its URL without the password.
        self.where = redacted_url(url)

    def scrub(self, text: str) -> str:
        """``text`` without the Redis URL's credentials (an exception's text may quote it)."""
        return scrub_url(text, self._url)

    def _connection(self) -> Any:
        with self._lock:
            if self._redis is None:
                from redis import Redis

                self._redis = Redis.from_url(
                    self._url,
                    socket_connect_timeout=CONNECT_TIMEOUT,
                    socket_timeout=CONNECT_TIMEOUT,
                )
            return self._redis

    def send(self, payload: Mapping[str, Any], job_id: str, meta: Mapping[str, Any]) -> bool:
        """Enqueue the job ``job_id`` unless Redis holds it already (blocking: call it in a
        thread). Returns whether it was enqueued now.

        Raises:
            Whatever redis-py and RQ raise when Redis refuses or cannot be reached.
        """
        from rq import Queue
        from rq.job import Job

        connection = self._connection()
        if Job.exists(job_id, connection=connection):
            return False
        Queue(payload.get("queue") or "default", connection=connection).enqueue_call(
            payload["func"],
            args=list(payload.get("args") or ()),
            kwargs=dict(payload.get("kwargs") or {}),
            timeout=payload.get("timeout"),
            job_id=job_id,
            meta=dict(meta),
        )
        return True


async def rq_handler(ctx: RunContext) -> str | None:
    """Enqueue ``ctx``'s occurrence as RQ job ``payload.func`` with the occurrence's stable id
    (the ``pulse_*`` facts of :func:`~pgpulse.node.task_queues.pulse_headers` in its ``meta``).

    Args:
        ctx: the attempt; ``ctx.options["rq"]`` is the node's :class:`RqSender`.

    Returns:
        ``enqueued job <id> (<func>) to queue <queue> via <redis>``, or ``job <id> ... was
        already enqueued`` when an earlier attempt of the occurrence enqueued it.

    Raises:
        HandlerFailed: invalid payload; the node has no Redis for RQ; Redis refused or was not
            reached within :data:`~pgpulse.node.task_queues.SEND_TIMEOUT` (or the job's shorter
            timeout).
    """
    try:
        validate_rq_payload(ctx.payload)
    except InvalidPayload as exc:
        raise HandlerFailed(f"invalid payload: {exc}") from exc
    sender = ctx.options.get("rq")
    if not isinstance(sender, RqSender):
        raise HandlerFailed("this node has no Redis for RQ (node run --rq-redis URL)")
    job_id = occurrence_task_id(ctx)
    sent = await send_bounded(
        ctx,
        sender,
        f"job {job_id}",
        functools.partial(sender.send, ctx.payload, job_id, pulse_headers(ctx)),
    )
    queue = ctx.payload.get("queue") or "default"
    what = f"job {job_id} ({ctx.payload['func']})"
    if not sent:
        return f"{what} was already enqueued to queue {queue} via {sender.where}; not sent again"
    return f"enqueued {what} to queue {queue} via {sender.where}"
