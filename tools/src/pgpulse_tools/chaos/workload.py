"""The chaos workload: the jobs the harness loads and the handlers its node processes run.

Every handler records its own execution in ``chaos_history`` (start and end instants by the
database's clock, attempt, fencing token, run id, node) and in its node's journal file outside
the database (:mod:`~pgpulse_tools.chaos.journal`: a failover may lose the rows), and does one
side effect guarded by its fencing
token (``chaos_effects``, keyed by occurrence): the guard README gives users, so fencing is
exercised end to end. ``PGPULSE_CHAOS_GUARD=lease`` makes the guard also require the token's
lease to be current, which only a resource inside Pulse's own database can check. Handler kinds
(``chaos.<kind>``):

========== =========================================== ======================================
kind       schedule                                    behaviour
========== =========================================== ======================================
quick      ``@every 1s``                               10–100 ms
steady     ``@every 3s``                               50–500 ms
cron       6-field cron with seconds (``*/2``, ``*/5``) 20–300 ms
flaky      ``@every 2s``                               fails at random (25%) and retries
slow       ``@every 1s``                               1.2–2.5 s: longer than its period
long       ``@every 3·lease``                          1.3–1.8 leases: lives on heartbeats
blocking   ``@every 3s``                               a sync handler (a thread; cannot be
                                                       cancelled), 0.2–1.5 s
overlap    ``@every 1s``, overlap ``allow``, N = 3     1.2–2.4 s: up to three occurrences at
                                                       once, each with its own lease and token
replace    ``@every 2s``, overlap ``replace``          1.5–3.5 s: mostly replaced (``cancelled``)
                                                       by the next occurrence
========== =========================================== ======================================

An ``overlap`` or ``replace`` execution, and any extra occurrence (a trigger's or a backfill's,
which the runner requests during the faults: ``ctx.kind``), guards its effect by its run id (its
token grows over the claims of its occurrence only: README), and its lease is the occurrence's
(``pgpulse_occurrences``).

Durations and failures are drawn from a generator seeded by (``PGPULSE_CHAOS_SEED``, job,
occurrence, attempt), so an execution behaves the same whichever node runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from pgpulse.app import App
from pgpulse.core.jobs import JobSpec
from pgpulse.node.handlers import HandlerFailed, RunContext
from pgpulse.sql import load_queries
from pgpulse_tools.chaos.chains import CHAIN_HANDLER
from pgpulse_tools.chaos.effects import OVERLAP_N
from pgpulse_tools.chaos.journal import Journal

Q = load_queries("chaos.sql", __package__)
#: Seconds a handler waits for a history connection before its attempt fails.
POOL_TIMEOUT = 15.0
#: History connections an async handler may hold at once, per node.
POOL_SIZE = 4


@dataclass(frozen=True, slots=True)
class Kind:
    """One handler kind of the workload (durations in seconds, ``fail`` a probability)."""

    name: str
    schedules: tuple[str, ...]
    min: float
    max: float
    policies: tuple[str, ...] = ("backfill", "skip", "coalesce")
    share: float = 0.1
    fail: float = 0.0
    blocking: bool = False
    max_concurrency: int | None = None  # overlap allow with this bound
    overlap: str = "forbid"  # without max_concurrency: forbid or replace

    @property
    def policy(self) -> str:
        """Its jobs' overlap policy."""
        return "allow" if self.max_concurrency is not None else self.overlap


