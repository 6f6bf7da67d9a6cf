"""The recorded history of a chaos run, as value objects the checker reads (no I/O here).

Rows come from the harness's tables (``chaos.sql``) and Pulse's own (``pgpulse_runs``,
``pgpulse_jobs``); :class:`Fault` entries come from the runner's log. Instants are aware
datetimes on the database's clock; durations are seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

#: Run-log outcomes that close a claim (the claim's token stops being the owner's).
CLOSING_OUTCOMES = frozenset({"succeeded", "failed", "retrying", "skipped", "fenced", "ended"})


@dataclass(frozen=True, slots=True)
class Execution:
    """One handler execution, as the handler recorded it (``chaos_history`` and its journal).

    Attributes:
        result: ``applied``, ``fenced``, ``failed``, or ``None`` if it never ended (cancelled
            or killed).
        lease_ok_at_start, lease_ok_at_end: whether the execution's token held an unexpired
            lease on the job at that instant, by the database (``None``: never ended).
        uid: the execution's own id (in the database's row and the node's journal).
        run_id: the run id its claim handed out.
        in_db: whether the database kept its whole record; ``False`` when only the node's
            journal has it (a failover lost the transactions that wrote it): see
            :mod:`~pgpulse_tools.chaos.journal`.
        occurrence: the kind of occurrence it ran (the handler's ``ctx.kind``): ``scheduled``
            (the schedule's, on the job row or forked under overlap ``allow``/``replace``),
            ``trigger`` (a trigger with a payload) or ``backfill`` (a backfill on request). An
            extra occurrence (``trigger``, ``backfill``) is identified by its ``run_id``, not by
            (job, ``scheduled_for``): a backfill re-runs an instant the schedule already ran.
        committed_at: the database's instant (``clock_timestamp()``) of the statement that
            ended it — its effect, or its planned failure — read inside that statement, so
            never after its commit; ``None`` if it never ended in the database (or its history
            predates the field). Unlike ``ended_at`` it is on the database's clock even when
            only the journal kept the execution (``ended_at`` is then the node's instant of
            the acknowledgement, which a loaded node writes late): the instant to compare
            with a failover's kill.
    """

    id: int
    job_id: int
    scheduled_for: datetime
    attempt: int
    token: int
    node_id: str
    kind: str
    started_at: datetime
    ended_at: datetime | None = None
    result: str | None = None
    lease_ok_at_start: bool = True
    lease_ok_at_end: bool | None = None
    uid: str = ""
    run_id: int | None = None
    in_db: bool = True
    committed_at: datetime | None = None
    occurrence: str = "scheduled"

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Execution:
        """Build from a ``read_history`` row."""
        return cls(**{name: row[name] for name in cls.__slots__ if name in row})

    @property
    def extra(self) -> bool:
        """Whether it ran an extra occurrence (a trigger's or a backfill's)."""
        return self.occurrence != "scheduled"

    @property
    def own_lease(self) -> bool:
        """Whether its occurrence had a lease and a token of its own (an extra occurrence, or
        one forked under overlap ``allow``/``replace``): its token grows over that occurrence's
        claims only, and its run id keys it."""
        return self.extra or self.kind in ("overlap", "replace")

    @property
    def key(self) -> tuple[int, datetime, int]:
        """The occurrence it ran: (job, ``scheduled_for``, 0) for the schedule's, (job,
        ``scheduled_for``, run id) for an extra one."""
        return (self.job_id, self.scheduled_for, (self.run_id or 0) if self.extra else 0)


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One write of the engine (``chaos_run_log``, recorded by triggers): a claim
    (``running``) or the end of one (``ended``: the lease cleared) on ``pgpulse_jobs``; an
    outcome, a reap (``retrying``) or a skipped record on ``pgpulse_runs``."""

    id: int
    job_id: int
    scheduled_for: datetime
    outcome: str
    attempts: int
    token: int | None
    node_id: str | None
    at: datetime
    error: str | None = None
    run_id: int | None = None
    kind: str = "scheduled"

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RunEvent:
        """Build from a ``read_run_log`` row."""
        return cls(**{name: row[name] for name in cls.__slots__ if name in row})

    @property
    def key(self) -> tuple[int, datetime, int]:
        """The occurrence it is about, as :attr:`Execution.key`."""
        extra = self.kind != "scheduled"
        return (self.job_id, self.scheduled_for, (self.run_id or 0) if extra else 0)


@dataclass(frozen=True, slots=True)
class Run:
    """A ``pgpulse_runs`` row as it stands at the check (a skipped summary row stands for the
    occurrences from ``scheduled_for`` through ``last_scheduled_for``); an extra occurrence
    still pending or running is one too, ``queued``.

    Attributes:
        id: the run id; kind: ``scheduled``, ``trigger`` or ``backfill``; batch_id: the batch
            of an extra or forked occurrence; error: the run's error (a replaced run's says
            ``replaced by the occurrence at …``).
    """

    job_id: int
    scheduled_for: datetime
    outcome: str
    attempts: int
    token: int | None
    last_scheduled_for: datetime | None = None
    id: int | None = None
    kind: str = "scheduled"
    batch_id: int | None = None
    error: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Run:
        """Build from a ``read_runs`` row."""
        return cls(**{name: row[name] for name in cls.__slots__ if name in row})


@dataclass(frozen=True, slots=True)
class Job:
    """A job's definition and state at the check (``pgpulse_jobs``)."""

    id: int
    name: str
    schedule: str
    timezone: str
    handler: str
    catch_up: str
    anchor_at: datetime
    status: str
    scheduled_for: datetime | None = None
    lease_expires_at: datetime | None = None
    locked_by: str | None = None
    last_error: str | None = None
    overlap: str = "forbid"
    max_concurrency: int | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        """Build from a ``read_jobs`` row."""
        return cls(**{name: row[name] for name in cls.__slots__ if name in row})


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault, as the runner logged it.

    Attributes:
        kind: ``kill``, ``pause``, ``partition``, ``delay``, ``pg_restart``, ``join_leave``,
            ``failover`` or ``switchover``.
        target: the node id (``None`` for the database's faults).
        started_at: when it began (SIGKILL, SIGSTOP, cut, delay, stop; for ``join_leave`` the
            extra node's start).
        ended_at: when it ended (restart, SIGCONT, heal, start; for ``join_leave`` the extra
            node's exit after its SIGTERM).
        detail: a human-readable description (mode, durations).
        died_at: (failover, switchover) when the old primary was killed or began to stop.
        promoted_at: (failover, switchover) when the new primary accepted writes.
    """

    kind: str
    target: str | None
    started_at: datetime
    ended_at: datetime
    detail: str = ""
    died_at: datetime | None = None
    promoted_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class NodeExit:
    """A node process that exited although the harness neither killed nor stopped it, or that
    did not stop when asked (``why``)."""

    node_id: str
    at: datetime
    returncode: int
    why: str = "exited on its own"


@dataclass(frozen=True, slots=True)
class Request:
    """A run-control request the harness made during the fault phase (runner.py), as the API
    answered it.

    Attributes:
        kind: ``trigger`` (with a payload: one extra occurrence, ``run_id``), ``trigger_job``
            (no payload: the job row's own occurrence moves to now, ``scheduled_for``) or
            ``backfill`` (``batch_id``, the ``selected`` instants of [``start``, ``end``],
            ``only``, ``max_concurrency``).
        at: the harness's instant of the request (the database's clock, by the offset).
        ok: whether the API acknowledged it; ``False`` with ``error``: refused (a paused or
            running job) or unanswered (the database was down): not checked, though what it
            may have written is (every extra run is).
    """

    kind: str
    job_id: int
    at: datetime
    ok: bool = True
    error: str | None = None
    run_id: int | None = None
    scheduled_for: datetime | None = None
    batch_id: int | None = None
    selected: tuple[datetime, ...] = ()
    start: datetime | None = None
    end: datetime | None = None
    only: tuple[str, ...] = ()
    max_concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class History:
    """Everything the checker reads.

    Attributes:
        settle_at: when the faults stopped (every node up, network healed): occurrences due by
            then must be accounted for at ``checked_at``.
        started_at: when every node was first alive (lag is measured from then on).
        checked_at: the instant of the snapshot, after settling.
        lease, heartbeat: the nodes' settings, seconds (for windows and grace periods).
        replication: ``sync`` or ``async`` on a replicated cluster; ``None`` on one server.
    """

    executions: tuple[Execution, ...]
    run_events: tuple[RunEvent, ...]
    runs: tuple[Run, ...]
    jobs: tuple[Job, ...]
    faults: tuple[Fault, ...]
    settle_at: datetime
    checked_at: datetime
    lease: float
    heartbeat: float
    node_exits: tuple[NodeExit, ...] = field(default=())
    started_at: datetime | None = None
    replication: str | None = None
    requests: tuple[Request, ...] = field(default=())


_TYPES: dict[str, type[Any]] = {
    "executions": Execution,
    "run_events": RunEvent,
    "runs": Run,
    "jobs": Job,
    "faults": Fault,
    "node_exits": NodeExit,
    "requests": Request,
}


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$t": value.isoformat()}
    if isinstance(value, tuple):
        return [_encode(item) for item in value]
    if hasattr(value, "__slots__"):
        return {name: _encode(getattr(value, name)) for name in value.__slots__}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"$t"}:
        return datetime.fromisoformat(value["$t"])
    if isinstance(value, dict):
        return {key: _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def dump_history(history: History, path: Path) -> None:
    """Write ``history`` to ``path`` as JSON (read it back with :func:`load_history`).

    Raises:
        OSError: the file cannot be written.
    """
    path.write_text(json.dumps(_encode(history)), encoding="utf-8")


def load_history(path: Path) -> History:
    """Read a history written by :func:`dump_history` (to check it again, or study it).

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not such a history.
    """
    data = _decode(json.loads(path.read_text(encoding="utf-8")))
    fields: dict[str, Any] = dict(data)
    for name, kind in _TYPES.items():
        fields[name] = tuple(
            kind(**{k: tuple(v) if isinstance(v, list) else v for k, v in item.items()})
            for item in data.get(name, [])
        )
    return History(**fields)
