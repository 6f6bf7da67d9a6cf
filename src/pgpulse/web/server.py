"""Serving the web app with uvicorn: ``pgpulse serve``, and the sidecar servers of a node.

``pgpulse serve`` runs the API, dashboard and metrics on one address and lets uvicorn handle
SIGTERM/SIGINT. A node (``pgpulse node run --metrics ADDR [--http ADDR]``) runs them as tasks in
its own event loop with :func:`web_sidecar`; those servers leave the node's signal handlers alone
(the node drains on SIGTERM) and stop when the node returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from pgpulse.app import connect
from pgpulse.core.errors import InvalidInput
from pgpulse.core.policy import WebSettings
from pgpulse.db.store import Store
from pgpulse.web.app import create_app, create_metrics_app
from pgpulse.web.options import parse_address

log = logging.getLogger(__name__)


def bind(text: str, *, field: str = "listen") -> socket.socket:
    """Bind a listening TCP socket for address ``text``
    (:func:`pgpulse.web.options.parse_address`).

    Binding here, before uvicorn starts, turns "address in use" into a clear refusal.

    Raises:
        InvalidInput: the address is malformed or cannot be bound.
    """
    host, port = parse_address(text, field=field)
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY on the connections of a socket whose
    # protocol is TCP by name only; without it a keep-alive client waits out the delayed ACK
    # (40 ms) on every response sent in two writes (headers, then body), on asyncio's loop.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(
            f"cannot listen on {text!r}: {exc.strerror or exc}", field=field, value=text
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class _QuietSignalsServer(uvicorn.Server):
    """A uvicorn server that installs no signal handlers (its host process owns them)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _config(app: Any) -> uvicorn.Config:
    # log_config=None: uvicorn's records go through Pulse's logging set-up (text or JSON lines).
    return uvicorn.Config(
        app,
        log_config=None,
        lifespan="off",
        server_header=False,
        access_log=False,
        proxy_headers=False,
    )


async def serve(
    store: Store, listen: str, settings: WebSettings, announce: Callable[[str], object] = print
) -> None:
    """Serve the API, dashboard and metrics on ``listen`` until SIGTERM/SIGINT (then finish
    open requests and return).

    Args:
        announce: called once with a line naming the bound address.

    Raises:
        InvalidInput: ``listen`` is malformed or cannot be bound.
    """
    sock = bind(listen)
    host, port = sock.getsockname()[:2]
    log.info(
        "serving the API and dashboard on http://%s:%d/ui/",
        host,
        port,
        extra={"action": "web_serving", "address": f"{host}:{port}"},
    )
    announce(
        f"serving the API (/api/v1), dashboard (/ui/) and metrics (/metrics) on "
        f"http://{host}:{port}"
    )
    server = _QuietSignalsServer(_config(create_app(store, settings)))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # finish open requests, then exit 0
        loop.add_signal_handler(sig, setattr, server, "should_exit", True)
    try:
        await server.serve(sockets=[sock])
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        sock.close()
    log.info("stopped serving", extra={"action": "web_stopped"})


@contextlib.asynccontextmanager
async def run_in_background(app: Any, sock: socket.socket) -> AsyncIterator[uvicorn.Server]:
    """Serve ``app`` on ``sock`` as a task of the running loop while the block runs."""
    server = _QuietSignalsServer(_config(app))
    task = asyncio.create_task(server.serve(sockets=[sock]), name="web")
    try:
        yield server
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=5)


@contextlib.asynccontextmanager
async def web_sidecar(
    database_url: str | None,
    data_dir: Path | None,
    *,
    metrics: str | None = None,
    http: str | None = None,
    settings: WebSettings | None = None,
    read_url: str | None = None,
) -> AsyncIterator[dict[str, tuple[str, int]]]:
    """Run a node's web servers while the block runs (``node run --metrics/--http``).

    Args:
        database_url, data_dir: the node's database (the sidecar opens its own small pool).
        read_url: a read replica's DSN for the lists the API and dashboard show, or ``None``.
        metrics: address of a ``/metrics`` + ``/healthz`` server, or ``None``.
        http: address of the whole web app (API, dashboard, metrics), or ``None``.
        settings: the web app's settings (shell opt-in, http allow-list...).

    Yields:
        The bound addresses by name (``"metrics"``, ``"http"``): ``(host, port)``, useful
        with port 0.

    Raises:
        InvalidInput: an address is malformed or cannot be bound (before the node starts).
    """
    if metrics is None and http is None:
        yield {}
        return
    sockets = [
        bind(metrics, field="metrics") if metrics else None,
        bind(http, field="http") if http else None,
    ]
    async with contextlib.AsyncExitStack() as stack:
        for sock in sockets:
            if sock is not None:
                stack.callback(sock.close)
        store = await stack.enter_async_context(
            connect(
                database_url,
                data_dir=data_dir,
                application_name="pgpulse:web",
                max_size=3,
                read_url=read_url,
                heal=True,
            )
        )
        if sockets[0] is not None:
            await stack.enter_async_context(
                run_in_background(create_metrics_app(store), sockets[0])
            )
        if sockets[1] is not None:
            await stack.enter_async_context(
                run_in_background(create_app(store, settings), sockets[1])
            )
        yield {
            name: sock.getsockname()[:2]
            for name, sock in zip(("metrics", "http"), sockets, strict=True)
            if sock
        }
