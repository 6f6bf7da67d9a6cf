"""Scenario 1's timed claims, runnable by another installation of Pulse.

:func:`time_claims` is what scenario 1 times in its own process. ``pgpulse bench
--compare-with PYTHON`` runs it as ``PYTHON -m pgpulse_tools.bench.claim_probe`` too, so the
claims are made by that interpreter's Pulse (its ``Store.claim_due``, its claim session, its SQL)
against a database the benchmark loaded. So that an older Pulse can run it, this module imports
nothing of the benchmark but its ``bench.sql`` and only what Pulse has had since 0.2
(``Store.claim_due``, ``Session``, ``CLAIM_SESSION_SETTINGS``, ``tune_collector``,
``run_command``).

Command line: ``python -m pgpulse_tools.bench.claim_probe DSN SAMPLES BATCH...`` prints one JSON
object: ``pgpulse`` (the file Pulse was imported from) and ``ms`` (batch -> every claim's
latency, ms), claiming from the 64 shards with the handler ``noop``.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any

import pgpulse
from pgpulse.app import connect
from pgpulse.cli.report import run_command, tune_collector
from pgpulse.db.claims import CLAIM_SESSION_SETTINGS
from pgpulse.db.database import Session
from pgpulse.db.store import Store
from pgpulse.sql import load_queries

#: The handler of scenario 1's jobs, the one the claiming node has.
HANDLER = "noop"
ALL_SHARDS = tuple(range(64))
_UNCLAIM = load_queries("bench.sql", __package__)["unclaim"]


async def time_claims(
    claimer: Store, pooled: Store, shards: tuple[int, ...], batch: int, samples: int
) -> list[float]:
    """Latency of ``samples`` claims through ``claimer`` by a node that has the handler
    :data:`HANDLER` only, in ms; each claim's jobs are handed back through ``pooled``, untimed
    (an empty poll claims nothing and hands nothing back)."""
    out: list[float] = []
    for _ in range(samples):
        start = time.perf_counter()
        jobs = await claimer.claim_due(
            "bench-claim", shards, batch, lease=60.0, handlers=(HANDLER,)
        )
        out.append((time.perf_counter() - start) * 1000)
        if jobs:
            async with pooled.pool.connection() as conn:
                await conn.execute(_UNCLAIM, {"ids": [job.id for job in jobs]})
    return out


async def probe(dsn: str, batches: list[int], samples: int) -> dict[str, Any]:
    """Time ``samples`` claims of each of ``batches`` from the 64 shards, as scenario 1 does:
    over a node's claim session, with a node's garbage collection."""
    session = Session(dsn, "pgpulse:bench-claim:claim", CLAIM_SESSION_SETTINGS)
    tune_collector()
    found: dict[str, list[float]] = {}
    try:
        async with connect(dsn, max_size=2, migrate=False) as pooled:
            claimer = Store(session)
            for batch in batches:
                found[str(batch)] = await time_claims(claimer, pooled, ALL_SHARDS, batch, samples)
    finally:
        await session.close()
        gc.unfreeze()
    return {"pgpulse": pgpulse.__file__, "ms": found}


def main(argv: list[str]) -> None:
    """``DSN SAMPLES BATCH...``: print :func:`probe`'s figures as one JSON line."""
    dsn, samples, *batches = argv
    # on the loop a command (and a node) runs on: uvloop where it is installed
    print(json.dumps(run_command(probe(dsn, [int(b) for b in batches], int(samples)))))


if __name__ == "__main__":
    main(sys.argv[1:])
