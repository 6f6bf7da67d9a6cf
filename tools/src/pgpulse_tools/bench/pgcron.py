"""pg_cron beside the peers of scenario 7, as far as pg_cron can express the scenarios.

pg_cron runs SQL on the database itself, from one background worker (the launcher), at most one
run of a job at a time and at most ``cron.max_running_jobs`` runs at once. Debian's
``postgresql-15-cron`` is version 1.4.2, whose finest schedule is one minute (the
``'N seconds'`` schedules came with 1.5): the scenarios' ``@every 1h`` backlog and ``@every
60s`` spread over the minute cannot be written. What it can express, and what is measured:

* ``jobs`` no-op SQL jobs (``SELECT 1``) on ``* * * * *``, all due at each minute's start, over
  ``minutes`` whole minutes;
* **capacity** (firings/s): the runs of a minute divided by the seconds from the minute's start
  to its last run's end — the rate at which it works through its due jobs, which bounds the
  jobs per minute it can carry (the drain's equivalent);
* **firings/s sustained**: the runs of the measured minutes over their seconds;
* **lag**: ``cron.job_run_details.start_time`` minus the scheduled instant (the minute's start);
* **DB CPU per firing**: the CPU of every process of the server (the launcher, each run's
  connection — pg_cron opens one per run — and the server's own processes) over the measured
  minutes, divided by the runs.

pg_cron needs ``shared_preload_libraries = 'pg_cron'``, set only at a server's start, so it is
measured on a private server of the benchmark's own (:class:`PrivateCluster`), never on the
shared one, and never installed as a Pulse dependency (``apt-get install postgresql-15-cron``).
"""

from __future__ import annotations

import math
import time
from typing import Any, Final

import psycopg

from pgpulse_tools.bench.common import cdf_points, lag_summary
from pgpulse_tools.bench.private_pg import ClusterUnavailable, PrivateCluster, bin_dir

#: The database pg_cron's launcher works in (``cron.database_name``).
CRON_DB: Final[str] = "pgpulse_bench_cron"
#: pg_cron's own default for runs at once.
MAX_RUNNING: Final[int] = 32
#: A no-op job.
NOOP_SQL: Final[str] = "SELECT 1"


def unavailable_reason(version: int = 15) -> str | None:
    """Why pg_cron cannot be measured here (``None``: it can)."""
    try:
        folder = bin_dir(version)
    except ClusterUnavailable as exc:
        return str(exc)
    if not (folder.parent / "lib" / "pg_cron.so").exists():
        return (
            f"pg_cron is not installed for PostgreSQL {version} "
            f"(Debian: apt-get install postgresql-{version}-cron)"
        )
    return None


def cluster(max_running: int = MAX_RUNNING, *, background_workers: bool = False) -> PrivateCluster:
    """A private server (not started) with pg_cron loaded, its launcher in :data:`CRON_DB`,
    running each job through a connection to 127.0.0.1 (pg_cron's default) or, with
    ``background_workers``, in a background worker of its own (``cron.use_background_workers``:
    no connection per run)."""
    return PrivateCluster(
        {
            "shared_preload_libraries": "'pg_cron'",
            "cron.database_name": f"'{CRON_DB}'",
            "cron.host": "'127.0.0.1'",
            "cron.max_running_jobs": str(max_running),
            "cron.use_background_workers": "on" if background_workers else "off",
            "max_worker_processes": str(max_running + 8),
            "max_connections": str(max_running + 40),
        }
    )


def version(server: PrivateCluster) -> str:
    """pg_cron's version as its extension reports it (``1.4-1`` for Debian's 1.4.2)."""
    with psycopg.connect(server.dsn(CRON_DB), autocommit=True) as conn:
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'"
        ).fetchone()
    return str(row[0]) if row else "?"


