"""The statements that change job definitions inside a caller's transaction, each recorded.

:meth:`Store.upsert_jobs <pgpulse.db.store.Store.upsert_jobs>` and
:meth:`Store.apply_plan <pgpulse.db.store.Store.apply_plan>` open the transaction, lock the rows
(:func:`lock_definitions`) and check who may write (:mod:`pgpulse.core.access`); these functions do
the writes and put each one in the audit trail (``pgpulse_job_history``, :mod:`pgpulse.core.audit`)
in the same transaction, so a change and its record commit or roll back together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgpulse.core.audit import Actor, definition_diff, definition_of_row, definition_of_spec
from pgpulse.core.definition import job_fields
from pgpulse.core.errors import InvalidInput
from pgpulse.core.jobs import JobSpec
from pgpulse.core.limits import first_in_window
from pgpulse.core.schedule import Schedule
from pgpulse.core.wording import did_you_mean
from pgpulse.sql import QUERIES

__all__ = [
    "Written",
    "check_chains",
    "check_definition",
    "delete_job_by_id",
    "lock_definitions",
    "lock_source",
    "rename_job",
    "write_definition",
]

Conn = psycopg.AsyncConnection[dict[str, Any]]
#: (tenant, name) of a job.
Key = tuple[str, str]


async def lock_source(conn: Conn, source: str) -> None:
    """Wait for, then hold until the transaction ends, the advisory lock of ``source``: the
    writers of one source (``apply``, ``crontab import --sync``) run one after the other."""
    await conn.execute(QUERIES["lock_source"], {"source": source})


async def lock_definitions(
    conn: Conn, keys: Sequence[Key], sources: Sequence[str] = ()
) -> dict[Key, dict[str, Any]]:
    """Lock and return the stored jobs named by ``keys`` and every job of ``sources``.

    Returns:
        ``{(tenant, name): row}``; each row holds ``id``, ``revision``, ``status`` and the
        definition (durations in seconds as ``*_s``, :func:`pgpulse.core.audit.definition_of_row`).
    """
    params = {
        "tenants": [tenant for tenant, _ in keys],
        "names": [name for _, name in keys],
        "sources": list(sources),
    }
    # Without sources, by name only: an upsert (the API's, the CLI's) never scans the table.
    query = "lock_definitions_and_sources" if sources else "lock_definitions"
    cur = await conn.execute(QUERIES[query], params)
    return {(row["tenant"], row["name"]): row for row in await cur.fetchall()}


def start_of(
    spec: JobSpec, current: dict[str, Any] | None, clock: datetime
) -> tuple[Schedule, datetime, datetime, str]:
    """Where ``spec``'s job starts if its occurrences are (re)set at ``clock``: its schedule,
    first occurrence (:func:`~pgpulse.core.limits.first_in_window`), interval anchor and status
    (``completed`` when its window holds no occurrence). The statement uses them only for a
    new job or a changed schedule or window.

    Args:
        spec: the definition.
        current: the job's locked row (:func:`lock_definitions`), ``None`` for a new job.
        clock: the database's now (UTC instant).

    Raises:
        InvalidInput: ``field="schedule"``: a new (or newly given) one-off ``@at`` whose instant
            is not after the database's now, unless ``catch_up`` (backfill or coalesce) says
            to run it.
    """
    schedule = spec.parsed_schedule()
    anchor = clock
    if schedule.kind == "interval" and spec.not_before is not None and spec.not_before > clock:
        anchor = spec.not_before
    same = current is not None and (current["schedule"], current["timezone"]) == (
        spec.schedule,
        spec.timezone,
    )
    if same and current is not None and current.get("anchor_at") is not None:
        # the statement keeps the stored anchor of an unchanged schedule: an @every job set
        # going again (a window extended, max_runs raised) stays on its own grid
        anchor = current["anchor_at"]
    first = first_in_window(schedule, now=clock, anchor=anchor, not_before=spec.not_before)
    status = "idle"
    if first is None:  # a one-off whose instant is not after now, or before not_before
        assert schedule.at is not None
        first = schedule.at
        fresh = current is None or (current["schedule"], current["timezone"]) != (
            spec.schedule,
            spec.timezone,
        )
        if schedule.at > clock:  # before not_before: never in the window
            status = "completed"
        elif fresh and spec.catch_up == "skip":
            raise InvalidInput(
                f"schedule {spec.schedule!r} of job {spec.name!r} is in the past (the database's "
                f"now is {clock.isoformat()}); to run it anyway, give catch_up backfill or "
                "coalesce",
                field="schedule",
                value=spec.schedule,
            )
    if spec.not_after is not None and first > spec.not_after:
        status = "completed"
    return schedule, first, anchor, status


async def check_definition(
    conn: Conn, spec: JobSpec, current: dict[str, Any] | None, clock: datetime
) -> None:
    """Refuse ``spec`` before anything is written if it needs the database to be judged: a
    calendar its tenant does not have, or a one-off already past (:func:`start_of`). The
    calendars it names are locked ``FOR SHARE`` until the transaction ends, so none of them is
    deleted before the job is written.

    Args:
        conn: a connection inside the writing transaction.
        spec: the definition about to be written.
        current: the job's locked row, ``None`` for a new job.
        clock: the database's now (UTC instant).

    Raises:
        InvalidInput: ``field="calendars"`` (an unknown calendar) or ``field="schedule"``.
    """
    if spec.calendars:
        cur = await conn.execute(
            QUERIES["calendars_of_tenant"], {"tenant": spec.tenant, "names": list(spec.calendars)}
        )
        found = {row["name"] for row in await cur.fetchall()}
        missing = [name for name in spec.calendars if name not in found]
        if missing:
            # only on a refusal: the tenant's calendars, for the nearest name to a typo
            cur = await conn.execute(QUERIES["list_calendars"], {"tenant": spec.tenant})
            near = did_you_mean(missing[0], [row["name"] for row in await cur.fetchall()])
            raise InvalidInput(
                f"calendar {missing[0]!r} of job {spec.name!r} does not exist in tenant "
                f"{spec.tenant!r}{near} (create it with: pgpulse calendar set {missing[0]} ...)",
                field="calendars",
                value=missing[0],
            )
    if current is None or definition_diff(definition_of_row(current), definition_of_spec(spec)):
        start_of(spec, current, clock)


async def check_chains(
    conn: Conn, specs: Sequence[JobSpec], created: Sequence[JobSpec] = ()
) -> None:
    """Refuse the chains the written ``specs`` make, in their writing transaction and after
    their writes (an upstream written in the same batch counts): an ``after`` naming a job
    its tenant does not have, or a cycle of ``after`` edges through one of them
    (docs/chains.md). Per tenant it first takes the tenant's chain lock (``lock_chains``,
    held to the end of the transaction), so two writers adding the two edges of a cycle at once
    are judged one after the other. Marks the upstreams as followed (``has_downstreams``), and
    the ``created`` jobs that others already follow (one deleted and created again). A write
    that creates no job and whose specs have no ``after`` costs nothing.

    Raises:
        InvalidInput: ``field="after"``, naming the unknown job or the cycle (the caller's
            transaction rolls back: nothing is written).
    """
    by_tenant: dict[str, list[str]] = {}
    for spec in specs:
        if spec.after:
            by_tenant.setdefault(spec.tenant, []).append(spec.name)
    born: dict[str, list[str]] = {}
    for spec in created:
        born.setdefault(spec.tenant, []).append(spec.name)
    for tenant in sorted(by_tenant.keys() | born.keys()):
        await conn.execute(QUERIES["lock_chains"], {"tenant": tenant})
        if tenant in born:
            await conn.execute(QUERIES["mark_followed"], {"tenant": tenant, "names": born[tenant]})
        names = by_tenant.get(tenant)
        if not names:
            continue
        cur = await conn.execute(QUERIES["check_chains"], {"tenant": tenant, "names": names})
        row = await cur.fetchone()
        assert row is not None
        if row["unknown"]:
            follower = next(s.name for s in specs if set(s.after) & set(row["unknown"]))
            raise InvalidInput(
                f"after names job {row['unknown'][0]!r}, which tenant {tenant!r} does not have "
                f"(job {follower!r})",
                field="after",
                value=row["unknown"][0],
            )
        if row["cycle"]:
            # the path runs from a job to one it follows: print it upstream first
            cycle = " → ".join(reversed(row["cycle"]))
            raise InvalidInput(
                f"after would make a cycle: {cycle}", field="after", value=row["cycle"][0]
            )


@dataclass(frozen=True, slots=True)
class Written:
    """What :func:`write_definition` did.

    Attributes:
        job_id: the job's id.
        created: whether the job is new.
        changes: the fields that changed, ``{"field": [old, new]}``; empty: nothing written.
    """

    job_id: int
    created: bool
    changes: dict[str, list[Any]]


async def write_definition(
    conn: Conn,
    spec: JobSpec,
    current: dict[str, Any] | None,
    *,
    clock: datetime,
    actor: Actor,
    now: datetime | None = None,
    extra_changes: dict[str, list[Any]] | None = None,
) -> Written | None:
    """Create or update ``spec``'s job, unless its stored definition is the same; record it.

    A new job, or one whose schedule, time zone or window changed, holds its first occurrence
    in its window after ``clock`` (:func:`start_of`); an update is a new revision. A
    definition equal to the stored one writes nothing (no revision, no audit row), so
    re-applying a file or re-importing a crontab changes nothing.

    Args:
        conn: a connection inside the caller's transaction, where ``current`` is locked.
        spec: the definition to write.
        current: the job's locked row (:func:`lock_definitions`), or ``None`` for a new job.
        clock: the database's now, read in this transaction (UTC instant).
        actor: who writes (recorded with the definition's own source).
        now: the audit row's instant, from tests only (``None``: the database's now).
        extra_changes: recorded with the definition's changes (a sync's rename).

    Returns:
        A :class:`Written`, or ``None`` when the job was deleted between the lookup and the
        update (the caller tries its transaction again).
    """
    changes = definition_diff(
        None if current is None else definition_of_row(current), definition_of_spec(spec)
    )
    changes = {**(extra_changes or {}), **changes}
    if current is not None and not changes:
        return Written(current["id"], False, {})
    schedule, first, anchor, status = start_of(spec, current, clock)
    cur = await conn.execute(
        QUERIES["upsert_job"],
        {
            **definition_params(spec),
            "schedule_kind": schedule.kind,
            "status": status,
            "anchor_at": anchor,
            "scheduled_for": first,
        },
    )
    row = await cur.fetchone()
    if row is None:
        return None
    await _record(conn, row["id"], spec.tenant, spec.name, row, spec.source, actor, changes, now)
    return Written(row["id"], row["created"], changes)


async def _record(
    conn: Conn,
    job_id: int,
    tenant: str,
    name: str,
    row: dict[str, Any],
    source: str,
    actor: Actor,
    changes: dict[str, list[Any]],
    now: datetime | None,
) -> None:
    await conn.execute(
        QUERIES["record_change"],
        {
            "job_id": job_id,
            "tenant": tenant,
            "name": name,
            "now": now,
            "action": "create" if row["created"] else "update",
            "source": source,
            "actor": actor.name,
            "revision": row["revision"],
            "changes": Jsonb(changes),
        },
    )


async def rename_job(conn: Conn, job_id: int, new_name: str) -> None:
    """Give job ``job_id`` the name ``new_name`` (its id and history stay; the caller records
    the rename with the update it belongs to)."""
    await conn.execute(QUERIES["rename_job"], {"id": job_id, "new_name": new_name})


async def delete_job_by_id(
    conn: Conn, job_id: int, *, actor: Actor, source: str, now: datetime | None = None
) -> bool:
    """Delete job ``job_id`` (its runs go with it; its audit trail stays) and record it.

    Returns:
        Whether the job existed.
    """
    cur = await conn.execute(
        QUERIES["delete_job"],
        {
            "id": job_id,
            "tenant": None,
            "name": None,
            "source": source,
            "actor": actor.name,
            "now": now,
            # a prune deletes its own source's jobs, whose every write was checked already
            "shell_allowed": True,
        },
    )
    return await cur.fetchone() is not None


def definition_params(spec: JobSpec) -> dict[str, Any]:
    """The parameters of ``upsert_job`` that hold ``spec``'s stored fields: ``tenant`` and
    ``name``, and ``definition``, the other columns of the model
    (:func:`pgpulse.core.definition.job_fields`) as one JSON object by column, which the
    statement reads as a row of ``pgpulse_jobs`` (``jsonb_populate_record``: each value
    converted by its column's type, so a new column does not lengthen the statement). Values
    as the columns' input reads them: durations as seconds, instants as ISO 8601 text, names
    as a list."""
    definition: dict[str, Any] = {}
    for entry in job_fields(JobSpec):
        if entry.column is None or entry.identity:
            continue
        value = getattr(spec, entry.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif entry.kind == "names":
            value = list(value)
        definition[entry.column] = value
    return {"tenant": spec.tenant, "name": spec.name, "definition": Jsonb(definition)}
