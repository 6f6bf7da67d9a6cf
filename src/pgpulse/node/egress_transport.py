"""The connection that checks where an ``http`` job (or a notifier) connects: an httpx transport
over httpcore's pool with a network backend of its own, which reads the host as the check when
a job is written does (:func:`pgpulse.core.egress.target_addresses`: an address in any spelling,
else the name resolved here), refuses the connection if any of its addresses is refused by
:mod:`pgpulse.core.egress`'s rule, and connects to a checked address, never resolving twice — for
every request, redirects included.

Kept apart from :mod:`pgpulse.core.egress` (the rule) so that httpx and httpcore load only when a
request is made: ``import pgpulse`` and a node without ``http`` jobs never import them.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpcore
import httpx

from pgpulse.core.egress import HttpAllowList, target_addresses

__all__ = ["GuardedTransport", "guarded_client"]


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS client context per process: building one (loading the CA bundle) costs tens of
    milliseconds of CPU, which a transport per request would spend on the event loop."""
    return httpx.create_ssl_context()


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses the allow-list rule admits."""

    def __init__(
        self, allow: HttpAllowList, reacher: str, inner: httpcore.AsyncNetworkBackend
    ) -> None:
        self.allow = allow
        self.reacher = reacher
        self.inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Read ``host`` (an address it spells, else the name resolved), refuse if any of its
        addresses is refused, connect to one of them (in order, the next when one fails)."""
        if self.allow.allows_name(host):
            return await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        addresses = await target_addresses(host, port, timeout)
        if not addresses:
            raise httpcore.ConnectError(f"{host!r} does not resolve")
        for address in addresses:
            why = self.allow.refuses(address)
            if why is not None:
                raise httpcore.ConnectError(
                    f"connection to {host!r} refused: it resolves to {address} ({why}), which "
                    f"{self.reacher} may reach only if the node's --http-allow list names it "
                    "(pgpulse node run --http-allow HOST)"
                )
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Refused: an ``http`` job reaches hosts, not local sockets."""
        raise httpcore.ConnectError(f"unix socket {path!r} refused")

    async def sleep(self, seconds: float) -> None:
        """Sleep as the inner backend does."""
        await self.inner.sleep(seconds)


class _Body(httpx.AsyncByteStream):
    """A response body read from httpcore, its errors as httpx's."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self.stream:
                yield part
        except httpcore.TimeoutException as exc:
            raise _as_httpx(exc) from exc
        except httpcore.NetworkError as exc:
            raise _as_httpx(exc) from exc
        except httpcore.ProtocolError as exc:
            raise _as_httpx(exc) from exc

    async def aclose(self) -> None:
        """Release the connection."""
        await self.stream.aclose()


def _as_httpx(exc: Exception) -> httpx.TransportError:
    """httpx's exception of the same name as httpcore's ``exc`` (they mirror each other)."""
    kind = getattr(httpx, type(exc).__name__, httpx.TransportError)
    if not (isinstance(kind, type) and issubclass(kind, httpx.TransportError)):
        kind = httpx.TransportError
    return kind(str(exc))


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose every connection is checked against ``allow`` when it is made
    (see the module docstring). No proxy: a proxy would connect on the node's behalf to an
    address this transport could not check.

    Args:
        allow: the node's ``--http-allow`` list.
        reacher: what connects, as a refusal names it (``http jobs``, ``notifiers``).
        network: what makes the connections the check admits (default: httpcore's anyio
            backend); a test's backend that never connects shows what would be reached.
    """

    def __init__(
        self,
        allow: HttpAllowList,
        *,
        reacher: str = "http jobs",
        network: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.pool = httpcore.AsyncConnectionPool(
            ssl_context=_ssl_context(),
            network_backend=_GuardedBackend(allow, reacher, network or httpcore.AnyIOBackend()),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` over a checked connection.

        Raises:
            httpx.ConnectError: the host does not resolve, or resolves to a refused address.
            httpx.TransportError: any other network failure (httpx's class of the same name).
        """
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self.pool.handle_async_request(core)
        except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise _as_httpx(exc) from exc
        except httpcore.UnsupportedProtocol as exc:
            raise httpx.UnsupportedProtocol(str(exc)) from exc
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close the pool's connections."""
        await self.pool.aclose()


def guarded_client(allow: HttpAllowList) -> httpx.AsyncClient:
    """A shared client for notifiers' requests: every connection checked against ``allow`` (a
    :class:`GuardedTransport`), no redirects followed, no client-wide timeout (each send sets
    its own). The caller owns it and closes it (``aclose``)."""
    return httpx.AsyncClient(
        transport=GuardedTransport(allow, reacher="webhook and checkin notifiers"),
        timeout=None,
        follow_redirects=False,
    )
