"""Run now with a payload, backfill on request, skip chosen occurrences: the writes that add
or take away occurrences of a job beside its schedule.

:class:`RunControl` is what the CLI (``job trigger NAME --payload``, ``job backfill``), the HTTP
API (``POST /jobs/{id}/trigger`` with a payload, ``POST /jobs/{id}/backfill``) and the Python API
call. Each request becomes extra occurrences (``pgpulse_occurrences``), which nodes claim and
run beside the live schedule, each with a lease and a fencing token of its own (docs/states.md,
"Extra occurrences"); the history marks their runs ``trigger`` or ``backfill``. Instants are
aware datetimes; ``now`` is for tests only (``None``: the database's clock).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from pgpulse.core.access import OPERATOR, Writer, check_run_payload
from pgpulse.core.audit import PYTHON_ACTOR, Actor
from pgpulse.core.backfill import (
    MAX_BACKFILL,
    HistoryRow,
    Planned,
    check_only,
    check_range,
    classify,
    select,
)
from pgpulse.core.errors import InvalidInput, JobNotFound
from pgpulse.core.jobs import LIMITS, check_key, check_reason, parse_payload
from pgpulse.core.limits import parse_instant
from pgpulse.core.payloads import PAYLOAD_VALIDATORS
from pgpulse.core.schedule import Schedule, parse_schedule
from pgpulse.core.skips import Skip, add_skips, pending_occurrence, remove_skips, stored
from pgpulse.core.wording import given
from pgpulse.core.zones import utc_if_naive
from pgpulse.db.database import ConnectionSource
from pgpulse.sql import QUERIES


@dataclass(frozen=True, slots=True)
class Triggered:
    """An extra occurrence made by a trigger: its id (also its run's id) and instant."""

    job_id: int
    occurrence: int
    scheduled_for: datetime


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """What a backfill request found and did.

    Attributes:
        job_id: the job.
        plan: every occurrence of the range, in run order, each with its status and whether it
            was selected (:mod:`pgpulse.core.backfill`).
        batch_id: the batch of extra occurrences written (``None``: a dry run, or nothing
            selected).
    """

    job_id: int
    plan: list[Planned]
    batch_id: int | None

    @property
    def selected(self) -> list[datetime]:
        """The occurrences that run (or would, in a dry run), in run order."""
        return [p.scheduled_for for p in self.plan if p.selected]


class RunControl:
    """Intent-named writes of extra occurrences.

    Args:
        pool: an open pool of autocommit connections with dict rows.
    """

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def _rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(QUERIES[name], params)
            return list(await cur.fetchall()) if cur.description else []

    async def _job(self, tenant: str, name: str) -> dict[str, Any]:
        check_key(tenant, name)  # InvalidInput naming the field: no job has such a name
        rows = await self._rows("get_job", {"tenant": tenant, "name": name})
        if not rows:
            raise JobNotFound(tenant, name)
        return rows[0]

    async def trigger(
        self,
        tenant: str,
        name: str,
        payload: object,
        *,
        writer: Writer = OPERATOR,
        actor: Actor = PYTHON_ACTOR,
        now: datetime | None = None,
        check_target: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> Triggered:
        """Run job (``tenant``, ``name``) once more, now, with ``payload`` (a JSON object, or JSON
        text of one) instead of its own: one extra occurrence at the database's now, beside the
        live schedule whatever the job's overlap policy, recorded as kind ``trigger``.

        The payload is checked as a definition's is (:func:`~pgpulse.core.jobs.parse_payload`, the
        built-in handler's validator), and ``writer`` must be allowed to write the job's
        definition (:func:`~pgpulse.core.access.check_run_payload`: a shell job's payload is a
        command). The trigger is recorded in the job's audit trail (action ``trigger``, by
        ``actor``, with the payload and the run id) in the same statement.

        ``check_target`` is the caller's policy for an ``http`` job's target, awaited with the
        checked payload before anything is written (the API's and the CLI's
        :func:`~pgpulse.core.policy.check_http_target`: the URL a trigger gives is checked as a
        definition's is); its refusal propagates.

        Raises:
            JobNotFound: no such job.
            InvalidPayload: the payload is not a valid payload of the job's handler.
            Forbidden: ``writer`` may not give this job a payload.
            InvalidInput: the job is paused or failed (``field="status"``); nothing is written.
        """
        job = await self._job(tenant, name)
        checked = parse_payload(payload)
        validator = PAYLOAD_VALIDATORS.get(job["handler"])
        if validator is not None:
            validator(checked)
        check_run_payload(writer, tenant=tenant, name=name, handler=job["handler"])
        if check_target is not None and job["handler"] == "http":
            await check_target(checked)
        rows = await self._rows(
            "insert_trigger",
            {
                "tenant": tenant,
                "name": name,
                "payload": Jsonb(checked),
                "source": actor.source,
                "actor": actor.name,
                "now": now,
            },
        )
        if not rows:
            raise JobNotFound(tenant, name)
        row = rows[0]
        if row["id"] is None:
            raise InvalidInput(
                f"job {name!r} is {row['status']}; only an idle or running job can be triggered",
                field="status",
                value=row["status"],
            )
        return Triggered(row["job_id"], row["id"], row["scheduled_for"])

    async def backfill(
        self,
        tenant: str,
        name: str,
        *,
        start: datetime,
        end: datetime,
        only: tuple[str, ...] = (),
        dry_run: bool = False,
        max_concurrency: int = 1,
        newest_first: bool = False,
        actor: Actor = PYTHON_ACTOR,
        now: datetime | None = None,
    ) -> BackfillPlan:
        """Run each selected occurrence of the job's schedule in ``[start, end]`` exactly once
        more, beside the live schedule: one batch of extra occurrences (kind ``backfill``), at
        most ``max_concurrency`` of them running at once, oldest first (or newest first).

        ``start`` and ``end`` are instants; naive ones are UTC (as on the command line and in
        the API: a backfill names instants of the history, which is kept in UTC).

        Which occurrences: :mod:`pgpulse.core.backfill` (``only``: ``missing``, ``failed``, both by
        default, or ``all``; the live schedule's own, and an earlier backfill's still queued,
        never). ``dry_run`` writes nothing and returns the same plan. A request that queues
        occurrences is recorded in the job's audit trail (action ``backfill``, by ``actor``: the
        range, ``only``, the bound, how many, the batch) in the same statement.

        Raises:
            JobNotFound: no such job.
            InvalidInput: an ``@after`` job, which has no fixed occurrences
                (``field="schedule"``), a range that ends before it starts or reaches into the
                future (``field="to"``), more than :data:`~pgpulse.core.backfill.MAX_BACKFILL`
                occurrences (``field="from"``), an unknown ``only``, a ``max_concurrency``
                outside 1-1000; nothing is written; the job is ``completed``
                (``field="status"``).
        """
        chosen = check_only(only)
        if (
            isinstance(max_concurrency, bool)
            or not isinstance(max_concurrency, int)
            or not 1 <= max_concurrency <= LIMITS["max_concurrency"]
        ):
            raise InvalidInput(
                f"max_concurrency must be a whole number from 1 to "
                f"{LIMITS['max_concurrency']:.0f}, got {given(max_concurrency)}",
                field="max_concurrency",
                value=max_concurrency,
            )
        start, end = utc_if_naive(start), utc_if_naive(end)
        job = await self._job(tenant, name)
        if job["status"] == "completed":  # docs/states.md, "Extra occurrences and run control"
            raise InvalidInput(
                f"job {name!r} is completed (no occurrence left); a completed job takes no "
                "backfill",
                field="status",
                value="completed",
            )
        schedule = parse_schedule(job["schedule"], job["timezone"])
        if schedule.delay is not None:
            raise InvalidInput(
                f"job {name!r} runs {schedule.describe()} (@after): it has no fixed occurrences "
                "to backfill; run it once now with `pgpulse job trigger`",
                field="schedule",
                value=job["schedule"],
            )
        db_now = now or (await self._rows("now", {}))[0]["db_now"]
        check_range(start, end, db_now)
        instants = schedule.occurrences_between(
            start - timedelta(microseconds=1), end, anchor=job["anchor_at"], limit=MAX_BACKFILL + 1
        )
        if len(instants) > MAX_BACKFILL:
            raise InvalidInput(
                f"from {start.isoformat()} to {end.isoformat()} holds more than "
                f"{MAX_BACKFILL:,} occurrences of {job['schedule']!r}: split the range",
                field="from",
                value=start,
            )
        bounds = {"job_id": job["id"], "from": start, "to": end}
        history = [
            HistoryRow(r["scheduled_for"], r["last_scheduled_for"], r["outcome"])
            for r in await self._rows("backfill_history", bounds)
        ]
        queued = {r["scheduled_for"] for r in await self._rows("backfill_queued", bounds)}
        classified = classify(instants, history, current=job["scheduled_for"], queued=queued)
        plan = select(classified, chosen, newest_first=newest_first)
        result = BackfillPlan(job["id"], plan, None)
        if dry_run or not result.selected:
            return result
        rows = await self._rows(
            "insert_backfill",
            {
                "job_id": job["id"],
                "max_concurrency": max_concurrency,
                "instants": result.selected,
                "source": actor.source,
                "actor": actor.name,
                "request": Jsonb(
                    {
                        "from": [None, start.isoformat()],
                        "to": [None, end.isoformat()],
                        # as asked (ONLY_CHOICES); none given: the default, both
                        "only": [None, sorted(set(only) or {"missing", "failed"})],
                        "max_concurrency": [None, max_concurrency],
                        "newest_first": [None, newest_first],
                        "occurrences": [None, len(result.selected)],
                    }
                ),
                "now": now,
            },
        )
        if not rows:  # deleted in between
            raise JobNotFound(tenant, name)
        return BackfillPlan(job["id"], plan, rows[0]["id"])

    async def skip(
        self,
        tenant: str,
        name: str,
        *,
        count: int | None = None,
        at: datetime | str | None = None,
        reason: str | None = None,
        actor: Actor = PYTHON_ACTOR,
    ) -> list[Skip]:
        """Skip the next ``count`` occurrences of the job's schedule (1 when neither ``count`` nor
        ``at`` is given), or the one ``at``, without pausing it: each is recorded ``skipped``
        (its reason names ``actor`` and ``reason``) when its time comes, and the job goes on
        after it (:mod:`pgpulse.core.skips`). The change is recorded in the job's audit trail
        (action ``skip``). Idempotent: an occurrence listed already keeps its first actor and
        reason.

        Args:
            count: how many occurrences from the next one a skip can reach (its held occurrence
                while no attempt of it started, else the one after).
            at: one occurrence: an aware instant, or ISO 8601 text (in the job's zone without
                an offset).
            reason: why (at most 500 characters), or ``None``.

        Returns:
            The job's skips after the change, oldest first.

        Raises:
            JobNotFound: no such job.
            InvalidInput: as :func:`~pgpulse.core.skips.add_skips`, or ``reason`` too long
                (``field="reason"``); nothing is written.
        """
        check_reason(reason)
        if count is None and at is None:
            count = 1

        def change(job: dict[str, Any], schedule: Schedule, pending: datetime | None) -> list[Skip]:
            instant = None if at is None else parse_instant("at", at, job["timezone"])
            return add_skips(
                stored(job["skips"]),
                schedule,
                pending=pending,
                anchor=job["anchor_at"],
                count=count,
                at=instant,
                by=actor.name,
                reason=reason,
            )

        return await self._set_skips(tenant, name, "skip", change, actor=actor, reason=reason)

    async def unskip(
        self,
        tenant: str,
        name: str,
        *,
        at: datetime | str | None = None,
        actor: Actor = PYTHON_ACTOR,
    ) -> list[Skip]:
        """Undo :meth:`skip`: the occurrence ``at`` runs after all (``None``: every listed one
        does). Recorded in the audit trail (action ``unskip``).

        Returns:
            The job's skips after the change, oldest first.

        Raises:
            JobNotFound: no such job.
            InvalidInput: ``at`` is not an instant or not listed (``field="at"``).
        """

        def change(job: dict[str, Any], schedule: Schedule, pending: datetime | None) -> list[Skip]:
            instant = None if at is None else parse_instant("at", at, job["timezone"])
            return remove_skips(stored(job["skips"]), pending=pending, at=instant)

        return await self._set_skips(tenant, name, "unskip", change, actor=actor, reason=None)

    async def _set_skips(
        self,
        tenant: str,
        name: str,
        action: str,
        change: Callable[[dict[str, Any], Schedule, datetime | None], list[Skip]],
        *,
        actor: Actor,
        reason: str | None,
    ) -> list[Skip]:
        """Read the job, compute its new skips with ``change`` and write them unless the job
        changed meanwhile (``set_skips``), then again from a fresh read: a concurrent skip, an
        edit of the schedule or a claim moving the job between the read and the write never
        loses an entry or lists an instant that is not an occurrence."""
        for _ in range(_SKIP_WRITE_TRIES):
            job = await self._job(tenant, name)
            schedule = parse_schedule(job["schedule"], job["timezone"])
            pending = pending_occurrence(
                schedule,
                status=job["status"],
                scheduled_for=job["scheduled_for"],
                attempt=job["attempt"],
                anchor=job["anchor_at"],
            )
            skips = change(job, schedule, pending)
            rows = await self._rows(
                "set_skips",
                {
                    "job_id": job["id"],
                    "old": None if job["skips"] is None else Jsonb(job["skips"]),
                    "skips": Jsonb([s.as_json() for s in skips]) if skips else None,
                    "schedule": job["schedule"],
                    "timezone": job["timezone"],
                    "anchor_at": job["anchor_at"],
                    "action": action,
                    "source": actor.source,
                    "actor": actor.name,
                    "reason": reason,
                },
            )
            if rows and rows[0]["found"]:
                return skips
        raise InvalidInput(
            f"job {name!r} kept changing while its skips were written; try again",
            field="name",
            value=name,
        )


#: How often a skip is computed again when the job changed between its read and its write.
_SKIP_WRITE_TRIES = 5
