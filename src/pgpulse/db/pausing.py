"""Pausing a job, running or not: after its run, or at once, cancelling what it runs.

:meth:`pgpulse.db.store.Store.pause_job` checks the request and calls :func:`pause`, which says
what it did in a :class:`Paused`. The CLI, the API and the dashboard word it with
:func:`pause_note`. The rules (docs/states.md, "Pausing a running job"):

* An idle, failed or paused job is paused at once (``pause_job``, queries.sql).
* A running job is not stopped: its pause is *requested*, and the write that ends its run (not
  a retry: a retry is part of the run) pauses it; meanwhile no pending extra occurrence of the
  job starts. Resuming it withdraws the request.
* With ``cancel``, what the job runs now stops: the job row's claim and its running extra
  occurrences are cancelled as overlap ``replace`` cancels one (their leases taken away, so each
  holder's next renewal is refused and it cancels the handler; their runs recorded
  ``cancelled``), the job moves past the cancelled occurrence (:func:`after_cancelled`) and is
  paused; its pending extra occurrences wait for the resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pgpulse.core.audit import Actor
from pgpulse.core.errors import InvalidInput, InvalidSchedule, JobNotFound
from pgpulse.core.schedule import parse_schedule
from pgpulse.sql import QUERIES

if TYPE_CHECKING:  # pause_note words a pause without the driver (`pgpulse` loads it)
    from pgpulse.db.database import ConnectionSource

#: A job's status once a pause is written: paused, still running with its pause requested, or
#: completed (its cancelled run was a one-off's last occurrence).
PausedStatus = Literal["paused", "running", "completed"]


@dataclass(frozen=True, slots=True)
class CancelledRun:
    """A run a pause cancelled: its id, kind (``scheduled``, ``trigger``, ``backfill``), its
    occurrence and the node that ran it (``None``: no node held it)."""

    run_id: int
    kind: str
    scheduled_for: datetime
    node_id: str | None


@dataclass(frozen=True, slots=True)
class Paused:
    """What a pause did.

    Attributes:
        changed: the pause is new: the job was neither paused nor its pause requested before.
        written: the pause was written (``False``: the job was paused, or its pause requested,
            already with this until and reason).
        status: the job's status now (:data:`PausedStatus`).
        requested: the job runs, and pauses when its run ends (``status`` ``running``).
        run_id: the run a requested pause waits for (``None`` otherwise).
        node_id: the node that runs it.
        cancelled: the runs cancelled (with ``cancel``), the job row's first.
        paused_until: the pause's end (``None``: until resumed).
        pause_reason: why.
    """

    changed: bool
    written: bool
    status: PausedStatus
    requested: bool = False
    run_id: int | None = None
    node_id: str | None = None
    cancelled: tuple[CancelledRun, ...] = ()
    paused_until: datetime | None = None
    pause_reason: str | None = None


def cancelled_by(actor: Actor) -> str:
    """The error of a run a pause cancelled: who cancelled it, and through which path."""
    return f"cancelled by {actor.name} ({actor.source}): the job was paused, cancelling its run"


def after_cancelled(job: Mapping[str, Any]) -> tuple[datetime, Literal["paused", "completed"]]:
    """Where job row ``job`` goes when its running occurrence is cancelled (pure): the next
    occurrence of its schedule after that one (as a run's end computes it, from
    ``scheduled_for``, not from now), paused; or, when the schedule or the job's window has none
    left (a one-off), the cancelled occurrence, ``completed``."""
    current: datetime = job["scheduled_for"]
    try:
        schedule = parse_schedule(job["schedule"], job["timezone"])
        following = schedule.next_after_or_none(current, anchor=job["anchor_at"])
    except InvalidSchedule:  # no occurrence in 400 years: none left
        following = None
    if following is None or (job["not_after"] is not None and following > job["not_after"]):
        return current, "completed"
    return following, "paused"


async def pause(
    pool: ConnectionSource,
    tenant: str,
    name: str,
    *,
    until: datetime | None,
    reason: str | None,
    cancel: bool,
    actor: Actor,
    now: datetime | None,
) -> Paused:
    """Pause job (``tenant``, ``name``) as the module docstring says; ``until`` and ``reason``
    are checked by the caller (:meth:`pgpulse.db.store.Store.pause_job`).

    Concurrency: without ``cancel``, one statement (``pause_job``: the job row locked, its
    status decided in it). With ``cancel``, one transaction that first locks the job row
    (``lock_job_to_pause``): its claim cannot end, be renewed or be reaped until the pause is
    written, so the claim it cancels is the one it read.

    Raises:
        JobNotFound: no such job.
        InvalidInput: the job is completed (``field="status"``); nothing changes.
    """
    params = {
        "tenant": tenant,
        "name": name,
        "until": until,
        "reason": reason,
        "source": actor.source,
        "actor": actor.name,
        "now": now,
    }
    if not cancel:
        async with pool.connection() as conn:
            return _plain(name, await _one(conn, "pause_job", params), until)
    async with pool.connection() as conn, conn.transaction():
        job = await _one(conn, "lock_job_to_pause", params)
        _refuse_completed(name, job["status"])
        error = cancelled_by(actor)
        cur = await conn.execute(
            QUERIES["cancel_running_occurrences"],
            {"job_id": job["id"], "error": error, "now": now},
        )
        extra = tuple(CancelledRun(**row) for row in await cur.fetchall())
        if job["status"] != "running" and not extra:  # nothing runs: a pause as without cancel
            return _plain(name, await _one(conn, "pause_job", params), until)
        held = job["status"] == "running"
        scheduled_for: datetime = job["scheduled_for"]
        status: Literal["paused", "completed"] = "paused"
        own: tuple[CancelledRun, ...] = ()
        if held:
            scheduled_for, status = after_cancelled(job)
            cur = await conn.execute(
                QUERIES["cancel_job_run"],
                {"job_id": job["id"], "token": job["fencing_token"], "error": error, "now": now},
            )
            own = tuple(
                CancelledRun(r["id"], "scheduled", job["scheduled_for"], job["locked_by"])
                for r in await cur.fetchall()
            )
        row = await _one(
            conn,
            "pause_cancelling",
            {
                **params,
                "job_id": job["id"],
                "token": job["fencing_token"] if held else None,
                "scheduled_for": scheduled_for,
                "status": status,
                "error": error,
                "cancelled": [run.run_id for run in own + extra],
            },
        )
        if not row["written"]:  # the row is locked: only a bug gets here (rolled back)
            raise RuntimeError(f"pause_cancelling wrote nothing of job {name!r}")
    return Paused(
        changed=job["status"] != "paused" and not job["pause_requested"],
        written=True,
        status=status,
        cancelled=own + extra,
        # as given (in the caller's offset) when it was written
        paused_until=until if until is not None and status == "paused" else row["paused_until"],
        pause_reason=row["pause_reason"],
    )


async def _one(conn: Any, statement: str, params: dict[str, Any]) -> dict[str, Any]:
    """The one row of ``statement`` about job (``params["tenant"]``, ``params["name"]``).

    Raises:
        JobNotFound: no row: no such job.
    """
    cur = await conn.execute(QUERIES[statement], params)
    row: dict[str, Any] | None = await cur.fetchone()
    if row is None:
        raise JobNotFound(params["tenant"], params["name"])
    return row


def _refuse_completed(name: str, status: str) -> None:
    if status == "completed":
        raise InvalidInput(
            f"job {name!r} is completed (no occurrence left); a completed job cannot be paused",
            field="status",
            value=status,
        )


def _plain(name: str, row: Mapping[str, Any], until: datetime | None) -> Paused:
    """What ``pause_job`` did, from its row (``until`` as given: in the caller's offset)."""
    _refuse_completed(name, row["was"])
    running = row["was"] == "running"
    return Paused(
        changed=not row["already"],
        written=row["written"],
        status="running" if running else "paused",
        requested=running,
        run_id=row["run_id"] if running else None,
        node_id=row["locked_by"] if running else None,
        paused_until=until if row["written"] else row["paused_until"],
        pause_reason=row["pause_reason"],
    )


def pause_note(name: str, done: Paused) -> str | None:
    """The line that says what a pause of job ``name`` did when it did more than pause a job
    that did not run — its pause requested, runs cancelled — one wording for the CLI, the API
    and the dashboard; ``None`` otherwise (each words a plain pause its own way).

    ``billing is running: pauses when this run ends (run 42 on node n1)``;
    ``paused billing; run 42 cancelled (node n1 stops it at its next lease renewal)``.
    """
    if done.requested:
        run = f"run {done.run_id} " if done.run_id else ""
        on = f" ({run}on node {done.node_id})" if done.node_id else ""
        line = f"{name} is running: pauses when this run ends{on}"
        if done.changed:
            return line + _until_and_reason(done)
        if done.written:
            return f"{line}; now{_until_and_reason(done) or ' with no reason'}"
        return f"{line}, as asked already; no change"
    if not done.cancelled:
        return None
    ids = ", ".join(str(run.run_id) for run in done.cancelled)
    runs = f"{'run' if len(done.cancelled) == 1 else 'runs'} {ids} cancelled"
    nodes = sorted({run.node_id for run in done.cancelled if run.node_id})
    them = "it" if len(done.cancelled) == 1 else "them"
    where = ""
    if len(nodes) == 1:
        where = f" (node {nodes[0]} stops {them} at its next lease renewal)"
    elif nodes:
        where = f" (nodes {', '.join(nodes)} stop them at their next lease renewals)"
    if done.status == "completed":
        return f"{name} completed: {runs}{where}, and its schedule has no occurrence left"
    return f"paused {name}{_until_and_reason(done)}; {runs}{where}"


def pause_message(name: str, done: Paused) -> str:
    """What a pause of job ``name`` did, in one line (the API's ``message``):
    :func:`pause_note`'s, or ``paused billing until T (why)``, ``billing was paused already;
    now paused billing until T``, ``billing was paused already; no change``."""
    line = pause_note(name, done)
    if line is not None:
        return line
    what = name + _until_and_reason(done)
    if done.changed:
        return f"paused {what}"
    if done.written:
        return f"{name} was paused already; now paused {what}"
    return f"{name} was paused already; no change"


def _until_and_reason(done: Paused) -> str:
    until = f" until {done.paused_until.isoformat()}" if done.paused_until else ""
    return until + (f" ({done.pause_reason})" if done.pause_reason else "")
