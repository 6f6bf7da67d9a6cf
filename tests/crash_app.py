"""An app for the crash-recovery test: the first attempt hangs, later attempts finish."""

from __future__ import annotations

import asyncio

from pgpulse import App, RunContext

app = App()


@app.handler("slow")
async def slow(ctx: RunContext) -> str:
    if ctx.attempt == 1:
        await asyncio.sleep(600)  # the node is killed during this
    return f"done by {ctx.node_id} at attempt {ctx.attempt}"


@app.handler("extract")
async def extract(ctx: RunContext) -> str:
    """An upstream of the chain tests: succeeds at once."""
    return f"extracted at attempt {ctx.attempt}"


@app.handler("load")
async def load(ctx: RunContext) -> str:
    """A downstream of the chain tests: succeeds at once."""
    return f"loaded {ctx.scheduled_for:%H:%M}"