def kinds(lease: float) -> tuple[Kind, ...]:
    """The workload's kinds for nodes running with ``lease`` seconds of lease."""
    long_every = f"@every {math.ceil(3 * lease)}s"
    return (
        Kind("quick", ("@every 1s",), 0.01, 0.1, share=0.30),
        Kind("steady", ("@every 3s",), 0.05, 0.5, share=0.13),
        Kind("cron", ("*/2 * * * * *", "*/5 * * * * *"), 0.02, 0.3, share=0.15),
        Kind("flaky", ("@every 2s",), 0.05, 0.3, share=0.10, fail=0.25),
        Kind("slow", ("@every 1s",), 1.2, 2.5, policies=("skip", "coalesce"), share=0.10),
        Kind("long", (long_every,), 1.3 * lease, 1.8 * lease, share=0.10),
        Kind("blocking", ("@every 3s",), 0.2, 1.5, share=0.12, blocking=True),
        Kind("overlap", ("@every 1s",), 1.2, 2.4, share=0.05, max_concurrency=OVERLAP_N),
        Kind("replace", ("@every 2s",), 1.5, 3.5, share=0.04, overlap="replace"),
    )


def build_jobs(count: int, *, lease: float, seed: int) -> list[JobSpec]:
    """Return ``count`` job specs mixing every kind and catch-up policy (deterministic).

    Args:
        count: number of jobs (at least one of each kind when ``count`` >= 8).
        lease: the nodes' lease, seconds (sets the ``long`` kind's durations and period).
        seed: seeds the choice of schedules, policies and grace periods.

    Raises:
        ValueError: ``count`` < 1.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    rng = random.Random(seed)
    all_kinds = kinds(lease)
    quotas = [max(1, round(k.share * count)) for k in all_kinds]
    while sum(quotas) > count and max(quotas) > 1:
        quotas[quotas.index(max(quotas))] -= 1
    quotas[0] += max(count - sum(quotas), 0)
    specs: list[JobSpec] = []
    for kind, quota in zip(all_kinds, quotas, strict=True):
        for i in range(quota):
            policy = kind.policies[i % len(kind.policies)]
            specs.append(
                JobSpec.create(
                    name=f"{kind.name}-{i:03d}-{policy}",
                    schedule=rng.choice(kind.schedules),
                    handler=f"chaos.{kind.name}",
                    catch_up=policy,
                    payload={
                        "kind": kind.name,
                        "min": kind.min,
                        "max": kind.max,
                        "fail": kind.fail,
                        # an occurrence with a lease of its own (allow, replace)
                        "overlap": kind.policy != "forbid",
                    },
                    overlap=kind.policy,
                    max_concurrency=kind.max_concurrency,
                    # A short grace makes skip/coalesce decisions happen after every outage.
                    misfire_grace=rng.choice((1.0, 2.0, 3.0)),
                    # Pulse's default for every policy: interruptions (kills, drains, lost
                    # leases) must not use attempts up (issue 37), and more attempts for
                    # backfill jobs would hide it; only the flaky kind's planned failures may
                    # end a run failed (counted, not lost).
                    max_attempts=3,
                    retry_backoff=0.2,
                    source="chaos",
                )
            )
    return specs[:count]


# -- the handlers node processes run ------------------------------------------------------------

app = App(builtins=False)
_sync_pool: ConnectionPool[psycopg.Connection[DictRow]] | None = None
_sync_lock = threading.Lock()
_journal = Journal.from_env()


def _dsn() -> str:
    return os.environ["PGPULSE_DATABASE_URL"]


def _conn_kwargs() -> dict[str, Any]:
    return {
        "autocommit": True,
        "row_factory": dict_row,
        "connect_timeout": 5,
        "application_name": "pgpulse-chaos-handler",
    }


class Connections:
    """The async handlers' connections to the run's database: at most ``size`` lent at once
    (a handler waits up to :data:`POOL_TIMEOUT` for one), an idle one checked before it is lent
    again (after a failover every idle connection is dead: unchecked, each would fail one
    execution), a new one opened by the borrowing handler itself.

    Not a psycopg_pool pool: a handler module has no hook to close one at the node's stop, and
    an unclosed pool's maintenance task that is reconnecting (after a restart, a failover)
    swallows the cancellation the event loop sends its tasks as the process ends, so the node
    never exited (seed 7's soak: a SIGTERMed node, its drain done, hung in the loop's last
    cancellation). Here nothing runs outside the handlers' own tasks.
    """

    def __init__(self, size: int = POOL_SIZE) -> None:
        self._free = asyncio.Semaphore(size)
        self._idle: list[psycopg.AsyncConnection[DictRow]] = []

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[DictRow]]:
        """A connection for one statement or a few; kept for the next handler unless the
        block raised (its state is unknown: it is closed).

        Raises:
            psycopg.OperationalError: none free within :data:`POOL_TIMEOUT`, or it could not
                connect.
        """
        try:
            async with asyncio.timeout(POOL_TIMEOUT):
                await self._free.acquire()
        except TimeoutError:
            raise psycopg.OperationalError(
                f"no history connection free within {POOL_TIMEOUT:g}s"
            ) from None
        try:
            conn = await self._lend()
            try:
                yield conn
            except BaseException:
                await conn.close()
                raise
            self._idle.append(conn)
        finally:
            self._free.release()

    async def close(self) -> None:
        """Close the idle connections (a node's process need not: they end with it)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    async def _lend(self) -> psycopg.AsyncConnection[DictRow]:
        while self._idle:
            conn = self._idle.pop()
            try:
                async with asyncio.timeout(POOL_TIMEOUT):
                    await conn.execute("")
            except (psycopg.Error, TimeoutError):
                await conn.close()
                continue
            return conn
        return await psycopg.AsyncConnection.connect(_dsn(), **_conn_kwargs())


_connections = Connections()


def _sync_history_pool() -> ConnectionPool[psycopg.Connection[DictRow]]:
    global _sync_pool
    with _sync_lock:
        if _sync_pool is None:
            _sync_pool = ConnectionPool(
                _dsn(),
                min_size=1,
                max_size=2,
                timeout=POOL_TIMEOUT,
                kwargs=_conn_kwargs(),
                connection_class=psycopg.Connection[DictRow],
                check=ConnectionPool.check_connection,
                open=True,
                name="chaos-history-sync",
            )
        return _sync_pool


def _plan(ctx: RunContext) -> tuple[float, bool]:
    """(duration in seconds, fails on purpose) of this execution — the same on any node."""
    seed = os.environ.get("PGPULSE_CHAOS_SEED", "0")
    key = f"{seed}:{ctx.job_id}:{ctx.scheduled_for.isoformat()}:{ctx.attempt}"
    if ctx.kind != "scheduled":  # a backfill of an instant is not its scheduled run again
        key += f":{ctx.kind}:{ctx.run_id}"
    rng = random.Random(key)
    payload = ctx.payload
    return rng.uniform(payload["min"], payload["max"]), rng.random() < payload.get("fail", 0.0)


def _start(ctx: RunContext, until_effect: float | None) -> dict[str, Any]:
    """The execution's start record: in the journal at once, then the database's row args
    (``until_effect``: the seconds it works before its effect, ``None`` when it fails on
    purpose and has none; a pause reads it: faults.py)."""
    fields = {
        "job_id": ctx.job_id,
        "scheduled_for": ctx.scheduled_for,
        "attempt": ctx.attempt,
        "token": ctx.fencing_token,
        "run_id": ctx.run_id,
        "kind": ctx.payload["kind"],
        "occurrence": ctx.kind,
    }
    uid = uuid.uuid4().hex
    _journal.started(uid, ctx.node_id, fields)
    return {
        **fields,
        "uid": uid,
        "node": ctx.node_id,
        "fence": _fence(ctx),
        "planned": until_effect,
    }


def _fence(ctx: RunContext) -> int:
    """The fence key of an execution: its job, or (an occurrence with a lease of its own: forked
    under allow/replace, or a trigger's or a backfill's) minus its run id."""
    own = ctx.payload.get("overlap") or ctx.kind != "scheduled"
    return -ctx.run_id if own else ctx.job_id


def _end(ctx: RunContext, start: dict[str, Any], row: DictRow, result: str, end: Any) -> None:
    """Journal the end the database acknowledged (``end``: its returned row)."""
    lease_ok = bool(end and end["lease_ok_at_end"])
    committed_at = end["committed_at"] if end else None
    _journal.ended(
        start["uid"],
        ctx.node_id,
        result,
        row["lease_ok_at_start"],
        lease_ok,
        committed_at=committed_at,
    )
    start["ended"] = True


def _abort(ctx: RunContext, start: dict[str, Any]) -> None:
    """Journal an execution that stops without an acknowledged end (it raised, or was
    cancelled): from now on it holds no token."""
    if not start.get("ended"):
        _journal.aborted(start["uid"], ctx.node_id)


def _effect_args(ctx: RunContext, start: dict[str, Any]) -> dict[str, Any]:
    return {
        "job_id": ctx.job_id,
        "scheduled_for": ctx.scheduled_for,
        "token": ctx.fencing_token,
        "run_id": ctx.run_id,
        "fence": start["fence"],
        "extra": 0 if ctx.kind == "scheduled" else ctx.run_id,
        "node": ctx.node_id,
        "uid": start["uid"],
        "lease_guard": os.environ.get("PGPULSE_CHAOS_GUARD", "lease") == "lease",
    }


def _verdict(result: str | None, ctx: RunContext) -> str:
    if result != "applied":
        raise HandlerFailed(f"chaos: the fencing guard refused token {ctx.fencing_token}")
    return f"effect applied by {ctx.node_id} (token {ctx.fencing_token})"


async def run_async(ctx: RunContext) -> str:
    """An async workload handler: record the start, work, then apply the fenced effect.

    Raises:
        HandlerFailed: a planned failure, or the guard refused the effect (fenced).
        psycopg.Error: the history could not be written (the attempt fails).
    """
    duration, fails = _plan(ctx)
    pool = _connections
    start = _start(ctx, None if fails else duration)
    try:
        async with pool.connection() as conn:
            row = await (await conn.execute(Q["start_execution"], start)).fetchone()
        assert row is not None
        if fails:
            await asyncio.sleep(duration / 4)
            async with pool.connection() as conn:
                cur = await conn.execute(Q["fail_execution"], _effect_args(ctx, start))
                failed = await cur.fetchone()
            _end(ctx, start, row, "failed", failed)
            raise HandlerFailed(f"chaos: planned failure of attempt {ctx.attempt}")
        await asyncio.sleep(duration)
        async with pool.connection() as conn:
            cur = await conn.execute(Q["apply_effect"], _effect_args(ctx, start))
            end = await cur.fetchone()
        assert end is not None
        _end(ctx, start, row, end["result"], end)
        return _verdict(end["result"], ctx)
    finally:
        _abort(ctx, start)


def run_blocking(ctx: RunContext) -> str:
    """A sync workload handler (runs in a worker thread, so it cannot be cancelled).

    Raises:
        HandlerFailed: a planned failure, or the guard refused the effect (fenced).
        psycopg.Error: the history could not be written (the attempt fails).
    """
    duration, fails = _plan(ctx)
    pool = _sync_history_pool()
    start = _start(ctx, None if fails else duration)
    try:
        with pool.connection() as conn:
            row = conn.execute(Q["start_execution"], start).fetchone()
        assert row is not None
        if fails:
            time.sleep(duration / 4)
            with pool.connection() as conn:
                failed = conn.execute(Q["fail_execution"], _effect_args(ctx, start)).fetchone()
            _end(ctx, start, row, "failed", failed)
            raise HandlerFailed(f"chaos: planned failure of attempt {ctx.attempt}")
        time.sleep(duration)
        with pool.connection() as conn:
            end = conn.execute(Q["apply_effect"], _effect_args(ctx, start)).fetchone()
        assert end is not None
        _end(ctx, start, row, end["result"], end)
        return _verdict(end["result"], ctx)
    finally:
        _abort(ctx, start)


for _kind in kinds(lease=1.0):
    app.handlers.register(f"chaos.{_kind.name}", run_blocking if _kind.blocking else run_async)
app.handlers.register(CHAIN_HANDLER, run_async)  # the chains' jobs: chains.py
