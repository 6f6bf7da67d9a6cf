"""Reads of the HTTP edge: paginated, filtered, tenant-scoped (statements in ``sql/web.sql``).

Every method takes ``tenant``: a tenant token passes its own, an admin token ``None`` (every
tenant). A row of another tenant is not found, exactly like a row that does not exist. Pages use
keyset cursors (stable under inserts, cheap at any depth): jobs by ``(tenant, name)``, runs by
descending id.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pgpulse.core.definition import job_fields
from pgpulse.core.errors import InvalidInput
from pgpulse.core.jobs import JobSpec
from pgpulse.core.skips import stored
from pgpulse.db.database import ConnectionSource
from pgpulse.db.store import attempt_log
from pgpulse.sql import load_statements

QUERIES = load_statements("web.sql")

#: The definition columns a job read shows: the model's stored fields but ``meta``.
_SHOWN_DEFINITION = tuple(
    entry.column for entry in job_fields(JobSpec) if entry.column not in (None, "meta")
)
#: The model's columns stored as intervals, shown in seconds.
_INTERVALS = frozenset(entry.column for entry in job_fields(JobSpec) if entry.interval)
#: What a job read shows beside its definition: its state (columns of ``pgpulse_jobs``) and
#: what ``web.sql``'s ``jobs`` computes.
_SHOWN_STATE = (
    "id",
    "revision",
    "status",
    "anchor_at",
    "scheduled_for",
    "next_run_at",
    "attempt",
    "locked_by",
    "lease_expires_at",
    "last_outcome",
    "last_error",
    "last_finished_at",
    "created_at",
    "updated_at",
    "runs_done",
    "failures",
    "paused_until",
    "pause_reason",
    "pause_requested",
    "skips",
    "db_now",
    "calendar_defs",
    "due_lag",
    "last_lag",
    "last_duration",
    "unroutable",
    "downstreams",
    "last_success_at",
    "last_success_scheduled_for",
    "key_limit",
    "key_running",
)
_SHOWN = frozenset(_SHOWN_DEFINITION + _SHOWN_STATE)


def shown_job(row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``web.sql``'s ``jobs`` (the job's row, ``j.*``, and what the statement
    computes) as a job read gives it: the definition model's columns but ``meta``, durations in
    seconds (``None``: no limit), and the state shown; not the row's other columns (``meta``,
    the claim's bookkeeping). The model names the definition's columns, so a new one needs no
    edit of the statement. ``skips``: the occurrences listed to skip (``job skip``) from the
    current one on."""
    shown = {
        key: value.total_seconds() if key in _INTERVALS and value is not None else value
        for key, value in row.items()
        if key in _SHOWN
    }
    if "skips" in shown:  # the ones still ahead: a passed one leaves the list at its next write
        held = row.get("scheduled_for")
        shown["skips"] = [
            {"at": s.at, "by": s.by, "reason": s.reason}
            for s in stored(shown["skips"])
            if held is None or s.at >= held
        ]
    return shown


