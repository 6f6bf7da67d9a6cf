"""A node across a real PostgreSQL restart: its pool's connections died with the server, yet a
SIGTERM after it still hands the running job back and marks the node stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from helpers import add, spec
from pgpulse.db.database import open_pool
from pgpulse.db.store import Store
from pgpulse.node.handlers import RunContext
from pgpulse_tools.chaos.server import ManagedServer
from test_engine import TRIGGERED_ONLY, node, wait_until


@pytest.fixture
async def server() -> AsyncIterator[ManagedServer]:
    """A PostgreSQL of this test's own on 127.0.0.1, which the test may restart (in the system's
    temporary folder: as root, the server's own user must be able to reach it)."""
    managed = ManagedServer(max_connections=40)
    await managed.start()
    try:
        yield managed
    finally:
        await managed.close()


def _query(dsn: str, statement: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        row = conn.execute(statement).fetchone()
        assert row is not None
        return row


@pytest.mark.slow
async def test_a_stop_after_a_postgresql_restart_hands_the_run_back(
    server: ManagedServer,
) -> None:
    """Issue 15: after a restart the pool handed out connections that died with the server, so
    the hand-back and the goodbye failed ("terminating connection due to administrator
    command"): the job stayed running until its lease expired and the node stayed draining.
    Pooled connections are checked before use."""
    dsn = server.admin_dsn()
    started = asyncio.Event()

    async def long(ctx: RunContext) -> None:
        started.set()
        await asyncio.sleep(60)

    pool = await open_pool(dsn, application_name="pgpulse-test", max_size=4)
    try:
        store = Store(pool)
        await store.migrate()
        await add(store, spec("long", schedule=TRIGGERED_ONLY, handler="long"))
        await store.trigger_job("default", "long")
        n = node(store, dsn, {"long": long}, lease=10.0, heartbeat_interval=0.5)
        task = asyncio.create_task(n.run())
        try:
            async with asyncio.timeout(20):
                await started.wait()
            await server.restart(0.2, "fast")  # every session, the pool's too, is terminated
            restarted = _query(dsn, "SELECT now() AS at")["at"]
            # the node's own sessions reconnect: its heartbeat (and the lease) lands again
            await wait_until(
                lambda: (
                    _query(dsn, "SELECT last_heartbeat FROM pgpulse_nodes")["last_heartbeat"]
                    > restarted
                ),
                within=20,
            )
            assert n.attempts.unfinished(), "the run did not survive the restart"
        finally:
            n.stop()
            async with asyncio.timeout(30):
                await task
    finally:
        await pool.close()
    job = _query(dsn, "SELECT status, locked_by, attempt FROM pgpulse_jobs")
    assert job == {"status": "idle", "locked_by": None, "attempt": 1}
    assert _query(dsn, "SELECT state FROM pgpulse_nodes") == {"state": "stopped"}
