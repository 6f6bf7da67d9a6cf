"""Apps for the capability-routing tests: ``app`` has handlers ``x`` and ``y``; ``plain`` has
``y`` only, as a node of the previous deploy would."""

from __future__ import annotations

from pgpulse import App, RunContext

app = App()
plain = App()


@app.handler("x")
async def x(ctx: RunContext) -> str:
    return f"x on {ctx.node_id}"


@app.handler("y")
@plain.handler("y")
async def y(ctx: RunContext) -> str:
    return f"y on {ctx.node_id}"
