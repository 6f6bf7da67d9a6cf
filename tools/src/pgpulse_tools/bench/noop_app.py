"""The benchmark's node app: a ``noop`` handler that does nothing, and ``fail``, which fails.

Run by the benchmark as ``python -m pgpulse node run --app pgpulse_tools.bench.noop_app:app``.
When the environment variable ``PGPULSE_BENCH_STARTS`` names a file, the handler also notes,
per run, the
instant it started and the occurrence's ``scheduled_for`` (both Unix seconds, float64), and the
process writes them there at exit as raw little-endian float64 pairs. Recording is an append to a
list (well under a microsecond), so the handler stays a no-op for the figures.
"""

from __future__ import annotations

import atexit
import os
import time
from array import array
from pathlib import Path

from pgpulse.app import App
from pgpulse.node.handlers import RunContext

#: Environment variable naming the file that receives (start, scheduled_for) pairs at exit.
STARTS_ENV = "PGPULSE_BENCH_STARTS"

app = App(tenant="bench", builtins=False)
#: Scenario 12's nodes: the built-in handlers (``celery`` among them) and nothing of its own.
builtins_app = App(tenant="bench", name="bench-builtins")
_starts = array("d")
_starts_file = os.environ.get(STARTS_ENV)


@app.handler("noop")
async def noop(ctx: RunContext) -> None:
    """Do nothing (record the start instant if asked to)."""
    if _starts_file is not None:
        _starts.append(time.time())
        _starts.append(ctx.scheduled_for.timestamp())


@app.handler("fail")
async def fail(ctx: RunContext) -> None:
    """Fail every attempt (the alert latency scenario's failing runs)."""
    raise RuntimeError(f"failing on purpose, attempt {ctx.attempt}")


def _dump() -> None:
    if _starts_file is not None:
        Path(_starts_file).write_bytes(_starts.tobytes())


atexit.register(_dump)


def read_starts(path: Path) -> list[tuple[float, float]]:
    """Read a file written at exit: ``[(handler start, scheduled_for), ...]`` in Unix seconds."""
    values = array("d")
    if path.exists():
        values.frombytes(path.read_bytes())
    return list(zip(values[0::2], values[1::2], strict=True))
