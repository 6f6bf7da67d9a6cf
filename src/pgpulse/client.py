"""A user's client: what a person (or a script) does with Pulse's jobs, runs and calendars.

    async with pgpulse.connect("postgresql://pulse@db/pulse") as client:
        await client.add_job("weekly", schedule="0 9 * * mon", handler="reports.send")
        await client.pause("weekly", until="2h", reason="deploy")
        for run in await client.runs("weekly", limit=5):
            print(run.scheduled_for, run.outcome)

:func:`connect` returns a :class:`Client` of one tenant; ``async with`` opens its connection
pool (migrating the schema first, as a node does) and closes it. Each method is the command
line's operation of the same intent (``job create``, ``job pause``, ``job backfill``,
``calendar set``...), with the same validation and the same one-line refusals: a
:class:`~pgpulse.core.errors.PulseError` naming the ``field`` and the ``value``, nothing written.
The client only delegates — to :class:`~pgpulse.db.store.Store`,
:class:`~pgpulse.db.run_control.RunControl` and the readers the API shows jobs with — and offers
nothing of a node's (heartbeats, claims, leases). Instants are aware datetimes (the database's
are UTC); durations are seconds. Writes are recorded in the audit trail as source ``python``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, overload

from pgpulse.app import connect as open_store
from pgpulse.core.audit import definition_of_row
from pgpulse.core.calendars import ExclusionCalendar, from_definitions
from pgpulse.core.definition import job_fields
from pgpulse.core.errors import InvalidInput, JobNotFound
from pgpulse.core.jobs import JobSpec, check_name
from pgpulse.core.limits import pause_until
from pgpulse.core.skips import Skip
from pgpulse.core.wording import given
from pgpulse.db.pausing import Paused
from pgpulse.db.run_control import BackfillPlan, RunControl, Triggered
from pgpulse.db.store import Store

__all__ = ["Client", "Job", "Run", "connect"]

#: How an http job's private target is allowed, as a refusal names it.
ALLOW_PRIVATE = "allow_private_target=True"


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the database holds it now (its whole definition: :meth:`Client.definition`).

    Attributes:
        id: the job's id.
        tenant, name: what identifies it.
        schedule, timezone, handler: its schedule expression, IANA zone and handler.
        status: ``idle``, ``running``, ``paused``, ``failed`` or ``completed``.
        scheduled_for: the occurrence it holds (UTC): the next one, the running one, or, once
            ``completed``, its last.
        paused_until: when a pause ends by itself (``None``: not paused, or until resumed).
        pause_reason: why it was paused.
        pause_requested: it runs, and pauses when its run ends.
        last_outcome, last_error, last_finished_at: its latest run's end.
        runs_done: runs counted against ``max_runs``.
        failures: consecutive failed runs (against ``auto_pause_after``).
        calendars: its exclusion calendars' names.
    """

    id: int
    tenant: str
    name: str
    schedule: str
    timezone: str
    handler: str
    status: str
    scheduled_for: datetime
    paused_until: datetime | None
    pause_reason: str | None
    pause_requested: bool
    last_outcome: str | None
    last_error: str | None
    last_finished_at: datetime | None
    runs_done: int
    failures: int
    calendars: tuple[str, ...]

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> Job:
        """The job of a store's row (``list_jobs``, ``get_job``), its fields by column name."""
        return _of_row(
            cls,
            row,
            pause_requested=bool(row["pause_requested"]),
            runs_done=row["runs_done"] or 0,
            failures=row["failures"] or 0,
            calendars=tuple(row["calendars"] or ()),
        )


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a job, as ``pgpulse runs`` lists it.

    Attributes:
        id: the run's id.
        tenant, name: its job.
        kind: ``scheduled``, ``trigger`` or ``backfill``.
        scheduled_for: its occurrence (UTC); a skipped row stands for those from it through
            ``last_scheduled_for`` (``occurrences`` of them).
        outcome: ``running``, ``retrying``, ``succeeded``, ``failed``, ``skipped``, ``fenced``
            or ``cancelled``.
        attempts: attempts so far; ``node_id``: the latest attempt's node.
        started_at, finished_at: the latest attempt's start and the run's end (``None``: not
            yet).
        duration: seconds of the latest attempt (``None`` while it runs).
        lag: seconds from the occurrence to its first attempt's start (``None`` for a
            backfill's run, or one not started).
        error, output: what the latest attempt recorded.
        revision: the definition's revision it ran under.
        attempt_log: every attempt, first to latest (:func:`pgpulse.db.store.attempt_log`).
    """

    id: int
    tenant: str
    name: str
    kind: str
    scheduled_for: datetime
    last_scheduled_for: datetime
    occurrences: int
    outcome: str
    attempts: int
    node_id: str | None
    started_at: datetime | None
    finished_at: datetime | None
    duration: float | None
    lag: float | None
    error: str | None
    output: str | None
    revision: int
    attempt_log: tuple[dict[str, Any], ...]

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> Run:
        """The run of a row of :meth:`Store.list_runs <pgpulse.db.store.Store.list_runs>`, its
        fields by column name."""
        return _of_row(
            cls,
            row,
            occurrences=row["occurrences"] or 1,
            attempt_log=tuple(row["attempt_log"]),
        )


#: The row types :func:`_of_row` builds.
_Row = TypeVar("_Row", "Job", "Run")


def _of_row(cls: type[_Row], row: Mapping[str, Any], **normalised: Any) -> _Row:
    """A ``cls`` of ``row``: each field the column of its name, unless ``normalised`` gives it.

    Raises:
        KeyError: the row lacks a field's column (the statement and the type disagree).
    """
    values = {field.name: row[field.name] for field in dataclasses.fields(cls)}
    return cls(**{**values, **normalised})


def connect(
    database_url: str | None = None,
    *,
    tenant: str = "default",
    data_dir: Path | None = None,
    read_url: str | None = None,
    application_name: str = "pgpulse",
    max_size: int = 4,
    migrate: bool = True,
) -> Client:
    """A :class:`Client` of ``tenant`` on a database; ``async with`` opens and closes it.

    Args:
        database_url: a DSN; ``None`` starts (or joins) the embedded PostgreSQL in
            ``data_dir`` (the ``embedded`` extra).
        tenant: the tenant whose jobs and calendars the client reads and writes.
        data_dir: the embedded server's data folder (default: :mod:`pgpulse.db.embedded`).
        read_url: a read replica's DSN for the lists (:meth:`Client.jobs`, :meth:`Client.runs`);
            ``None``: everything on ``database_url``.
        application_name: shown in ``pg_stat_activity``.
        max_size: connections in the pool.
        migrate: apply pending migrations when opened (as a node does); ``False``: refuse a
            database without the current schema instead, writing nothing.

    Raises:
        InvalidInput: ``field="tenant"``: no tenant can have that name (nothing is opened).
    """
    return Client(
        database_url,
        tenant=tenant,
        data_dir=data_dir,
        read_url=read_url,
        application_name=application_name,
        max_size=max_size,
        migrate=migrate,
    )


class Client:
    """The operations a user performs on one tenant's jobs, runs and calendars (module
    docstring). Made by :func:`connect`; use it inside ``async with``, or call :meth:`open` and
    :meth:`close` (a web application's lifespan). A method called while it is closed raises
    :class:`RuntimeError`.

    Every method may also raise :class:`~pgpulse.core.errors.DatabaseUnavailable` or the driver's
    error when the database fails; a refused input raises before anything is written.
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        tenant: str = "default",
        data_dir: Path | None = None,
        read_url: str | None = None,
        application_name: str = "pgpulse",
        max_size: int = 4,
        migrate: bool = True,
    ) -> None:
        #: The tenant of every job and calendar this client names.
        self.tenant = check_name("tenant", tenant)
        self._options: dict[str, Any] = {
            "database_url": database_url,
            "data_dir": data_dir,
            "read_url": read_url,
            "application_name": application_name,
            "max_size": max_size,
            "migrate": migrate,
            "require_schema": not migrate,
            "heal": True,  # a client may live as long as its application
        }
        self._exit: contextlib.AsyncExitStack | None = None
        self._opened: Store | None = None

    # -- opening -----------------------------------------------------------------------------

    async def open(self) -> Client:
        """Open the connection pool (migrating, unless ``migrate=False``); idempotent.

        Raises:
            DatabaseUnavailable: the database does not answer.
            SchemaMissing: ``migrate=False`` and the schema is absent or older.
        """
        if self._opened is not None:
            return self
        exit_stack = contextlib.AsyncExitStack()
        self._opened = await exit_stack.enter_async_context(open_store(**self._options))
        self._exit = exit_stack
        return self

    async def close(self) -> None:
        """Close the pool; idempotent."""
        exit_stack, self._exit, self._opened = self._exit, None, None
        if exit_stack is not None:
            await exit_stack.aclose()

    async def __aenter__(self) -> Client:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def _store(self) -> Store:
        if self._opened is None:
            raise RuntimeError(
                "the client is not open: use `async with pgpulse.connect(...) as client` "
                "(or await client.open())"
            )
        return self._opened

    # -- jobs --------------------------------------------------------------------------------

    async def jobs(self, *, all_tenants: bool = False) -> list[Job]:
        """The tenant's jobs (every tenant's with ``all_tenants``), by tenant and name."""
        rows = await self._store.list_jobs(None if all_tenants else self.tenant)
        return [Job.of_row(row) for row in rows]

    async def job(self, name: str) -> Job:
        """Job ``name`` as it is now.

        Raises:
            JobNotFound: no such job in the tenant.
            InvalidInput: ``field="name"``: no job can have that name.
        """
        return Job.of_row(await self._store.get_job(self.tenant, name))

    async def definition(self, name: str) -> JobSpec:
        """The whole stored definition of job ``name``, to change and write back with
        :meth:`put_job` (``dataclasses.replace(spec, timeout=60.0)``).

        Raises:
            JobNotFound: no such job in the tenant.
            InvalidInput: ``field="name"``: no job can have that name.
        """
        row = await self._store.get_job(self.tenant, name)
        fields = definition_of_row(row)  # durations in seconds; instants and names below
        for entry in job_fields(JobSpec):  # the model's: as the row holds them, not as text
            if entry.kind == "instant":
                fields[entry.name] = row[entry.name]
            elif entry.kind == "names":
                fields[entry.name] = tuple(row[entry.name] or ())
        return JobSpec(tenant=row["tenant"], name=row["name"], **fields)

    async def add_job(
        self,
        name: str,
        *,
        schedule: str,
        handler: str,
        payload: Mapping[str, Any] | str | None = None,
        allow_private_target: bool = False,
        extra_handlers: Collection[str] = (),
        **options: Any,
    ) -> Job:
        """Create job ``name``, or replace its definition (an upsert of the whole definition,
        as ``pgpulse job create``: an option left out takes its default again; the same
        definition twice writes nothing).

        Args:
            schedule: cron, ``@macro``, ``@every 5m`` or a one-off ``@at`` instant.
            handler: the handler's name (``shell``, ``http``, or your own).
            payload: the JSON object handed to the handler (or JSON text of one).
            allow_private_target: store an ``http`` job whose host is loopback, private or
                unresolvable, or that follows redirects (refused otherwise, as by the CLI).
            extra_handlers: handler names your code has that no node has registered yet
                (``app.handlers``).
            **options: any other field of :meth:`JobSpec.create` (``timezone``, ``catch_up``,
                ``max_attempts``, ``timeout`` and ``spread`` in seconds, ``not_before``,
                ``not_after``, ``calendars``, ``auto_pause_after``...).

        Returns:
            The job as written.

        Raises:
            InvalidSchedule, UnknownTimeZone, InvalidPayload, InvalidInput: a field refused
                (``field`` names it; ``tenant`` among ``options``: the client's own).
            UnknownHandler: no node, built-in or ``extra_handlers`` knows the handler.
        """
        if "tenant" in options:
            raise InvalidInput(
                f"tenant is the client's ({self.tenant!r}): pgpulse.connect(tenant=...)",
                field="tenant",
                value=options["tenant"],
            )
        spec = JobSpec.create(
            tenant=self.tenant,
            name=name,
            schedule=schedule,
            handler=handler,
            payload=payload,
            **options,
        )
        return await self.put_job(
            spec, allow_private_target=allow_private_target, extra_handlers=extra_handlers
        )

    async def put_job(
        self,
        spec: JobSpec,
        *,
        allow_private_target: bool = False,
        extra_handlers: Collection[str] = (),
    ) -> Job:
        """Create or replace the job ``spec`` defines (:meth:`add_job`'s upsert).

        Raises:
            InvalidInput: ``field="tenant"``: ``spec`` is of another tenant than the client's;
                ``field="payload.url"``: an ``http`` target not allowed (see :meth:`add_job`);
                a calendar the tenant does not have (``field="calendars"``); nothing written.
            UnknownHandler: no node, built-in or ``extra_handlers`` knows the handler.
        """
        if spec.tenant != self.tenant:
            raise InvalidInput(
                f"job {spec.name!r} is of tenant {spec.tenant!r}; this client's is {self.tenant!r}",
                field="tenant",
                value=spec.tenant,
            )
        if spec.handler == "http" and not allow_private_target:
            from pgpulse.core.policy import WebSettings, check_http_target  # no web framework

            await check_http_target(spec.payload, WebSettings(), allowed_flag=ALLOW_PRIVATE)
        await self._store.upsert_jobs([spec], extra_handlers=extra_handlers)
        return await self.job(spec.name)

    async def delete_job(self, name: str) -> None:
        """Delete job ``name`` and its run history (its audit trail stays). A node running it
        cancels the attempt (its writes change nothing).

        Raises:
            JobNotFound: no such job in the tenant.
        """
        await self._store.delete_job(self.tenant, name)

    async def history(self, name: str, *, limit: int = 50) -> list[dict[str, Any]]:
        """The audit trail of job ``name``, newest first (``pgpulse job history``): ``at``
        (UTC), ``action``, ``source``, ``actor``, ``revision``, ``changes``
        (``{"field": [old, new]}``). Empty for a name never recorded.

        Raises:
            InvalidInput: ``limit`` is not 1-10000 (``field="limit"``).
        """
        return await self._store.job_history(self.tenant, name, limit=_count("limit", limit))

    # -- run control -------------------------------------------------------------------------

    async def pause(
        self,
        name: str,
        *,
        until: datetime | str | None = None,
        reason: str | None = None,
        cancel: bool = False,
    ) -> Paused:
        """Pause job ``name`` (``pgpulse job pause``): it is not claimed until resumed. A
        running job pauses when its run ends; with ``cancel`` its run stops now. Pausing a
        paused job sets the ``until`` or ``reason`` given and keeps the other.

        Args:
            until: when it resumes by itself: an aware instant, or text as the CLI's
                ``--until`` takes it (a duration from the database's now, ``2h``, ``90m``,
                ``1d``; or ISO 8601, in the job's zone without an offset). ``None``: until
                :meth:`resume`.
            reason: why (at most 500 characters), shown wherever the status is.
            cancel: stop what the job runs now.

        Returns:
            What the pause did (:class:`~pgpulse.db.pausing.Paused`).

        Raises:
            JobNotFound: no such job in the tenant.
            InvalidInput: ``until`` is not after now or not an instant (``field="until"``),
                ``reason`` too long (``field="reason"``), the job is completed
                (``field="status"``); nothing changes.
        """
        store = self._store
        if isinstance(until, str):
            zone = (await store.get_job(self.tenant, name))["timezone"]
            until = pause_until(until, zone, await store.db_now())
        return await store.pause_job(self.tenant, name, until=until, reason=reason, cancel=cancel)

    async def resume(self, name: str, *, catch_up: str = "skip") -> bool:
        """Resume job ``name`` (``pgpulse job resume``); a requested pause is withdrawn.

        Args:
            catch_up: the occurrences inside the pause: ``skip`` (not these), ``once`` (run
                once, as the newest), ``backfill`` (run each, oldest first).

        Returns:
            ``True`` if it was resumed (or its requested pause withdrawn), ``False`` if it was
            not paused (nothing changes).

        Raises:
            JobNotFound: no such job in the tenant.
            InvalidInput: ``field="catch_up"``: not one of skip, once, backfill.
        """
        return await self._store.resume_job(self.tenant, name, catch_up=catch_up)

    @overload
    async def trigger(self, name: str, *, payload: None = None) -> datetime: ...

    @overload
    async def trigger(
        self, name: str, *, payload: Mapping[str, Any] | str, allow_private_target: bool = False
    ) -> Triggered: ...

    async def trigger(
        self,
        name: str,
        *,
        payload: Mapping[str, Any] | str | None = None,
        allow_private_target: bool = False,
    ) -> datetime | Triggered:
        """Run job ``name`` now, once (``pgpulse job trigger``).

        Without ``payload``: the idle job's own occurrence moves to now (its later occurrences
        stay); returns that occurrence (UTC), or an older one already due. With ``payload``
        (a JSON object, or JSON text of one, checked as the handler's payload): one extra
        occurrence now, beside whatever runs, with that payload (the job idle or running);
        returns it (:class:`~pgpulse.db.run_control.Triggered`: its run id and instant). An
        ``http`` payload's target is checked as :meth:`add_job` checks it.

        Raises:
            JobNotFound: no such job in the tenant.
            InvalidPayload: the payload is not one of the job's handler.
            InvalidInput: ``field="status"``: the job is not idle (without a payload), or is
                paused, failed or completed (with one); nothing is written.
        """
        store = self._store
        if payload is None:
            return await store.trigger_job(self.tenant, name)

        async def check_target(checked: dict[str, Any]) -> None:
            from pgpulse.core.policy import WebSettings, check_http_target  # no web framework

            if not allow_private_target:
                await check_http_target(checked, WebSettings(), allowed_flag=ALLOW_PRIVATE)

        return await RunControl(store.pool).trigger(
            self.tenant, name, payload, check_target=check_target
        )

    async def backfill(
        self,
        name: str,
        start: datetime,
        end: datetime,
        *,
        only: str | Iterable[str] = (),
        max_concurrency: int = 1,
        newest_first: bool = False,
        dry_run: bool = False,
    ) -> BackfillPlan:
        """Run each selected occurrence of job ``name`` from ``start`` to ``end`` (inclusive;
        naive instants are UTC) exactly once more, beside the live schedule (``pgpulse job
        backfill``): one batch of extra occurrences, kind ``backfill``.

        Args:
            only: ``missing`` (never ran, or skipped), ``failed``, both by default, or ``all``
                (succeeded ones too); one, or several.
            max_concurrency: most of them running at once (1-1000).
            newest_first: run the newest first.
            dry_run: write nothing; return what would run.

        Returns:
            The plan (:class:`~pgpulse.db.run_control.BackfillPlan`: every occurrence of the
            range with its status and whether it runs; ``batch_id`` ``None`` for a dry run or
            when nothing was selected).

        Raises:
            JobNotFound: no such job in the tenant.
            InvalidInput: ``end`` before ``start`` or in the future (``field="to"``), more than
                10,000 occurrences (``field="from"``), an unknown ``only``, ``max_concurrency``
                out of range, a completed job (``field="status"``); nothing is written.
        """
        return await RunControl(self._store.pool).backfill(
            self.tenant,
            name,
            start=start,
            end=end,
            only=(only,) if isinstance(only, str) else tuple(only),
            dry_run=dry_run,
            max_concurrency=max_concurrency,
            newest_first=newest_first,
        )

    async def skip(
        self,
        name: str,
        *,
        next: int | None = None,
        at: datetime | str | None = None,
        reason: str | None = None,
    ) -> list[Skip]:
        """Skip the next ``next`` occurrences of job ``name`` (1 when neither is given), or the
        one ``at``, without pausing it (``pgpulse job skip``): each is recorded ``skipped``,
        with who and why, when its time comes.

        Args:
            next: how many occurrences from the next one (1-100).
            at: one occurrence: an aware instant, or ISO 8601 text (the job's zone without an
                offset).
            reason: why (at most 500 characters).

        Returns:
            The occurrences listed to skip (:class:`~pgpulse.core.skips.Skip`), oldest first.

        Raises:
            JobNotFound: no such job in the tenant.
            InvalidInput: ``next`` out of range or given with ``at`` (``field="next"``), ``at``
                not an occurrence of the schedule or behind the next one (``field="at"``), a
                completed job (``field="status"``); nothing is written.
        """
        return await RunControl(self._store.pool).skip(
            self.tenant, name, count=next, at=at, reason=reason
        )

    async def unskip(self, name: str, *, at: datetime | str | None = None) -> list[Skip]:
        """Undo :meth:`skip` (``pgpulse job unskip``): the occurrence ``at`` (``None``: every
        listed one) runs as scheduled.

        Returns:
            The occurrences still listed to skip.

        Raises:
            JobNotFound: no such job in the tenant.
            InvalidInput: ``at`` is not listed (``field="at"``).
        """
        return await RunControl(self._store.pool).unskip(self.tenant, name, at=at)

    # -- reading -----------------------------------------------------------------------------

    async def runs(
        self, name: str | None = None, *, limit: int = 50, all_tenants: bool = False
    ) -> list[Run]:
        """Recent runs (of job ``name``, if given), the most recently claimed first, running
        ones included (``pgpulse runs``).

        Args:
            limit: at most this many (1-10000).
            all_tenants: every tenant's runs (of jobs named ``name`` in any tenant).

        Raises:
            JobNotFound: no job ``name`` (in the tenant, or in any with ``all_tenants``).
            InvalidInput: ``field="limit"`` out of range, or ``field="name"``.
        """
        store = self._store
        limit = _count("limit", limit)
        tenant = None if all_tenants else self.tenant
        if name is not None:
            if tenant is not None:
                await store.get_job(tenant, name)  # JobNotFound, or a name no job can have
            elif not await store.tenants_with_job_name(check_name("name", name)):
                raise JobNotFound(None, name)
        rows = await store.list_runs(tenant=tenant, name=name, limit=limit)
        return [Run.of_row(row) for row in rows]

    async def next_occurrences(self, name: str, count: int = 5) -> list[datetime]:
        """The next ``count`` (1-1000) occurrences job ``name`` will run, as ``pgpulse job
        show`` lists them: in the job's own time zone (aware), its exclusion calendars, active
        window, ``max_runs`` and a pause applied; fewer when it ends, none when completed.

        Raises:
            JobNotFound: no such job in the tenant.
            InvalidInput: ``field="count"`` out of range.
        """
        from pgpulse.web.reads import Reads  # the API's reading of a job: no web framework
        from pgpulse.web.service import upcoming

        count = _count("count", count, most=1000)
        store = self._store
        job_id = (await store.get_job(self.tenant, name))["id"]
        row = await Reads(store.reads).job(job_id, tenant=self.tenant)
        if row is None:  # deleted in between
            raise JobNotFound(self.tenant, name)
        return upcoming(row, count)

    # -- calendars ---------------------------------------------------------------------------

    async def calendars(self) -> list[ExclusionCalendar]:
        """The tenant's exclusion calendars, by name (which jobs use one: :attr:`Job.calendars`)."""
        return list(from_definitions(await self._store.list_calendars(self.tenant)))

    async def put_calendar(
        self,
        name: str,
        *,
        dates: Iterable[date | str] = (),
        country: str | None = None,
        subdivision: str | None = None,
    ) -> bool:
        """Create or replace calendar ``name`` (``pgpulse calendar set``): jobs that name it
        follow its dates from their next occurrence.

        Args:
            dates: excluded dates (``date`` or ``2026-12-24``), in each job's own zone.
            country: an ISO 3166-1 code whose public holidays are excluded (the ``calendars``
                extra).
            subdivision: one of the country's subdivisions.

        Returns:
            ``True`` if created, ``False`` if it replaced one.

        Raises:
            InvalidInput: ``field`` ``calendar.name``, ``calendar.dates``,
                ``calendar.country`` or ``calendar.subdivision``; nothing written.
        """
        calendar = ExclusionCalendar.create(
            name, dates=dates, country=country, subdivision=subdivision
        )
        return await self._store.put_calendar(self.tenant, calendar)

    async def delete_calendar(self, name: str) -> None:
        """Delete calendar ``name``.

        Raises:
            CalendarNotFound: no such calendar (``field="name"``).
            InvalidInput: ``field="calendar"``: jobs name it; nothing is deleted.
        """
        await self._store.delete_calendar(self.tenant, name)

    # -- limits of concurrency keys ----------------------------------------------------------

    async def limits(self) -> list[dict[str, Any]]:
        """The tenant's limits of concurrency keys by key (``pgpulse limit list``): ``key``,
        ``max_running``, ``running`` (now), ``jobs`` (naming the key), ``waiting`` (due)."""
        return await self._store.list_limits(self.tenant)

    async def set_limit(self, key: str, max_running: int) -> bool:
        """At most ``max_running`` occurrences of the tenant's jobs with concurrency key
        ``key`` run at once, across every node (``pgpulse limit set``; 1 is a mutex).

        Returns:
            ``True`` if created, ``False`` if it changed the limit.

        Raises:
            InvalidInput: ``field`` ``key`` or ``max_running``; nothing written.
        """
        return await self._store.set_limit(self.tenant, key, max_running)

    async def delete_limit(self, key: str) -> None:
        """Delete the limit of ``key``: its jobs are no longer limited.

        Raises:
            LimitNotFound: no such limit (``field="key"``).
        """
        await self._store.delete_limit(self.tenant, key)


def _count(field: str, value: int, *, most: int = 10_000) -> int:
    """``value`` if it is a whole number from 1 to ``most``; else InvalidInput naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidInput(
            f"{field} must be a whole number from 1 to {most}, got {given(value)}",
            field=field,
            value=value,
        )
    return value
