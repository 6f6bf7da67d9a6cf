"""APScheduler 4 (alpha, pinned 4.0.0a6) with its SQLAlchemy + asyncpg PostgreSQL data store and
the asyncpg event broker, in scenario 7 of ``pgpulse bench``.

* drain: ``--jobs`` interval schedules (every hour) whose fire time fell in the last 30 minutes,
  all due. A firing is APScheduler's whole path: the schedule is acquired and released with its
  next fire time, a job row is added, acquired, run and released with its result stored
  (``job_result_expiration_time`` = 1 h, APScheduler's run history; counted in ``job_results``).
* steady: ``--jobs`` ``IntervalTrigger(seconds=60)`` schedules spread evenly over the minute
  exactly as Pulse's scenario 4 anchors its jobs: job k starts at ``base + k * 60 / jobs`` s,
  to the microsecond (sub-second; one job every 0.6 ms at 100,000 jobs, never two at once).
  APScheduler keeps the microseconds: ``IntervalTrigger`` fires at ``start_time + n * interval``
  (``datetime`` arithmetic), the trigger is pickled whole and fire times are ``timestamptz``
  columns on PostgreSQL. Lag = job start minus ``scheduled_fire_time``.

Schedules are bulk-inserted through the data store's own table and serializer (the rows
``add_schedule`` would write), since adding 1,000,000 schedules one call at a time would take
longer than the benchmark. Run it through ``pgpulse bench --only 7`` or directly from
``.venv-bench``::

    .venv-bench/bin/python tools/peers/apscheduler_peer.py --dsn postgresql://... \
        --mode drain --jobs 10000
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler import AsyncScheduler, CoalescePolicy, current_job
from apscheduler._structures import Schedule
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.eventbrokers.asyncpg import AsyncpgEventBroker
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

sys.path.insert(0, str(Path(__file__).parent))
from harness import Peer, main, note_start, offset_us, spread, steady_expected

TASK = "noop"
BATCH = 5000


async def noop() -> None:
    """The no-op job: records its start for the steady lag."""
    job = current_job.get()
    if job.scheduled_fire_time is not None:
        note_start(job.scheduled_fire_time.timestamp())


def _engine(dsn: str) -> AsyncEngine:
    url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    return create_async_engine(url, pool_size=10)


def _scheduler(engine: AsyncEngine, concurrency: int = 100) -> AsyncScheduler:
    store = SQLAlchemyDataStore(engine)
    broker = AsyncpgEventBroker.from_async_sqla_engine(engine)
    return AsyncScheduler(store, broker, max_concurrent_jobs=concurrency, cleanup_interval=None)


async def setup(dsn: str) -> None:
    """Create APScheduler's tables and the ``noop`` task (no limit on its running jobs)."""
    engine = _engine(dsn)
    async with _scheduler(engine) as scheduler:
        await scheduler.configure_task(TASK, func=noop, max_running_jobs=None, job_executor="async")
    await engine.dispose()


async def _insert(dsn: str, jobs: int, trigger_of: Callable[[int], IntervalTrigger]) -> None:
    """Insert schedules ``s0..s<jobs-1>`` (``trigger_of(k)`` each), :data:`BATCH` per
    statement, built batch by batch so a million never sit in memory at once."""
    engine = _engine(dsn)
    store = SQLAlchemyDataStore(engine)
    async with engine.begin() as conn:
        for start in range(0, jobs, BATCH):
            rows: list[dict[str, Any]] = []
            for k in range(start, min(jobs, start + BATCH)):
                trigger = trigger_of(k)
                schedule = Schedule(
                    id=f"s{k}",
                    task_id=TASK,
                    trigger=trigger,
                    coalesce=CoalescePolicy.latest,
                    misfire_grace_time=None,
                    metadata={},
                    max_jitter=None,
                    job_executor="async",
                    job_result_expiration_time=timedelta(hours=1),
                )
                schedule.next_fire_time = trigger.next()  # as add_schedule does
                rows.append(store._convert_outgoing_fire_times(schedule.marshal(store.serializer)))
            await conn.execute(store._t_schedules.insert(), rows)
    await engine.dispose()


async def load_drain(dsn: str, jobs: int) -> None:
    """``jobs`` hourly schedules, each due once within the last 30 minutes."""
    now = datetime.now(UTC)
    await _insert(
        dsn,
        jobs,
        lambda k: IntervalTrigger(hours=1, start_time=now - timedelta(seconds=1800 - k % 1800)),
    )


async def load_steady(dsn: str, jobs: int, base: float, duration: float) -> int:
    """``jobs`` every-60-s schedules, schedule k starting at ``base + k * 60 / jobs`` s to the
    microsecond (Pulse's scenario 4 spread); returns how many occurrences fall within the
    window."""
    start = datetime.fromtimestamp(base, UTC)
    await _insert(
        dsn,
        jobs,
        lambda k: IntervalTrigger(
            seconds=60, start_time=start + timedelta(microseconds=offset_us(spread(k, jobs)))
        ),
    )
    return steady_expected(jobs, duration, lambda k: spread(k, jobs))


async def worker(dsn: str, mode: str, jobs: int, concurrency: int, stop: asyncio.Event) -> None:
    """One scheduler process (role both: processes schedules and runs jobs)."""
    engine = _engine(dsn)
    async with _scheduler(engine, concurrency) as scheduler:
        await scheduler.configure_task(TASK, func=noop, max_running_jobs=None, job_executor="async")
        await scheduler.start_in_background()
        await stop.wait()
    await engine.dispose()


PEER = Peer(
    name="APScheduler 4.0.0a6",
    setup=setup,
    load_drain=load_drain,
    load_steady=load_steady,
    worker=worker,
    done_sql="SELECT count(*) FROM job_results WHERE outcome = 'success'",
    drain_note="interval schedules all due; each firing stores a job result",
    steady_note="IntervalTrigger(seconds=60) schedules, start times spread evenly over the "
    "minute to the microsecond, as Pulse's",
)

if __name__ == "__main__":
    main(PEER)
