"""The alerts' part of the JSON API (``/api/v1``): notifiers, rules, alert events with their
deliveries, acknowledgements and silences (docs/alerts.md, "HTTP API").

Writes go through :class:`~pgpulse.alerts.store.AlertStore`, the same checks as the CLI's;
who may write what is :func:`pgpulse.core.access.check_alert_write`: notifiers, cluster rules and
defaults, and silences of every job need an admin token; a tenant token manages its own jobs'
rules and silences and acknowledges their alerts. Notifier configs are returned redacted
(secrets as ``***``), never as stored. A job of another tenant answers 404 as a missing one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from fastapi import APIRouter, Path, Query, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, create_model

from pgpulse.alerts.notifiers import NOTIFIER_KINDS, NotifierKind
from pgpulse.alerts.rules import ALL_RULES, RULE_KINDS
from pgpulse.alerts.store import AlertNotFound, AlertStore
from pgpulse.core.access import Writer, check_alert_write, token_writer
from pgpulse.core.jobs import check_name
from pgpulse.db.tokens import Principal
from pgpulse.web.api import Ctx, JobId, Who
from pgpulse.web.bodies import JsonRoute
from pgpulse.web.context import WebContext
from pgpulse.web.schemas import Error, Integer, Number
from pgpulse.web.service import NoSuchJob

_ERR = {"model": Error}
router = APIRouter(
    prefix="/api/v1",
    route_class=JsonRoute,
    tags=["alerts"],
    responses={400: _ERR, 401: _ERR, 403: _ERR, 404: _ERR, 422: _ERR, 503: _ERR},
)

Name = Annotated[str, Path(min_length=1, max_length=100, description="The notifier's name.")]
RuleName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=40,
        description="The rule's kind: "
        + "; ".join(f"{k.name} ({k.scope}): {k.doc}" for k in RULE_KINDS.values()),
        examples=list(RULE_KINDS),
    ),
]
AlertId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The alert event's id.")]
SilenceId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The silence's id.")]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _config_schema(kind: NotifierKind) -> dict[str, Any]:
    """The JSON schema of a ``kind`` notifier's ``config``, from its keys' table (checked by
    the config class itself: its refusals name ``config.<key>``, as the CLI's do)."""
    return {
        "type": "object",
        "title": f"{kind.name} config",
        "description": f"{kind.doc}; docs/alerts.md, {kind.name!r}",
        "properties": {
            key.name: {
                "type": key.json_type.split("|") if "|" in key.json_type else key.json_type,
                "description": key.doc + (" (secret: shown as ***)" if key.secret else ""),
            }
            for key in kind.keys
        },
        "required": [key.name for key in kind.keys if key.required],
        "additionalProperties": False,
    }


class _NotifierBody(_Body):
    """What every member of :data:`NotifierIn` holds."""

    kind: str
    config: dict[str, Any]
    tenant: str | None = Field(default=None, examples=["acme"])
    shared_with: list[str] | None = Field(default=None, max_length=1000, examples=[["acme"]])


def _notifier_body(kind: NotifierKind) -> type[_NotifierBody]:
    """The body of a ``kind`` notifier: one member of :data:`NotifierIn`'s union on ``kind``."""
    return create_model(
        f"{kind.name.capitalize()}NotifierIn",
        __base__=_NotifierBody,
        __doc__=f"A {kind.name} notifier ({kind.doc}), its tenant (null: the cluster's) and "
        "the tenants it is shared with (omitted: kept as they are).",
        kind=(Literal[kind.name], Field(examples=[kind.name])),  # type: ignore[arg-type]
        config=(dict[str, Any], Field(json_schema_extra=_config_schema(kind))),
    )


if TYPE_CHECKING:
    NotifierIn = _NotifierBody
else:
    #: A notifier's body (docs/alerts.md): a union tagged by ``kind``, one member per notifier
    #: kind (:data:`~pgpulse.alerts.notifiers.NOTIFIER_KINDS`).
    NotifierIn = Annotated[
        Union[tuple(_notifier_body(kind) for kind in NOTIFIER_KINDS.values())],  # noqa: UP007
        Field(discriminator="kind"),
    ]


class Notifier(BaseModel):
    """A notifier, its config redacted. A tenant's job rules may name it when it is the
    tenant's (``tenant``) or shared with the tenant (``shared_with``)."""

    id: int
    name: str
    kind: str
    tenant: str | None
    shared_with: list[str]
    config: dict[str, Any]
    created_at: AwareDatetime
    updated_at: AwareDatetime


def _rule_in_doc() -> str:
    """:class:`RuleIn`'s description, from the rule kinds' table."""
    counts = ", ".join(f"``{k.name}``" for k in RULE_KINDS.values() if k.unit == "runs")
    seconds = ", ".join(f"``{k.name}``" for k in RULE_KINDS.values() if k.unit == "seconds")
    return (
        f"A rule's threshold (a count for {counts}; seconds for {seconds}; none for the "
        "others) and the notifiers it goes to (``checkin`` notifiers for a ``checkin`` rule, "
        "and for no other)."
    )


class RuleIn(_Body):
    __doc__ = _rule_in_doc()

    threshold: Number | None = None
    notifiers: list[str] = Field(min_length=1, max_length=20, examples=[["ops"]])


class Rule(BaseModel):
    """A rule: of a job (``job_id``), or the cluster's rule or default (``job_id`` null)."""

    id: int
    job_id: int | None
    tenant: str | None
    job: str | None
    rule: str
    threshold: float | None
    notifiers: list[str]


class Delivery(BaseModel):
    """One delivery of an alert: to which notifier, how far it got."""

    notifier: str
    status: str
    attempts: int
    last_status: int | None
    last_error: str | None
    finished_at: AwareDatetime | None
    next_attempt_at: AwareDatetime | None


class Alert(BaseModel):
    """An alert event and its deliveries. ``state``: ``open``, ``acknowledged``, ``resolved``."""

    id: int
    rule: str
    job_id: int | None
    tenant: str | None
    job: str | None
    scheduled_for: AwareDatetime | None
    fired_at: AwareDatetime
    error: str | None
    details: dict[str, Any]
    silenced: bool
    state: str
    resolved_at: AwareDatetime | None
    acknowledged_at: AwareDatetime | None
    acknowledged_by: str | None
    deliveries: list[Delivery]


class SilenceIn(_Body):
    """A silence of one job (``job_id``), or of everything (``job_id`` null: admin only)."""

    job_id: Integer | None = Field(default=None, ge=1, le=2**63 - 1)
    seconds: Number = Field(ge=1, le=366 * 86400, examples=[7200])
    reason: str = Field(default="", max_length=1000)


class Silence(BaseModel):
    """A silence in force."""

    id: int
    job_id: int | None
    starts_at: AwareDatetime
    ends_at: AwareDatetime
    reason: str


def _alerts(ctx: WebContext) -> AlertStore:
    return AlertStore(ctx.store.pool)


def _writer(who: Principal) -> Writer:
    return token_writer(who.token_id, who.tenant, admin=who.admin, shell_allowed=False)


async def _job(ctx: WebContext, who: Principal, job_id: int) -> tuple[str, str]:
    row = await ctx.service.reads.job(job_id, tenant=who.scope)
    if row is None:
        raise NoSuchJob(job_id)
    return row["tenant"], row["name"]


@router.get("/notifiers", response_model=list[Notifier], summary="List notifiers (admin)")
async def list_notifiers(who: Who, ctx: Ctx) -> list[dict[str, Any]]:
    """Every notifier with its config redacted."""
    check_alert_write(_writer(who), None)
    return await _alerts(ctx).list_notifiers()


@router.put("/notifiers/{name}", response_model=Notifier, summary="Create or replace a notifier")
async def put_notifier(
    name: Name, body: NotifierIn, who: Who, ctx: Ctx, response: Response
) -> dict[str, Any]:
    """Validated as the CLI validates it; webhook and check-in URLs must be public or on the
    server's ``--http-allow`` list. 201 when created, 200 when replaced. Admin only: an e-mail
    notifier's SMTP host is not held to the address policy, so a tenant cannot make one."""
    check_alert_write(_writer(who), None)
    for tenant in body.shared_with or ():  # before anything is written
        check_name("shared_with", tenant)
    alerts = _alerts(ctx)
    _, created = await alerts.add_notifier(
        name, body.kind, body.config, allow=ctx.settings.http_allow, tenant=body.tenant
    )
    if body.shared_with is not None:
        [current] = [n for n in await alerts.list_notifiers() if n["name"] == name]
        wanted = set(body.shared_with)
        await alerts.share_notifier(
            name, add=sorted(wanted), remove=sorted(set(current["shared_with"]) - wanted)
        )
    response.status_code = 201 if created else 200
    return next(n for n in await alerts.list_notifiers() if n["name"] == name)


@router.delete("/notifiers/{name}", status_code=204, summary="Remove a notifier")
async def delete_notifier(name: Name, who: Who, ctx: Ctx) -> Response:
    """Refused (400 ``refused``, field ``name``) while a rule names it."""
    check_alert_write(_writer(who), None)
    await _alerts(ctx).remove_notifier(name)
    return Response(status_code=204)


@router.get("/alert-rules", response_model=list[Rule], summary="List rules")
async def list_rules(who: Who, ctx: Ctx) -> list[dict[str, Any]]:
    """The cluster's rules and defaults, and the rules of the jobs this token sees."""
    rows = await _alerts(ctx).list_rules()
    return [r for r in rows if r["tenant"] is None or who.sees(r["tenant"])]


@router.put("/alert-rules/{rule}", response_model=Rule, summary="Set a cluster rule or default")
async def put_cluster_rule(rule: RuleName, body: RuleIn, who: Who, ctx: Ctx) -> dict[str, Any]:
    """A cluster rule (``node_died``, ``leader_changed``, ``lag``, ``no_live_node``), or a job
    rule's default for every job without its own (admin)."""
    alerts = _alerts(ctx)
    await alerts.set_rule(rule, body.notifiers, threshold=body.threshold, writer=_writer(who))
    return next(r for r in await alerts.list_rules() if r["job_id"] is None and r["rule"] == rule)


@router.put("/jobs/{job_id}/alert-rules/{rule}", response_model=Rule, summary="Set a job's rule")
async def put_job_rule(
    job_id: JobId, rule: RuleName, body: RuleIn, who: Who, ctx: Ctx
) -> dict[str, Any]:
    """A rule of one job, replacing the default of its kind for that job. A ``silence`` window
    shorter than the job's schedule's period is refused (field ``threshold``)."""
    job = await _job(ctx, who, job_id)
    alerts = _alerts(ctx)
    await alerts.set_rule(
        rule, body.notifiers, threshold=body.threshold, job=job, writer=_writer(who)
    )
    rows = await alerts.list_rules(job=job)
    return next(r for r in rows if r["job_id"] == job_id and r["rule"] == rule)


@router.delete("/jobs/{job_id}/alert-rules/{rule}", status_code=204, summary="Remove a rule")
async def delete_job_rule(job_id: JobId, rule: RuleName, who: Who, ctx: Ctx) -> Response:
    """Remove one job's rule (the default of its kind applies again)."""
    job = await _job(ctx, who, job_id)
    check_alert_write(_writer(who), job[0])
    await _alerts(ctx).remove_rule(rule, job=job)
    return Response(status_code=204)


@router.get("/alerts", response_model=list[Alert], summary="List alerts and their deliveries")
async def list_alerts(
    who: Who,
    ctx: Ctx,
    job_id: Annotated[int | None, Query(ge=1)] = None,
    open: bool = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[dict[str, Any]]:
    """Newest first; a tenant token sees its jobs' alerts, not the cluster's."""
    job = await _job(ctx, who, job_id) if job_id is not None else None
    rows = await _alerts(ctx).list_alerts(job=job, open_only=open, limit=limit)
    return [r for r in rows if who.admin or (r["tenant"] is not None and who.sees(r["tenant"]))]


@router.post("/alerts/{alert_id}/acknowledge", response_model=Alert, summary="Acknowledge")
async def acknowledge(alert_id: AlertId, who: Who, ctx: Ctx) -> dict[str, Any]:
    """Someone is on it; the first acknowledgement is kept. A notice (``leader_changed``,
    ``no_live_node``) is closed by it (docs/alerts.md, "States")."""
    alerts = _alerts(ctx)
    rows = await alerts.list_alerts(alert_id=alert_id, limit=1)
    if not rows or not (who.admin or (rows[0]["tenant"] and who.sees(rows[0]["tenant"]))):
        raise AlertNotFound(alert_id)
    await alerts.acknowledge(alert_id, by=f"token {who.token_id}")
    [row] = await alerts.list_alerts(alert_id=alert_id, limit=1)
    return row


@router.get("/silences", response_model=list[Silence], summary="Silences in force")
async def list_silences(who: Who, ctx: Ctx) -> list[dict[str, Any]]:
    """Soonest to end first."""
    rows = await _alerts(ctx).list_silences()
    return [r for r in rows if who.admin or (r["tenant"] is not None and who.sees(r["tenant"]))]


@router.post("/silences", response_model=Silence, status_code=201, summary="Silence alerts")
async def add_silence(body: SilenceIn, who: Who, ctx: Ctx) -> dict[str, Any]:
    """Alerts that fire meanwhile are recorded, not delivered."""
    job = await _job(ctx, who, body.job_id) if body.job_id is not None else None
    check_alert_write(_writer(who), job[0] if job else None)
    return await _alerts(ctx).silence(body.seconds, job=job, reason=body.reason)


@router.delete("/silences/{silence_id}", response_model=Silence, summary="End a silence")
async def end_silence(silence_id: SilenceId, who: Who, ctx: Ctx) -> dict[str, Any]:
    """Ends it now, before its time: alerts that fire from now on are delivered. A tenant token
    ends its jobs' silences; a silence of everything needs an admin token. 404 for a silence
    that ended, never existed or is not the token's to see."""
    return await _alerts(ctx).end_silence(silence_id, writer=_writer(who))


__all__ = ["ALL_RULES", "router"]
