"""The one interface to every claim a node holds: claims, outcomes, renewals, hand-backs,
forks and heartbeats, for job rows and extra occurrences alike.

A claim's lease is held by a job row (its scheduled occurrence) or by a row of
``pgpulse_occurrences`` (a trigger, a backfill occurrence, a fork under overlap
``replace``/``allow``; docs/states.md, "Extra occurrences"); a :class:`~pgpulse.core.model.ClaimKey`
names which. :class:`ClaimStore` is the part of the store a node's own sessions use — the claim
loop's (:data:`CLAIM_SESSION_SETTINGS`) and the heartbeat's — and
:class:`~pgpulse.db.store.Store`, the whole store, inherits it. Every method runs the statements of
``sql/queries.sql`` and ``sql/occurrences.sql`` it names and says what they lock and fence
(docs/design.md, invariants 2 and 3). Instants are aware datetimes; durations are seconds. ``now``
parameters exist for tests only: production callers leave them ``None`` so the database's clock
decides (docs/design.md, invariant 1).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson
import psycopg
from psycopg.abc import Buffer
from psycopg.rows import tuple_row
from psycopg.types.json import JsonbBinaryLoader

from pgpulse.core.chains import previous_scheduled_for
from pgpulse.core.model import ClaimedJob, ClaimKey, Heartbeat, Outcome, Step
from pgpulse.core.planner import Advance
from pgpulse.core.routing import Routes
from pgpulse.core.sharding import DEFAULT_SHARD_COUNT
from pgpulse.db.database import ConnectionSource
from pgpulse.db.history import prune_history
from pgpulse.db.registry import NodeRegistry
from pgpulse.sql import QUERIES, at_shard_count

#: Advisory lock key of the leader ("Puls"); held on one session by the leader node.
LEADER_LOCK_KEY = 0x50756C73
#: How long a node silent that long stays in ``pgpulse_nodes`` before the leader's prune
#: forgets it (seconds: a day), unless a lease still names it. ``status`` lists it for the
#: first hour (:data:`pgpulse.cli.report.RECENT_NODES`).
NODE_RETENTION = 86400.0
#: The sweep (queries.sql), in the order sent: expired leases of job rows, then of extra
#: occurrences (each of these two returns ``reaped``), then pauses that reached their end, then
#: joins of downstream occurrences past their after_timeout (docs/chains.md). The
#: leader sends it after each heartbeat statement; a node that does not lead, as the backup.
SWEEP = ("reap_job_leases", "reap_occurrence_leases", "end_pauses", "expire_after_waits")

#: Settings of the session a node claims through (:meth:`ClaimStore.finish_and_claim`). The claim
#: and the batch completion are planned once per session, as a generic plan: the plan does not
#: depend on the values (the due bound is an index condition whatever they are), and a custom
#: plan of these CTEs costs ~1 ms of planning per call, as much as claiming 25 jobs. JIT is off:
#: a generic plan's row estimates can cross ``jit_above_cost``, and compiling costs tens of ms.
#: TimeZone is UTC (instants are absolute; only their Python form changes): psycopg then returns
#: timestamps with ``datetime.UTC`` rather than a ``ZoneInfo``, which the planner's per-run
#: comparisons and arithmetic handle without a time-zone lookup. Sequential scans are off: every
#: table this statement touches is read through an index by design, and a generic plan made
#: while ``pgpulse_runs`` is empty (and analyzed) would scan the whole history per finished run.
CLAIM_SESSION_SETTINGS = {
    "plan_cache_mode": "force_generic_plan",
    "jit": "off",
    "enable_seqscan": "off",
    "TimeZone": "UTC",
}


class _PayloadLoader(JsonbBinaryLoader):
    """psycopg's binary ``jsonb`` loader, with the empty object (most jobs' payload) made
    without calling the JSON decoder: a new ``dict`` each time, as ``json.loads`` gives."""

    def load(self, data: Buffer) -> Any:
        """Decode one ``jsonb`` value (version byte, then JSON text)."""
        if data == b"\x01{}":
            return {}
        return super().load(data)


@functools.lru_cache(maxsize=16)
def _array_literal(values: tuple[int, ...]) -> str:
    """``values`` as a PostgreSQL array literal (``{1,2,3}``), sent as text and cast by the
    statement: a node's routes change rarely, and psycopg would dump the lists at every step."""
    return "{" + ",".join(map(str, values)) + "}"


