"""What the API and the dashboard do for a signed-in principal, over the store.

No scheduling logic lives here: definitions go through :meth:`JobSpec.create` and
:meth:`Store.upsert_jobs`, state changes through the store's ``pause_job``, ``resume_job``,
``trigger_job`` and ``delete_job``. This module adds what the edge owns: tenant scoping (another
tenant's job is :class:`NoSuchJob`, exactly like a missing one), the ``shell`` and ``http``
rules of :mod:`pgpulse.core.policy`, and presentation (next occurrences in the job's zone).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from pgpulse.core.access import Writer, token_writer
from pgpulse.core.audit import SETTABLE_FIELDS
from pgpulse.core.calendars import ExclusionCalendar, from_definitions
from pgpulse.core.errors import DefinitionChanged, JobNotFound, PulseError
from pgpulse.core.jobs import JobSpec
from pgpulse.core.keys import key_holds_back, waiting_for
from pgpulse.core.limits import first_to_run, parse_instant, pause_until
from pgpulse.core.plan import Step
from pgpulse.core.policy import WebSettings, check_http_target, check_text
from pgpulse.core.routing import waiting_reason
from pgpulse.core.schedule import Schedule, parse_schedule
from pgpulse.core.sharding import DEFAULT_SHARD_COUNT
from pgpulse.core.skips import Skip
from pgpulse.core.zones import load_zone
from pgpulse.db.pausing import Paused
from pgpulse.db.run_control import BackfillPlan, RunControl, Triggered
from pgpulse.db.store import Store
from pgpulse.db.tokens import Principal
from pgpulse.web.reads import Reads

log = logging.getLogger(__name__)

#: Fields of a job definition the API accepts (``name`` and ``tenant`` identify the job).
DEFINITION_FIELDS = SETTABLE_FIELDS
#: How many upcoming occurrences a job shows.
UPCOMING = 5
#: How often a partial update reads, merges and writes a job another write keeps changing,
#: and the longest pause (seconds, random, times the try's number) before the next try.
UPDATE_TRIES = 10
UPDATE_JITTER = 0.01


class NoSuchJob(PulseError):
    """No job with this id is visible to the token (missing, or of another tenant)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"no job with id {job_id}", field="job_id", value=job_id)


