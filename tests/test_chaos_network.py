"""Lease renewal through a bad network: reproductions of what the chaos harness measured.

A node reaches the test database through the harness's TCP proxy, so a test can slow or cut
its traffic. Both tests run an async handler that needs its lease renewed (5 s of work, a lease
of 2.5-3 s) and state the rule of docs/design.md, invariant 3: a node stops a run only when it
*cannot* renew the lease in time. Under the faults below it can, so the run must finish on its
first attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg import conninfo

from helpers import add, spec
from pgpulse.db.database import open_pool
from pgpulse.db.store import Store
from pgpulse.node.handlers import RunContext
from pgpulse_tools.chaos.proxy import Proxy
from pgpulse_tools.chaos.server import ExternalServer
from test_engine import node, running, wait_until

LEASE, HEARTBEAT = 3.0, 0.2


@pytest.fixture
async def proxied(
    dsn: str, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Proxy, Store, str]]:
    """A proxy in front of the test database, and a store whose pool goes through it (of
    ``request.param`` connections; 6 by default)."""
    proxy = Proxy("node", ExternalServer(dsn).upstream)
    await proxy.start()
    via = proxy.dsn(str(conninfo.conninfo_to_dict(dsn)["dbname"]))
    size = getattr(request, "param", 6)
    pool = await open_pool(via, application_name="pgpulse-proxied", max_size=size, min_size=size)
    try:
        yield proxy, Store(pool), via
    finally:
        proxy.heal()
        await pool.close()
        await proxy.close()


async def _first_attempt(
    proxy: Proxy, store: Store, via: str, fault: Any, lease: float = LEASE
) -> str:
    """Run a 5 s attempt on a node behind ``proxy`` (``lease`` seconds of lease), apply
    ``fault`` 1 s in, heal; return how the first attempt ended: ``done``, or ``cancelled`` (its
    node gave its lease up)."""
    ended: dict[int, str] = {}
    over = asyncio.Event()

    async def work(ctx: RunContext) -> None:
        try:
            await asyncio.sleep(5)
            ended[ctx.attempt] = "done"
        except asyncio.CancelledError:
            ended[ctx.attempt] = "cancelled"
            raise
        finally:
            over.set()

    await add(store, spec("long", schedule="0 0 1 1 *", handler="work"))
    await store.trigger_job("default", "long")
    async with running(
        node(store, via, {"work": work}, lease=lease, heartbeat_interval=HEARTBEAT, node_ttl=1.0)
    ) as n:
        await wait_until(lambda: len(n.attempts) > 0, within=30)
        await asyncio.sleep(1.0)  # one second into the attempt
        await fault()
        async with asyncio.timeout(15):
            await over.wait()
        proxy.heal()
    return ended[1]


@pytest.mark.slow
async def test_a_slow_network_that_can_still_renew_keeps_the_run(
    proxied: tuple[Proxy, Store, str],
) -> None:
    proxy, store, via = proxied

    async def slow_network() -> None:  # 250 ms each way: a 0.5 s round trip, 6x under the lease
        proxy.delay(0.25)

    assert await _first_attempt(proxy, store, via, slow_network) == "done"


@pytest.mark.slow
@pytest.mark.parametrize("proxied", [1], indirect=True)
async def test_a_short_connection_reset_does_not_cost_the_lease(
    proxied: tuple[Proxy, Store, str],
) -> None:
    """A 1.5 s outage 1 s into the run, with a 2.5 s lease renewed every 0.2 s: the last renewal
    before it holds the lease until 2.1-2.3 s after it began, so a node that reconnects when the
    database is back (1.5 s) renews in time. With the pool's backoff (one connection: attempts at
    once, about 1 s later, then about 2 s after that) the first connection comes at 2.7 s or later.
    """
    proxy, store, via = proxied

    async def outage() -> None:  # like a 1.5 s PostgreSQL restart: resets, then refusals
        proxy.cut("drop")
        await asyncio.sleep(1.5)
        proxy.heal()

    assert await _first_attempt(proxy, store, via, outage, lease=2.5) == "done"


def test_the_proxy_carries_a_session_on_uvloop(dsn: str) -> None:
    """`pgpulse chaos` runs on uvloop (as every command does), whose transports are no
    asyncio.Transport subclasses: the proxy must carry a session there too (it refused every
    connection once, and the harness's nodes never reached the database)."""
    import psycopg
    import uvloop

    async def through_proxy() -> int:
        proxy = Proxy("node", ExternalServer(dsn).upstream)
        await proxy.start()
        try:
            via = proxy.dsn(str(conninfo.conninfo_to_dict(dsn)["dbname"]))
            async with await psycopg.AsyncConnection.connect(via, connect_timeout=5) as conn:
                row = await (await conn.execute("SELECT 41 + 1")).fetchone()
        finally:
            await proxy.close()
        assert row is not None
        return int(row[0])

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(through_proxy()) == 42
