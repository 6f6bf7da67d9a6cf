"""The ``celery`` built-in handler: send one occurrence as a Celery task, with Celery's own client.

Pulse takes the place of ``celery beat``: any number of nodes, one send per occurrence. The
payload names the task (``{"task": "proj.tasks.add", "args": [...], "kwargs": {...},
"queue"?: ..., "headers"?: {...}, "expires"?: seconds}``); the broker is the node's, never the
payload's (``node run --celery-broker URL`` or ``--celery-app module:attr``), so a broker's
password is never stored in a job or shown in a run. A node without either does not advertise
the handler and claims no ``celery`` job (:mod:`pgpulse.core.routing`).

Every attempt of one occurrence sends the same task id (:func:`pgpulse.node.task_queues.
occurrence_task_id`): the send is at least once, and a repeat after a crash between the send
and the record carries the id a worker or result backend can drop it by.

Celery's client is blocking: the send runs in a worker thread, bounded in time, never on the
event loop. One Celery app (with its producer pool) per node, created at the first send.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from pgpulse.core.errors import InvalidInput, InvalidPayload
from pgpulse.core.payloads import CELERY_FIELDS, validate_celery_payload
from pgpulse.node.handlers import HandlerFailed, RunContext
from pgpulse.node.task_queues import (
    check_url,
    occurrence_task_id,
    pulse_headers,
    redacted_url,
    scrub_url,
    send_bounded,
)

__all__ = ["CELERY_FIELDS", "CelerySender", "celery_handler", "validate_celery_payload"]

#: A node's own Celery app (``--celery-broker``) gives up on a broker that is down within
#: seconds: one connection attempt of at most this many seconds, two publish retries.
CONNECT_TIMEOUT = 5.0
_INSTALL = "the celery extra is not installed: pip install 'pgpulse[celery]'"


def load_celery_app(ref: str) -> Any:
    """Import the Celery app ``module:attribute`` (as ``celery -A`` does: the working directory
    is on the import path).

    Raises:
        InvalidInput: ``field="celery_app"``: not ``module:attribute``, celery is not installed,
            the module does not import (the exception's class and text), or the attribute is
            missing or not a Celery app.
    """
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise InvalidInput(
            f"celery app {ref!r} must be module:attribute (e.g. proj.celery:app)",
            field="celery_app",
            value=ref,
        )
    try:
        from celery import Celery
    except ImportError:
        raise InvalidInput(_INSTALL, field="celery_app", value=ref) from None
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except (Exception, SystemExit) as exc:
        why = " ".join(str(exc).split())  # one line, whatever the exception's text holds
        raise InvalidInput(
            f"celery app {ref!r} does not import: {type(exc).__name__}: {why}",
            field="celery_app",
            value=ref,
        ) from None
    if not isinstance(found, Celery):
        raise InvalidInput(
            f"celery app {ref!r} is a {type(found).__name__}, not a Celery app",
            field="celery_app",
            value=ref,
        )
    return found


def _broker_schemes() -> frozenset[str]:
    try:
        from kombu.transport import TRANSPORT_ALIASES
    except ImportError:
        raise InvalidInput(_INSTALL, field="celery_broker", value=None) from None
    return frozenset(TRANSPORT_ALIASES)


class CelerySender:
    """One node's Celery client: the app (given, or made from a broker URL at the first send)
    and its producer pool, shared by every attempt's thread.

    Build it with :meth:`for_broker` or :meth:`for_app`, which check their input at the
    node's start.
    """

    def __init__(self, *, broker: str | None = None, app: Any = None, where: str) -> None:
        self._broker = broker
        self._app = app
        self._lock = threading.Lock()
        #: How runs name the broker: the URL without its password, or ``app <module:attr>``.
        self.where = where

    @classmethod
    def for_broker(cls, url: str) -> CelerySender:
        """A sender to the broker at ``url`` (``redis://``, ``amqp://``... any transport of
        kombu) with Celery's defaults and bounded connect and publish retries.

        Raises:
            InvalidInput: ``field="celery_broker"``: the URL does not parse, or celery is not
                installed.
        """
        check_url("celery_broker", url, _broker_schemes())
        return cls(broker=url, where=redacted_url(url))

    @classmethod
    def for_app(cls, ref: str) -> CelerySender:
        """A sender through the team's configured app (its broker, routes, serializer,
        transport options), imported now.

        Raises:
            InvalidInput: ``field="celery_app"``, as :func:`load_celery_app`.
        """
        return cls(app=load_celery_app(ref), where=f"app {ref}")

    def app(self) -> Any:
        """The Celery app, made at the first call for a broker URL (thread-safe)."""
        with self._lock:
            if self._app is None:
                from celery import Celery

                assert self._broker is not None
                app = Celery("pgpulse", broker=self._broker, set_as_current=False)
                transport: dict[str, Any] = {}
                if self._broker.split(":", 1)[0].startswith(("redis", "rediss")):
                    transport = {
                        "socket_connect_timeout": CONNECT_TIMEOUT,
                        "socket_timeout": CONNECT_TIMEOUT,
                    }
                app.conf.update(
                    broker_connection_timeout=CONNECT_TIMEOUT,
                    broker_connection_retry=False,
                    broker_connection_max_retries=1,
                    broker_transport_options=transport,
                    task_publish_retry_policy={
                        "max_retries": 2,
                        "interval_start": 0,
                        "interval_step": 0.5,
                        "interval_max": 1,
                    },
                )
                self._app = app
            return self._app

    def queue_of(self, task: str, queue: str | None) -> str:
        """The queue the app's routes send ``task`` to (``queue`` when given)."""
        app = self.app()
        if queue:
            return queue
        try:
            routed = app.amqp.router.route({}, task)
            return str(routed["queue"].name)
        except Exception:  # a router of the team's may need the arguments: report the default
            return str(app.conf.task_default_queue)

    def send(self, payload: Mapping[str, Any], task_id: str, headers: Mapping[str, Any]) -> str:
        """Publish one task (blocking: call it in a thread) and return its queue's name.

        Raises:
            Whatever Celery and kombu raise when the broker refuses or cannot be reached.
        """
        task: str = payload["task"]
        queue = payload.get("queue")
        options: dict[str, Any] = {}
        if queue:
            options["queue"] = queue
        if payload.get("expires") is not None:
            options["expires"] = float(payload["expires"])
        self.app().send_task(
            task,
            args=list(payload.get("args") or ()),
            kwargs=dict(payload.get("kwargs") or {}),
            task_id=task_id,
            headers={**(payload.get("headers") or {}), **headers},
            add_to_parent=False,
            **options,
        )
        return self.queue_of(task, queue)

    def scrub(self, text: str) -> str:
        """``text`` without the broker's password (an exception's text may quote the URL)."""
        return scrub_url(text, self._broker) if self._broker else text


