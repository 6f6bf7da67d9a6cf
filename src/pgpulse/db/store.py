"""The store: every read and write Pulse makes, as intent-named methods over one connection pool.

:class:`Store` is the whole interface: job definitions (create by upsert, read, pause, resume,
trigger, delete), the history and the cluster as people read them, and — inherited from
:class:`~pgpulse.db.claims.ClaimStore` — what nodes claim, finish, renew and hand back. Each method
runs statements from ``sql/queries.sql`` and says in its docstring what it locks and what it
fences. Instants are aware datetimes; durations are seconds. ``now`` parameters exist for tests
only — production callers leave them ``None`` so the database's clock decides (docs/design.md,
invariant 1).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg

from pgpulse.core.access import OPERATOR, Writer, check_delete, check_write
from pgpulse.core.audit import PYTHON_ACTOR, Actor
from pgpulse.core.errors import DefinitionChanged, InvalidInput, JobNotFound
from pgpulse.core.jobs import (
    JobSpec,
    check_handlers,
    check_key,
    check_reason,
    unknown_handlers,
)
from pgpulse.core.limits import RESUME_MODES
from pgpulse.core.plan import Plan, Step, plan_source
from pgpulse.core.routing import waiting_reason
from pgpulse.core.schedule import parse_schedule
from pgpulse.core.zones import check_instant_range
from pgpulse.db.calendar_store import CalendarStore
from pgpulse.db.claims import LEADER_LOCK_KEY
from pgpulse.db.database import ConnectionSource
from pgpulse.db.limit_store import LimitStore
from pgpulse.db.migrations import migrate, require_schema
from pgpulse.db.pausing import Paused, pause
from pgpulse.db.reconcile import Planner, reconcile
from pgpulse.db.writes import (
    check_chains,
    check_definition,
    lock_definitions,
    write_definition,
)
from pgpulse.sql import QUERIES

#: Tries of :meth:`Store.upsert_jobs` when another session creates or deletes one of its jobs at
#: the same instant (each try is one transaction; the next one finds the name).
UPSERT_TRIES = 3


class _UpsertRaced(Exception):
    """Another session created or deleted a job of this upsert concurrently; try again."""


def _instant(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def attempt_log(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Every attempt of a ``runs`` row, first to latest: the earlier ones as their writes
    recorded them when they ended (``earlier_attempts``, migration run_attempts), then the
    latest from the row's own columns. A skipped run has none; a run retried before that
    migration shows only its latest.

    Returns:
        Dicts of ``attempt``, ``node_id``, ``fencing_token``, ``started_at``, ``ended_at``
        (aware datetimes; ``ended_at`` ``None`` while it runs, and for a lease that expired it
        is when the sweeper reaped it), ``outcome`` (``retrying`` for an attempt followed by
        another), ``error`` and ``output`` (what it captured; ``None`` for a lost lease).
    """
    found = [
        {
            "attempt": a["attempt"],
            "node_id": a["node_id"],
            "fencing_token": a["fencing_token"],
            "started_at": _instant(a["started_at"]),
            "ended_at": _instant(a["ended_at"]),
            "outcome": a["outcome"],
            "error": a["error"],
            "output": a.get("output"),
        }
        for a in run["earlier_attempts"]
    ]
    if run["started_at"] is not None:
        found.append(
            {
                "attempt": run["attempts"],
                "node_id": run["node_id"],
                "fencing_token": run["fencing_token"],
                "started_at": run["started_at"],
                "ended_at": run["finished_at"] or run["attempt_ended_at"],
                "outcome": run["outcome"],
                "error": run["error"],
                "output": run["output"],
            }
        )
    return found


