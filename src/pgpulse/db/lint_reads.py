"""The database reads of ``pgpulse lint`` and of the dry runs' 30-day diff (statements in
``sql/lint.sql``): definitions, what recent runs show, the handlers of live nodes, the tenants'
calendars and where stored jobs stand. Read only; each statement is bounded by the jobs asked
about (the observed percentiles read at most ``last`` runs per job through an index), never by
history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgpulse.core.audit import definition_of_row
from pgpulse.core.calendars import ExclusionCalendar, from_definitions
from pgpulse.core.errors import PulseError
from pgpulse.core.jobs import JobSpec
from pgpulse.core.lint import Facts, Observed
from pgpulse.core.month_diff import Pending
from pgpulse.sql import load_statements

if TYPE_CHECKING:
    from pgpulse.db.store import Store

__all__ = [
    "LAST_RUNS",
    "lint_facts",
    "spec_of_row",
    "stored_jobs",
    "stored_specs",
    "tenant_calendars",
]

QUERIES = load_statements("lint.sql")
#: The runs per job the observed percentiles are over.
LAST_RUNS = 200


async def _rows(
    store: Store, name: str, params: dict[str, Any], *, primary: bool = False
) -> list[dict[str, Any]]:
    """Statement ``name``'s rows, read where people's reads go (a replica, when configured),
    or on the primary (what a plan just computed there is compared with)."""
    async with (store.pool if primary else store.reads).connection() as conn:
        cur = await conn.execute(QUERIES[name], params)
        return list(await cur.fetchall())


def spec_of_row(row: dict[str, Any]) -> JobSpec:
    """A stored job's definition as a :class:`JobSpec` (validated again, as written).

    Raises:
        InvalidInput: the stored definition no longer passes this version's checks.
    """
    fields = definition_of_row(row)
    return JobSpec.create(tenant=row["tenant"], name=row["name"], **fields)


async def stored_specs(store: Store, tenant: str | None) -> tuple[list[JobSpec], list[str]]:
    """The definitions of ``tenant``'s jobs (``None``: every tenant's), by tenant and name, and
    a note for each stored definition this version refuses (left out)."""
    specs: list[JobSpec] = []
    notes: list[str] = []
    for row in await _rows(store, "lint_definitions", {"tenant": tenant}):
        try:
            specs.append(spec_of_row(row))
        except PulseError as exc:
            notes.append(f"job {row['tenant']}/{row['name']} left out: {exc}")
    return specs, notes


async def tenant_calendars(
    store: Store, tenants: Iterable[str]
) -> dict[str, tuple[ExclusionCalendar, ...]]:
    """Each of ``tenants``' calendars."""
    out: dict[str, tuple[ExclusionCalendar, ...]] = {}
    for tenant in sorted(set(tenants)):
        out[tenant] = from_definitions(await store.list_calendars(tenant))
    return out


async def lint_facts(
    store: Store, specs: Sequence[JobSpec], *, ttl: float, last: int = LAST_RUNS
) -> Facts:
    """What the database knows about ``specs``' jobs (by tenant and name: a file's jobs match
    the stored ones they would update): their runs' percentiles over the last ``last`` runs,
    the handlers of nodes live by ``ttl`` seconds (for a node row without its own), their
    tenants' calendars, which of the jobs their ``after`` lists name exist, and the database's
    now."""
    observed = await _rows(
        store,
        "lint_observed",
        {
            "tenants": [s.tenant for s in specs],
            "names": [s.name for s in specs],
            "last": last,
        },
    )
    handlers = await _rows(store, "live_handlers", {"ttl": ttl})
    upstreams = [(s.tenant, name) for s in specs for name in s.after]
    stored = (
        await _rows(
            store,
            "lint_stored",
            {"tenants": [t for t, _ in upstreams], "names": [n for _, n in upstreams]},
        )
        if upstreams
        else []
    )
    return Facts(
        now=await store.db_now(),
        live_handlers=frozenset(row["handler"] for row in handlers),
        calendars=await tenant_calendars(store, (s.tenant for s in specs)),
        observed={
            (row["tenant"], row["name"]): Observed(row["runs"], row["lag_p99"], row["duration_p95"])
            for row in observed
        },
        stored=frozenset((row["tenant"], row["name"]) for row in stored),
    )


async def stored_jobs(
    store: Store, ids: Sequence[int]
) -> tuple[datetime, dict[int, tuple[JobSpec | None, Pending]]]:
    """The database's now, and for each of the jobs ``ids`` its stored definition (``None``
    when this version refuses it) and where it stands, read on the primary, where the dry
    run's plan was made."""
    now = await store.db_now()
    out: dict[int, tuple[JobSpec | None, Pending]] = {}
    if not ids:
        return now, out
    for row in await _rows(store, "dry_run_jobs", {"ids": list(ids)}, primary=True):
        try:
            spec: JobSpec | None = spec_of_row(row)
        except PulseError:
            spec = None
        out[row["id"]] = (spec, Pending(row["scheduled_for"], row["anchor_at"], row["status"]))
    return now, out
