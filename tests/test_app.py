"""Jobs declared in code: validated at declaration, upserted when a node starts, then run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pgpulse import App, InvalidSchedule, RunContext, UnknownTimeZone
from test_engine import wait_until


def test_a_bad_declaration_fails_at_import_time() -> None:
    app = App()
    with pytest.raises(InvalidSchedule) as caught:
        app.job("bad", schedule="0 0 31 4 *")
    assert caught.value.field == "schedule" and caught.value.value == "0 0 31 4 *"
    with pytest.raises(UnknownTimeZone):
        app.job("bad", schedule="@daily", timezone="Nowhere/Land")
    assert app.jobs == [] and "bad" not in app.handlers


async def test_declared_jobs_are_upserted_at_node_start_and_run(dsn: str, db: Any) -> None:
    app = App(tenant="relay")
    seen: list[RunContext] = []

    @app.job("health", schedule="@every 1s", catch_up="skip", misfire_grace=5)
    async def health(ctx: RunContext) -> str:
        seen.append(ctx)
        return "healthy"

    assert [(s.name, s.handler, s.source) for s in app.jobs] == [
        ("health", "health", "code:default")
    ]
    node = asyncio.create_task(app.run_node(dsn, install_signal_handlers=False))
    try:
        await wait_until(lambda: len(seen) >= 2)
    finally:
        node.cancel()
        with pytest.raises(asyncio.CancelledError):
            await node
    job = db.execute("SELECT tenant, name, handler, schedule, source FROM pgpulse_jobs").fetchone()
    assert job == {
        "tenant": "relay",
        "name": "health",
        "handler": "health",
        "schedule": "@every 1s",
        "source": "code:default",
    }
    assert {ctx.tenant for ctx in seen} == {"relay"}
    handlers = db.execute("SELECT handlers FROM pgpulse_nodes").fetchone()["handlers"]
    assert "health" in handlers and "http" in handlers
    assert "shell" not in handlers  # shell jobs are an explicit opt-in of each node