class Store(CalendarStore, LimitStore):
    """Intent-named access to Pulse's tables.

    Args:
        pool: an open pool of autocommit connections with dict rows
            (:func:`pgpulse.db.database.open_pool`), or any other connection source such as a
            node's dedicated heartbeat :class:`~pgpulse.db.database.Session`.
        reads: where the lists people browse are read (:meth:`list_jobs`, :meth:`list_runs`,
            :meth:`cluster_counts`, the web's lists): a read replica's pool
            (``--read-database-url``), so a busy dashboard costs the primary nothing. ``None``:
            ``pool``. Everything that writes or decides — a job read before its update, the
            leader (the primary's locks) — stays on ``pool``. A replica may lag: these lists
            show the cluster as it was that long ago.
    """

    def __init__(self, pool: ConnectionSource, reads: ConnectionSource | None = None) -> None:
        super().__init__(pool)
        self.reads = reads or pool

    async def _read_rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        async with self.reads.connection() as conn:
            cur = await conn.execute(QUERIES[name], params)
            return list(await cur.fetchall())

    # -- schema ----------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Apply pending migrations (serialised by an advisory lock); return versions applied."""
        async with self.pool.connection() as conn:
            return await migrate(conn)

    async def require_schema(self) -> None:
        """Refuse a database without this Pulse's current schema; migrate nothing.

        Raises:
            SchemaMissing: see :func:`pgpulse.db.migrations.require_schema`.
        """
        async with self.pool.connection() as conn:
            await require_schema(conn)

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
        writer: Writer = OPERATOR,
        extra_handlers: Collection[str] = (),
        now: datetime | None = None,
        actor: Actor = PYTHON_ACTOR,
        expect_revisions: Mapping[tuple[str, str], int] | None = None,
    ) -> list[tuple[int, bool]]:
        """Create or update jobs by (tenant, name), all in one transaction, as ``writer``.

        ``expect_revisions`` maps a job's (tenant, name) to the revision the caller's spec was
        built from (a read-modify-write, such as the API's partial update): if the stored job
        has another revision (or is gone) when its row is locked, nothing is written.

        Authorisation (docs/design.md, invariant 10): every path that writes a definition comes
        here, and here each spec is checked by :func:`pgpulse.core.access.check_write` against the
        job it replaces, whose row is read and locked in the writing transaction (so a
        concurrent change of that job cannot slip between the check and the write). The
        default writer, :data:`~pgpulse.core.access.OPERATOR`, holds the database's credentials and
        may write everything; the API passes its token's writer, a node its code's.

        A new job (or one whose schedule, time zone or active window changed) holds its first
        occurrence in its window after the database's now (``completed`` when there is none);
        an unchanged schedule keeps the job's state. A spec equal to the
        stored definition writes nothing, so upserting the same spec twice is a no-op; every
        other write is a new revision, recorded in the audit trail with ``actor``
        (:mod:`pgpulse.db.writes`). A running job keeps its current occurrence; the new definition
        takes effect from its next one.

        The first occurrence is :func:`~pgpulse.core.limits.first_in_window`'s, from the database's
        now (:func:`pgpulse.db.writes.check_definition`). A spec's handler must be known: built
        in (``shell``, ``http``), in ``extra_handlers`` (the caller's own app), or registered by
        a node that ran against this database (read only when the first two do not know it).
        Payloads are checked when the spec is built (:meth:`JobSpec.create`), as every other
        field.

        Jobs are found by name in ``pgpulse_job_names``. When another session creates one of the
        same names (or deletes one of the jobs) at the same instant, the whole transaction is rolled
        back and tried again, up to :data:`UPSERT_TRIES` times; the next try updates the job the
        other session created.

        Returns:
            ``(job id, created)`` per spec, in order.

        Raises:
            UnknownHandler: a spec's handler is not known (``field`` is ``"handler"``); nothing
                is written.
            InvalidInput: two specs name the same job, a spec names a calendar its tenant does
                not have (``field="calendars"``), or a new one-off ``@at`` is already past under
                ``catch_up`` skip (``field="schedule"``); nothing is written.
            Forbidden: ``writer`` may not write one of the specs; nothing is written.
            DefinitionChanged: a job of ``expect_revisions`` has another revision; nothing is
                written.
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
                return await self._upsert_once(specs, writer, now, actor, expect_revisions or {})
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
        self,
        specs: Sequence[JobSpec],
        writer: Writer,
        now: datetime | None,
        actor: Actor,
        expect_revisions: Mapping[tuple[str, str], int],
    ) -> list[tuple[int, bool]]:
        """One try of :meth:`upsert_jobs`, in one transaction; raises :class:`_UpsertRaced`
        (after rolling back) when another session created or deleted one of the jobs at once."""
        results: list[tuple[int, bool]] = []
        try:
            async with self.pool.connection() as conn, conn.transaction():
                clock = now or (await (await conn.execute(QUERIES["now"])).fetchone())["db_now"]  # type: ignore[index]
                current = await lock_definitions(conn, [(s.tenant, s.name) for s in specs])
                for spec in specs:  # before any write: a refusal leaves the transaction empty
                    row = current.get((spec.tenant, spec.name))
                    expected = expect_revisions.get((spec.tenant, spec.name))
                    if expected is not None and (row is None or row["revision"] != expected):
                        raise DefinitionChanged(
                            spec.name, expected, 0 if row is None else row["revision"]
                        )
                    check_write(writer, spec, None if row is None else row["handler"])
                    await check_definition(conn, spec, row, clock)
                for spec in specs:
                    written = await write_definition(
                        conn,
                        spec,
                        current.get((spec.tenant, spec.name)),
                        clock=clock,
                        actor=actor,
                        now=now,
                    )
                    if written is None:  # deleted between the name lookup and the update
                        raise _UpsertRaced
                    results.append((written.job_id, written.created))
                created = [s for s, (_, new) in zip(specs, results, strict=True) if new]
                await check_chains(conn, specs, created)
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != "pgpulse_job_names_pkey":
                raise
            raise _UpsertRaced from exc
        except psycopg.errors.DeadlockDetected as exc:  # two batches creating names crosswise
            raise _UpsertRaced from exc
        return results

    async def plan_job(self, spec: JobSpec, *, writer: Writer = OPERATOR) -> Step:
        """What :meth:`upsert_jobs` would do with ``spec`` as ``writer``, writing nothing: the
        same refusals (handler, authorisation, calendars, a past one-off), then the plan's step
        (:func:`pgpulse.core.plan.plan_source`): ``create``, ``update`` with the fields that
        change (old and new) or ``unchanged``. The dashboard shows it before a save.

        The row is read in a transaction that is rolled back; a write between this plan and the
        save is caught there (the save's ``expect_revision``, or the plan shown again).

        Raises:
            UnknownHandler, InvalidInput, Forbidden: as :meth:`upsert_jobs`; nothing is written.
        """
        known: set[str] = set()
        if unknown_handlers([spec], known):
            known |= await self.registered_handlers()
        check_handlers([spec], known)
        async with self.pool.connection() as conn, conn.transaction(force_rollback=True):
            clock = (await (await conn.execute(QUERIES["now"])).fetchone())["db_now"]  # type: ignore[index]
            current = await lock_definitions(conn, [(spec.tenant, spec.name)])
            row = current.get((spec.tenant, spec.name))
            check_write(writer, spec, None if row is None else row["handler"])
            await check_definition(conn, spec, row, clock)
        return plan_source(spec.source, [spec], current, prune=False).steps[0]

    async def get_job(self, tenant: str, name: str) -> dict[str, Any]:
        """Return one job row. Raises :class:`JobNotFound`."""
        check_key(tenant, name)
        rows = await self._rows("get_job", {"tenant": tenant, "name": name})
        if not rows:
            raise JobNotFound(tenant, name)
        return rows[0]

    async def followers(self, tenant: str, name: str) -> list[str]:
        """The names of ``tenant``'s jobs whose ``after`` names job ``name``, in order: they
        wait for its runs (docs/chains.md). Read by the GIN index of ``after``.

        Raises:
            InvalidInput: ``tenant`` or ``name`` is not one a job can have (its field named).
        """
        check_key(tenant, name)
        rows = await self._rows("job_followers", {"tenant": tenant, "name": name})
        return [row["name"] for row in rows]

    async def list_jobs(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Return every job (of ``tenant``, or all tenants), ordered by tenant and name."""
        return await self._read_rows("list_jobs", {"tenant": tenant})

    async def tenants_with_job_name(self, name: str) -> list[str]:
        """The tenants (at most five, in order) that have a job named ``name``."""
        return [row["tenant"] for row in await self._rows("tenants_with_job_name", {"name": name})]

    async def pause_job(
        self,
        tenant: str,
        name: str,
        *,
        until: datetime | None = None,
        reason: str | None = None,
        cancel: bool = False,
        now: datetime | None = None,
        actor: Actor = PYTHON_ACTOR,
    ) -> Paused:
        """Pause a job: it is not claimed until resumed (:mod:`pgpulse.db.pausing`). An idle,
        failed or paused job is paused at once (pausing a paused job again sets its ``until``
        and ``reason`` anew). A running job pauses when its run ends (a retry of the run still
        happens); with ``cancel`` its run, and every extra occurrence of it that runs, is
        cancelled now (recorded ``cancelled``, fenced like overlap ``replace``) and the job moves
        past the cancelled occurrence, paused (a one-off with none left: completed).

        Args:
            until: an aware instant after the database's now: the leader resumes the job then
                (mode ``skip``: the occurrences inside the pause are recorded as skipped, reason
                ``paused``); ``None``: until resumed by hand.
            reason: why, shown wherever the status is (at most 500 characters).
            cancel: stop what the job runs now rather than wait for its run's end.

        Returns:
            What the pause did (:class:`~pgpulse.db.pausing.Paused`: ``changed`` if the job was
            neither paused nor its pause requested before).

        Raises:
            JobNotFound: no such job.
            InvalidInput: the job is completed (``field="status"``), ``until`` is not after now
                (``field="until"``) or ``reason`` too long or with a character that cannot be
                shown (``field="reason"``); nothing changes.
        """
        check_key(tenant, name)
        check_reason(reason)
        if until is not None:
            if not isinstance(until, datetime):
                raise InvalidInput(
                    f"until must be an aware datetime, got {until!r}", field="until", value=until
                )
            if until.tzinfo is not None:
                check_instant_range("until", until)
            clock = now or await self.db_now()
            if until.tzinfo is None or until <= clock:
                raise InvalidInput(
                    f"until {until.isoformat()} is not after the database's now "
                    f"({clock.isoformat()}): give a future instant with its offset",
                    field="until",
                    value=until.isoformat(),
                )
        return await pause(
            self.pool,
            tenant,
            name,
            until=until,
            reason=reason,
            cancel=cancel,
            actor=actor,
            now=now,
        )

    async def resume_job(
        self,
        tenant: str,
        name: str,
        *,
        catch_up: str = "skip",
        now: datetime | None = None,
        actor: Actor = PYTHON_ACTOR,
    ) -> bool:
        """Resume a paused (or failed) job. Idempotent.

        Args:
            catch_up: what happens to the occurrences that fell inside the pause
                (:mod:`pgpulse.core.limits`): ``skip`` — not these (the job holds its first
                occurrence after now, nothing recorded); ``once`` — they run once, as the
                newest of them, the older ones recorded as skipped; ``backfill`` — each of
                them runs, oldest first. Later occurrences follow the job's own ``catch_up``.

        A job whose pause was requested while it ran (:meth:`pause_job`) is not paused: the
        request is withdrawn, and its run and the occurrences after it go on.

        Returns:
            ``True`` if the job was resumed now (or its requested pause withdrawn), ``False`` if
            it was not paused (idle, running or completed: nothing changes).

        Raises:
            JobNotFound: no such job.
            InvalidInput: ``catch_up`` is not one of skip, once, backfill (``field="catch_up"``).
        """
        check_key(tenant, name)
        if catch_up not in RESUME_MODES:
            raise InvalidInput(
                f"catch_up must be one of {', '.join(RESUME_MODES)}, got {catch_up!r}",
                field="catch_up",
                value=catch_up,
            )
        first, status = None, "idle"
        if catch_up == "skip":
            job = await self.get_job(tenant, name)
            clock = now or await self.db_now()
            schedule = parse_schedule(job["schedule"], job["timezone"])
            first = schedule.next_after_or_none(clock, anchor=job["anchor_at"])
            if first is None or (job["not_after"] is not None and first > job["not_after"]):
                first, status = first or job["scheduled_for"], "completed"
        params = {
            "tenant": tenant,
            "name": name,
            "status": status,
            "scheduled_for": first,
            "mode": None if catch_up == "skip" else catch_up,
            "now": now,
            "source": actor.source,
            "actor": actor.name,
        }
        if await self._rows("resume_job", params):
            return True
        current = await self._rows("job_status", {"tenant": tenant, "name": name})
        if not current:
            raise JobNotFound(tenant, name)
        return False

    async def trigger_job(self, tenant: str, name: str, *, actor: Actor = PYTHON_ACTOR) -> datetime:
        """Add an extra occurrence at the database's now (the schedule continues after it).

        Returns:
            The occurrence the job now holds (now, or an older one already due).

        Raises:
            JobNotFound: no such job.
            InvalidInput: the job is running, paused or failed — nothing changes.
        """
        check_key(tenant, name)
        rows = await self._rows(
            "trigger_job",
            {"tenant": tenant, "name": name, "source": actor.source, "actor": actor.name},
        )
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

    async def delete_job(
        self,
        tenant: str,
        name: str,
        *,
        actor: Actor = PYTHON_ACTOR,
        writer: Writer = OPERATOR,
    ) -> None:
        """Delete a job and its run history (its audit trail stays, ending with the delete). A
        node still running it finds its fenced writes change nothing. Its alert rules and
        silences go too (its alert history stays).

        Removing a definition is a write of it (:func:`~pgpulse.core.access.check_delete`):
        ``writer`` must be allowed to write the job, a ``shell`` job's too; the statement
        decides on the row it deletes.

        Raises:
            JobNotFound: no such job.
            Forbidden: ``writer`` may not write this job (another tenant's; a shell job without
                shell rights); nothing is deleted.
        """
        check_key(tenant, name)
        check_delete(writer, tenant=tenant, name=name, handler=None)
        params = {"id": None, "tenant": tenant, "name": name, "now": None}
        rows = await self._rows(
            "delete_job",
            {**params, "source": actor.source, "actor": actor.name, "shell_allowed": writer.shell},
        )
        if not rows:
            current = await self._rows("job_status", {"tenant": tenant, "name": name})
            if current:  # kept by the rule: a shell job, and no shell rights
                check_delete(writer, tenant=tenant, name=name, handler="shell")
            raise JobNotFound(tenant, name)

    async def job_history(
        self, tenant: str, name: str, *, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The audit trail of job (``tenant``, ``name``) — under its earlier names too — and of
        deleted jobs of that name, newest first: ``at`` (the database's instant), ``action``,
        ``source``, ``actor``, ``revision`` and ``changes`` (``{"field": [old, new]}``). A
        job renamed away from ``name`` (``crontab import --sync``) shows its rename here as
        under its new name. Empty when nothing of that name was ever recorded."""
        check_key(tenant, name)
        return await self._rows("job_history", {"tenant": tenant, "name": name, "limit": limit})

    async def job_history_by_id(
        self, job_id: int, *, tenant: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The audit trail of job ``job_id`` (of ``tenant``, unless ``None``), newest first."""
        return await self._rows(
            "job_history_by_id", {"job_id": job_id, "tenant": tenant, "limit": limit}
        )

    async def reconcile(
        self,
        batches: Sequence[tuple[str, Sequence[JobSpec]]],
        planner: Planner,
        **options: Any,
    ) -> list[Plan]:
        """Make whole sources' jobs match their definitions, or plan it
        (:func:`pgpulse.db.reconcile.reconcile`: its options, locks and errors)."""
        return await reconcile(self, batches, planner, **options)

    async def declare_code(self, source: str, tenant: str, names: Sequence[str], node: str) -> None:
        """Record the jobs an app's code declares (``source`` ``code:<app>``, of ``tenant``), as
        node ``node`` starts: the source's other jobs are then "declared by code no longer
        running" (:meth:`stale_code_jobs`)."""
        await self._rows(
            "declare_code", {"source": source, "tenant": tenant, "names": list(names), "node": node}
        )

    async def stale_code_jobs(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Jobs of a ``code:<app>`` source that the app, as its last node to start declared it,
        no longer declares (``id``, ``tenant``, ``name``, ``source``, ``node_id``,
        ``declared_at``), of ``tenant`` or all."""
        return await self._rows("stale_code_jobs", {"tenant": tenant})

    # -- reading for people ----------------------------------------------------------------

    async def list_runs(
        self, *, tenant: str | None = None, name: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Most recent runs first (of one job, one tenant, or all), each with ``lag`` (seconds
        from the occurrence to its first attempt's start) and ``attempt_log``
        (:func:`attempt_log`)."""
        rows = await self._read_rows("list_runs", {"tenant": tenant, "name": name, "limit": limit})
        for row in rows:
            row["attempt_log"] = attempt_log(row)
            del row["earlier_attempts"], row["attempt_ended_at"]
        return rows

    async def cluster_nodes(self, *, ttl: float) -> list[dict[str, Any]]:
        """Every registered node with liveness (by its own registered time-to-live, else
        ``ttl`` seconds), state (``lost`` for a silent node that never stopped; a lost or
        stopped node shows no shards and nothing running) and whether it leads."""
        return await self._rows("cluster_nodes", {"ttl": ttl, "leader_key": LEADER_LOCK_KEY})

    async def cluster_counts(
        self, tenant: str | None = None, *, ttl: float = 10.0
    ) -> dict[str, Any]:
        """Counts of due, running, paused, failed and all jobs, the worst lag (seconds), and
        ``unroutable``: the idle jobs no live node can run (a node row that recorded no
        time-to-live is judged by ``ttl`` seconds), by handler, each
        ``{"handler", "jobs", "due", "reason"}`` with the reason they wait
        (:func:`pgpulse.core.routing.waiting_reason`)."""
        row = (await self._read_rows("cluster_counts", {"tenant": tenant, "ttl": ttl}))[0]
        row["unroutable"] = [
            {**entry, "reason": waiting_reason(entry["handler"])} for entry in row["unroutable"]
        ]
        return row
