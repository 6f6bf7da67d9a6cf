"""Helpers of the web tests: tokens, an in-process API client, and a live server in a thread
(uvicorn on a real socket, optionally with a real scheduler node) for the browser and fuzz
tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from pgpulse.alerts import services as alert_services
from pgpulse.core.policy import WebSettings
from pgpulse.db.database import open_pool
from pgpulse.db.store import Store
from pgpulse.db.tokens import TokenStore
from pgpulse.node.engine import Node, NodeConfig
from pgpulse.node.handlers import Handler
from pgpulse.web.app import create_app
from pgpulse.web.server import bind, run_in_background


async def make_token(store: Store, tenant: str | None = None, *, admin: bool = False) -> str:
    """Create a token and return its secret."""
    secret, _ = await TokenStore(store.pool).create(tenant=tenant, admin=admin)
    return secret


#: What a browser sends with a form post from the dashboard's own page (:func:`api_client`'s
#: host): sign-in and sign-out refuse a post without it (pgpulse.web.dashboard.from_own_page).
OWN_PAGE = {"Origin": "http://pulse.test"}


@asynccontextmanager
async def api_client(
    store: Store, token: str | None = None, settings: WebSettings | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client calling the web app in process (same event loop as ``store``)."""
    app = create_app(store, settings or WebSettings())
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://pulse.test", headers=headers
    ) as client:
        yield client


class LiveServer:
    """The web app on 127.0.0.1 (random port) in a thread with its own event loop and pool,
    plus a scheduler node running ``handlers`` when given. Use as a context manager."""

    def __init__(
        self,
        dsn: str,
        settings: WebSettings,
        *,
        handlers: Mapping[str, Handler] | None = None,
        node_config: NodeConfig | None = None,
    ) -> None:
        self.dsn = dsn
        self.settings = settings
        self.handlers = handlers
        self.node_config = node_config
        self.base_url = ""
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._thread_main, name="live-server", daemon=True)

    def __enter__(self) -> LiveServer:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("live server did not start in 30 s")
        if self.error is not None:
            raise RuntimeError("live server failed to start") from self.error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the test thread
            self.error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        pool = await open_pool(self.dsn, application_name="pgpulse-live", max_size=8)
        try:
            store = Store(pool)
            sock = bind("127.0.0.1:0")
            self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            async with run_in_background(create_app(store, self.settings), sock):
                node = None
                if self.handlers is not None:
                    node = Node(store, self.dsn, self.handlers, self.node_config)
                    alert_services.register(node)  # as App.run_node does
                    task = asyncio.create_task(node.run())
                    async with asyncio.timeout(20):
                        await node.started.wait()
                self._ready.set()
                await self._stop.wait()
                if node is not None:
                    node.stop()
                    await task
        finally:
            await pool.close()


def node_config(**overrides: Any) -> NodeConfig:
    """A fast node for tests: short heartbeats and polls."""
    options: dict[str, Any] = {
        "node_id": "web-test-node",
        "slots": 4,
        "lease": 3.0,
        "heartbeat_interval": 0.25,
        "node_ttl": 2.0,
        "poll_interval": 0.5,
        "drain_timeout": 2.0,
    }
    options.update(overrides)
    return NodeConfig(**options)


def sync_token(dsn: str, tenant: str | None = None, *, admin: bool = False) -> str:
    """:func:`make_token` for synchronous tests (runs its own short event loop)."""

    async def create() -> str:
        pool = await open_pool(dsn, application_name="pgpulse-test-token", max_size=1)
        try:
            return await make_token(Store(pool), tenant, admin=admin)
        finally:
            await pool.close()

    return asyncio.run(create())
