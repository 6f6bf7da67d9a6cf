"""An app for the alert delivery tests: ``boom`` always fails, ``ok`` always succeeds."""

from __future__ import annotations

from pgpulse import App, RunContext
from pgpulse.node.handlers import HandlerFailed

app = App()


@app.handler("boom")
async def boom(ctx: RunContext) -> None:
    raise HandlerFailed(f"boom at attempt {ctx.attempt}")


@app.handler("ok")
async def ok(ctx: RunContext) -> str:
    return "fine"
