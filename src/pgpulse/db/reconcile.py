"""Making the stored jobs of whole sources match their definitions, in one transaction.

``pgpulse apply``, ``crontab import --sync`` and a node pruning its app's jobs come here
(:func:`reconcile`): each source is locked (an advisory lock, so two writers of one source run
one after the other and the second plans against what the first wrote), its jobs and the jobs
its definitions name are locked, a planner (:mod:`pgpulse.core.plan`,
:mod:`pgpulse.core.crontab_sync`) computes each source's :class:`~pgpulse.core.plan.Plan`, every
definition is checked against who may write it (:mod:`pgpulse.core.access`, docs/design.md
invariant 10), and then the plan is written — every step recorded in the audit trail — or, for a
dry run, nothing is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from pgpulse.core.access import OPERATOR, Writer, check_write
from pgpulse.core.audit import PYTHON_ACTOR, Actor
from pgpulse.core.errors import InvalidInput, PulseError
from pgpulse.core.jobs import JobSpec, check_handlers, unknown_handlers
from pgpulse.core.plan import Key, Plan
from pgpulse.db.writes import (
    check_chains,
    check_definition,
    delete_job_by_id,
    lock_definitions,
    lock_source,
    rename_job,
    write_definition,
)
from pgpulse.sql import QUERIES

if TYPE_CHECKING:
    from pgpulse.db.store import Store

__all__ = ["Declared", "Planner", "reconcile"]

#: Plans one source: (source, its specs, the locked rows by (tenant, name)) -> plan.
Planner = Callable[[str, Sequence[JobSpec], Mapping[Key, Mapping[str, Any]]], Plan]


class Declared(Protocol):
    """What a layer above declares with the jobs' definitions, planned and written in
    :func:`reconcile`'s transaction like their other fields (the alert rules:
    :class:`pgpulse.alerts.declared.DeclaredRules`)."""

    async def plan(
        self, conn: Any, plans: Sequence[Plan], *, clock: datetime, writer: Writer
    ) -> list[Plan]:
        """Check what is declared against the database (the rows are locked) and put its
        changes in the plans' steps; refuse (a :class:`~pgpulse.core.errors.PulseError`)
        before anything is written."""
        ...

    async def write(self, conn: Any, job_ids: Mapping[Key, int]) -> None:
        """Write it, after the definitions (``job_ids``: the kept jobs' ids, created ones
        too)."""
        ...


@contextmanager
def _about(spec: JobSpec) -> Iterator[None]:
    """A refusal raised inside is about ``spec``: its :attr:`~pgpulse.core.errors.PulseError.job`
    names it (``pgpulse apply`` turns that into file and line)."""
    try:
        yield
    except PulseError as exc:
        if exc.job is None:
            exc.job = (spec.tenant, spec.name)
        raise


def _check_unique(batches: Sequence[tuple[str, Sequence[JobSpec]]]) -> None:
    seen: dict[Key, str] = {}
    for source, specs in batches:
        for spec in specs:
            key = (spec.tenant, spec.name)
            if key in seen:
                where = "twice" if seen[key] == source else f"by {seen[key]} and {source}"
                with _about(spec):
                    raise InvalidInput(
                        f"job {spec.name!r} of tenant {spec.tenant!r} is defined {where}",
                        field="name",
                        value=spec.name,
                    )
            seen[key] = source


async def reconcile(
    store: Store,
    batches: Sequence[tuple[str, Sequence[JobSpec]]],
    planner: Planner,
    *,
    dry_run: bool = False,
    writer: Writer = OPERATOR,
    actor: Actor = PYTHON_ACTOR,
    extra_handlers: Collection[str] = (),
    rules: Declared | None = None,
    now: datetime | None = None,
) -> list[Plan]:
    """Plan each source of ``batches`` and, unless ``dry_run``, write every plan, all in one
    transaction.

    Locks: each source's advisory lock (in source order), then the rows of the source's jobs
    and of the jobs its specs name (id order), all until the end of the transaction. Writes
    run deletes first, then renames and updates, then creates, so a name freed by a delete can
    be taken in the same plan. A refusal anywhere writes nothing.

    Args:
        store: the store whose pool is used.
        batches: ``(source, specs)`` per source; the specs' own ``source`` should be it.
        planner: computes a source's plan from its specs and the locked rows.
        dry_run: compute and return the plans, write nothing (the writes are made and rolled
            back, so the refusals are the real run's).
        writer: who writes (:mod:`pgpulse.core.access`); the operator by default.
        actor: recorded in the audit trail with each change.
        extra_handlers: handler names known besides the built-in and registered ones.
        rules: the alert rules declared with jobs' definitions
            (:class:`pgpulse.alerts.declared.DeclaredRules`): each such job's own rules become
            exactly these, and their changes are in its step's ``changes`` (``alerts``).
        now: the audit rows' instant, from tests only.

    Returns:
        One plan per source, in ``batches`` order; once written, a ``create`` step's
        ``job_id`` is the created job's.

    Raises:
        InvalidInput: a job is defined twice (in one source or two), or a definition names a
            calendar its tenant does not have or is a one-off already past
            (:func:`pgpulse.db.writes.check_definition`), or a declared rule is refused
            (:class:`~pgpulse.alerts.declared.RuleRefused`); nothing is written.
        UnknownHandler: a spec's handler is not known.
        Forbidden: ``writer`` may not write a definition of the plan.

        Each of these names the definition it refuses in its ``job``.
    """
    _check_unique(batches)
    every = [spec for _, specs in batches for spec in specs]
    known = set(extra_handlers)
    if unknown_handlers(every, known):
        known |= await store.registered_handlers()
    for spec in every:
        with _about(spec):
            check_handlers([spec], known)
    sources = sorted({source for source, _ in batches})
    async with store.pool.connection() as conn, conn.transaction():
        for source in sources:
            await lock_source(conn, source)
        clock = now or (await (await conn.execute(QUERIES["now"])).fetchone())["db_now"]  # type: ignore[index]
        stored = await lock_definitions(conn, [(s.tenant, s.name) for s in every], sources)
        plans = [planner(source, specs, stored) for source, specs in batches]
        if rules is not None:
            plans = await rules.plan(conn, plans, clock=clock, writer=writer)
        by_id = {row["id"]: row for row in stored.values()}
        _check_writes(plans, by_id, writer)
        for plan in plans:  # calendars exist, a one-off is not past: before any write
            for step in plan.steps:
                if step.spec is not None and step.action in ("create", "update"):
                    row = by_id.get(step.job_id) if step.job_id is not None else None
                    with _about(step.spec):
                        await check_definition(
                            conn, step.spec, None if row is None else dict(row), clock
                        )
        # A dry run writes too, and rolls its writes back: the chains of the written followers
        # are judged on the written rows (a cycle through jobs of the plan, an upstream it
        # deletes), so a dry run refuses what the real one would.
        async with conn.transaction(force_rollback=dry_run):
            ids = await _write(conn, plans, by_id, clock=clock, actor=actor, now=now)
            steps = [s for p in plans for s in p.steps if s.spec is not None]
            await check_chains(
                conn,
                [s.spec for s in steps if s.spec is not None and s.spec.after],
                [s.spec for s in steps if s.spec is not None and s.action == "create"],
            )
            if dry_run:
                return plans
            if rules is not None:
                await rules.write(conn, ids)
        plans = [_with_created_ids(plan, ids) for plan in plans]
    return plans


def _with_created_ids(plan: Plan, ids: Mapping[Key, int]) -> Plan:
    """``plan`` with each written ``create`` step's ``job_id`` the id of the job it created
    (``ids``: by (tenant, name), from :func:`_write`), so a report of it names the job."""
    steps = [
        replace(step, job_id=ids.get((step.tenant, step.name)))
        if step.action == "create" and step.job_id is None
        else step
        for step in plan.steps
    ]
    return replace(plan, steps=steps)


def _check_writes(
    plans: Sequence[Plan], by_id: Mapping[int, Mapping[str, Any]], writer: Writer
) -> None:
    """Refuse the plans unless ``writer`` may write each created or updated definition over
    the job it replaces (docs/design.md, invariant 10)."""
    for plan in plans:
        for step in plan.steps:
            if step.spec is not None and step.action in ("create", "update"):
                row = by_id.get(step.job_id) if step.job_id is not None else None
                with _about(step.spec):
                    check_write(writer, step.spec, None if row is None else row["handler"])


async def _write(
    conn: Any,
    plans: Sequence[Plan],
    by_id: Mapping[int, Mapping[str, Any]],
    *,
    clock: datetime,
    actor: Actor,
    now: datetime | None,
) -> dict[Key, int]:
    """Write the plans: deletes, then renames and updates, then creates. Returns the id of
    every job a plan keeps (created, updated or unchanged), by (tenant, name)."""
    steps = [(plan.source, step) for plan in plans for step in plan.steps]
    ids = {
        (step.tenant, step.name): step.job_id
        for _, step in steps
        if step.action == "unchanged" and step.job_id is not None
    }
    for source, step in steps:
        if step.action == "delete" and step.job_id is not None:
            await delete_job_by_id(conn, step.job_id, actor=actor, source=source, now=now)
    for action in ("update", "create"):
        for _, step in steps:
            if step.action != action or step.spec is None:
                continue
            row = by_id.get(step.job_id) if step.job_id is not None else None
            extra: dict[str, list[Any]] = {}
            if step.rename_from is not None and step.job_id is not None:
                await rename_job(conn, step.job_id, step.spec.name)
                extra = {"name": [step.rename_from, step.spec.name]}
            written = await write_definition(
                conn,
                step.spec,
                None if row is None else dict(row),
                clock=clock,
                actor=actor,
                now=now,
                extra_changes=extra,
            )
            if written is None:  # impossible while the row is locked
                raise RuntimeError(f"job {step.name!r} vanished while locked")
            ids[(step.tenant, step.name)] = written.job_id
    return ids