def encode_job_cursor(tenant: str, name: str) -> str:
    """Opaque cursor of the page after job ``(tenant, name)`` (URL-safe base64 of JSON)."""
    raw = json.dumps([tenant, name], ensure_ascii=False).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_job_cursor(cursor: str) -> tuple[str, str]:
    """Inverse of :func:`encode_job_cursor`.

    Raises:
        InvalidInput: not a cursor this server made (``field="cursor"``).
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        tenant, name = json.loads(raw.decode("utf-8"))
        if not (isinstance(tenant, str) and isinstance(name, str)):
            raise ValueError("not two strings")
        if "\x00" in tenant + name:
            raise ValueError("NUL")
        tenant.encode("utf-8")
        name.encode("utf-8")
    except (ValueError, TypeError, binascii.Error, UnicodeError):
        raise InvalidInput(
            f"cursor {cursor!r} is not a cursor returned by this API", field="cursor", value=cursor
        ) from None
    return tenant, name


class Reads:
    """Tenant-scoped reads for the API and the dashboard.

    Args:
        pool: the store's pool (autocommit connections, dict rows).
    """

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def _runs(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """A page of runs: the recorded runs and the attempts running now (two statements of
        ``web.sql``, ``runs_recorded`` and ``runs_running``, each at most a page), read in one
        snapshot so that a run ending meanwhile is in exactly one of them, then merged newest
        first (by id, descending; an id-less row first, as ``ORDER BY id DESC`` puts a NULL)."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            recorded = await conn.execute(QUERIES["runs_recorded"], params)
            rows = list(await recorded.fetchall())
            running = await conn.execute(QUERIES["runs_running"], params)
            rows += await running.fetchall()
        rows.sort(key=lambda row: (row["id"] is None, row["id"] or 0), reverse=True)
        del rows[params["limit"] :]
        for row in rows:
            row["attempt_log"] = attempt_log(row)
            del row["earlier_attempts"], row["attempt_ended_at"]
        return rows

    async def _rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(QUERIES[name], params)
            return list(await cur.fetchall())

    async def _jobs(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The jobs of ``web.sql``'s ``jobs`` as shown (:func:`shown_job`)."""
        return [shown_job(row) for row in await self._rows("jobs", params)]

    async def jobs(
        self,
        *,
        tenant: str | None,
        status: str | None = None,
        handler: str | None = None,
        source: str | None = None,
        last_outcome: str | None = None,
        name_prefix: str | None = None,
        q: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """A page of jobs in ``(tenant, name)`` order, after the job ``after``.

        Filters (each optional, all combined): ``status``, ``handler``, ``source`` (``api``,
        ``crontab``, ``app``...), ``last_outcome``, ``name_prefix``, and ``q``: text found in
        the name or the handler, case-insensitively.

        Each row holds the definition (durations in seconds), the state, ``due_lag`` (seconds
        the job is overdue now, ``None`` unless idle and due), and ``last_lag`` (from the first
        attempt) / ``last_duration`` of its latest started run.
        """
        return await self._jobs(
            {
                "tenant": tenant,
                "id": None,
                "status": status,
                "handler": handler,
                "source": source,
                "last_outcome": last_outcome,
                "name_prefix": name_prefix,
                "q": q,
                "after_tenant": after[0] if after else None,
                "after_name": after[1] if after else None,
                "limit": limit,
            },
        )

    async def job(self, job_id: int, *, tenant: str | None) -> dict[str, Any] | None:
        """One job as :meth:`jobs` gives it, or ``None`` if missing or of another tenant."""
        rows = await self._jobs(
            {
                "tenant": tenant,
                "id": job_id,
                "status": None,
                "handler": None,
                "source": None,
                "last_outcome": None,
                "name_prefix": None,
                "q": None,
                "after_tenant": None,
                "after_name": None,
                "limit": 1,
            },
        )
        return rows[0] if rows else None

    async def runs(
        self,
        *,
        tenant: str | None,
        job_id: int | None = None,
        outcome: str | None = None,
        handler: str | None = None,
        source: str | None = None,
        q: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """A page of runs, newest first, with ``lag`` (seconds from the occurrence to the start
        of its FIRST attempt), ``duration`` (of the latest attempt), ``output``, ``error`` and
        ``earlier_attempts`` (the attempts before the latest, oldest first).

        ``since <= scheduled_for < until`` when given; ``handler``, ``source`` and ``q`` (text
        in the job's name, case-insensitively) filter by the run's job; ``before_id`` is the
        keyset cursor.
        """
        return await self._runs(
            {
                "tenant": tenant,
                "job_id": job_id,
                "run_id": None,
                "outcome": outcome,
                "handler": handler,
                "source": source,
                "q": q,
                "since": since,
                "until": until,
                "before_id": before_id,
                "limit": limit,
            },
        )

    async def run(self, run_id: int, *, tenant: str | None) -> dict[str, Any] | None:
        """One run as :meth:`runs` gives it, or ``None`` if missing or of another tenant."""
        rows = await self._runs(
            {
                "tenant": tenant,
                "job_id": None,
                "run_id": run_id,
                "outcome": None,
                "handler": None,
                "source": None,
                "q": None,
                "since": None,
                "until": None,
                "before_id": None,
                "limit": 1,
            },
        )
        return rows[0] if rows else None

    async def grid_runs(
        self, job_id: int, *, after: datetime, until: datetime, limit: int
    ) -> list[dict[str, Any]]:
        """The runs of job ``job_id`` (the caller checked the tenant) whose occurrences fall in
        ``(after, until]`` (UTC instants), oldest first, plus a skipped summary reaching into
        the range from before it; at most ``limit`` rows."""
        return await self._rows(
            "grid_runs", {"job_id": job_id, "after": after, "until": until, "limit": limit}
        )

    async def recent_runs(
        self, job_ids: Sequence[int], *, per_job: int = 10
    ) -> dict[int, list[dict[str, Any]]]:
        """The newest ``per_job`` recorded runs of each job of ``job_ids`` (ids the caller's
        token may see), oldest first: ``{job id: [{id, outcome, scheduled_for, occurrences,
        error}, ...]}``; a job without runs is left out."""
        found: dict[int, list[dict[str, Any]]] = {}
        for row in await self._rows("recent_runs", {"job_ids": list(job_ids), "per_job": per_job}):
            found.setdefault(row["job_id"], []).append(row)
        return found

    async def attention(
        self, *, tenant: str | None, overdue: float = 60.0, limit: int = 20
    ) -> list[dict[str, Any]]:
        """Jobs that need a person: failed, last run failed or fenced, or overdue by more than
        ``overdue`` seconds; the most recently finished first."""
        return await self._rows("attention", {"tenant": tenant, "overdue": overdue, "limit": limit})
