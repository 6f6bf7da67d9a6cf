"""The API's request and response bodies (pydantic models; they make the OpenAPI document).

Durations are seconds. Instants are ISO-8601 with an offset: UTC for stored instants, the job's
own zone for ``upcoming``. Bounds here are the edge's (they keep values inside what the database
stores); :meth:`pgpulse.core.jobs.JobSpec.create` still validates every definition.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    create_model,
    field_validator,
)
from pydantic.json_schema import SkipJsonSchema

from pgpulse.core.definition import Field as DefinitionField
from pgpulse.core.definition import job_fields
from pgpulse.core.jobs import JobSpec

#: A request's number field (seconds, a threshold): a JSON number, integer or fraction, and
#: nothing pydantic would coerce into one: ``true`` is not 1 and ``"2"`` is not 2 (strict
#: mode), as :mod:`pgpulse.core.jobs` refuses them in a file (``pgpulse apply``). A refusal is 422
#: naming the field.
Number = Annotated[float, Strict()]


def _whole(value: Any) -> Any:
    """A whole JSON number written with a fraction (``2.0``) as the integer it is: a file read
    by ``pgpulse apply`` (:mod:`pgpulse.core.jobs`) takes it, so the API does too."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _instant_text(value: Any) -> Any:
    """Refuse a number for an instant: pydantic would read ``1700000000`` as seconds since
    1970, a reading no other path of Pulse (CLI, files) has."""
    if isinstance(value, int | float):
        raise ValueError("must be an ISO 8601 instant such as 2026-12-01T10:00:00Z, not a number")
    return value


#: A request's integer field (attempts, counts, ids): a JSON integer, or a whole number written
#: ``2.0``; ``true``, ``"2"`` and ``2.5`` are refused (strict mode), as :data:`Number`'s are.
Integer = Annotated[int, BeforeValidator(_whole), Strict()]
#: A request's instant: ISO 8601 text (its offset, or the field's rule for a naive one); never
#: a number.
Instant = Annotated[datetime, BeforeValidator(_instant_text)]

Name = Annotated[str, Field(min_length=1, max_length=200, examples=["nightly-report"])]
#: Every outcome of a run and every status of a job (the CHECKs of pgpulse_runs and pgpulse_jobs):
#: the API's filters and the dashboard's (pgpulse.web.filters) take exactly these.
Outcome = Literal["running", "retrying", "succeeded", "failed", "skipped", "fenced", "cancelled"]
Status = Literal["idle", "running", "paused", "failed", "completed"]
ResumeMode = Literal["skip", "once", "backfill"]
CalendarName = Annotated[str, Field(min_length=1, max_length=64, examples=["us-holidays"])]
RunKind = Literal["scheduled", "trigger", "backfill"]
#: A field that may be left out of a PATCH but not set to null (absent from the schema).
Unset = SkipJsonSchema[None]


def _value_type(entry: DefinitionField, *, strict: bool = True) -> Any:
    """The pydantic type of a model entry's value (:data:`pgpulse.core.definition.Kind`): a
    request's strict one, or a response's (``strict=False``)."""
    if entry.kind == "choice":
        return Literal.__getitem__(entry.choices)
    if entry.kind == "json":
        return dict[str, Any]
    if entry.kind == "names":
        return list[CalendarName] if strict else list[str]
    if entry.kind == "instant":
        return Instant if strict else datetime
    if entry.kind == "int":
        return Integer if strict else int
    if entry.kind == "seconds":
        return Number if strict else float
    return str


def _description(entry: DefinitionField) -> str:
    unit = f" Unit: {entry.unit}." if entry.unit else ""
    null = " Null: no limit." if entry.nullable else ""
    return f"{entry.doc}{unit}{null}"


