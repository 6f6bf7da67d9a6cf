"""A FastAPI application that hosts a Pulse node in its own event loop (no second process).

    PGPULSE_DATABASE_URL=postgresql://... uvicorn examples.fastapi_app:api

The node starts with the application (its lifespan), claims the app's jobs beside the requests,
and drains when uvicorn shuts down: a run in progress finishes (within the node's drain timeout)
and is recorded before the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

import pgpulse

app = pgpulse.App(name="web")

#: Where each run of ``report`` leaves a line as it starts and as it ends (the example's test
#: reads it); unset, nothing is written.
TRACE = os.environ.get("EXAMPLE_TRACE_FILE")


@app.job("report", schedule="@every 2s", catch_up="skip", misfire_grace=60)
async def report(ctx: pgpulse.RunContext) -> str:
    """Stand-in for real work: takes a second."""
    _trace(f"start {ctx.run_id}")
    await asyncio.sleep(1)
    _trace(f"end {ctx.run_id}")
    return f"report for {ctx.scheduled_for.isoformat()}"


def _trace(line: str) -> None:
    if TRACE:
        with Path(TRACE).open("a") as out:
            out.write(line + "\n")


@contextlib.asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    async with app.running(os.environ.get("PGPULSE_DATABASE_URL")) as node:
        api.state.node = node
        yield


api = FastAPI(lifespan=lifespan)


@api.get("/pulse")
async def pulse_node() -> dict[str, object]:
    """The hosted node's id and how many shards it owns."""
    node = api.state.node
    return {"node": node.node_id, "shards": len(node.shards)}
