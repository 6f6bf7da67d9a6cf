"""Procrastinate 3.10 (PostgreSQL task queue with periodic tasks) in scenario 7 of
``pgpulse bench``.

* drain: Procrastinate's periodic tasks are declared in code and defer one job per tick, so a
  backlog of ``--jobs`` due occurrences is expressed as ``--jobs`` deferred no-op jobs
  (``batch_defer_async``). A firing: the job is fetched, run and marked ``succeeded`` (its row
  stays, with its events: Procrastinate's run history).
* steady: ``--jobs`` periodic tasks of one no-op task (``periodic_id`` 0..N-1), job k on cron
  ``* * * * * S`` with ``S = k mod 60``. This is as close as Procrastinate gets to Pulse's
  spread, not the same: Pulse's scenario 4 anchors job k at ``base + k * 60 / N`` s to the
  microsecond (sub-second, never two jobs due at once), but Procrastinate's periodic tasks are
  cron with a seconds field, one-second resolution, and the ``timestamp`` a job receives is a
  whole Unix second. So Procrastinate sees ~N/60 jobs due in the same second (1,667 at
  N = 100,000), all deferred at that second's tick. Every worker runs the periodic deferrer,
  as Procrastinate does; the database refuses duplicate defers. Lag = job start minus the
  periodic ``timestamp`` the job receives.

Run it through ``pgpulse bench --only 7`` or directly from ``.venv-bench``::

    .venv-bench/bin/python tools/peers/procrastinate_peer.py --dsn postgresql://... \
        --mode drain --jobs 10000
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

from procrastinate import App, PsycopgConnector

sys.path.insert(0, str(Path(__file__).parent))
from harness import Peer, main, note_start, steady_expected

BATCH = 5000


def _app(dsn: str, pool_size: int = 10) -> App:
    # max_delay 2 s: catch up only the occurrences of the last 2 s when a worker starts (the
    # default, 10 min, would defer the previous occurrence of every task at once at start-up;
    # 0 would never defer anything: a first tick always comes a little after its second)
    return App(
        connector=PsycopgConnector(conninfo=dsn, max_size=pool_size),
        periodic_defaults={"max_delay": 2},
    )


def _register(app: App) -> None:
    @app.task(name="noop")
    async def noop(timestamp: int | None = None) -> None:
        if timestamp is not None:
            note_start(float(timestamp))


def _second(k: int, jobs: int) -> int:
    """Second of the minute job k fires at: cron has one-second resolution, so the sub-second
    spread of Pulse's scenario 4 (``k * 60 / jobs``) cannot be expressed; ``k mod 60``."""
    return k % 60


async def setup(dsn: str) -> None:
    """Apply Procrastinate's schema."""
    app = _app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def load_drain(dsn: str, jobs: int) -> None:
    """Defer ``jobs`` no-op jobs, all due at once."""
    app = _app(dsn)
    _register(app)
    async with app.open_async():
        task = app.tasks["noop"]
        for start in range(0, jobs, BATCH):
            await task.batch_defer_async(*({} for _ in range(start, min(jobs, start + BATCH))))


async def load_steady(dsn: str, jobs: int, base: float, duration: float) -> int:
    """Nothing to store (the periodic tasks live in the workers' code); returns how many
    occurrences of them fall within the window (``base`` is a whole second)."""
    return steady_expected(jobs, duration, lambda k: float(_second(k, jobs)))


async def worker(dsn: str, mode: str, jobs: int, concurrency: int, stop: asyncio.Event) -> None:
    """One worker process (with the periodic deferrer when ``mode`` is steady)."""
    app = _app(dsn, pool_size=concurrency + 2)
    _register(app)
    if mode == "steady":
        noop = app.tasks["noop"]
        for k in range(jobs):
            app.periodic(cron=f"* * * * * {_second(k, jobs)}", periodic_id=str(k))(noop)
    async with app.open_async():
        run = asyncio.create_task(
            app.run_worker_async(
                concurrency=concurrency, install_signal_handlers=False, shutdown_graceful_timeout=5
            )
        )
        await stop.wait()
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run


PEER = Peer(
    name="Procrastinate 3.10.0",
    setup=setup,
    load_drain=load_drain,
    load_steady=load_steady,
    worker=worker,
    done_sql="SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
    drain_note="deferred jobs (periodic tasks are code, one defer per tick); job rows kept",
    steady_note="periodic tasks, cron with seconds: 1-second resolution, so ~N/60 due in the "
    "same second (Pulse spreads them sub-second)",
)

if __name__ == "__main__":
    main(PEER)
