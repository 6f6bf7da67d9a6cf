"""What the task-queue built-ins (``celery``, ``rq``) share: the occurrence's stable task id and
how a node's broker setting is shown (their payload checks are :mod:`pgpulse.core.payloads`').

Pulse hands an occurrence to a queue the team already runs; it never executes the task. The
send is at least once per occurrence (a node may die after the broker took the message and
before the run was recorded; the next attempt sends again), so every attempt of one occurrence
sends the same id (:func:`occurrence_task_id`): a worker or a result backend can drop a repeat.
Nothing here imports a queue's client (pure, no I/O).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from pgpulse.core.errors import InvalidInput
from pgpulse.core.masking import mask_url, scrub, url_credentials
from pgpulse.core.wording import seconds_text
from pgpulse.node.handlers import HandlerFailed, RunContext

__all__ = [
    "occurrence_task_id",
    "pulse_headers",
    "redacted_url",
]

#: The namespace of the task ids Pulse derives (uuid5 of this and the occurrence's identity).
TASK_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://pgpulse.dev/occurrence")


def occurrence_task_id(ctx: RunContext) -> str:
    """The task id of ``ctx``'s occurrence: the same for every attempt of it, on any node.

    It is ``uuid5(TASK_ID_NAMESPACE, "<job id>/<scheduled_for, ISO-8601 UTC>")`` for a
    scheduled occurrence (docs/design.md: an occurrence is (job id, scheduled_for)). A triggered or
    backfilled run adds its run id, so a deliberate re-run of an occurrence is a new task
    rather than a repeat a worker would drop.

    Args:
        ctx: the attempt (``scheduled_for`` aware or naive UTC).
    """
    instant = ctx.scheduled_for
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    identity = f"{ctx.job_id}/{instant.astimezone(UTC).isoformat()}"
    if ctx.kind != "scheduled":
        identity += f"/{ctx.kind}/{ctx.run_id}"
    return str(uuid.uuid5(TASK_ID_NAMESPACE, identity))


def pulse_headers(ctx: RunContext) -> dict[str, Any]:
    """The headers every message carries about its occurrence (set after the payload's, so a
    payload cannot disguise which run sent it): ``pulse_job`` (``tenant/name``),
    ``pulse_scheduled_for`` (ISO-8601, UTC), ``pulse_attempt``, ``pulse_run_id``."""
    instant = ctx.scheduled_for
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return {
        "pulse_job": f"{ctx.tenant}/{ctx.job_name}",
        "pulse_scheduled_for": instant.astimezone(UTC).isoformat(),
        "pulse_attempt": ctx.attempt,
        "pulse_run_id": ctx.run_id,
    }


def redacted_url(url: str) -> str:
    """``url`` without its credentials (``redis://:***@host:6379/0``, and every query value:
    ``?password=***``, :func:`pgpulse.core.masking.mask_url`): what a run's output or a log line may
    show of a node's broker (each of several ``;``-separated URLs)."""
    shown = []
    for one in url.split(";"):
        try:
            urlsplit(one)
        except ValueError:
            shown.append("<unparsable URL>")
            continue
        shown.append(mask_url(one))
    return ";".join(shown)


def scrub_url(text: str, url: str) -> str:
    """``text`` (an exception's text) without ``url``'s credentials, however it quotes them:
    the URL whole, or its password or query values alone (:func:`pgpulse.core.masking.scrub`)."""
    for one in url.split(";"):
        text = scrub(text.replace(one, redacted_url(one)), url_credentials(one))
    return text


def check_url(option: str, url: str, schemes: frozenset[str]) -> None:
    """Refuse a broker URL that does not parse: no scheme among ``schemes``, or a port that is
    not a number (each of several ``;``-separated URLs).

    Args:
        option: the node option it came from (``celery_broker``, ``rq_redis``): the field named.
        url: the URL.
        schemes: the schemes the client knows.

    Raises:
        InvalidInput: ``field`` is ``option``; the value shown without its password.
    """
    for one in url.split(";"):
        try:
            parts = urlsplit(one.strip())
            parts.port  # noqa: B018 - parses the port; a non-number raises ValueError
            scheme = parts.scheme.lower()
            ok = scheme in schemes and "://" in one
        except ValueError:
            ok = False
        if not ok:
            raise InvalidInput(
                f"{option.replace('_', ' ')} URL {redacted_url(one)!r} does not parse: expected "
                f"<scheme>://[user:password@]host[:port][/...] with a scheme among "
                f"{', '.join(sorted(s for s in schemes if s.islower()))}",
                field=option,
                value=redacted_url(one),
            )


def utc_text(instant: datetime) -> str:
    """``instant`` as ISO-8601 UTC text (naive taken as UTC)."""
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC).isoformat()


T = TypeVar("T")

#: Seconds one send may take at most, whatever the job's timeout (a broker that does not answer
#: fails the attempt, with the reason, instead of holding its slot).
SEND_TIMEOUT = 30.0


class Sender(Protocol):
    """What :func:`send_bounded` needs of a node's producer for one queue."""

    #: The broker's address, its password masked (shown in runs).
    where: str

    def scrub(self, text: str) -> str:
        """``text`` without the broker's secrets."""
        ...


async def send_bounded(ctx: RunContext, sender: Sender, what: str, send: Callable[[], T]) -> T:
    """Run ``send`` (a blocking client call) in a thread, for at most :data:`SEND_TIMEOUT`
    seconds or the job's timeout if shorter, as one attempt's send of ``what`` (``task <id>``,
    ``job <id>``).

    Raises:
        HandlerFailed: it took longer, or raised: the message names ``what``, where it went
            and why (the broker's secrets scrubbed).
    """
    bound = min(ctx.timeout or SEND_TIMEOUT, SEND_TIMEOUT)
    try:
        async with asyncio.timeout(bound):
            return await asyncio.to_thread(send)
    except TimeoutError:
        raise HandlerFailed(
            f"sending {what} via {sender.where} took over {seconds_text(bound)}"
        ) from None
    except Exception as exc:
        raise HandlerFailed(
            f"sending {what} via {sender.where} failed: {type(exc).__name__}: "
            f"{sender.scrub(str(exc))}"
        ) from None
