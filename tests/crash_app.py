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