def install(server: PrivateCluster, jobs: int) -> None:
    """Create :data:`CRON_DB` with the extension and ``jobs`` no-op jobs on ``* * * * *``."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {CRON_DB}")
    with psycopg.connect(server.dsn(CRON_DB), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_cron")
        conn.execute(
            "SELECT cron.schedule('bench-' || i, '* * * * *', %s) "
            "FROM generate_series(1, %s::int) AS i",
            (NOOP_SQL, jobs),
        )


def _sleep_until(instant: float) -> None:
    while (left := instant - time.time()) > 0:
        time.sleep(min(left, 1.0))


def measure(server: PrivateCluster, jobs: int, minutes: int) -> dict[str, Any]:
    """Measure ``minutes`` whole minutes of the jobs :func:`install` scheduled: from the next
    minute's start (at least 2 s away, so the launcher has read the jobs) until every run of the
    last measured minute has ended; the jobs are unscheduled just before the minute after it.

    Returns:
        ``fired`` (succeeded runs), ``expected`` (``jobs × minutes``), ``missed``, ``failed``,
        ``rate`` (capacity, firings/s: see the module), ``sustained`` (firings/s over the
        minutes), ``busy_s`` (mean seconds from a minute's start to its last run's end),
        ``db_cpu_ms`` per firing, ``lag`` (:func:`lag_summary`, ms), ``lags_ms`` (CDF points).
    """
    first = math.ceil((time.time() + 2) / 60) * 60
    end = first + 60 * minutes
    _sleep_until(first - 1)
    cpu0 = server.cpu_seconds()
    _sleep_until(end - 2)
    with psycopg.connect(server.dsn(CRON_DB), autocommit=True) as conn:
        conn.execute("SELECT cron.unschedule(jobid) FROM cron.job")
        deadline = time.time() + 120
        while time.time() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM cron.job_run_details WHERE status IN ('starting', 'running')"
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.5)
        cpu1 = server.cpu_seconds()
        runs = conn.execute(
            "SELECT extract(epoch FROM start_time)::float8, extract(epoch FROM end_time)::float8,"
            " status FROM cron.job_run_details"
            " WHERE start_time >= to_timestamp(%s) AND start_time < to_timestamp(%s)",
            (first, end),
        ).fetchall()
    ok = [(start, stop) for start, stop, status in runs if status == "succeeded"]
    lags = [(start - (start // 60) * 60) * 1000 for start, _ in ok]
    busy = []
    for minute in range(minutes):
        at = first + 60 * minute
        ends = [stop for start, stop in ok if at <= start < at + 60 and stop is not None]
        if ends:
            busy.append((max(ends) - at, len(ends)))
    busy_s = sum(b for b, _ in busy) / len(busy) if busy else math.nan
    fired = len(ok)
    return {
        "fired": fired,
        "expected": jobs * minutes,
        "missed": jobs * minutes - fired,
        "failed": len(runs) - fired,
        "rate": sum(n for _, n in busy) / sum(b for b, _ in busy) if busy else 0.0,
        "sustained": fired / (60 * minutes),
        "busy_s": busy_s,
        "seconds": sum(b for b, _ in busy),
        "db_cpu_ms": (cpu1 - cpu0) / fired * 1000 if fired else math.nan,
        "lag": lag_summary(lags),
        "lags_ms": cdf_points(lags),
    }


def run_peer(
    jobs: int, minutes: int, max_running: int = MAX_RUNNING, *, background_workers: bool = False
) -> list[dict[str, Any]]:
    """Measure pg_cron on a private server and return its figures as scenario 7's runs: a
    ``drain`` run (the capacity) and a ``steady`` run (the lag), both of the same minutes
    (``background_workers``: see :func:`cluster`).

    Raises:
        ClusterUnavailable: pg_cron or the programs are missing, or the server did not start.
    """
    reason = unavailable_reason()
    if reason:
        raise ClusterUnavailable(reason)
    with cluster(max_running, background_workers=background_workers) as server:
        install(server, jobs)
        name = f"pg_cron {version(server)}" + (", background workers" if background_workers else "")
        figures = measure(server, jobs, minutes)
    common = {"peer": name, "jobs": jobs, "processes": 1, "concurrency": max_running}
    shape = (
        f"{jobs:,} `SELECT 1` jobs on `* * * * *` (its finest schedule in 1.4), "
        f"{minutes} min, at most {max_running} runs at once, "
        + ("one background worker per run" if background_workers else "one connection per run")
    )
    return [
        {
            **common,
            "mode": "drain",
            "note": f"{shape}; capacity = runs ÷ seconds from the minute's start to its last "
            f"run's end ({figures['busy_s']:.1f} s); {figures['sustained']:.1f} firings/s "
            "sustained over the minutes",
            **{k: v for k, v in figures.items() if k not in ("lag", "lags_ms")},
        },
        {
            **common,
            "mode": "steady",
            "note": f"{shape}; lag = job_run_details.start_time − the minute's start "
            "(every job is due at once each minute: a burst, not a spread)",
            "lag": figures["lag"],
            "lags_ms": figures["lags_ms"],
            "runs": figures["fired"],
            "missed": figures["missed"],
            "expected": figures["expected"],
        },
    ]