def _constraints(entry: DefinitionField) -> dict[str, Any]:
    """The entry's bounds as pydantic's: a number's ``ge``/``le``, a text's lengths."""
    out: dict[str, Any] = {"description": _description(entry)}
    if entry.example is not None:
        out["examples"] = [entry.example]
    if entry.kind in ("int", "seconds"):
        out.update(ge=entry.minimum, le=entry.maximum)
    elif entry.kind == "text":
        out.update(min_length=entry.minimum, max_length=entry.maximum)
    return out


def _settable() -> list[DefinitionField]:
    """The model's entries a request sets (:data:`pgpulse.core.audit.SETTABLE_FIELDS`)."""
    return [e for e in job_fields(JobSpec) if e.settable and not e.identity]


def _create_fields() -> dict[str, Any]:
    """``JobCreate``'s fields: the job's name, its tenant (the token's by default), then every
    settable field of the model, required where the model has no default."""
    fields: dict[str, Any] = {
        "name": (Name, ...),
        "tenant": (
            str | None,
            Field(
                None,
                min_length=1,
                max_length=200,
                description="Default: the token's tenant (admin: 'default').",
            ),
        ),
    }
    for entry in _settable():
        kind = _value_type(entry)
        annotation = kind | None if entry.nullable else kind
        extra = _constraints(entry)
        if entry.required:
            fields[entry.name] = (annotation, Field(**extra))
        elif entry.kind in ("json", "names"):
            factory = dict if entry.kind == "json" else list
            fields[entry.name] = (annotation, Field(default_factory=factory, **extra))
        else:
            fields[entry.name] = (annotation, Field(entry.default, **extra))
    return fields


def _patch_fields() -> dict[str, Any]:
    """``JobPatch``'s fields: every settable field, optional; only the model's nullable ones
    may be null (no limit), the others may only be left out."""
    fields: dict[str, Any] = {}
    for entry in _settable():
        kind = _value_type(entry)
        annotation = kind | None if entry.nullable else kind | Unset
        fields[entry.name] = (annotation, Field(None, **_constraints(entry)))
    return fields


def _not_null(cls: Any, value: Any) -> Any:
    if value is None:
        raise ValueError("may not be null (leave the field out to keep its value)")
    return value


def _job_bodies() -> tuple[type[BaseModel], type[BaseModel]]:
    """The API's job create and update bodies, built from the job definition model
    (:mod:`pgpulse.core.definition`): its kinds, bounds, defaults and descriptions."""
    forbid = ConfigDict(extra="forbid")
    create = create_model(
        "JobCreate",
        __config__=forbid,
        __doc__="Create or update (upsert by tenant and name) a job.",
        **_create_fields(),
    )
    not_null = [e.name for e in _settable() if not e.nullable]
    nullable = ", ".join(f"``{e.name}``" for e in _settable() if e.nullable)
    patch = create_model(
        "JobPatch",
        __config__=forbid,
        __doc__="Change some fields of a job; the others keep their values. Only "
        f"{nullable} may be set to null (no limit).",
        __validators__={
            "_not_null": cast(Any, field_validator(*not_null, mode="before"))(_not_null)
        },
        **_patch_fields(),
    )
    return create, patch


def _job_view() -> dict[str, Any]:
    """The definition fields of a job as the API shows it (``Job``): the model's, but
    ``meta``."""
    fields: dict[str, Any] = {}
    for entry in job_fields(JobSpec):
        if entry.name == "meta":
            continue
        kind = _value_type(entry, strict=False)
        fields[entry.name] = (kind | None if entry.nullable else kind, ...)
    return fields


if TYPE_CHECKING:  # built at import (below); to the type checker, models
    JobCreate = BaseModel
    JobPatch = BaseModel
else:
    JobCreate, JobPatch = _job_bodies()


class ListedSkip(BaseModel):
    """An occurrence listed to skip."""

    at: datetime
    by: str = Field(description="Who listed it.")
    reason: str | None


