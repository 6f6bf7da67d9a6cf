"""A small TCP proxy per node, so the harness can cut or slow one node's database traffic.

Each node connects to its own :class:`Proxy` on ``127.0.0.1``; the proxy forwards every
connection to the PostgreSQL server (TCP or Unix socket). Controls:

* :meth:`Proxy.cut` ``"stall"``: a network partition as TCP experiences it: nothing is
  delivered in either direction (the proxy stops reading, so bytes wait in socket buffers as
  they would in retransmission), new connections hang, and the server does not notice — a
  session's locks stay held. :meth:`Proxy.heal` delivers what waited.
* :meth:`Proxy.cut` ``"drop"``: every connection is reset on both sides (the server ends the
  sessions, releasing their locks) and new connections are refused until healed.
* :meth:`Proxy.delay`: every chunk waits ``seconds`` before it is forwarded (order kept).

Built on asyncio protocols (no task per connection): the harness's event loop forwards every
node's traffic, so the per-chunk cost stays small.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from typing import Literal, cast

log = logging.getLogger(__name__)

CutMode = Literal["stall", "drop"]


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the proxy forwards to: ``host``/``port`` over TCP, or a Unix socket ``path``."""

    host: str = "127.0.0.1"
    port: int = 5432
    path: str | None = None


