"""The store: every read and write Pulse makes, as intent-named methods over one connection pool.

Each method runs statements from ``sql/queries.sql`` and says in its docstring what it locks and
what it fences. Instants are aware datetimes; durations are seconds. ``now`` parameters exist for
tests only — production callers leave them ``None`` so the database's clock decides (design.md,
invariant 1).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson
import psycopg
from psycopg.abc import Buffer
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb, JsonbBinaryLoader

from pgpulse.database import ConnectionSource
from pgpulse.errors import InvalidInput, JobNotFound
from pgpulse.jobs import JobSpec, check_handlers, unknown_handlers
from pgpulse.migrations import migrate
from pgpulse.model import ClaimedJob, ClaimKey, Heartbeat, Outcome, Step
from pgpulse.planner import first_occurrence
from pgpulse.schedule import parse_schedule
from pgpulse.sql import QUERIES

#: Advisory lock key of the leader ("Puls"); held on one session by the leader node.
LEADER_LOCK_KEY = 0x50756C73

#: Tries of :meth:`Store.upsert_jobs` when another session creates or deletes one of its jobs at
#: the same instant (each try is one transaction; the next one finds the name).
UPSERT_TRIES = 3


class _UpsertRaced(Exception):
    """Another session created or deleted a job of this upsert concurrently; try again."""


#: Settings of the session a node claims through (:meth:`Store.finish_and_claim`). The claim and
#: the batch completion are planned once per session, as a generic plan: the plan does not
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
    statement: a node's shards change rarely, and psycopg would dump the list at every step."""
    return "{" + ",".join(map(str, values)) + "}"


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