class _JobState(BaseModel):
    """A job's state and next occurrences (``Job`` adds its definition, from the model)."""

    id: int
    schedule_description: str = Field(description="The schedule in words.")
    revision: int = Field(1, description="The definition's revision (1 when created).")
    status: Status
    paused_until: datetime | None = Field(description="A pause's end (the leader resumes it).")
    pause_reason: str | None = Field(description="Why it is paused (auto-pause says so).")
    pause_requested: bool = Field(
        False,
        description="Paused while it ran: it pauses when its run ends (with paused_until and "
        "pause_reason); no new occurrence of it starts meanwhile. A resume withdraws it.",
    )
    skips: list[ListedSkip] = Field(
        default_factory=list,
        description="Occurrences listed to skip (job skip), from the current one on, oldest "
        "first: each is recorded skipped when its time comes.",
    )
    runs_done: int = Field(description="Runs that count towards max_runs.")
    failures: int = Field(description="Consecutive failed runs.")
    scheduled_for: datetime = Field(description="The current occurrence (logical time), UTC.")
    next_run_at: datetime = Field(description="When it may be claimed (later on retry), UTC.")
    upcoming: list[datetime] = Field(
        description="Current and next occurrences, job's zone; a paused job's (or one whose "
        "pause is requested) come after its pause ends and after now (none while paused with "
        "no end)."
    )
    attempt: int
    locked_by: str | None
    lease_expires_at: datetime | None
    last_outcome: str | None
    last_error: str | None
    last_finished_at: datetime | None
    created_at: datetime
    updated_at: datetime
    due_lag: float | None = Field(description="Seconds overdue now (idle and due), else null.")
    waiting: str | None = Field(
        description="Why the job waits although idle: no live node can run its handler (or, "
        "for a shell job, none allows shell jobs); null when a live node can."
    )
    last_lag: float | None = Field(
        description="Start of the latest run minus its spread instant (scheduled_for + the "
        "job's spread offset)."
    )
    last_duration: float | None = Field(description="Seconds the latest finished run took.")
    downstreams: list[str] = Field(
        default_factory=list,
        description="The jobs of the tenant that follow this one (their after names it).",
    )
    last_success_at: datetime | None = Field(
        default=None, description="When the job's scheduled occurrence last succeeded."
    )
    last_success_scheduled_for: datetime | None = Field(
        default=None, description="That occurrence's scheduled_for."
    )


if TYPE_CHECKING:
    Job = BaseModel
else:
    Job = create_model(
        "Job",
        __base__=_JobState,
        __doc__="A job: its definition, its current state and its next occurrences.",
        **_job_view(),
    )


class JobPage(BaseModel):
    """A page of jobs; pass ``next_cursor`` as ``cursor`` for the next page."""

    items: list[Job]
    next_cursor: str | None


class TriggerRequest(BaseModel):
    """Run now: with no payload the job's own occurrence moves to now (an idle job only); with
    one, an extra occurrence runs once with it, beside the schedule."""

    model_config = ConfigDict(extra="forbid")

    payload: dict[str, Any] | None = Field(
        None, description="JSON object to run this once with instead of the job's payload."
    )


class Triggered(BaseModel):
    """A triggered job and the occurrence that runs now."""

    job: Job
    occurrence: datetime
    run_id: int | None = Field(
        None, description="With a payload: the id of the extra occurrence's run."
    )


