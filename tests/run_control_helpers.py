"""A node played at fixed instants, for the run-control tests: claim, decide, run, write."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from helpers import ALL_SHARDS, run_claim
from pgpulse.db.store import Store
from pgpulse.node.handlers import NodeHandlers, RunContext


async def drain(
    store: Store, now: datetime, *, fail: bool = False, seen: list[datetime] | None = None
) -> list[datetime]:
    """Play a node at the fixed instant ``now`` until nothing is due; return the occurrences
    whose handler ran (appended to ``seen`` too). ``fail``: every handler raises."""
    ran = [] if seen is None else seen

    async def handler(ctx: RunContext) -> None:
        ran.append(ctx.scheduled_for)
        if fail:
            raise RuntimeError("boom")

    handlers = NodeHandlers({"noop": handler}, "node-a", {})
    for _ in range(1000):
        batch = await store.claim_due("node-a", ALL_SHARDS, 10, lease=30, now=now)
        if not batch:
            return ran
        outcomes = [await run_claim(job, handlers, now) for job in batch]
        assert await store.finish_runs(outcomes, now=now, node="node-a") == {
            job.key for job in batch
        }
    raise AssertionError("never drained")


async def history(store: Store) -> list[tuple[Any, ...]]:
    """Every run row in the order written: (outcome, occurrence, last occurrence, count,
    error)."""
    rows = sorted(await store.list_runs(limit=100_000), key=lambda r: r["id"])
    return [
        (r["outcome"], r["scheduled_for"], r["last_scheduled_for"], r["occurrences"], r["error"])
        for r in rows
    ]


def job_row(db: Any, name: str) -> dict[str, Any]:
    """The job row of ``name`` (sync connection ``db``)."""
    row = db.execute("SELECT * FROM pgpulse_jobs WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return dict(row)
