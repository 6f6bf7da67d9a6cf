"""An app for the tests of pausing a running job (tests/test_pause_node.py): handlers that say
when they start, end and are cancelled, in files of the folder ``PULSE_PAUSE_DIR``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pgpulse import App, RunContext

app = App()


def _note(line: str) -> None:
    with (Path(os.environ["PULSE_PAUSE_DIR"]) / "events").open("a") as events:
        events.write(line + "\n")


@app.handler("until_go")
async def until_go(ctx: RunContext) -> str:
    """Runs until the file ``go`` exists in the folder (at most a minute)."""
    _note(f"started {ctx.scheduled_for.isoformat()}")
    go = Path(os.environ["PULSE_PAUSE_DIR"]) / "go"
    async with asyncio.timeout(60):
        while not go.exists():  # noqa: ASYNC110 - the test, another process, makes the file
            await asyncio.sleep(0.05)
    _note("ended")
    return "went"


@app.handler("hangs")
async def hangs(ctx: RunContext) -> None:
    """Runs ten minutes, unless cancelled."""
    _note(f"started {ctx.scheduled_for.isoformat()}")
    try:
        await asyncio.sleep(600)
    except asyncio.CancelledError:
        _note("cancelled")
        raise