def step_params(
    batch: list[dict[str, Any]],
    *,
    now: datetime | None,
    node: str,
    routes: Routes,
    limit: int,
    lease: float,
    flows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The parameters of a claim step (:meth:`ClaimStore.finish_and_claim` and
    :meth:`ClaimStore.finish_and_claim_occurrences`, queries.sql / occurrences.sql): the outcome
    ``batch`` as JSON, the node's ``routes`` as one handler array and one shard-array literal
    per handler, ``limit`` rows at most (none without a route), a lease of ``lease`` seconds;
    ``now`` a UTC instant only in tests (``None``: the database's clock); ``flows`` the ended
    runs of followed jobs (:func:`_flows`), sent with ``flow_down``."""
    return {
        "outcomes": orjson.dumps(batch).decode(),
        "flows": orjson.dumps(flows or []).decode(),
        "now": now,
        "node": node,
        "route_handlers": list(routes),
        "route_shards": [_array_literal(tuple(shards)) for shards in routes.values()],
        "limit": max(limit, 0) if routes else 0,
        "lease": lease,
    }


def _storable(text: str | None) -> str | None:
    """``text`` as PostgreSQL can store it: NUL characters (which ``text`` cannot hold) become
    U+FFFD and lone surrogates (undecodable bytes kept by ``surrogateescape``) become ``?``.
    Handler output and error text come from anywhere; they must never block an outcome."""
    if text is None:
        return None
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


_NO_SKIPS: dict[str, Any] = {"skips": 0, "skip_from": None, "skip_to": None}

#: The outcomes that end an upstream's run for its downstreams (docs/chains.md): a success
#: gives them an occurrence, a failure a skipped run naming it.
_FLOWING = frozenset({"succeeded", "failed", "fenced"})


def _flows(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """The elements of ``flow_down`` for ``outcomes``: each final outcome of a job that others
    follow (its claim's ``downstreams``), with its run id, token and data interval's start
    (:func:`~pgpulse.core.chains.previous_scheduled_for`). Empty for a batch of jobs nobody
    follows, so they never send the statement."""
    return [
        {
            "run_id": o.job.run_id,
            "token": o.job.fencing_token,
            "interval_start": previous_scheduled_for(o.job),
        }
        for o in outcomes
        if o.job.downstreams and o.outcome in _FLOWING
    ]


#: A statement's result in a claim step: its column names and its rows.
_Result = tuple[list[str], list[tuple[Any, ...]]]


def _claimed(result: _Result) -> list[ClaimedJob]:
    """The claimed rows of ``claim_jobs`` or ``claim_occurrences``, read by column name into
    :class:`ClaimedJob` (a field the statement does not return keeps its default), oldest
    occurrence first."""
    names, rows = result
    fields = [(name, i) for i, name in enumerate(names) if name in ClaimedJob._fields]
    convert: dict[str, Callable[[Any], Any]] = {
        name: _seconds if name in _DURATIONS else _kept for name, _ in fields
    }
    jobs = [ClaimedJob(**{name: convert[name](row[i]) for name, i in fields}) for row in rows]
    if "batch_success_at" in names:  # claim_occurrences: a downstream's later success
        at, of = names.index("batch_success_at"), names.index("batch_success_for")
        jobs = [_later_success(job, row[at], row[of]) for job, row in zip(jobs, rows, strict=True)]
    return sorted(jobs, key=lambda job: job.scheduled_for)


#: The claim's ``interval`` columns, which :class:`ClaimedJob` holds in seconds. Converted here,
#: not by the claim statements: ``extract(epoch ...)`` thrice made them too long for the
#: driver's cache of converted statements (tests/test_migrations.py).
_DURATIONS = frozenset({"misfire_grace", "retry_backoff", "timeout"})


def _kept(value: Any) -> Any:
    return value


def _seconds(value: timedelta | None) -> float | None:
    """An ``interval`` as seconds (``None``: none, a job without a timeout)."""
    return None if value is None else value.total_seconds()


def _later_success(job: ClaimedJob, at: datetime | None, of: datetime | None) -> ClaimedJob:
    """A downstream occurrence's last success (kind ``after``): its after batch's (``at``,
    the occurrence ``of``), written by finish_occurrences, when later than its job row's (the
    job row is not written from an occurrence's finish: a fork locks it first)."""
    if job.kind != "after" or at is None:
        return job
    if job.last_success_at is not None and job.last_success_at >= at:
        return job
    return job._replace(last_success_at=at, last_success_scheduled_for=of)


def _one(result: _Result) -> dict[str, Any]:
    """The one row of ``next_job_due`` or ``next_occurrence_due``, by column name."""
    names, [row] = result
    return dict(zip(names, row, strict=True))


def _skips(advance: Advance | None) -> dict[str, Any]:
    """The skipped occurrences of an outcome as ``record_skips_and_auto_pauses`` reads them: a
    count, the first and (for more than one) the last; it writes one summary row of them."""
    if advance is None or not advance.skipped_count:
        return _NO_SKIPS
    return {
        "skips": advance.skipped_count,
        "skip_from": advance.skipped_first,
        "skip_to": advance.skipped_last if advance.skipped_count > 1 else None,
    }


class ClaimStore(NodeRegistry):
    """Intent-named access to what a node claims, finishes, renews and hands back (and, from
    :class:`~pgpulse.db.registry.NodeRegistry`, its registry row).

    Args:
        pool: an open pool of autocommit connections with dict rows
            (:func:`pgpulse.db.database.open_pool`), or a node's dedicated
            :class:`~pgpulse.db.database.Session` (its claim or heartbeat session).

    Attributes:
        shard_count: the shard count the routes of its claims are of (the node sets it with
            its routes, from the heartbeat; :func:`pgpulse.sql.at_shard_count`).
    """

    shard_count: int = DEFAULT_SHARD_COUNT

    def __init__(self, pool: ConnectionSource) -> None:
        super().__init__(pool)
        #: Whether the last claim step of each kind of row claimed a full batch (:meth:`_step`).
        self._was_full: dict[str, bool] = {}

    # -- claims and outcomes ---------------------------------------------------------------

    async def claim_due(
        self,
        node: str,
        shards: Sequence[int],
        limit: int,
        *,
        lease: float,
        handlers: Collection[str] | None = None,
        now: datetime | None = None,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` due idle jobs of ``shards`` whose handler is in ``handlers``
        for ``node``, oldest due first (:meth:`finish_and_claim` with no outcomes to write,
        every handler routed to ``shards``).

        Args:
            handlers: the handler names claimed; ``None``: every handler a stored job names (a
                second statement first: for tools and tests, never a node's claim loop).

        Concurrency: one statement; rows are locked ``FOR UPDATE SKIP LOCKED`` so concurrent
        claimers never wait on each other and never receive the same job. Each claimed job gets
        status ``running``, ``attempt + 1``, a new fencing token and a lease of ``lease``
        seconds, and keeps (retry) or draws (first attempt) the occurrence's run id. Nothing is
        written to ``pgpulse_runs`` until the attempt ends (:meth:`finish_runs`, or the sweeper).
        """
        if limit <= 0 or not shards:
            return []
        if handlers is None:
            handlers = [row["handler"] for row in await self._rows("job_handlers")]
        routes = {handler: tuple(shards) for handler in handlers}
        return (await self.finish_and_claim((), node, routes, limit, lease=lease, now=now)).jobs

    async def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        node: str,
        routes: Routes,
        limit: int,
        *,
        lease: float,
        now: datetime | None = None,
    ) -> Step:
        """One step of a node's claim loop, named statements in one pipeline (one round trip,
        one transaction: :meth:`_step`): write the fenced ``outcomes`` of claims ``node`` made
        (``finish_jobs``, as :meth:`finish_runs`), then claim up to ``limit`` due jobs along
        ``routes`` (as :meth:`claim_due`: the jobs of each handler of ``routes`` in that
        handler's shards, oldest due first over all of them; nothing is claimed when ``limit``
        is 0 or ``routes`` is empty). A job whose handler has
        no route is never read: the claim costs the same however many of those are due.

        The claim (``claim_jobs``) sees the outcomes just written: a job whose next occurrence
        is already due is claimed in the same step. If a statement fails, nothing of the step
        is committed and the caller may send the same outcomes again (fenced writes are
        idempotent). The outcomes go out as one JSON array, in job id order (as renew writes:
        two statements over the same running rows never wait on each other in a cycle, i.e.
        never deadlock); their text is made storable (:func:`_storable`) and their instants are
        written by orjson as RFC 3339 with offset.
        Each carries its claim's run id, occurrence and attempt (the :class:`ClaimedJob`'s) and
        ``node``: the run row takes them from the outcome, not from a second read of the job
        row, and the fence (job id, token, lease held) makes them the job row's own, since
        nothing changes them while a claim holds its token.

        Raises:
            psycopg.Error: a statement failed (nothing was written or claimed).
            DatabaseUnavailable: the store's session could not connect.
        """
        batch = [
            {
                "job_id": o.job.id,
                "token": o.job.fencing_token,
                "status": o.status,
                "scheduled_for": o.next_scheduled_for,
                "next_run_at": o.next_run_at,
                "retry_in": o.retry_in or 0.0,
                "reset_attempt": o.advance is not None,
                "outcome": o.outcome,
                "error": o.error and _storable(o.error),
                "output": o.output and _storable(o.output),
                **_skips(o.advance),
                "skip_reason": o.skip_reason,
                "counts_run": o.counts_run,
                "failures": o.failures,
                "pause_reason": o.pause_reason,
                "run_id": o.job.run_id,
                "run_scheduled_for": o.job.scheduled_for,
                "attempt": o.job.attempt,
                "node": node,
            }
            for o in sorted(outcomes, key=lambda o: o.job.id)
        ]
        params = step_params(
            batch,
            now=now,
            node=node,
            routes=routes,
            limit=limit,
            lease=lease,
            flows=_flows(outcomes),
        )
        # a skip summary or an auto-pause's audit row: only for a batch that has one
        rare = any(element["skips"] or element["status"] == "paused" for element in batch)
        # next_job_due runs after the finish: it counts the jobs just moved on
        return await self._step("job", params, rare=rare)

    async def _step(
        self, row: Literal["job", "occurrence"], params: dict[str, Any], *, rare: bool = False
    ) -> Step:
        """One claim step of ``row`` rows with ``params`` (:func:`step_params`): the finish of
        its outcomes (none: not sent; ``rare``: ``record_skips_and_auto_pauses`` first), then,
        when its limit is above 0, the claim and, unless the last batch of ``row`` rows was
        full, the next due instant, in one pipeline (:meth:`_send_step`); the next due instant
        alone after it when a batch comes back short unasked. Returns the claims written and,
        when it claimed, the claimed rows, the next due instant (``None`` after a full batch)
        and the clock (else ``None`` for both)."""
        kind, due_name = ("jobs" if row == "job" else "occurrences"), f"next_{row}_due"
        names = ["record_skips_and_auto_pauses"] if rare else []
        if finishing := params["outcomes"] != "[]":
            names.append(f"finish_{kind}")
        if params["flows"] != "[]":  # after the finish, in its transaction (docs/chains.md)
            names.append("flow_down")
        claiming = params["limit"] > 0
        # A full batch's next due instant is never read (its node has no free slot to sleep
        # for), so after a full batch the step leaves it out and asks it alone if this batch
        # comes back short after all: one round trip when a backlog drains, a statement less
        # per step while it lasts.
        asking_due = claiming and not self._was_full.get(row, False)
        if claiming:
            names += [f"claim_{kind}", *([due_name] if asking_due else [])]
        results = dict(zip(names, await self._send_step(names, params), strict=True))
        written = set()
        if finishing:
            written = {ClaimKey(row, i, token) for i, token in results[f"finish_{kind}"][1]}
        if not claiming:
            return Step(written, [], None, None)
        claimed = _claimed(results[f"claim_{kind}"])
        self._was_full[row] = full = len(claimed) >= params["limit"]
        if not asking_due and full:
            return Step(written, claimed, None, claimed[0].db_now)
        if not asking_due:
            [results[due_name]] = await self._send_step([due_name], params)
        due = _one(results[due_name])
        return Step(written, claimed, due["next_due"], due["clock_now"], due.get("occurrences_due"))

    async def _send_step(self, names: Sequence[str], params: dict[str, Any]) -> list[_Result]:
        """Send the statements ``names`` of a claim step, at the routes' shard count
        (:func:`~pgpulse.sql.at_shard_count`), in one pipeline: one round trip and one
        transaction (the pipeline's one Sync ends the implicit transaction they share, so a
        statement sees what an earlier one wrote, and a failure of one commits none). Prepared
        at once (the claim session plans them generically), with rows in binary (no text
        parsing of instants and numbers). Returns each statement's columns and rows, in order;
        none for no statement (no round trip)."""
        if not names:
            return []
        async with self.pool.connection() as conn:
            cursors = []
            async with conn.pipeline():
                for name in names:
                    cur = conn.cursor(row_factory=tuple_row)
                    cur.adapters.register_loader("jsonb", _PayloadLoader)
                    statement = at_shard_count(name, self.shard_count)
                    await cur.execute(statement, params, binary=True, prepare=True)
                    cursors.append(cur)
            return [
                ([c.name for c in cur.description or ()], await cur.fetchall()) for cur in cursors
            ]

    async def finish_and_claim_occurrences(
        self,
        outcomes: Sequence[Outcome],
        node: str,
        routes: Routes,
        limit: int,
        *,
        lease: float,
        now: datetime | None = None,
    ) -> Step:
        """Write the fenced outcomes of extra occurrences, then claim up to ``limit`` due ones
        along ``routes`` (handler → shards, as :meth:`finish_and_claim`: an occurrence of a job
        whose handler has no route is never claimed) within their batches' bounds: the
        statements ``finish_occurrences``, ``claim_occurrences`` and ``next_occurrence_due``
        (occurrences.sql) in one pipeline, as :meth:`finish_and_claim`.

        Concurrency: an outcome is written only if its occurrence still runs under its token; a
        final one deletes the occurrence, ``retrying`` makes it pending after ``retry_in``.
        Pending occurrences are locked ``FOR UPDATE SKIP LOCKED``, then their batch rows (``SKIP
        LOCKED``), whose newest count of leases bounds how many of each are claimed; the counts
        change in the same statement. Each claimed occurrence gets a new lease and token.

        Returns:
            The step: the claims written, the occurrences claimed (``occurrence`` set), the next
            due instant of a pending one (when fewer than ``limit`` were claimed) and the clock.

        Raises:
            psycopg.Error: the statement failed (nothing was written or claimed).
            DatabaseUnavailable: the session could not connect.
        """
        batch = [
            {
                "id": o.job.occurrence,
                "token": o.job.fencing_token,
                "outcome": o.outcome,
                "retry_in": o.retry_in or 0.0,
                "error": o.error and _storable(o.error),
                "output": o.output and _storable(o.output),
            }
            for o in sorted(outcomes, key=lambda o: o.job.occurrence or 0)
        ]
        params = step_params(
            batch,
            now=now,
            node=node,
            routes=routes,
            limit=limit,
            lease=lease,
            flows=_flows(outcomes),
        )
        return await self._step("occurrence", params)

    async def fork(self, outcome: Outcome, *, now: datetime | None = None) -> bool:
        """Write a ``forked`` outcome: the job row moves to ``outcome.advance`` and its claimed
        occurrence becomes a pending extra occurrence of the job's overlap batch
        (``fork_occurrence``); under ``replace`` the job's other scheduled occurrences are
        cancelled first (``cancel_replaced``, history ``cancelled``), in the same transaction
        and round trip.

        Fenced by the job row's token: a lost claim changes nothing.

        Returns:
            Whether it was written.
        """
        job = outcome.job
        assert outcome.advance is not None
        params = {
            "job_id": job.id,
            "token": job.fencing_token,
            "scheduled_for": outcome.advance.scheduled_for,
            **_skips(outcome.advance),
            "skip_reason": outcome.skip_reason,
            "now": now,
        }
        names = ["cancel_replaced"] if job.overlap == "replace" else []
        *_, (_, forked) = await self._send_step([*names, "fork_occurrence"], params)
        return bool(forked)

    async def finish_runs(
        self, outcomes: Sequence[Outcome], *, node: str, now: datetime | None = None
    ) -> set[ClaimKey]:
        """End the current attempt of each claim in ``outcomes`` (claims ``node`` made), job
        rows and extra occurrences alike — fenced — claiming nothing (:meth:`finish_and_claim`
        and :meth:`finish_and_claim_occurrences`).

        Concurrency: each element is written only if its row still holds the element's lease
        (same fencing token, lease not expired); otherwise it changes nothing (its lease was
        lost). Skipped occurrences of an element are inserted only if the element was written.

        Returns:
            The claims whose outcome was written.
        """
        rows = [o for o in outcomes if o.job.occurrence is None]
        extra = [o for o in outcomes if o.job.occurrence is not None]
        written: set[ClaimKey] = set()
        if rows:
            written |= (await self.finish_and_claim(rows, node, {}, 0, lease=0.0, now=now)).written
        if extra:
            step = await self.finish_and_claim_occurrences(extra, node, {}, 0, lease=0.0, now=now)
            written |= step.written
        return written

    async def renew(
        self, held: Sequence[ClaimKey], *, lease: float, now: datetime | None = None
    ) -> set[ClaimKey]:
        """Extend by ``lease`` seconds the lease of each claim still held, job rows and extra
        occurrences alike, in one statement (``renew``); return the claims renewed.

        Fenced: a claim whose token is stale, whose row no longer runs (reaped, handed back,
        replaced, deleted with its job) or whose lease has already expired is not renewed —
        its holder must stop the run (docs/design.md, invariant 3). Each kind goes in id order, as
        every statement over running rows (no lock-order deadlock).
        """
        if not held:
            return set()
        jobs = sorted(key for key in held if key.row == "job")
        extra = sorted(key for key in held if key.row == "occurrence")
        rows = await self._rows(
            "renew",
            {
                "job_ids": [key.id for key in jobs],
                "job_tokens": [key.token for key in jobs],
                "occurrence_ids": [key.id for key in extra],
                "occurrence_tokens": [key.token for key in extra],
                "lease": lease,
                "now": now,
            },
        )
        return {ClaimKey(row["row"], row["id"], row["fencing_token"]) for row in rows}

    async def hand_back(
        self,
        held: Sequence[ClaimKey],
        *,
        started: Collection[ClaimKey],
        reason: str,
        now: datetime | None = None,
    ) -> tuple[int, int]:
        """Hand claims back (a node that stops): a job row is idle and due at once, with
        ``reason`` its ``last_error``; an extra occurrence is pending and due at once, its
        batch's count of leases one lower (``hand_back_jobs``, ``hand_back_occurrences``, in one
        transaction). Fenced per claim.

        A claim in ``started`` (its handler was called) counts as an attempt and as an
        interruption, not a failure: its run row is written ``retrying`` with ``reason`` as
        the error, so the next claim is the next attempt. Any other claim is not counted and
        leaves no row.

        Returns:
            (claims handed back, of which counted as attempts).
        """
        if not held:
            return 0, 0
        handed = counted = 0
        async with self.pool.connection() as conn, conn.transaction():
            for name, row in (("hand_back_jobs", "job"), ("hand_back_occurrences", "occurrence")):
                keys = [key for key in held if key.row == row]
                if not keys:
                    continue
                cur = await conn.execute(
                    QUERIES[name],
                    {
                        "ids": [key.id for key in keys],
                        "tokens": [key.token for key in keys],
                        "started": [key in started for key in keys],
                        "reason": reason,
                        "now": now,
                    },
                )
                rows = await cur.fetchall()
                handed += len(rows)
                counted += sum(1 for r in rows if r["started"])
        return handed, counted

    # -- nodes and leases ------------------------------------------------------------------

    @staticmethod
    async def _send_sweep(
        conn: psycopg.AsyncConnection[Any],
        older_than: float,
        *,
        limit: int,
        node: str | None,
        now: datetime | None,
    ) -> list[psycopg.AsyncCursor[Any]]:
        """Send the sweep's statements (:data:`SWEEP`) on ``conn``, reaping leases expired more
        than ``older_than`` seconds ago (0: the leader's sweep) and ending pauses as old; in a
        pipeline, their results come with its end. Returns their cursors, in :data:`SWEEP` order."""
        params = {"older_than": older_than, "limit": limit, "node": node, "now": now}
        return [await conn.execute(QUERIES[name], params) for name in SWEEP]

    @staticmethod
    async def _reaped(sent: Sequence[psycopg.AsyncCursor[Any]]) -> int:
        """How many leases the sweep ``sent`` (:meth:`_send_sweep`; none: 0) returned to the pool:
        job rows and extra occurrences (the pauses it ended are not leases)."""
        reaped = 0
        for cur in sent[:2]:
            row = await cur.fetchone()
            reaped += row["reaped"] if row else 0
        return reaped

    async def reap_expired_leases(
        self, *, limit: int = 1000, older_than: float = 0.0, now: datetime | None = None
    ) -> int:
        """Return running jobs and extra occurrences whose lease expired (more than
        ``older_than`` seconds ago) to the pool, due at once, and end the pauses that reached
        their end as long ago; return how many leases. The leader sweeps with each
        :meth:`heartbeat`; this is the same sweep on behalf of no node (nothing recorded, no
        leadership taken): its statements in one pipeline (one round trip, one transaction).

        Locks the expired rows ``SKIP LOCKED``; the occurrence's run row is written as
        ``retrying`` (the lost attempt counted) so the next claim is the next attempt of the
        same run.
        """
        async with self.pool.connection() as conn:
            async with conn.pipeline():
                sent = await self._send_sweep(conn, older_than, limit=limit, node=None, now=now)
            return await self._reaped(sent)

    async def heartbeat(
        self,
        node: str | None,
        *,
        running: int,
        shards: Sequence[int],
        ttl: float,
        state: str = "alive",
        leading: bool | None = None,
        backup_delay: float | None = None,
        limit: int = 1000,
        hostname: str | None = None,
        pid: int | None = None,
        shard_count: int | None = None,
        known: str | None = None,
        claimed_at: datetime | None = None,
        claim_error: str | None = None,
        now: datetime | None = None,
    ) -> Heartbeat:
        """Record this node's heartbeat, take part in leadership, and sweep (docs/design.md,
        "Cluster behaviour"): the ``heartbeat`` statement, then, for a node that leads or backs
        the leader up, the sweep (:data:`SWEEP`: expired leases of job rows and of extra
        occurrences, pauses that reached their end) — one pipeline, so one round trip and one
        transaction. A node that does not lead and has no ``backup_delay`` sends the heartbeat
        statement alone. One transaction, not because the parts must commit together (each
        statement is whole on its own: a job row with its run row, an occurrence with its run
        row and its batch's count, a resumed job with its audit row), but because a commit
        between them would cost a round trip; a failure of one fails the whole beat, which the
        next beat sends again.

        The sweep goes over this same connection, so the leadership it sweeps under is the one
        the heartbeat statement found: a session-level lock, held by this connection. A node
        whose heartbeat took the lock at this beat (``leading`` was ``False``) sweeps as the
        leader at once after it, in a second round trip (once per change of leader).

        A node is live when its state is ``alive`` and its heartbeat is younger than ``ttl``
        seconds by the database's clock. If this node's row is missing (pruned), or another
        process took it over (another ``hostname`` or ``pid``), nothing is recorded, it is not
        in ``live``, and the caller should register again (:meth:`register_node` says whether
        the id is still its to take).

        Args:
            node: this node's id; ``None`` records nothing.
            leading: ``True`` if this connection holds the leader lock already (the lock is not
                asked for again), ``False`` to try to take it — a session-level lock, so only
                over a dedicated session, never a pool; ``None`` (default) takes no part.
            backup_delay: if this connection does not lead, sweep as the leader's backup:
                reap only leases expired more than this many seconds ago, and end pauses that
                ended as long ago (``None``: no sweep); the leader sweeps everything due.
            limit: most leases of each kind (job rows, extra occurrences) reaped by one sweep.
            hostname, pid: this process, whose row the heartbeat records (``None``: whichever
                process holds ``node``'s row).
            shard_count: the shard count ``shards`` are of, recorded with them (a count change
                is complete once every live node reports the new one: :mod:`pgpulse.db.resharding`).
            known: the :attr:`~pgpulse.core.model.Heartbeat.members` digest of the live set the
                caller holds; if the live set still has it, it is not sent again
                (``Heartbeat.live`` is ``None``). ``None``: always sent.
            claimed_at: the database instant of this node's last claim step that succeeded
                (recorded unless older than the one recorded; ``None``: kept).
            claim_error: the error of this node's last claim step, if it failed (``None``: it
                succeeded): ``status`` then calls the node unhealthy.

        Returns:
            The heartbeat's reading: the live nodes with the handlers each advertises (what
            :func:`pgpulse.core.routing.routes_for` routes by; ``None`` when unchanged since
            ``known``), their digest, the database's shard count, its clock, leadership,
            leases reaped.

        Concurrency: expired rows are locked ``SKIP LOCKED`` (sweepers never wait on each
        other; reaping twice is harmless); the run row stays open as ``retrying`` so the next
        claim is the next attempt of the same run; each reaped job's shard is notified.
        """
        params = {
            "node": node,
            "running": running,
            "shards": list(shards),
            "ttl": ttl,
            "state": state,
            "leading": leading,
            "leader_key": LEADER_LOCK_KEY,
            "hostname": hostname,
            "pid": pid,
            "shard_count": shard_count,
            "known": known,
            "claimed_at": claimed_at,
            "claim_error": claim_error,
            "now": now,
        }
        older_than = 0.0 if leading else backup_delay  # the leader's sweep, a backup's, or none
        async with self.pool.connection() as conn:
            async with conn.pipeline():
                beat = await conn.execute(QUERIES["heartbeat"], params)
                sent = []
                if older_than is not None:
                    sent = await self._send_sweep(conn, older_than, limit=limit, node=node, now=now)
            row = await beat.fetchone()
            assert row is not None  # one row, always
            reaped = await self._reaped(sent)
            if row["leader"] and not leading:  # this beat took the lock: sweep as the leader
                async with conn.pipeline():
                    sent = await self._send_sweep(conn, 0.0, limit=limit, node=node, now=now)
                reaped += await self._reaped(sent)
        live, handlers = None, None
        if row["live"] is not None:
            handlers = {node_id: tuple(names) for node_id, names in sorted(row["live"].items())}
            live = tuple(handlers)
        return Heartbeat(
            live=live,
            handlers=handlers,
            db_now=row["db_now"],
            leader=row["leader"],
            reaped=reaped,
            members=row["digest"],
            shard_count=row["shard_count"],
        )

    async def prune(self, *, keep_runs: float, now: datetime | None = None) -> tuple[int, int]:
        """Forget finished runs older than ``keep_runs`` seconds, or than their job's own
        ``keep_runs`` allows, making the history's coming partitions on the way
        (:func:`pgpulse.db.history.prune_history`: whole days dropped, the rest in bounded
        batches); then nodes silent for :data:`NODE_RETENTION` seconds (a day) that no lease
        names (a running job or an occurrence with a lease held by the node keeps its row,
        reaping the lease first), the audit trail and the finished batches as old as the runs.
        Returns (runs forgotten, nodes deleted).

        Raises:
            psycopg.Error: the database failed; what was pruned before stays pruned.
        """
        runs = await prune_history(self.pool, keep=keep_runs, now=now)
        row = (
            await self._rows(
                "prune", {"keep": keep_runs, "now": now, "node_retention": NODE_RETENTION}
            )
        )[0]
        return runs, row["nodes"]