class BackfillRequest(BaseModel):
    """Run each selected occurrence of [from, to] exactly once more, beside the schedule."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    start: Instant = Field(
        alias="from", description="First instant, ISO-8601 (without an offset: UTC, as the CLI)."
    )
    end: Instant = Field(
        alias="to", description="Last instant (inclusive), not in the future (naive: UTC)."
    )
    only: list[Literal["missing", "failed", "all"]] = Field(
        default_factory=list,
        description="missing (never ran, or skipped), failed; both when empty; all.",
    )
    # strict: 0 is not false, "3" is not 3 (a type the schema does not allow is refused)
    dry_run: StrictBool = Field(False, description="List what would run; write nothing.")
    max_concurrency: Integer = Field(1, ge=1, le=1000, description="Most running at once.")
    newest_first: StrictBool = False


class BackfillOccurrence(BaseModel):
    """One occurrence of the range: what the history says of it, and whether it runs."""

    scheduled_for: datetime
    status: Literal["succeeded", "failed", "skipped", "missing", "pending", "queued"]
    selected: bool


class Backfill(BaseModel):
    """A backfill's plan, in run order; ``batch_id`` null for a dry run or nothing selected."""

    job_id: int
    batch_id: int | None
    dry_run: bool
    occurrences: list[BackfillOccurrence]


class Attempt(BaseModel):
    """One attempt of a run."""

    attempt: int = Field(description="1 for the first attempt.")
    node_id: str | None
    fencing_token: int | None
    started_at: datetime | None
    ended_at: datetime | None = Field(
        description="When it ended (null while it runs; for a lost lease, when it was reaped)."
    )
    outcome: str = Field(description="'retrying' for an attempt another one followed.")
    error: str | None
    output: str | None = Field(description="What this attempt captured.")


class Run(BaseModel):
    """One run: the execution of one occurrence, over its attempts."""

    id: int
    job_id: int
    tenant: str
    name: str
    handler: str
    source: str = Field(description="Where the job's definition comes from (api, crontab...).")
    scheduled_for: datetime
    attempts: int = Field(description="Attempts made (0 for a skipped occurrence).")
    outcome: Outcome
    occurrences: int = Field(
        description="Occurrences the row stands for: 1, or for a skipped summary the "
        "consecutive occurrences from scheduled_for through last_scheduled_for."
    )
    last_scheduled_for: datetime = Field(
        description="The last occurrence the row stands for (scheduled_for when 1)."
    )
    node_id: str | None = Field(description="The node of the latest attempt.")
    fencing_token: int | None
    started_at: datetime | None = Field(description="Start of the latest attempt.")
    first_started_at: datetime | None = Field(description="Start of the first attempt.")
    finished_at: datetime | None
    duration: float | None = Field(description="Seconds the latest attempt took.")
    lag: float | None = Field(
        description="Seconds from the spread instant (scheduled_for + the job's spread "
        "offset; scheduled_for without spread) to the start of the FIRST attempt."
    )
    error: str | None
    output: str | None = Field(description="Captured output of the latest attempt.")
    attempt_log: list[Attempt] = Field(description="Every attempt, first to latest.")
    revision: int | None = Field(
        None, description="The job definition's revision the run started under."
    )
    kind: RunKind = Field(
        "scheduled",
        description="scheduled (the schedule's occurrence), trigger (run now with a payload) "
        "or backfill (a backfill on request).",
    )


class Change(BaseModel):
    """One entry of a job's audit trail."""

    id: int
    job_id: int
    tenant: str
    name: str = Field(description="The job's name when the change was made.")
    at: datetime = Field(description="When, by the database's clock (UTC).")
    action: Literal[
        "create", "update", "pause", "resume", "trigger", "backfill", "delete", "skip", "unskip"
    ]
    source: str = Field(description="cli, api, code:<app>, crontab:<path> or apply:<name>.")
    actor: str = Field(description="os:<user>, token:<id> (<label>), code:<app>@<node>...")
    revision: int = Field(description="The definition's revision after the change.")
    changes: dict[str, list[Any]] = Field(description='{"field": [old, new]}.')


class History(BaseModel):
    """A job's audit trail, newest first."""

    items: list[Change]


class RunPage(BaseModel):
    """A page of runs, newest first (the latest recorded first, in run id order: a backfill's
    runs come above the scheduled runs recorded before them, even of later occurrences); pass
    ``next_cursor`` as ``cursor`` for older ones."""

    items: list[Run]
    next_cursor: str | None