class NoSuchRun(PulseError):
    """No run with this id is visible to the token (missing, or of another tenant)."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"no run with id {run_id}", field="run_id", value=run_id)


def upcoming(row: dict[str, Any], count: int = UPCOMING) -> list[datetime]:
    """The job's next occurrences, in the job's own time zone: its current one unless it is
    running, then the ones after it.

    Stops early at the end of time (year 9999) or for a schedule that no longer fires, and
    past ``not_after`` or ``max_runs``; a ``completed`` job has none (its last one ran). The
    occurrences its exclusion calendars (``calendar_defs``: the stored definitions) exclude
    are left out, as the claims skip them (:func:`pgpulse.core.limits.first_to_run`).

    A paused job's occurrences inside the pause do not run (the pause's end resumes it with
    ``skip``): one paused until T shows those after T, or after the database's now
    (``db_now``, when the row has it) once T has passed and the leader has not resumed it yet —
    never one inside the pause or in the past; one paused with no end has none to show until
    it is resumed (the resume decides which come). A job whose pause is requested while it runs
    (``pause_requested``) shows the same as a paused one.

    A running job's current occurrence (``scheduled_for``: a scheduled one, or the instant of a
    trigger) is under way, not to come: the list starts with the one after it.
    """
    if row.get("status") == "completed":
        return []
    schedule = parse_schedule(row["schedule"], row["timezone"])
    zone = load_zone(row["timezone"])
    calendars = from_definitions(row.get("calendar_defs"))
    found: list[datetime] = []
    try:
        first = _first_to_come(row, schedule)
        if first is None:
            return []
        cursor = first
        left = None
        if row.get("max_runs") is not None:
            # the running occurrence is one of the runs max_runs allows
            under_way = 1 if row.get("status") == "running" else 0
            left = max(int(row["max_runs"]) - int(row.get("runs_done") or 0) - under_way, 0)
        while len(found) < (count if left is None else min(count, left)):
            if calendars:  # what the claims skip is not shown as to come
                runs, _ = first_to_run(schedule, calendars, cursor, anchor=row["anchor_at"])
                if runs is None:
                    break
                cursor = runs
            if row.get("not_after") is not None and cursor > row["not_after"]:
                break
            found.append(cursor.astimezone(zone))
            cursor = schedule.next_after(cursor, anchor=row["anchor_at"])
    except (OverflowError, PulseError):
        pass
    return found


def _first_to_come(row: dict[str, Any], schedule: Schedule) -> datetime | None:
    """The first occurrence of job ``row`` still to come, before its calendars and limits
    (:func:`upcoming`): its current one (``scheduled_for``), the one after it while it runs,
    the first after a pause's end (and after the database's now, ``db_now``), ``None`` while
    paused (or its pause requested) with no end."""
    cursor: datetime = row["scheduled_for"]
    if row.get("status") == "running":  # under way: not to come
        cursor = schedule.next_after(cursor, anchor=row["anchor_at"])
    if row.get("status") != "paused" and not row.get("pause_requested"):
        return cursor
    until = row.get("paused_until")
    if until is None:
        return None
    # a pause that ended but that the leader has not resumed yet: it resumes with skip now
    bound = until if row.get("db_now") is None else max(until, row["db_now"])
    if cursor <= bound:
        return schedule.next_after_or_none(bound, anchor=row["anchor_at"])
    return cursor


def present_job(row: dict[str, Any]) -> dict[str, Any]:
    """A job row as the API shows it: instants in UTC, the schedule in words, the next
    occurrences in the job's own zone, and why it waits if no live node can run it or its
    concurrency key is at its limit."""
    job = {
        key: value.astimezone(UTC) if isinstance(value, datetime) else value
        for key, value in row.items()
        if key not in ("unroutable", "calendar_defs", "key_limit", "key_running")
    }
    job["waiting"] = waiting_reason(row["handler"]) if row.get("unroutable") else None
    if job["waiting"] is None and key_holds_back(row):
        job["waiting"] = waiting_for(row["concurrency_key"], row["key_running"], row["key_limit"])
    try:
        job["schedule_description"] = parse_schedule(row["schedule"], row["timezone"]).describe()
        job["upcoming"] = upcoming(row)
    except PulseError as exc:  # stored by another version, or its zone left the tz database
        job["schedule_description"], job["upcoming"] = f"invalid: {exc}", []
    return job


class JobService:
    """Tenant-scoped job and run operations.

    Args:
        store: the store every write goes through.
        settings: the edge's security settings.
    """

    def __init__(self, store: Store, settings: WebSettings) -> None:
        self.store = store
        self.reads = Reads(store.pool)  # what a write or a decision reads: the primary
        self.lists = Reads(store.reads)  # what people browse: a read replica, if any
        self.settings = settings

    async def job(self, who: Principal, job_id: int) -> dict[str, Any]:
        """The job ``job_id`` as :func:`present_job` shows it.

        Raises:
            NoSuchJob: missing or of another tenant.
        """
        row = await self.reads.job(job_id, tenant=who.scope)
        if row is None:
            raise NoSuchJob(job_id)
        return present_job(row)

    def writer(self, who: Principal) -> Writer:
        """What the token may write (:mod:`pgpulse.core.access`: the store applies the rule)."""
        return token_writer(
            who.token_id, who.tenant, admin=who.admin, shell_allowed=self.settings.allow_shell_jobs
        )

    async def save(
        self, who: Principal, fields: dict[str, Any], *, expect_revision: int | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Create or update job ``(fields["tenant"], fields["name"])``: validate, then upsert
        as the token's writer (the store refuses what the token may not write, against the job
        as it stands in the writing transaction).

        Args:
            fields: ``name``, ``tenant`` (default: the token's, or ``default`` for admin) and
                definition fields (:data:`DEFINITION_FIELDS`).
            expect_revision: the revision ``fields`` were read from (a partial update); the
                write is refused if the job has another one when it is written.

        Returns:
            ``(job, created)``.

        Raises:
            Forbidden: another tenant's name for a tenant token; creating, changing or
                replacing a ``shell`` job without admin token and server opt-in.
            InvalidInput: any refused field (schedule, timezone, payload, handler, URL target,
                limits); nothing is written.
            DefinitionChanged: the job's revision is not ``expect_revision``; nothing is written.
        """
        spec = await self._spec(who, fields)
        tenant = spec.tenant
        expect = None if expect_revision is None else {(tenant, spec.name): expect_revision}
        [(job_id, created)] = await self.store.upsert_jobs(
            [spec], writer=self.writer(who), actor=who.actor, expect_revisions=expect
        )
        log.info(
            "job %s/%s %s through the API (token %d)",
            tenant,
            spec.name,
            "created" if created else "updated",
            who.token_id,
            extra={
                "action": "api_job_saved",
                "tenant": tenant,
                "job": spec.name,
                "token_id": who.token_id,
                "job_created": created,  # not "created": a LogRecord attribute
            },
        )
        return await self.job(who, job_id), created

    async def _spec(self, who: Principal, fields: dict[str, Any]) -> JobSpec:
        """The definition ``fields`` make for ``who`` (:meth:`save`'s): every field checked,
        an ``http`` job's target too.

        Raises:
            InvalidInput: any refused field; TargetNotAllowed: an ``http`` target the server
                does not allow.
        """
        for key, value in fields.items():
            check_text(key, value)
        tenant = fields.get("tenant") or who.tenant or "default"
        options = {key: fields[key] for key in DEFINITION_FIELDS if key in fields}
        # In a worker thread: checking a schedule's spread walks its occurrences (90 ms for an
        # hourly job in a DST zone), and a node's heartbeats share this event loop.
        spec = await asyncio.to_thread(
            partial(
                JobSpec.create,
                name=fields.get("name"),  # type: ignore[arg-type]
                tenant=tenant,
                source="api",
                **options,
            )
        )
        if spec.handler == "http":
            await check_http_target(spec.payload, self.settings)
        return spec

    async def plan(self, who: Principal, fields: dict[str, Any]) -> Step:
        """What :meth:`save` would do with ``fields``, writing nothing: the same checks and
        refusals (:meth:`Store.plan_job <pgpulse.db.store.Store.plan_job>`), then ``create``,
        ``update`` (the fields that change, old and new) or ``unchanged``.

        Raises:
            Forbidden, InvalidInput: as :meth:`save`.
        """
        spec = await self._spec(who, fields)
        return await self.store.plan_job(spec, writer=self.writer(who))

    async def plan_update(self, who: Principal, job_id: int, changes: dict[str, Any]) -> Step:
        """What :meth:`update` would do with ``changes``, writing nothing (:meth:`plan` of the
        job's stored definition with ``changes`` merged in).

        Raises:
            NoSuchJob, Forbidden, InvalidInput: as :meth:`update`.
        """
        current = await self.reads.job(job_id, tenant=who.scope)
        if current is None:
            raise NoSuchJob(job_id)
        fields = {key: current[key] for key in DEFINITION_FIELDS}
        fields.update(changes, name=current["name"], tenant=current["tenant"])
        if all(key in current and current[key] == value for key, value in changes.items()):
            # as update: a change to the values it has writes nothing (not even a takeover)
            return Step("unchanged", current["tenant"], current["name"], job_id=job_id)
        return await self.plan(who, fields)

    async def update(self, who: Principal, job_id: int, changes: dict[str, Any]) -> dict[str, Any]:
        """Change some definition fields of job ``job_id`` (the rest keep their values). A
        change that sets no field to a new value (``{}``) writes nothing: the job keeps its
        source (a job of another source is taken over only by a real change) and revision.

        Two concurrent updates of one job do not lose either's fields: each is merged into the
        revision it read and written only if that revision is still the stored one; the loser
        reads the job again and merges anew, up to :data:`UPDATE_TRIES` times (after a random
        pause that grows with each try, so that racing updates spread out).

        Raises:
            NoSuchJob, Forbidden, InvalidInput: as :meth:`job` and :meth:`save`.
            DefinitionChanged: the job changed under every try (answered 409).
        """
        for attempt in range(1, UPDATE_TRIES + 1):
            current = await self.reads.job(job_id, tenant=who.scope)
            if current is None:
                raise NoSuchJob(job_id)
            if all(key in current and current[key] == value for key, value in changes.items()):
                return present_job(current)  # writes nothing: nothing to authorise
            fields = {key: current[key] for key in DEFINITION_FIELDS}
            fields.update(changes, name=current["name"], tenant=current["tenant"])
            try:
                job, _ = await self.save(who, fields, expect_revision=current["revision"])
            except DefinitionChanged:
                if attempt == UPDATE_TRIES:
                    raise
                await asyncio.sleep(random.uniform(0, UPDATE_JITTER * attempt))
                continue
            return job
        raise AssertionError("unreachable")  # pragma: no cover

    async def act(
        self, who: Principal, job_id: int, verb: str, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Pause, resume, trigger or delete job ``job_id`` through the store, with the verb's
        ``options`` (pause: ``until``, an instant read in the job's zone when naive, as the
        CLI's; ``reason``; resume: ``catch_up``).

        Returns:
            The job after the change (``{}`` after ``delete``); after ``trigger`` it holds the
            extra occurrence as ``scheduled_for``.

        Raises:
            NoSuchJob: missing or of another tenant (also when deleted meanwhile).
            InvalidInput: the store refused the change in the job's state (``field="status"``).
        """
        await self._act(who, job_id, verb, options)
        return {} if verb == "delete" else await self.job(who, job_id)

    async def pause(
        self, who: Principal, job_id: int, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], Paused]:
        """Pause job ``job_id`` (:meth:`act`'s ``pause``; ``options`` may also hold ``cancel``:
        stop what it runs now, :meth:`Store.pause_job`).

        Returns:
            The job after the pause, and what the pause did.

        Raises:
            NoSuchJob, InvalidInput: as :meth:`act`.
        """
        done: Paused = await self._act(who, job_id, "pause", options)
        return await self.job(who, job_id), done

    async def _act(
        self, who: Principal, job_id: int, verb: str, options: dict[str, Any] | None
    ) -> Any:
        """:meth:`act`'s change; returns what the store's method returned."""
        row = await self.reads.job(job_id, tenant=who.scope)
        if row is None:
            raise NoSuchJob(job_id)
        methods: dict[str, Callable[..., Awaitable[Any]]] = {
            "pause": self.store.pause_job,
            "resume": self.store.resume_job,
            "trigger": self.store.trigger_job,
            "delete": self.store.delete_job,
        }
        options = dict(options or {})
        if options.get("until") is not None:
            # as `job pause --until`: an instant without an offset is in the job's zone
            until = options["until"]
            options["until"] = (
                pause_until(until, row["timezone"], await self.store.db_now())
                if isinstance(until, str)
                else parse_instant("until", until, row["timezone"])
            )
        if verb == "delete":
            options["writer"] = self.writer(who)  # removing a definition is a write of it
        try:
            done = await methods[verb](row["tenant"], row["name"], actor=who.actor, **options)
        except JobNotFound:
            raise NoSuchJob(job_id) from None
        log.info(
            "job %s/%s: %s through the API (token %d)",
            row["tenant"],
            row["name"],
            verb,
            who.token_id,
            extra={
                "action": f"api_job_{verb}",
                "tenant": row["tenant"],
                "job": row["name"],
                "token_id": who.token_id,
            },
        )
        return done

    async def trigger_with_payload(
        self, who: Principal, job_id: int, payload: dict[str, Any]
    ) -> tuple[dict[str, Any], Triggered]:
        """Run job ``job_id`` once now with ``payload``, as an extra occurrence
        (:meth:`~pgpulse.db.run_control.RunControl.trigger`, as the token's writer).

        Raises:
            NoSuchJob, Forbidden, InvalidInput: as :meth:`job` and the store's refusals.
            TargetNotAllowed: an ``http`` job's payload names a target the server does not
                allow (:func:`~pgpulse.core.policy.check_http_target`, as a definition's).
        """
        row = await self.reads.job(job_id, tenant=who.scope)
        if row is None:
            raise NoSuchJob(job_id)
        check_text("payload", payload)
        try:
            done = await RunControl(self.store.pool).trigger(
                row["tenant"],
                row["name"],
                payload,
                writer=self.writer(who),
                actor=who.actor,
                check_target=lambda checked: check_http_target(checked, self.settings),
            )
        except JobNotFound:
            raise NoSuchJob(job_id) from None
        self._log_action(who, row, "trigger", run_id=done.occurrence)
        return await self.job(who, job_id), done

    async def backfill(self, who: Principal, job_id: int, request: dict[str, Any]) -> BackfillPlan:
        """Backfill job ``job_id`` on request (:meth:`~pgpulse.db.run_control.RunControl.backfill`;
        ``request`` holds its keyword arguments). Runs the job's own definition: the token
        needs its tenant only.

        Raises:
            NoSuchJob, InvalidInput: as :meth:`job` and the backfill's refusals.
        """
        row = await self.reads.job(job_id, tenant=who.scope)
        if row is None:
            raise NoSuchJob(job_id)
        try:
            plan = await RunControl(self.store.pool).backfill(
                row["tenant"], row["name"], **request, actor=who.actor
            )
        except JobNotFound:
            raise NoSuchJob(job_id) from None
        if plan.batch_id is not None:
            self._log_action(who, row, "backfill", batch_id=plan.batch_id)
        return plan

    async def skip(self, who: Principal, job_id: int, request: dict[str, Any]) -> list[Skip]:
        """Skip occurrences of job ``job_id`` (:meth:`~pgpulse.db.run_control.RunControl.skip`;
        ``request`` holds ``count``, ``at`` and ``reason``), as the token's actor. A run-control
        write, as a pause: the token needs the job's tenant only.

        Raises:
            NoSuchJob, InvalidInput: as :meth:`job` and the skip's refusals.
        """
        row = await self.reads.job(job_id, tenant=who.scope)
        if row is None:
            raise NoSuchJob(job_id)
        try:
            skips = await RunControl(self.store.pool).skip(
                row["tenant"], row["name"], **request, actor=who.actor
            )
        except JobNotFound:
            raise NoSuchJob(job_id) from None
        self._log_action(who, row, "skip")
        return skips

    async def unskip(self, who: Principal, job_id: int, at: datetime | None) -> list[Skip]:
        """Undo a skip of job ``job_id`` (:meth:`~pgpulse.db.run_control.RunControl.unskip`).

        Raises:
            NoSuchJob, InvalidInput: as :meth:`job` and the refusal of an ``at`` not listed.
        """
        row = await self.reads.job(job_id, tenant=who.scope)
        if row is None:
            raise NoSuchJob(job_id)
        try:
            skips = await RunControl(self.store.pool).unskip(
                row["tenant"], row["name"], at=at, actor=who.actor
            )
        except JobNotFound:
            raise NoSuchJob(job_id) from None
        self._log_action(who, row, "unskip")
        return skips

    def _log_action(
        self,
        who: Principal,
        row: dict[str, Any],
        verb: str,
        *,
        run_id: int | None = None,
        batch_id: int | None = None,
    ) -> None:
        log.info(
            "job %s/%s: %s through the API (token %d)",
            row["tenant"],
            row["name"],
            verb,
            who.token_id,
            extra={
                "action": f"api_job_{verb}",
                "tenant": row["tenant"],
                "job": row["name"],
                "token_id": who.token_id,
                "run_id": run_id,
                "batch_id": batch_id,
            },
        )

    async def put_calendar(
        self, who: Principal, tenant: str | None, name: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        """Create or replace calendar ``name`` of ``tenant`` (default: the token's) as the
        token's writer; returns it as listed.

        Raises:
            InvalidInput: the calendar's own refusals (:meth:`ExclusionCalendar.create`).
            Forbidden: another tenant's calendar for a tenant token.
        """
        where = tenant or who.tenant or "default"
        calendar = ExclusionCalendar.create(name, **fields)
        await self.store.put_calendar(where, calendar, writer=self.writer(who))
        rows = await self.store.list_calendars(where)
        return next(row for row in rows if row["name"] == name)

    async def history(self, who: Principal, job_id: int, limit: int) -> list[dict[str, Any]]:
        """The audit trail of job ``job_id``, newest first (under its earlier names too).

        Raises:
            NoSuchJob: missing or of another tenant.
        """
        await self.job(who, job_id)
        return await self.store.job_history_by_id(job_id, tenant=who.scope, limit=limit)

    async def run(self, who: Principal, run_id: int) -> dict[str, Any]:
        """One run with output and error. Raises :class:`NoSuchRun`."""
        row = await self.reads.run(run_id, tenant=who.scope)
        if row is None:
            raise NoSuchRun(run_id)
        return row

    async def cluster(self, who: Principal) -> dict[str, Any]:
        """Nodes (liveness, heartbeat, shards, load), the leader, shard ownership, job counts
        (of the token's tenant, or all) and the worst lag."""
        nodes = await self.store.cluster_nodes(ttl=self.settings.node_ttl)
        owners: dict[int, list[str]] = defaultdict(list)
        for node in nodes:
            if node["alive"]:
                for shard in node["shards"]:
                    owners[shard].append(node["node_id"])
        leader = next((n["node_id"] for n in nodes if n["leader"]), None)
        count = nodes[0]["shard_count"] if nodes else DEFAULT_SHARD_COUNT
        return {
            "nodes": [{**n, "leader": bool(n["leader"])} for n in nodes],
            "leader": leader,
            "shards": {
                "count": count,
                "owners": {str(s): owners[s] for s in sorted(owners)},
                "unowned": [s for s in range(count) if s not in owners],
                "contested": [s for s in sorted(owners) if len(owners[s]) > 1],
            },
            "jobs": await self.store.cluster_counts(tenant=who.scope),
        }


#: The most occurrences a schedule preview lists (``pgpulse schedule next --count``'s bound).
PREVIEW_MAX = 50


def schedule_preview(expression: str, timezone: str, count: int, after: datetime) -> dict[str, Any]:
    """The next ``count`` occurrences of ``expression`` in ``timezone`` after ``after`` (an
    aware instant; an ``@every`` grid is anchored there), as ``pgpulse schedule next --json``
    gives them: each in UTC and in the zone, the schedule in words, and whether it ends sooner.
    The dashboard's job form shows it as the schedule is typed. Pure but for the zone
    database; walking a rare schedule can take a while, so callers run it in a worker thread.

    Raises:
        InvalidInput: the schedule or the zone is refused (``field`` ``schedule`` or
            ``timezone``), or no occurrence comes before the year 10000.
    """
    parsed = parse_schedule(expression, timezone)
    zone = load_zone(timezone)
    found: list[dict[str, datetime]] = []
    cursor = after
    try:
        while len(found) < count:
            following = parsed.next_after_or_none(cursor, anchor=after)
            if following is None:
                break
            found.append({"utc": following, "local": following.astimezone(zone)})
            cursor = following
    except OverflowError:  # an occurrence whose local time is past 9999-12-31: the list ends
        pass
    except PulseError:  # none before the year 10000: the list ends, unless it is empty
        if not found:
            raise
    return {
        "schedule": expression,
        "timezone": timezone,
        "description": parsed.describe(),
        "occurrences": found,
        "ended": len(found) < count,
    }
