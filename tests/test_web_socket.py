"""The web servers' listening socket (``pgpulse serve``, a node's ``--http`` and ``--metrics``)."""

from __future__ import annotations

import asyncio
import socket

from pgpulse.web.server import bind


async def test_each_accepted_connection_sends_its_writes_at_once_on_asyncios_loop() -> None:
    """bind() names TCP as its socket's protocol, so asyncio's own loop (a node without the
    uvloop extra) sets TCP_NODELAY on every connection it accepts: a keep-alive client does not
    wait out its delayed ACK, 40 ms, on each response written in two parts (headers, then
    body). Found by the API fuzz: its 3,189 requests took 165 s with the stall, 25 s without."""
    sock = bind("127.0.0.1:0")
    nodelay: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accepted(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = writer.get_extra_info("socket")
        nodelay.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=sock)
    async with server:
        _reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await asyncio.wait_for(nodelay, 5) != 0
        writer.close()
        await writer.wait_closed()
