"""An app whose job declares its alert rules in code."""

from __future__ import annotations

from pgpulse import App, RunContext

app = App(tenant="acme")


@app.job(
    "nightly",
    schedule="0 3 * * *",
    alerts={
        "failures": {"threshold": 2, "notify": ["ops"]},
        "silence": {"threshold": 2 * 86400, "notify": ["ops"]},
    },
)
async def nightly(ctx: RunContext) -> None:
    return None