class Node(BaseModel):
    """A scheduler node as it last reported itself."""

    node_id: str
    hostname: str
    pid: int
    state: str
    alive: bool
    started_at: datetime
    last_heartbeat: datetime
    shards: list[int]
    running: int
    slots: int
    handlers: list[str] = Field(description="The handlers the node can run (its capabilities).")
    leader: bool
    last_claim_at: datetime | None = Field(
        None, description="When its last claim step succeeded (null: none recorded yet)."
    )
    claim_error: str | None = Field(
        None,
        description="The error of its last claim step if that one failed: the node is then "
        "'unhealthy' and not alive, although it beats.",
    )


class Shards(BaseModel):
    """Shard ownership among live nodes: shard -> owners (more than one only briefly)."""

    count: int = Field(description="The database's shard count (`pgpulse shards set`).")
    owners: dict[str, list[str]]
    unowned: list[int]
    contested: list[int]


class Unroutable(BaseModel):
    """Idle jobs of one handler that no live node can run: they wait for a node that can."""

    handler: str
    jobs: int
    due: int = Field(description="Of them, how many are due now.")
    reason: str = Field(
        description='"no live node can run handler X", or for shell jobs '
        '"no live node allows shell jobs".'
    )


class JobCounts(BaseModel):
    """Jobs by state (of the token's tenant; admin: all), the worst lag, seconds, and the idle
    jobs no live node can run, by handler."""

    due: int
    running: int
    paused: int
    pausing: int = Field(
        0, description="jobs whose pause waits for the end of their run (pause of a running job)"
    )
    failed: int = Field(description="jobs that cannot be scheduled (status failed)")
    failing: int = Field(description="jobs whose last run failed or was fenced")
    completed: int = Field(description="jobs with no occurrence left (status completed)")
    total: int
    max_lag: float | None
    unroutable: list[Unroutable]


class Cluster(BaseModel):
    """Nodes, the leader, shard ownership and job counts."""

    nodes: list[Node]
    leader: str | None
    shards: Shards
    jobs: JobCounts


class Me(BaseModel):
    """Who the token acts for."""

    token_id: int
    tenant: str | None
    admin: bool


class ErrorDetail(BaseModel):
    """What was refused."""

    code: str
    message: str
    field: str | None
    value: Any = None


class Error(BaseModel):
    """Every refusal has this body."""

    error: ErrorDetail


class PauseRequest(BaseModel):
    """How to pause: until when (the leader resumes it then) and why; both optional."""

    model_config = ConfigDict(extra="forbid")

    until: Instant | None = Field(
        None, description="An instant in the future (without an offset: in the job's zone)."
    )
    reason: str | None = Field(None, max_length=500)
    cancel: bool = Field(
        False,
        description="Stop what the job runs now: its run (and any extra occurrence of it "
        "running) is cancelled, recorded as cancelled, and the job paused past that "
        "occurrence. false: a running job pauses when its run ends.",
    )


class SkipRequest(BaseModel):
    """Which occurrences to skip: the next ``next`` (1 when neither is given) or the one
    ``at``, and why."""

    model_config = ConfigDict(extra="forbid")

    next: int | None = Field(None, ge=1, le=100, description="How many from the next one.")
    at: Instant | None = Field(
        None, description="One occurrence (without an offset: in the job's zone)."
    )
    reason: str | None = Field(None, max_length=500)


class UnskipRequest(BaseModel):
    """Which listed occurrence runs after all (none: every listed one)."""

    model_config = ConfigDict(extra="forbid")

    at: Instant | None = None


class Skips(BaseModel):
    """A job's occurrences listed to skip, oldest first."""

    job_id: int
    skips: list[ListedSkip]


class CancelledRun(BaseModel):
    """A run a pause cancelled."""

    run_id: int
    kind: RunKind
    scheduled_for: datetime
    node_id: str | None = Field(description="The node that ran it: it stops at its next renewal.")


