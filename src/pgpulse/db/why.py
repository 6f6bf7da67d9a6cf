"""Read what Pulse stores about one job around an instant, for ``pgpulse why``
(:func:`read_facts`), and build its trace (:func:`why`).

Four statements of ``sql/why.sql``, each an index lookup bounded by a LIMIT (docs/design.md,
invariant 8: the cost does not grow with the job's history), sent in one read-only
repeatable-read transaction so they see one instant of the database. The trace itself is
:func:`pgpulse.core.why.build_trace`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgpulse.core.calendars import from_definitions
from pgpulse.core.errors import JobNotFound
from pgpulse.core.jobs import check_key
from pgpulse.core.why import Trace, WhyFacts, build_trace
from pgpulse.core.zones import check_instant_range, utc_if_naive
from pgpulse.db.registry import DEFAULT_NODE_TTL
from pgpulse.db.store import attempt_log
from pgpulse.sql import load_statements

if TYPE_CHECKING:
    from pgpulse.db.database import AsyncConn
    from pgpulse.db.store import Store

QUERIES = load_statements("why.sql")

#: How many of a job's newest audit rows a trace reads (pauses, resumes, schedule changes).
HISTORY_ROWS = 200


async def why(
    store: Store,
    *,
    tenant: str | None = None,
    name: str | None = None,
    job_id: int | None = None,
    at: datetime | None = None,
    scope: str | None = None,
    ttl: float = DEFAULT_NODE_TTL,
    now: datetime | None = None,
) -> Trace:
    """The trace of job (``tenant``, ``name``)'s, or job ``job_id``'s, occurrence at or nearest
    ``at`` (:func:`pgpulse.core.why.build_trace`).

    Args:
        store: the store (read on its primary pool: a trace right after an event must see it).
        tenant, name: the job by name (with ``job_id`` ``None``).
        job_id: the job by id (the API's address), of tenant ``scope`` unless that is ``None``.
        at: the instant asked about (naive: UTC); ``None``: the database's now.
        scope: only a job of this tenant (a tenant token's); ``None``: any.
        ttl: seconds of silence after which a node that registered none is not live.
        now: tests only: the instant the database's clock is taken to be.

    Raises:
        InvalidInput: a malformed tenant or name, or ``at`` outside the instants Pulse stores.
        JobNotFound: no such job now and no audit trail of one (by name), or a job id not
            visible to ``scope``.
    """
    if job_id is None:
        assert tenant is not None and name is not None
        check_key(tenant, name)
    if at is not None:  # naive: UTC, as every instant that names stored history
        at = check_instant_range("at", utc_if_naive(at))
    async with store.pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        facts = await read_facts(
            conn, tenant=tenant, name=name, job_id=job_id, at=at, scope=scope, ttl=ttl, now=now
        )
    if facts.job is None and (job_id is not None or not facts.history):
        raise JobNotFound(scope if job_id is not None else tenant, name or str(job_id))
    return build_trace(facts)


async def read_facts(
    conn: AsyncConn,
    *,
    tenant: str | None,
    name: str | None,
    job_id: int | None,
    at: datetime | None,
    scope: str | None,
    ttl: float,
    now: datetime | None,
) -> WhyFacts:
    """The :class:`~pgpulse.core.why.WhyFacts` of one job around ``at`` (see :func:`why`), read
    on ``conn`` (the caller's transaction)."""
    job = await _one(
        conn, "why_job", {"now": now, "id": job_id, "tenant": tenant, "name": name, "scope": scope}
    )
    db_now: datetime = job.pop("now")
    instant = at or db_now
    if job["id"] is None:
        history = await _rows(
            conn,
            "why_history_of_job" if job_id is not None else "why_history_of_name",
            {"job_id": job_id, "scope": scope, "tenant": tenant, "name": name},
        )
        return WhyFacts(instant, db_now, tenant or scope or "", name or "", None, history=history)
    runs = await _rows(conn, "why_runs", {"job_id": job["id"], "at": instant})
    for run in runs:
        run["attempt_log"] = attempt_log(run)
    history = await _rows(conn, "why_history_of_job", {"job_id": job["id"], "scope": None})
    live = await _one(
        conn,
        "why_live_handlers",
        {"now": now, "ttl": ttl, "tenant": job["tenant"], "calendars": job["calendars"]},
    )
    return WhyFacts(
        instant,
        db_now,
        job["tenant"],
        job["name"],
        job,
        runs=runs,
        history=history,
        history_complete=len(history) < HISTORY_ROWS,
        live_handlers=frozenset(live["handlers"]),
        calendars=from_definitions(live["calendars"]),
    )


async def _rows(conn: AsyncConn, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = await conn.execute(QUERIES[name], {"limit": HISTORY_ROWS, **params})
    return list(await cur.fetchall())


async def _one(conn: AsyncConn, name: str, params: dict[str, Any]) -> dict[str, Any]:
    [row] = await _rows(conn, name, params)
    return row
