"""The history's upkeep: ``pgpulse_runs`` partitioned by day, its partitions made ahead of the
rows and dropped whole once the retention is past them (migration 0023; docs/scaling.md,
"History growth and retention").

``pgpulse_runs`` is partitioned by range of ``scheduled_for``, one partition a UTC day, named
``pgpulse_runs_YYYYMMDD``; ``pgpulse_runs_default`` takes the rows of any day that has none, so
no insert ever fails for want of one, and the history from before 0023 is one partition,
``pgpulse_runs_before``. The leader's prune (:meth:`pgpulse.db.claims.ClaimStore.prune`, once
an hour) calls :func:`prune_history`, which, with the database's clock:

1. **makes the partitions** of today and of the :data:`DAYS_AHEAD` days after it that are not
   there yet, moving into each the rows the default partition holds for its day;
2. **drops whole** each partition whose every occurrence is older than the global retention
   and whose every run finished longer ago than it (checked under a lock that keeps rows out):
   a catalogue change instead of a ``DELETE`` and its ``VACUUM`` (docs/benchmarks.md, scenario
   11); a partition still holding a run that must stay (a backfill of an old day that ran
   today) is left, and its other rows go in step 3;
3. **deletes row by row**, in batches of :data:`BATCH` rows (each its own transaction, so no
   statement holds locks or builds WAL for long), the runs the global retention forgets that
   step 2 left, then the runs each job's own ``keep_runs`` forgets (days, or its newest N).

A run is forgotten exactly when it was before 0023: once it finished ``keep`` seconds ago (a run
finishes after its occurrence's instant, so a day older than the retention holds only such runs
unless one finished late, which step 2 checks for). The DDL scripts come from ``queries.sql``
(``runs_partition_add``, ``runs_partition_drop``), which quote the names; each is sent as one
message, one transaction that commits on the server without a round trip back. Each of steps 1
and 2 waits at most :data:`LOCK_TIMEOUT` for its locks and otherwise gives up until the next
prune: the history's readers and writers never queue behind it for long.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import psycopg

from pgpulse.db.database import ConnectionSource
from pgpulse.sql import QUERIES

__all__ = ["BATCH", "DAYS_AHEAD", "LOCK_TIMEOUT", "MAX_BATCHES", "prune_history"]

log = logging.getLogger(__name__)

#: Days after today whose partitions are made ahead of their rows (a prune once an hour makes
#: each several times over before its first row; a default partition catches the rest).
DAYS_AHEAD: Final[int] = 3
#: Rows deleted by one statement of step 3.
BATCH: Final[int] = 5000
#: Statements of each kind of step 3 per prune, at most (the rest waits for the next prune).
MAX_BATCHES: Final[int] = 200
#: How long making or dropping a partition waits for its locks (a PostgreSQL duration). While
#: it waits, the statements that come after it on the history queue behind its request (the
#: claim step among them, whose own limit is half a lease): it gives up soon, and tries again
#: at the next prune.
LOCK_TIMEOUT: Final[str] = "100ms"

_DAY = timedelta(days=1)


def _day_start(instant: datetime) -> datetime:
    """The start of ``instant``'s UTC day (an aware instant)."""
    return instant.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _covered(partitions: list[dict[str, Any]], day: datetime) -> bool:
    """Whether a partition (not the default one) holds the whole UTC day from ``day``."""
    return any(
        not p["is_default"]
        and (p["lower"] is None or p["lower"] <= day)
        and p["upper"] is not None
        and day + _DAY <= p["upper"]
        for p in partitions
    )


async def _one(conn: psycopg.AsyncConnection[Any], name: str, params: dict[str, Any]) -> Any:
    cur = await conn.execute(QUERIES[name], params)
    row = await cur.fetchone()
    assert row is not None  # these statements return one row
    return row


