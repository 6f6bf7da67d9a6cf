"""One outbound HTTP request of a notifier (``webhook``, ``checkin``), turned into a
:class:`~pgpulse.alerts.notifiers.events.DeliveryResult`: it never raises for a delivery failure.

* One deadline (``asyncio.timeout``) bounds connecting, sending and reading together.
* Redirects are never followed: a 3xx is a final failure naming the status (a redirect could
  lead past the address policy the URL was checked against).
* At most :data:`MAX_DETAIL_BYTES` of the answer are read and kept.
* Cancel-safe: a cancelled send closes its connection (the client's own ``async with``, or the
  response's ``aclose`` on a shared client) and lets ``CancelledError`` through.
* Every error text is scrubbed of the request's secrets; ``httpx``'s own INFO log line (which
  quotes the full URL) is scrubbed by
  :func:`~pgpulse.alerts.notifiers.redaction.guard_library_logs`.

``httpx`` is imported when a request is sent, not with this module, so
``import pgpulse.alerts.notifiers`` loads no HTTP stack.

Seam for the address policy at connect time: pass ``client``, an ``httpx.AsyncClient`` the caller
owns and shares between sends (built on the guarded transport that checks every address it
connects to). Without one, each send uses a client of its own, with the environment's proxy
settings, as the ``http`` job handler does.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgpulse.alerts.notifiers.events import DeliveryResult
from pgpulse.alerts.notifiers.redaction import guard_library_logs, scrub
from pgpulse.alerts.notifiers.retry import (
    RETRY_AFTER_STATUSES,
    classify_http_status,
    parse_retry_after,
)
from pgpulse.core.wording import seconds_text

if TYPE_CHECKING:
    import httpx

#: Bytes of a receiver's answer read and kept in ``DeliveryResult.detail``.
MAX_DETAIL_BYTES = 1024


@dataclass(frozen=True, slots=True)
class OutboundRequest:
    """A request to send, with what its error messages may show.

    Attributes:
        method: ``POST``, ``GET``...
        url: the full URL (secret: never shown).
        shown_url: the URL with its secret parts masked, for messages.
        headers: request headers (their values may be secret).
        body: the body, or ``None``.
        timeout: seconds for the whole exchange.
        secrets: strings no message may quote (the URL's secret parts, header values...).
    """

    method: str
    url: str
    shown_url: str
    headers: Mapping[str, str]
    body: bytes | None
    timeout: float
    secrets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    reason: str
    retry_after: str | None
    detail: str


async def _exchange(client: httpx.AsyncClient, request: OutboundRequest) -> _Answer:
    built = client.build_request(
        request.method, request.url, headers=dict(request.headers), content=request.body
    )
    response = await client.send(built, stream=True, follow_redirects=False)
    try:
        kept = bytearray()
        async for chunk in response.aiter_bytes():
            kept += chunk[: MAX_DETAIL_BYTES - len(kept)]
            if len(kept) >= MAX_DETAIL_BYTES:
                break
    finally:
        await response.aclose()
    return _Answer(
        response.status_code,
        response.reason_phrase,
        response.headers.get("retry-after"),
        kept.decode("utf-8", "replace"),
    )


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CAs, ``SSL_CERT_FILE``...), built once: building
    it costs some 70 ms of CPU, which a client per send would spend on the event loop."""
    import httpx

    return httpx.create_ssl_context()


def _retryable_error(exc: Exception) -> bool:
    import httpx

    return isinstance(
        exc,
        httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError | httpx.TimeoutException,
    )


async def send_request(
    request: OutboundRequest,
    *,
    client: httpx.AsyncClient | None = None,
    clock: Callable[[], float] = time.time,
) -> DeliveryResult:
    """Send ``request`` and classify the answer (:mod:`pgpulse.alerts.notifiers.retry`).

    Args:
        request: what to send.
        client: a shared client the caller owns (see the module's docstring), or ``None``.
        clock: seconds since the epoch, to read a ``Retry-After`` date against.

    Returns:
        ``ok`` for 2xx; otherwise the status, or the network error, as one scrubbed line.
        Never raises for a delivery failure; a cancellation propagates.
    """
    import httpx

    guard_library_logs(request.secrets)
    where = f"{request.method} {request.shown_url}"
    started = time.monotonic()

    def failed(message: str, retryable: bool) -> DeliveryResult:
        return DeliveryResult(
            ok=False,
            retryable=retryable,
            error=scrub(message, request.secrets),
            status=None,
            elapsed=time.monotonic() - started,
        )

    try:
        async with asyncio.timeout(request.timeout):
            if client is not None:
                answer = await _exchange(client, request)
            else:
                async with httpx.AsyncClient(
                    timeout=None, follow_redirects=False, verify=_default_tls()
                ) as own:
                    answer = await _exchange(own, request)
    except TimeoutError:
        return failed(f"{where} timed out after {seconds_text(request.timeout)}", retryable=True)
    except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
        return failed(f"{where} failed: {type(exc).__name__}: {exc}", _retryable_error(exc))
    verdict = classify_http_status(answer.status)
    retry_after = (
        parse_retry_after(answer.retry_after, clock())
        if answer.status in RETRY_AFTER_STATUSES
        else None
    )
    error = None
    if verdict != "ok":
        error = f"{where} answered {answer.status} {answer.reason}".rstrip()
        if 300 <= answer.status < 400:
            error += " (redirects are not followed: configure the final URL)"
    return DeliveryResult(
        ok=verdict == "ok",
        retryable=verdict == "retry",
        error=None if error is None else scrub(error, request.secrets),
        status=answer.status,
        elapsed=time.monotonic() - started,
        retry_after=retry_after,
        detail=scrub(answer.detail, request.secrets) or None,
    )
