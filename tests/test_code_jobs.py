"""Jobs declared in code: a job the code no longer declares is shown as "declared by code no
longer running", or, with ``App(prune=True)`` / ``node run --prune-code-jobs``, deleted at start
and logged; other sources are never touched."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from helpers import pgpulse, spec
from pgpulse.app import App
from pgpulse.core.jobs import JobSpec
from pgpulse.db.store import Store
from pgpulse.node.handlers import RunContext


def app_with(*names: str, prune: bool = False) -> App:
    app = App(name="billing", prune=prune)
    for name in names:

        async def handler(ctx: RunContext) -> None:
            del ctx

        app.job(name, schedule="@hourly")(handler)
    return app


async def test_jobs_the_code_no_longer_declares_are_listed_then_pruned(
    store: Store, dsn: str, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await app_with("rollup", "invoice").declare(store, "node-1")
    await store.upsert_jobs([_cli_job()])  # a job of another source
    plan = await app_with("rollup").declare(store, "node-2")  # a deploy without 'invoice'
    assert [(s.name, s.action) for s in plan.steps] == [
        ("rollup", "unchanged"),
        ("invoice", "orphan"),
    ]
    stale = await store.stale_code_jobs()
    assert [(j["name"], j["source"], j["node_id"]) for j in stale] == [
        ("invoice", "code:billing", "node-2")
    ]
    status = pgpulse("status", dsn=dsn)
    assert status.returncode == 0, status.stderr
    assert "declared by code no longer running: 1 job: invoice" in status.stdout
    shown = pgpulse("job", "show", "invoice", dsn=dsn)
    assert "code:billing (declared by code no longer running)" in shown.stdout
    # mid-deploy, a live node of the old code still runs it: not stale yet (seventh trial)
    db.execute(
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, last_heartbeat, state, handlers) "
        "VALUES ('node-1', 'h', 1, now(), 'alive', ARRAY['rollup', 'invoice'])"
    )
    assert await store.stale_code_jobs() == []
    db.execute("DELETE FROM pgpulse_nodes WHERE node_id = 'node-1'")

    with caplog.at_level(logging.WARNING, logger="pgpulse.app"):
        plan = await app_with("rollup", prune=True).declare(store, "node-3")
    assert [(s.name, s.action) for s in plan.steps] == [
        ("rollup", "unchanged"),
        ("invoice", "delete"),
    ]
    pruned = [r for r in caplog.records if getattr(r, "action", "") == "code_job_pruned"]
    assert [r.__dict__["job"] for r in pruned] == ["invoice"]
    names = [r["name"] for r in db.execute("SELECT name FROM pgpulse_jobs ORDER BY name")]
    assert names == ["manual", "rollup"]
    assert await store.stale_code_jobs() == []
    [deleted] = [
        h for h in await store.job_history("default", "invoice") if h["action"] == "delete"
    ]
    assert (deleted["source"], deleted["actor"]) == ("code:billing", "code:billing@node-3")


def _cli_job() -> JobSpec:
    return spec("manual", handler="shell", payload={"command": "true"}, source="cli")


def test_prune_code_jobs_needs_an_app(dsn: str) -> None:
    result = pgpulse("node", "run", "--prune-code-jobs", dsn=dsn)
    assert result.returncode == 2
    assert "--prune-code-jobs" in result.stderr and "needs --app" in result.stderr