async def celery_handler(ctx: RunContext) -> str | None:
    """Send ``ctx``'s occurrence as the Celery task ``payload.task`` and return what was sent.

    The message carries the occurrence's stable task id, ``payload.args``/``kwargs``, the
    queue (``payload.queue``, else the app's routes, else its default queue), ``expires``
    (seconds from the send), and ``payload.headers`` with ``pulse_job``,
    ``pulse_scheduled_for``, ``pulse_attempt`` and ``pulse_run_id`` set last.

    Args:
        ctx: the attempt; ``ctx.options["celery"]`` is the node's :class:`CelerySender`.

    Returns:
        ``sent task <id> (<task>) to queue <queue> via <broker without password>``.

    Raises:
        HandlerFailed: invalid payload; the node has no broker; the broker refused or was not
            reached within the send's bound (:func:`~pgpulse.node.task_queues.send_bounded`), named
            by the exception's class and text.
    """
    try:
        validate_celery_payload(ctx.payload)
    except InvalidPayload as exc:
        raise HandlerFailed(f"invalid payload: {exc}") from exc
    sender = ctx.options.get("celery")
    if not isinstance(sender, CelerySender):
        raise HandlerFailed("this node has no Celery broker (node run --celery-broker URL)")
    task_id = occurrence_task_id(ctx)
    queue = await send_bounded(
        ctx,
        sender,
        f"task {task_id}",
        functools.partial(sender.send, ctx.payload, task_id, pulse_headers(ctx)),
    )
    return f"sent task {task_id} ({ctx.payload['task']}) to queue {queue} via {sender.where}"