async def _add_partition(pool: ConnectionSource, day: datetime) -> bool:
    """Make and attach the partition of the UTC day from ``day``; False if its locks were not
    had within :data:`LOCK_TIMEOUT` (nothing changed).

    The script is one message (simple query protocol: one implicit transaction): it commits
    on the server, so no lock it takes waits on this process's event loop."""
    async with pool.connection() as conn:
        script = (
            await _one(conn, "runs_partition_add", {"day": day, "lock_timeout": LOCK_TIMEOUT})
        )["script"]
        try:
            await conn.execute(script)
        except psycopg.errors.LockNotAvailable:
            return False
    return True


async def _drop_partition(
    pool: ConnectionSource, part: dict[str, Any], *, keep: float, now: datetime | None
) -> int | None:
    """Drop partition ``part`` if the retention keeps none of its rows: the rows dropped (the
    statistics' estimate for a partition of 100,000 or more), or ``None`` if it stays (a run in
    it must stay, or its locks were not had in time). As :func:`_add_partition`, one message."""
    bounds = {"name": part["name"], "lower": part["lower"], "upper": part["upper"]}
    async with pool.connection() as conn:
        rows = int((await _one(conn, "runs_partition_rows", bounds))["rows"])
        script = (
            await _one(
                conn,
                "runs_partition_drop",
                {**bounds, "keep": keep, "now": now, "lock_timeout": LOCK_TIMEOUT},
            )
        )["script"]
        try:
            await conn.execute(script)
        except (psycopg.errors.LockNotAvailable, psycopg.errors.ObjectInUse):
            return None
    return rows


async def _delete_batches(pool: ConnectionSource, name: str, params: dict[str, Any]) -> int:
    """Send statement ``name`` (``prune_runs`` or ``prune_job_runs``) until a batch comes back
    short, at most :data:`MAX_BATCHES` times; the rows deleted."""
    total = 0
    for _ in range(MAX_BATCHES):
        async with pool.connection() as conn:
            done = int((await _one(conn, name, {**params, "batch": BATCH}))["runs"])
        total += done
        if done < BATCH:
            break
    return total


async def prune_history(pool: ConnectionSource, *, keep: float, now: datetime | None = None) -> int:
    """Keep ``pgpulse_runs`` partitioned ahead and forget the runs the retentions let go (see
    the module's docstring for the three steps).

    Args:
        pool: the leader's pool (autocommit connections).
        keep: the global retention, seconds: a run finished longer ago is forgotten (a job's
            ``keep_runs`` forgets its runs sooner, never later).
        now: the instant to prune at (tests); ``None``: the database's clock.

    Returns:
        The runs forgotten (a dropped partition's rows included: estimated from the
        statistics when it held 100,000 or more, counted otherwise).

    Raises:
        psycopg.Error: the database failed (the next prune starts over; each step leaves the
            history whole).
    """
    async with pool.connection() as conn:
        cur = await conn.execute(QUERIES["runs_partitions"], {"now": now})
        partitions = list(await cur.fetchall())
    clock: datetime = partitions[0]["now"]
    today = _day_start(clock)
    for ahead in range(DAYS_AHEAD + 1):
        day = today + ahead * _DAY
        if not _covered(partitions, day) and not await _add_partition(pool, day):
            log.warning(
                "the history's partition of %s waits for the next prune (its locks were busy)",
                day.date().isoformat(),
                extra={"action": "history_partition_deferred", "day": day.date().isoformat()},
            )
    forgotten = 0
    cutoff = clock - timedelta(seconds=keep)
    for part in partitions:
        if part["is_default"] or part["upper"] is None or part["upper"] > cutoff:
            continue
        dropped = await _drop_partition(pool, part, keep=keep, now=now)
        if dropped is not None:
            forgotten += dropped
            log.info(
                "dropped the history's partition %s (%s runs)",
                part["name"],
                dropped,
                extra={"action": "history_partition_dropped", "partition": part["name"]},
            )
    forgotten += await _delete_batches(pool, "prune_runs", {"keep": keep, "now": now})
    forgotten += await _delete_batches(pool, "prune_job_runs", {"now": now})
    return forgotten
