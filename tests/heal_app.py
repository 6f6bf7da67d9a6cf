"""An app for the tests of nodes that heal from a sick database and stop in bounded time:
job ``every-second`` ends at once; job ``hang`` (declared when ``HEAL_APP_HANG`` is set) runs
until it is cancelled."""

from __future__ import annotations

import asyncio
import os

from pgpulse import App, RunContext

app = App()


@app.job("every-second", schedule="@every 1s")
async def tick(ctx: RunContext) -> str:
    return f"tick by {ctx.node_id}"


async def hang(ctx: RunContext) -> None:
    await asyncio.sleep(3600)  # cancelled by the node's drain


if os.environ.get("HEAL_APP_HANG"):
    app.job("hang", schedule="@every 1s", max_attempts=5)(hang)