class Store:
    """Intent-named access to Pulse's tables.

    Args:
        pool: an open pool of autocommit connections with dict rows
            (:func:`pgpulse.database.open_pool`), or any other connection source such as a
            node's dedicated heartbeat :class:`~pgpulse.database.Session`.
    """

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(QUERIES[name], params or {})
            return list(await cur.fetchall()) if cur.description else []

    # -- schema ----------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Apply pending migrations (serialised by an advisory lock); return versions applied."""
        async with self.pool.connection() as conn:
            return await migrate(conn)

    async def db_now(self) -> datetime:
        """The database's current instant."""
        return (await self._rows("now"))[0]["db_now"]  # type: ignore[no-any-return]

    # -- job definitions -------------------------------------------------------------------

    async def registered_handlers(self) -> set[str]:
        """Names of the handlers registered by any node that ever ran against this database."""
        return {row["handler"] for row in await self._rows("known_handlers")}

    async def upsert_jobs(
        self,
        specs: Sequence[JobSpec],
        *,
        extra_handlers: Collection[str] = (),
        now: datetime | None = None,
    ) -> list[tuple[int, bool]]:
        """Create or update jobs by (tenant, name), all in one transaction.

        A new job (or one whose schedule or time zone changed) holds the first occurrence after
        the database's now; an unchanged schedule keeps the job's state, so upserting the same
        spec twice is a no-op. A running job keeps its current occurrence; the new definition
        takes effect from its next one.

        The first occurrence is the planner's (:func:`~pgpulse.planner.first_occurrence`, from the
        database's now). A spec's handler must be known: built in (``shell``, ``http``), in
        ``extra_handlers`` (the caller's own app), or registered by a node that ran against this
        database (read only when the first two do not know it). Payloads are checked when the
        spec is built (:meth:`JobSpec.create`), as every other field.

        Jobs are found by name in ``pgpulse_job_names``. When another session creates one of the
        same names (or deletes one of the jobs) at the same instant, the whole transaction is rolled
        back and tried again, up to :data:`UPSERT_TRIES` times; the next try updates the job the
        other session created.

        Returns:
            ``(job id, created)`` per spec, in order.

        Raises:
            UnknownHandler: a spec's handler is not known (``field`` is ``"handler"``); nothing
                is written.
            InvalidInput: two specs name the same job; nothing is written.
            psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected: still racing
                another session after :data:`UPSERT_TRIES` tries; nothing is written.
            RuntimeError: a job was deleted between its lookup and its update at every try;
                nothing is written.
        """
        known = set(extra_handlers)
        if unknown_handlers(specs, known):
            known |= await self.registered_handlers()
        check_handlers(specs, known)
        names = [(spec.tenant, spec.name) for spec in specs]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InvalidInput(
                f"job {dup[1]!r} of tenant {dup[0]!r} is given twice", field="name", value=dup[1]
            )
        for attempt in range(1, UPSERT_TRIES + 1):
            try:
                return await self._upsert_once(specs, now)
            except _UpsertRaced as raced:
                if attempt == UPSERT_TRIES:
                    raise (
                        raced.__cause__
                        or RuntimeError(
                            f"upsert_jobs: a job was deleted between its lookup and its update "
                            f"at each of {UPSERT_TRIES} tries"
                        )
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _upsert_once(
        self, specs: Sequence[JobSpec], now: datetime | None
    ) -> list[tuple[int, bool]]:
        """One try of :meth:`upsert_jobs`, in one transaction; raises :class:`_UpsertRaced`
        (after rolling back) when another session created or deleted one of the jobs at once."""
        results: list[tuple[int, bool]] = []
        try:
            async with self.pool.connection() as conn, conn.transaction():
                clock = now or (await (await conn.execute(QUERIES["now"])).fetchone())["db_now"]  # type: ignore[index]
                for spec in specs:
                    schedule = spec.parsed_schedule()
                    first = first_occurrence(schedule, now=clock, anchor=clock)
                    cur = await conn.execute(
                        QUERIES["upsert_job"],
                        {
                            "tenant": spec.tenant,
                            "name": spec.name,
                            "schedule": spec.schedule,
                            "schedule_kind": schedule.kind,
                            "timezone": spec.timezone,
                            "handler": spec.handler,
                            "payload": Jsonb(spec.payload),
                            "catch_up": spec.catch_up,
                            "backfill_limit": spec.backfill_limit,
                            "misfire_grace": spec.misfire_grace,
                            "max_attempts": spec.max_attempts,
                            "retry_backoff": spec.retry_backoff,
                            "timeout": spec.timeout,
                            "source": spec.source,
                            "meta": Jsonb(spec.meta),
                            "anchor_at": clock,
                            "scheduled_for": first,
                        },
                    )
                    row = await cur.fetchone()
                    if row is None:  # deleted between the name lookup and the update
                        raise _UpsertRaced
                    results.append((row["id"], row["created"]))
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != "pgpulse_job_names_pkey":
                raise
            raise _UpsertRaced from exc
        except psycopg.errors.DeadlockDetected as exc:  # two batches creating names crosswise
            raise _UpsertRaced from exc
        return results

    async def get_job(self, tenant: str, name: str) -> dict[str, Any]:
        """Return one job row. Raises :class:`JobNotFound`."""
        rows = await self._rows("get_job", {"tenant": tenant, "name": name})
        if not rows:
            raise JobNotFound(tenant, name)
        return rows[0]

    async def list_jobs(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Return every job (of ``tenant``, or all tenants), ordered by tenant and name."""
        return await self._rows("list_jobs", {"tenant": tenant})

    async def pause_job(self, tenant: str, name: str) -> None:
        """Pause an idle or failed job: it is not claimed until resumed.

        Raises:
            JobNotFound: no such job.
            InvalidInput: the job is running (pause it when the run ends) — nothing changes.
        """
        await self._set_status(tenant, name, "paused", ("idle", "failed", "paused"), None, "paused")

    async def resume_job(self, tenant: str, name: str, *, now: datetime | None = None) -> None:
        """Resume a paused (or failed) job at its first occurrence after now.

        Occurrences that fell inside the pause are not run: pausing means "not these".

        Raises:
            JobNotFound: no such job.
            InvalidInput: the job is neither paused nor failed.
        """
        job = await self.get_job(tenant, name)
        clock = now or await self.db_now()
        schedule = parse_schedule(job["schedule"], job["timezone"])
        first = first_occurrence(schedule, now=clock, anchor=job["anchor_at"])
        await self._set_status(tenant, name, "idle", ("paused", "failed"), first, "resumed")

    async def _set_status(
        self,
        tenant: str,
        name: str,
        status: str,
        from_status: Sequence[str],
        scheduled_for: datetime | None,
        verb: str,
    ) -> None:
        rows = await self._rows(
            "set_paused",
            {
                "tenant": tenant,
                "name": name,
                "status": status,
                "from_status": list(from_status),
                "scheduled_for": scheduled_for,
            },
        )
        if not rows:
            current = await self._rows("job_status", {"tenant": tenant, "name": name})
            if not current:
                raise JobNotFound(tenant, name)
            raise InvalidInput(
                f"job {name!r} is {current[0]['status']}; only a {' or '.join(from_status)} "
                f"job can be {verb}",
                field="status",
                value=current[0]["status"],
            )

    async def trigger_job(self, tenant: str, name: str) -> datetime:
        """Add an extra occurrence at the database's now (the schedule continues after it).

        Returns:
            The occurrence the job now holds (now, or an older one already due).

        Raises:
            JobNotFound: no such job.
            InvalidInput: the job is running, paused or failed — nothing changes.
        """
        rows = await self._rows("trigger_job", {"tenant": tenant, "name": name})
        if not rows:
            current = await self._rows("job_status", {"tenant": tenant, "name": name})
            if not current:
                raise JobNotFound(tenant, name)
            raise InvalidInput(
                f"job {name!r} is {current[0]['status']}; only an idle job can be triggered",
                field="status",
                value=current[0]["status"],
            )
        return rows[0]["scheduled_for"]  # type: ignore[no-any-return]

    async def delete_job(self, tenant: str, name: str) -> None:
        """Delete a job and its run history. A node still running it finds its fenced writes
        change nothing. Raises :class:`JobNotFound`."""
        if not await self._rows("delete_job", {"tenant": tenant, "name": name}):
            raise JobNotFound(tenant, name)

    # -- the hot path ----------------------------------------------------------------------

    async def claim_due(
        self,
        node: str,
        shards: Sequence[int],
        limit: int,
        *,
        lease: float,
        now: datetime | None = None,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` due idle jobs of ``shards`` for ``node``, oldest due first
        (:meth:`finish_and_claim` with no outcomes to write).

        Concurrency: one statement; rows are locked ``FOR UPDATE SKIP LOCKED`` so concurrent
        claimers never wait on each other and never receive the same job. Each claimed job gets
        status ``running``, ``attempt + 1``, a new fencing token and a lease of ``lease``
        seconds, and keeps (retry) or draws (first attempt) the occurrence's run id. Nothing is
        written to ``pgpulse_runs`` until the attempt ends (:meth:`finish_runs`, or the sweeper).
        """
        if limit <= 0 or not shards:
            return []
        return (await self.finish_and_claim((), node, shards, limit, lease=lease, now=now)).jobs

    async def finish_runs(
        self, outcomes: Sequence[Outcome], *, now: datetime | None = None
    ) -> set[ClaimKey]:
        """End the current attempt of each job in ``outcomes`` — fenced — in one statement
        (:meth:`finish_and_claim` claiming nothing).

        Concurrency: each element is written only if its job is still ``running`` under the
        element's fencing token; otherwise that element changes nothing (its lease was lost).
        Skipped occurrences of an element are inserted only if the element was written.

        Returns:
            The claims (job id, fencing token) whose outcome was written.
        """
        if not outcomes:
            return set()
        return (await self.finish_and_claim(outcomes, "", (), 0, lease=0.0, now=now)).written

    async def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        node: str,
        shards: Sequence[int],
        limit: int,
        *,
        lease: float,
        now: datetime | None = None,
    ) -> Step:
        """One step of a node's claim loop, in one statement (one round trip, one commit):
        write the fenced ``outcomes`` (as :meth:`finish_runs`), then claim up to ``limit`` due
        jobs of ``shards`` (as :meth:`claim_due`; nothing is claimed when ``limit`` is 0 or
        ``shards`` is empty).

        The claim sees the database as it was before the outcomes: a job whose next occurrence
        is already due is claimed at the next step (its outcome's ``next_run_at`` says when).
        If the statement fails, nothing of it is committed and the caller may send the same
        outcomes again (fenced writes are idempotent). The outcomes go out as one JSON array, in
        job id order (as renew_leases writes: two statements over the same running rows never
        wait on each other in a cycle, i.e. never deadlock); their text is made storable
        (:func:`_storable`) and their instants are written by orjson as RFC 3339 with offset.

        Raises:
            psycopg.Error: the statement failed (nothing was written or claimed).
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
                "skipped": o.advance.skipped
                if o.advance is not None and o.advance.skipped
                else None,
                "skip_reason": o.skip_reason,
            }
            for o in sorted(outcomes, key=lambda o: o.job.id)
        ]
        params = {
            "outcomes": orjson.dumps(batch).decode(),
            "now": now,
            "node": node,
            "shards": _array_literal(tuple(shards)),
            "limit": max(limit, 0) if shards else 0,
            "lease": lease,
        }
        async with self.pool.connection() as conn:
            # ClaimedJob's fields, in order, in binary (no text parsing of instants and numbers)
            cur = conn.cursor(row_factory=tuple_row, binary=True)
            cur.adapters.register_loader("jsonb", _PayloadLoader)
            await cur.execute(QUERIES["finish_and_claim"], params)
            rows = await cur.fetchall()
        fields = len(ClaimedJob._fields)  # then next_due, then written (on one row)
        written = next(
            {(job_id, token) for job_id, token in row[fields + 1]}
            for row in rows
            if row[fields + 1] is not None
        )
        jobs = [ClaimedJob(*row[:fields]) for row in rows if row[0] is not None]
        if not (limit > 0 and shards):
            return Step(written, jobs, None, None)
        next_due, db_now = rows[0][fields], rows[0][fields - 1]
        if len(jobs) < limit:  # a job finished here may be due before anything else
            for o in outcomes:
                if o.job.key in written:
                    at = o.next_run_at or db_now + timedelta(seconds=o.retry_in or 0.0)
                    next_due = at if next_due is None else min(next_due, at)
        return Step(written, jobs, next_due, db_now)

    async def renew_leases(
        self, held: Sequence[ClaimKey], *, lease: float, now: datetime | None = None
    ) -> set[ClaimKey]:
        """Extend the lease of each claim (job id, fencing token) still held; return the claims
        renewed.

        Fenced: a pair whose token is stale, whose job is no longer running, or whose lease has
        already expired is not renewed — its holder must stop the run (design.md, invariant 3).
        """
        if not held:
            return set()
        held = sorted(held)  # job id order, as finish_runs: no lock-order deadlock
        rows = await self._rows(
            "renew_leases",
            {
                "job_ids": [job_id for job_id, _ in held],
                "tokens": [tok for _, tok in held],
                "lease": lease,
                "now": now,
            },
        )
        return {(row["id"], row["fencing_token"]) for row in rows}

    async def hand_back_runs(
        self,
        held: Sequence[ClaimKey],
        *,
        started: Collection[ClaimKey],
        reason: str,
        now: datetime | None = None,
    ) -> tuple[int, int]:
        """Hand claims back (a node that stops): each held job is idle and due at once, and
        ``reason`` becomes its ``last_error``. Fenced per claim (job id, fencing token).

        A claim in ``started`` (its handler was called) counts as an attempt: its run row is
        written ``retrying`` with ``reason`` as the error, so the next claim is the next
        attempt. Any other claim is not counted and leaves no row.

        Returns:
            (claims handed back, of which counted as attempts).
        """
        if not held:
            return 0, 0
        rows = await self._rows(
            "hand_back_runs",
            {
                "job_ids": [job_id for job_id, _ in held],
                "tokens": [token for _, token in held],
                "started": [key in started for key in held],
                "reason": reason,
                "now": now,
            },
        )
        return len(rows), sum(1 for row in rows if row["started"])

    # -- cluster ---------------------------------------------------------------------------

    async def reap_expired_leases(
        self, *, limit: int = 1000, older_than: float = 0.0, now: datetime | None = None
    ) -> int:
        """Return running jobs whose lease expired (more than ``older_than`` seconds ago) to
        idle, due at once; return how many. Nodes reap with each :meth:`heartbeat`; this is
        the same sweep on behalf of no node (nothing recorded, no leadership taken).

        Locks the expired rows ``SKIP LOCKED``; the occurrence's run row is written as
        ``retrying`` (the lost attempt counted) so the next claim is the next attempt of the
        same run.
        """
        beat = await self.heartbeat(
            None, running=0, shards=(), ttl=0.0, backup_delay=older_than, limit=limit, now=now
        )
        return beat.reaped

    async def register_node(
        self,
        node: str,
        *,
        hostname: str,
        pid: int,
        slots: int,
        handlers: Collection[str],
        now: datetime | None = None,
    ) -> None:
        """Insert or refresh this node's registry row (state ``alive``)."""
        await self._rows(
            "register_node",
            {
                "node": node,
                "hostname": hostname,
                "pid": pid,
                "slots": slots,
                "handlers": sorted(handlers),
                "now": now,
            },
        )

    async def revive_jobs(self, handlers: Collection[str]) -> int:
        """Return jobs that failed for want of a handler in ``handlers`` to idle, due at once.
        Returns how many were revived."""
        return len(await self._rows("revive_jobs", {"handlers": sorted(handlers)}))

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
        now: datetime | None = None,
    ) -> Heartbeat:
        """Record this node's heartbeat, take part in leadership, and reap expired leases — one
        statement (design.md, "Cluster behaviour").

        A node is live when its state is ``alive`` and its heartbeat is younger than ``ttl``
        seconds by the database's clock. If this node's row is missing (pruned), it is not in
        ``live`` and the caller should register again.

        Args:
            node: this node's id; ``None`` records nothing (a sweep only).
            leading: ``True`` if this connection holds the leader lock already (the lock is not
                asked for again), ``False`` to try to take it — a session-level lock, so only
                over a dedicated session, never a pool; ``None`` (default) takes no part.
            backup_delay: if this connection does not lead, reap only leases expired more than
                this many seconds ago (``None``: none); the leader reaps every expired lease.
            limit: most leases reaped by one heartbeat.

        Concurrency: expired rows are locked ``SKIP LOCKED`` (sweepers never wait on each
        other; reaping twice is harmless); the run row stays open as ``retrying`` so the next
        claim is the next attempt of the same run; each reaped job's shard is notified.
        """
        [row] = await self._rows(
            "heartbeat",
            {
                "node": node,
                "running": running,
                "shards": list(shards),
                "ttl": ttl,
                "state": state,
                "leading": leading,
                "leader_key": LEADER_LOCK_KEY,
                "backup_delay": backup_delay,
                "limit": limit,
                "now": now,
            },
        )
        return Heartbeat(
            live=tuple(row["live"]),
            db_now=row["db_now"],
            leader=row["leader"],
            reaped=row["reaped"],
        )

    async def stop_node(self, node: str) -> None:
        """Mark this node stopped (it owns no shards from now on)."""
        await self._rows("stop_node", {"node": node, "now": None})

    async def prune(self, *, keep_runs: float, now: datetime | None = None) -> tuple[int, int]:
        """Delete finished runs older than ``keep_runs`` seconds and nodes silent for a day.
        Returns (runs deleted, nodes deleted)."""
        row = (await self._rows("prune", {"keep": keep_runs, "now": now}))[0]
        return row["runs"], row["nodes"]

    # -- reading for people ----------------------------------------------------------------

    async def list_runs(
        self, *, tenant: str | None = None, name: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Most recent runs first (of one job, one tenant, or all)."""
        return await self._rows("list_runs", {"tenant": tenant, "name": name, "limit": limit})

    async def cluster_nodes(self, *, ttl: float) -> list[dict[str, Any]]:
        """Every registered node with liveness (by ``ttl`` seconds) and whether it leads."""
        return await self._rows("cluster_nodes", {"ttl": ttl, "leader_key": LEADER_LOCK_KEY})

    async def cluster_counts(self, tenant: str | None = None) -> dict[str, Any]:
        """Counts of due, running, paused, failed and all jobs, and the worst lag (seconds)."""
        return (await self._rows("cluster_counts", {"tenant": tenant}))[0]