class _Side(asyncio.Protocol):
    """One end of a proxied connection (the node's, or the server's)."""

    def __init__(self, link: _Link) -> None:
        self.link = link
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.outbox: collections.deque[tuple[float, bytes]] = collections.deque()
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport; not an asyncio.Transport subclass on uvloop (which `pgpulse chaos`
        # runs on), so no isinstance check.
        self.transport = cast(asyncio.Transport, transport)
        if self.link.closed:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.link.early.append(data)  # the node spoke before the upstream was connected
        else:
            self.link.proxy._send(self.peer, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.close()

    def pause_writing(self) -> None:  # our peer writes faster than this side drains
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if (
            self.peer is not None
            and self.peer.transport is not None
            and self.link.proxy.mode is None
        ):
            self.peer.transport.resume_reading()


class _Link:
    """A client connection and its upstream connection."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.client = _Side(self)
        self.server: _Side | None = None
        self.early: list[bytes] = []
        self.closed = False

    def sides(self) -> list[_Side]:
        return [s for s in (self.client, self.server) if s is not None]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.proxy._links.discard(self)
        for side in self.sides():
            if side.timer is not None:
                side.timer.cancel()
            if side.transport is not None:
                side.transport.abort()  # RST, not a polite FIN: the peer sees the link break


class Proxy:
    """A controllable TCP proxy listening on ``127.0.0.1`` (an ephemeral port by default).

    Args:
        name: label for logs (the node it serves).
        upstream: the server to forward to.
        port: port to listen on; 0 picks a free one (read :attr:`port` after :meth:`start`).
    """

    def __init__(self, name: str, upstream: Upstream, port: int = 0) -> None:
        self.name = name
        self.upstream = upstream
        self.port = port
        self.mode: CutMode | None = None
        self.latency = 0.0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._waiting: list[_Link] = []  # accepted while stalled: connect upstream on heal
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Start listening.

        Raises:
            OSError: the port is taken.
        """
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def dsn(self, dbname: str, user: str = "postgres") -> str:
        """The libpq URI a node uses to reach database ``dbname`` through this proxy."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def cut(self, mode: CutMode) -> None:
        """Partition this proxy's node from the database (see the module doc for the modes)."""
        self.mode = mode
        for link in list(self._links):
            if mode == "drop":
                link.close()
            else:
                for side in link.sides():
                    if side.transport is not None:
                        side.transport.pause_reading()

    def delay(self, seconds: float) -> None:
        """Delay every chunk by ``seconds`` (0 to stop delaying)."""
        self.latency = max(seconds, 0.0)

    def heal(self) -> None:
        """End a cut and any delay: traffic flows again (stalled bytes are delivered)."""
        self.mode = None
        self.latency = 0.0
        for link in list(self._links):
            for side in link.sides():
                if side.transport is not None and not side.transport.is_closing():
                    side.transport.resume_reading()
        waiting, self._waiting = self._waiting, []
        for link in waiting:
            self._spawn(link)

    async def close(self) -> None:
        """Stop listening and reset every connection."""
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self) -> _Side:
        link = _Link(self)
        self._links.add(link)
        if self.mode == "drop":
            asyncio.get_running_loop().call_soon(link.close)  # refused, once it exists
        elif self.mode == "stall":
            asyncio.get_running_loop().call_soon(self._hold, link)
        else:
            self._spawn(link)
        return link.client

    def _hold(self, link: _Link) -> None:
        if link.client.transport is not None:
            link.client.transport.pause_reading()
        if not link.closed:
            self._waiting.append(link)

    def _spawn(self, link: _Link) -> None:
        task = asyncio.get_running_loop().create_task(self._connect(link))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        server = _Side(link)
        try:
            if self.upstream.path is not None:
                await loop.create_unix_connection(lambda: server, self.upstream.path)
            else:
                await loop.create_connection(lambda: server, self.upstream.host, self.upstream.port)
        except OSError:
            link.close()
            return
        if link.closed:
            assert server.transport is not None
            server.transport.abort()
            return
        link.server, server.peer, link.client.peer = server, link.client, server
        early, link.early = link.early, []
        for data in early:
            self._send(server, data)
        if self.mode == "stall":
            for side in link.sides():
                if side.transport is not None:
                    side.transport.pause_reading()

    def _send(self, to: _Side, data: bytes) -> None:
        """Forward ``data`` to ``to``, now or after the current latency (order kept)."""
        if to.transport is None or to.transport.is_closing():
            return
        if not self.latency and not to.outbox:
            to.transport.write(data)
            return
        loop = asyncio.get_running_loop()
        to.outbox.append((loop.time() + self.latency, data))
        if to.timer is None:
            to.timer = loop.call_at(to.outbox[0][0], self._flush, to)

    def _flush(self, to: _Side) -> None:
        to.timer = None
        loop = asyncio.get_running_loop()
        if self.mode == "stall":  # delayed bytes wait out a partition too
            to.timer = loop.call_later(0.05, self._flush, to)
            return
        while to.outbox and to.outbox[0][0] <= loop.time():
            _, data = to.outbox.popleft()
            if to.transport is not None and not to.transport.is_closing():
                to.transport.write(data)
        if to.outbox:
            to.timer = loop.call_at(to.outbox[0][0], self._flush, to)


class ProxyGroup:
    """One node's link to the database: a :class:`Proxy` per server (one for a single server,
    one per member of a replicated cluster), cut, delayed and healed together.

    Args:
        name: label for logs (the node it serves).
        upstreams: the servers, in the order the node's DSN lists them.
    """

    def __init__(self, name: str, upstreams: list[Upstream]) -> None:
        self.name = name
        self.proxies = [Proxy(f"{name}/{i + 1}", upstream) for i, upstream in enumerate(upstreams)]

    async def start(self) -> None:
        """Start every proxy.

        Raises:
            OSError: a port is taken.
        """
        for proxy in self.proxies:
            await proxy.start()

    def dsn(self, dbname: str, user: str = "postgres") -> str:
        """The DSN a node uses: the proxy's URI for one server; for several, libpq's multi-host
        form, ``host=127.0.0.1,127.0.0.1 port=P1,P2 ... target_session_attrs=read-write``, so the
        node itself finds the server that accepts writes."""
        if len(self.proxies) == 1:
            return self.proxies[0].dsn(dbname, user)
        hosts = ",".join("127.0.0.1" for _ in self.proxies)
        ports = ",".join(str(proxy.port) for proxy in self.proxies)
        return (
            f"host={hosts} port={ports} user={user} dbname={dbname} target_session_attrs=read-write"
        )

    def cut(self, mode: CutMode) -> None:
        """Partition the node from every server (see :meth:`Proxy.cut`)."""
        for proxy in self.proxies:
            proxy.cut(mode)

    def delay(self, seconds: float) -> None:
        """Delay the node's traffic to every server (see :meth:`Proxy.delay`)."""
        for proxy in self.proxies:
            proxy.delay(seconds)

    def heal(self) -> None:
        """End a cut and any delay on every server's proxy."""
        for proxy in self.proxies:
            proxy.heal()

    async def close(self) -> None:
        """Close every proxy."""
        for proxy in self.proxies:
            await proxy.close()
