"""PgQueuer 1.6.0 (PostgreSQL job queue with a cron scheduler) in scenario 7 of ``pgpulse bench``.

PgQueuer's scheduler keeps one row per (entrypoint, cron expression) with minute resolution: it
cannot hold 1,000,000 distinct recurring jobs, nor an ``@every 60s`` job anchored at a second
offset. So both scenarios use its queue, the part that carries its throughput:

* drain: ``--jobs`` no-op jobs enqueued (one batch ``enqueue`` call per 5,000), all due. A firing:
  the job is dequeued, run, deleted from the queue and logged ``successful`` in
  ``pgqueuer_log`` (PgQueuer's run history, counted).
* steady: every occurrence the window holds (``--jobs`` jobs every 60 s, spread evenly over the
  minute exactly as Pulse's scenario 4 anchors its jobs: job k at ``base + k * 60 / jobs`` s, to
  the microsecond) enqueued in advance as a delayed job whose ``execute_after`` is set to the
  occurrence's instant exactly. Sub-second instants are no limitation here: ``enqueue`` takes
  ``execute_after`` as a ``timedelta`` (a PostgreSQL ``interval``, microseconds kept) added to
  the database's ``NOW()``, the column is a ``timestamptz`` and jobs are eligible once
  ``execute_after < NOW()``; since a delay relative to ``NOW()`` at enqueue time cannot hit an
  absolute instant, the rows are then set to the instant their payload holds (Unix
  microseconds). Lag = start minus that instant.

Run it through ``pgpulse bench --only 7`` or directly from ``.venv-bench``::

    .venv-bench/bin/python tools/peers/pgqueuer_peer.py --dsn postgresql://... \
        --mode drain --jobs 10000
"""

from __future__ import annotations

import asyncio
import struct
import sys
from datetime import timedelta
from pathlib import Path

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer, Queries
from pgqueuer.models import Job

sys.path.insert(0, str(Path(__file__).parent))
from harness import PERIOD, Peer, main, note_start, offset_us, spread, steady_expected

BATCH = 5000
ENTRYPOINT = "noop"


async def setup(dsn: str) -> None:
    """Install PgQueuer's schema."""
    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def _enqueue(dsn: str, payloads: list[bytes | None]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(conn))
        for start in range(0, len(payloads), BATCH):
            chunk = payloads[start : start + BATCH]
            await queries.enqueue(
                [ENTRYPOINT] * len(chunk),
                chunk,
                [0] * len(chunk),
                [timedelta(hours=1) if p else None for p in chunk],
            )
        if any(payloads):
            # the payload holds the occurrence's instant (Unix microseconds): make it the
            # exact eligibility time (integer microseconds, no float rounding)
            await conn.execute(
                "UPDATE pgqueuer SET execute_after = timestamptz 'epoch' + "
                "('x' || encode(payload, 'hex'))::bit(64)::bigint * interval '1 microsecond' "
                "WHERE payload IS NOT NULL"
            )
    finally:
        await conn.close()


async def load_drain(dsn: str, jobs: int) -> None:
    """Enqueue ``jobs`` no-op jobs, all due at once."""
    await _enqueue(dsn, [None] * jobs)


async def load_steady(dsn: str, jobs: int, base: float, duration: float) -> int:
    """Enqueue every occurrence within ``[base, base + duration]`` of job k every 60 s from
    ``base + k * 60 / jobs`` s (to the microsecond) as a delayed job; returns how many."""
    base_us, window, period = offset_us(base), offset_us(duration), offset_us(PERIOD)
    instants = [
        base_us + first + m * period
        for first in (offset_us(spread(k, jobs)) for k in range(jobs))
        for m in range((window - first) // period + 1 if first <= window else 0)
    ]
    await _enqueue(dsn, [struct.pack(">q", at) for at in instants])
    expected = steady_expected(jobs, duration, lambda k: spread(k, jobs))
    assert expected == len(instants)
    return expected


async def worker(dsn: str, mode: str, jobs: int, concurrency: int, stop: asyncio.Event) -> None:
    """One PgQueuer process (a queue manager; batch size ``concurrency``)."""
    conn = await asyncpg.connect(dsn)
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        if job.payload:
            note_start(struct.unpack(">q", job.payload)[0] / 1e6)

    run = asyncio.create_task(pgq.run(batch_size=concurrency, dequeue_timeout=timedelta(seconds=1)))
    await stop.wait()
    pgq.shutdown.set()
    await run
    await conn.close()


PEER = Peer(
    name="PgQueuer 1.6.0",
    setup=setup,
    load_drain=load_drain,
    load_steady=load_steady,
    worker=worker,
    done_sql="SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
    drain_note="enqueued jobs (its scheduler holds one cron per entrypoint, minute resolution)",
    steady_note="delayed one-shot jobs at each occurrence's instant, spread to the microsecond "
    "as Pulse's (its scheduler cannot express per-job @every 60s)",
)

if __name__ == "__main__":
    main(PEER)