class PauseResult(Job):
    """The job after a pause, and what the pause did."""

    message: str = Field(
        description='What happened, as the CLI says it: "paused nightly", "nightly is running: '
        'pauses when this run ends (run 42 on node n1)", "paused nightly; run 42 cancelled '
        '(node n1 stops it at its next lease renewal)".'
    )
    changed: bool = Field(description="The job was neither paused nor its pause requested.")
    waits_for_run: int | None = Field(
        description="The run a requested pause waits for (the job pauses when it ends)."
    )
    cancelled_runs: list[CancelledRun] = Field(description="The runs cancelled (cancel: true).")


class ResumeRequest(BaseModel):
    """What happens to the occurrences that fell inside the pause."""

    model_config = ConfigDict(extra="forbid")

    catch_up: ResumeMode = Field(
        "skip", description="skip: not these; once: run once, as the newest; backfill: each."
    )


class CalendarIn(BaseModel):
    """An exclusion calendar: explicit dates, a country's public holidays, or both."""

    model_config = ConfigDict(extra="forbid")

    # ten years, day by day: the longest list a 64 KiB body (the default --max-body) holds
    dates: list[date] = Field(default_factory=list, max_length=3_650)
    country: str | None = Field(None, min_length=2, max_length=3, examples=["US"])
    subdivision: str | None = Field(None, min_length=1, max_length=10, examples=["CA"])

    @field_validator("dates", mode="before")
    @classmethod
    def _iso_strings(cls, value: Any) -> Any:
        """A date is an ISO string (``2026-12-24``), never a number read as days since 1970."""
        if isinstance(value, list) and any(not isinstance(item, str | date) for item in value):
            raise ValueError("each date is an ISO string, like 2026-12-24")
        return value


class KeyLimitIn(BaseModel):
    """The limit of a concurrency key: how many occurrences of its jobs run at once."""

    model_config = ConfigDict(extra="forbid")

    max_running: int = Field(
        ge=1,
        le=100_000,
        description="Most occurrences of the tenant's jobs with this key running at once, "
        "across every node (1: a mutex).",
        examples=[2],
    )


class KeyLimit(KeyLimitIn):
    """A stored limit, with what its key's jobs do now."""

    model_config = ConfigDict(extra="ignore")

    tenant: str
    key: str
    running: int = Field(description="Occurrences of the key's jobs running now.")
    jobs: int = Field(description="Jobs that name the key.")
    waiting: int = Field(description="Of those, idle and due: waiting for a free slot.")


class Calendar(CalendarIn):
    """A stored calendar and the jobs that name it."""

    model_config = ConfigDict(extra="ignore")

    tenant: str
    name: str
    jobs: list[str]


class PlanStep(BaseModel):
    """What a create or change would do, written nothing (``pgpulse apply --dry-run``'s plan
    of one job)."""

    action: Literal["create", "update", "unchanged"] = Field(
        description="create: no such job yet; update: the fields in changes change; "
        "unchanged: saving writes nothing."
    )
    tenant: str
    name: str
    job_id: int | None = Field(description="The stored job's id (null for create).")
    changes: dict[str, list[Any]] = Field(
        description='An update\'s changed fields, {"field": [old, new]} (durations in '
        "seconds, instants as UTC ISO 8601)."
    )
    lines: list[str] = Field(description="The plan as pgpulse apply --dry-run prints it.")


class Occurrence(BaseModel):
    """One occurrence of a schedule."""

    utc: datetime = Field(description="The instant, UTC.")
    local: datetime = Field(description="The same instant in the schedule's time zone.")


class SchedulePreview(BaseModel):
    """The next occurrences of a schedule (``pgpulse schedule next --json``)."""

    schedule: str
    timezone: str
    description: str = Field(description="The schedule in words.")
    occurrences: list[Occurrence]
    ended: bool = Field(description="Fewer than asked: the schedule has no more.")
