"""The JSON API (``/api/v1``): jobs, runs, cluster. Its OpenAPI document is
``/api/v1/openapi.json``.

Every route needs ``Authorization: Bearer <token>`` (:mod:`pgpulse.db.tokens`). The
dashboard's pages reach the same routes under ``/ui/api/v1`` (:data:`DASHBOARD_API`), signed in
by the browser's cookie, every write with the page's CSRF value (:class:`DashboardCsrf`). Jobs
and runs are addressed by id; a job or run of another tenant answers 404 exactly as a missing
one. Writes go through :class:`~pgpulse.web.service.JobService` (the store's methods); refusals
follow :mod:`pgpulse.web.errors`.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BeforeValidator

from pgpulse.core.constant_time import same_secret
from pgpulse.core.errors import InvalidInput
from pgpulse.core.plan import Plan, Step, format_plan
from pgpulse.core.policy import check_text
from pgpulse.core.zones import utc_if_naive
from pgpulse.db.pausing import pause_message
from pgpulse.db.tokens import Principal, csrf_token
from pgpulse.web.bodies import ASGIApp, JsonRoute, Receive, Scope, Send, send_refusal
from pgpulse.web.context import WebContext
from pgpulse.web.dashboard import COOKIE
from pgpulse.web.errors import Unauthorized, error_body
from pgpulse.web.reads import decode_job_cursor, encode_job_cursor
from pgpulse.web.schemas import (
    Backfill,
    BackfillRequest,
    Calendar,
    CalendarIn,
    Cluster,
    Error,
    History,
    Job,
    JobCreate,
    JobPage,
    JobPatch,
    KeyLimit,
    KeyLimitIn,
    Me,
    Outcome,
    PauseRequest,
    PauseResult,
    PlanStep,
    ResumeRequest,
    Run,
    RunPage,
    SchedulePreview,
    SkipRequest,
    Skips,
    Status,
    Triggered,
    TriggerRequest,
    UnskipRequest,
)
from pgpulse.web.service import PREVIEW_MAX, present_job, schedule_preview

bearer = HTTPBearer(auto_error=False, description="An API token: pgpulse token create.")

_ERR = {"model": Error}
router = APIRouter(
    prefix="/api/v1",
    responses={400: _ERR, 401: _ERR, 422: _ERR, 503: _ERR},
    route_class=JsonRoute,
)

JobId = Annotated[int, Path(ge=1, le=2**63 - 1, examples=[1], description="The job's id.")]
RunId = Annotated[int, Path(ge=1, le=2**63 - 1, examples=[1], description="The run's id.")]
Text = Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")]
Limit = Annotated[int, Query(ge=1, le=500, description="Items per page.")]
Search = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=200,
        pattern=r"^[^\x00-\x1f]+$",
        description="Text in the job's name (jobs: or its handler), case-insensitively.",
    ),
]
Cursor = Annotated[
    str | None,
    Query(min_length=1, max_length=1000, description="next_cursor of the previous page."),
]


#: Where the dashboard's pages reach this API: the same routes, signed in by the browser's
#: cookie (scoped to ``/ui``) instead of a bearer token (:func:`principal`).
DASHBOARD_API = "/ui/api/"
#: The header a dashboard page's write carries its CSRF value in.
CSRF_HEADER = "X-CSRF-Token"
#: Methods that change nothing: no CSRF value needed.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def context(request: Request) -> WebContext:
    """The app's :class:`WebContext`."""
    ctx: WebContext = request.app.state.pulse
    return ctx


async def principal(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """Who the request acts for, from its bearer token (checked on every request); under
    :data:`DASHBOARD_API`, with no ``Authorization`` header, from the dashboard's cookie
    (:func:`_dashboard_principal`).

    Raises:
        Unauthorized: no bearer token, or an unknown, malformed or revoked one.
    """
    # only a request with no Authorization header at all: DashboardCsrf skips exactly those
    # that have one, so a cookie is never used without the CSRF check
    if "authorization" not in request.headers and request.url.path.startswith(DASHBOARD_API):
        return await _dashboard_principal(request)
    if creds is None:
        raise Unauthorized(
            "a bearer token is required (Authorization: Bearer <token>)",
            field="authorization",
            value=None,
        )
    who = await context(request).tokens.authenticate(creds.credentials)
    if who is None:
        raise Unauthorized(
            "the token is unknown or revoked",
            field="authorization",
            value=creds.credentials[:12] + "…",
        )
    return who


async def _dashboard_principal(request: Request) -> Principal:
    """Who a dashboard page's request acts for: the signed-in browser's token cookie, checked
    as a bearer token is (a write's CSRF value is checked before, by :class:`DashboardCsrf`).

    Raises:
        Unauthorized: no cookie, or an unknown or revoked token.
    """
    token = request.cookies.get(COOKIE)
    who = await context(request).tokens.authenticate(token) if token else None
    if who is None or token is None:
        raise Unauthorized("not signed in: sign in at /ui/login", field="authorization", value=None)
    return who


class DashboardCsrf:
    """ASGI middleware: a write under :data:`DASHBOARD_API` signed in by the dashboard's
    cookie (no ``Authorization`` header) must carry the page's CSRF value
    (:func:`~pgpulse.db.tokens.csrf_token` of the cookie's token) in :data:`CSRF_HEADER`, else
    403 naming ``csrf`` — checked before the body is read, so a forged request gets no other
    answer. A cross-site page can neither send the cookie (``SameSite=Strict``) nor compute
    the value, nor set a header on a plain form post.

    Args:
        app: the wrapped ASGI app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith(DASHBOARD_API)
            and scope["method"] not in SAFE_METHODS
        ):
            request = Request(scope)
            token = request.cookies.get(COOKIE)
            if (
                "authorization" not in request.headers
                and token is not None
                and not same_secret(request.headers.get(CSRF_HEADER, ""), csrf_token(token))
            ):
                await send_refusal(
                    send,
                    403,
                    error_body(
                        "forbidden",
                        f"the request has no valid {CSRF_HEADER} header: reload the page and retry",
                        "csrf",
                        None,
                    ),
                )
                return
        await self.app(scope, receive, send)


Who = Annotated[Principal, Depends(principal)]
Ctx = Annotated[WebContext, Depends(context)]


@router.get("/me", response_model=Me, summary="Who this token acts for")
async def me(who: Who) -> dict[str, Any]:
    """The token's id, tenant and whether it is an admin token."""
    return {"token_id": who.token_id, "tenant": who.tenant, "admin": who.admin}


@router.get("/jobs", response_model=JobPage, summary="List jobs")
async def list_jobs(
    who: Who,
    ctx: Ctx,
    tenant: Text = None,
    status: Status | None = None,
    handler: Text = None,
    source: Text = None,
    last_outcome: Outcome | None = None,
    name_prefix: Text = None,
    q: Search = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> dict[str, Any]:
    """Jobs in (tenant, name) order, filtered (every filter given applies); a tenant token
    sees only its tenant."""
    if tenant is not None and not who.sees(tenant):
        return {"items": [], "next_cursor": None}
    after = decode_job_cursor(cursor) if cursor else None
    rows = await ctx.service.lists.jobs(
        tenant=tenant or who.scope,
        status=status,
        handler=handler,
        source=source,
        last_outcome=last_outcome,
        name_prefix=name_prefix,
        q=q,
        after=after,
        limit=limit + 1,
    )
    page = rows[:limit]
    more = len(rows) > limit
    return {
        "items": [present_job(row) for row in page],
        "next_cursor": encode_job_cursor(page[-1]["tenant"], page[-1]["name"]) if more else None,
    }


@router.post(
    "/jobs",
    response_model=Job,
    status_code=201,
    summary="Create or update a job",
    responses={200: {"model": Job, "description": "Updated"}, 403: _ERR, 413: _ERR},
)
async def create_job(body: JobCreate, who: Who, ctx: Ctx, response: Response) -> dict[str, Any]:
    """Upsert by (tenant, name): 201 when created, 200 when updated. An unchanged schedule keeps
    the job's state. ``shell`` jobs need an admin token and a server started with
    ``--allow-shell-jobs``; ``http`` targets must be public or allow-listed."""
    job, created = await ctx.service.save(who, body.model_dump())
    response.status_code = 201 if created else 200
    return job


def _plan(step: Step) -> dict[str, Any]:
    return {
        "action": step.action,
        "tenant": step.tenant,
        "name": step.name,
        "job_id": step.job_id,
        "changes": step.changes,
        # the step's own lines; the summary line counts the one step
        "lines": format_plan(Plan("api", [step]))[:-1],
    }


@router.post(
    "/plan",
    response_model=PlanStep,
    summary="Plan a create or update, writing nothing",
    responses={403: _ERR, 413: _ERR},
)
async def plan_job(body: JobCreate, who: Who, ctx: Ctx) -> dict[str, Any]:
    """What ``POST /jobs`` with this body would do, with the same checks and refusals (403,
    422), writing nothing: ``create``, ``update`` with each changed field's old and new value,
    or ``unchanged``."""
    return _plan(await ctx.service.plan(who, body.model_dump()))


@router.get("/jobs/{job_id}", response_model=Job, responses={404: _ERR}, summary="Show a job")
async def get_job(job_id: JobId, who: Who, ctx: Ctx) -> dict[str, Any]:
    """One job with its next occurrences in its own time zone."""
    return await ctx.service.job(who, job_id)


@router.patch(
    "/jobs/{job_id}",
    response_model=Job,
    summary="Change a job",
    responses={403: _ERR, 404: _ERR, 413: _ERR},
)
async def update_job(job_id: JobId, body: JobPatch, who: Who, ctx: Ctx) -> dict[str, Any]:
    """Change the given fields; a new schedule or zone takes effect from the next occurrence."""
    return await ctx.service.update(who, job_id, body.model_dump(exclude_unset=True))


@router.post(
    "/jobs/{job_id}/plan",
    response_model=PlanStep,
    summary="Plan a change, writing nothing",
    responses={403: _ERR, 404: _ERR, 413: _ERR},
)
async def plan_update(job_id: JobId, body: JobPatch, who: Who, ctx: Ctx) -> dict[str, Any]:
    """What ``PATCH /jobs/{job_id}`` with this body would do, with the same checks and
    refusals, writing nothing."""
    changes = body.model_dump(exclude_unset=True)
    return _plan(await ctx.service.plan_update(who, job_id, changes))


@router.delete(
    "/jobs/{job_id}",
    status_code=204,
    response_class=Response,
    responses={404: _ERR},
    summary="Delete a job",
)
async def delete_job(job_id: JobId, who: Who, ctx: Ctx) -> Response:
    """Delete the job and its run history."""
    await ctx.service.act(who, job_id, "delete")
    return Response(status_code=204)


@router.post(
    "/jobs/{job_id}/pause",
    response_model=PauseResult,
    responses={404: _ERR, 409: _ERR},
    summary="Pause a job",
)
async def pause_job(
    job_id: JobId, who: Who, ctx: Ctx, body: PauseRequest | None = None
) -> dict[str, Any]:
    """Pause a job (409 once completed), optionally until an instant (the leader resumes it
    then; the occurrences inside are recorded as skipped) and with a reason shown wherever its
    status is. An idle or failed job pauses at once; a running one when its run ends
    (``pause_requested``; no new occurrence starts meanwhile), or at once with ``cancel``: its
    run is cancelled (recorded ``cancelled``) and the job paused past that occurrence. The
    answer is the job with what the pause did (``message``, ``cancelled_runs``)."""
    options = {} if body is None else body.model_dump()
    job, done = await ctx.service.pause(who, job_id, options)
    return {
        **job,
        "message": pause_message(job["name"], done),
        "changed": done.changed,
        "waits_for_run": done.run_id if done.requested else None,
        "cancelled_runs": [
            {
                "run_id": run.run_id,
                "kind": run.kind,
                "scheduled_for": run.scheduled_for,
                "node_id": run.node_id,
            }
            for run in done.cancelled
        ],
    }


@router.post(
    "/jobs/{job_id}/resume",
    response_model=Job,
    responses={404: _ERR, 409: _ERR},
    summary="Resume a job",
)
async def resume_job(
    job_id: JobId, who: Who, ctx: Ctx, body: ResumeRequest | None = None
) -> dict[str, Any]:
    """Resume a paused or failed job. ``catch_up`` says what happens to the occurrences inside
    the pause: ``skip`` (default: the job holds its first occurrence after now), ``once`` (they
    run once, as the newest) or ``backfill`` (each runs, oldest first). A running job whose
    pause is requested is not paused: the request is withdrawn (``pause_requested`` false)."""
    options = {} if body is None else body.model_dump()
    return await ctx.service.act(who, job_id, "resume", options)


@router.post(
    "/jobs/{job_id}/trigger",
    response_model=Triggered,
    responses={404: _ERR, 409: _ERR},
    summary="Run a job now",
)
async def trigger_job(
    job_id: JobId, who: Who, ctx: Ctx, body: TriggerRequest | None = None
) -> dict[str, Any]:
    """Without a payload, move an idle job's occurrence to the database's now (409 otherwise).
    With one, run the job once now with it, as an extra occurrence beside the schedule (an
    idle or running job; 409 otherwise), recorded as kind ``trigger``."""
    if body is not None and body.payload is not None:
        job, done = await ctx.service.trigger_with_payload(who, job_id, body.payload)
        return {"job": job, "occurrence": done.scheduled_for, "run_id": done.occurrence}
    job = await ctx.service.act(who, job_id, "trigger")
    return {"job": job, "occurrence": job["scheduled_for"]}


@router.post(
    "/jobs/{job_id}/backfill",
    response_model=Backfill,
    responses={404: _ERR, 422: _ERR},
    summary="Backfill a range",
)
async def backfill_job(job_id: JobId, body: BackfillRequest, who: Who, ctx: Ctx) -> dict[str, Any]:
    """Run each selected occurrence of [from, to] exactly once more, beside the live schedule,
    at most max_concurrency at once; each run is a history row of its own, kind ``backfill``.
    With ``dry_run`` nothing is written and the plan is the same."""
    plan = await ctx.service.backfill(
        who,
        job_id,
        {
            "start": body.start,
            "end": body.end,
            "only": tuple(body.only),
            "dry_run": body.dry_run,
            "max_concurrency": body.max_concurrency,
            "newest_first": body.newest_first,
        },
    )
    return {
        "job_id": plan.job_id,
        "batch_id": plan.batch_id,
        "dry_run": body.dry_run,
        "occurrences": [
            {"scheduled_for": p.scheduled_for, "status": p.status, "selected": p.selected}
            for p in plan.plan
        ],
    }


@router.post(
    "/jobs/{job_id}/skip",
    response_model=Skips,
    responses={404: _ERR, 422: _ERR},
    summary="Skip occurrences",
)
async def skip_job(
    job_id: JobId, who: Who, ctx: Ctx, body: SkipRequest | None = None
) -> dict[str, Any]:
    """Skip the next ``next`` occurrences (1 when neither is given) or the one ``at``, without
    pausing the job: each is recorded ``skipped`` (by the token, with the reason) when its time
    comes. A run in progress is not stopped. The answer lists every occurrence now listed."""
    request = {} if body is None else {"count": body.next, "at": body.at, "reason": body.reason}
    skips = await ctx.service.skip(who, job_id, request)
    return {"job_id": job_id, "skips": [s.as_json() for s in skips]}


@router.post(
    "/jobs/{job_id}/unskip",
    response_model=Skips,
    responses={404: _ERR, 422: _ERR},
    summary="Undo a skip",
)
async def unskip_job(
    job_id: JobId, who: Who, ctx: Ctx, body: UnskipRequest | None = None
) -> dict[str, Any]:
    """The listed occurrence ``at`` (none: every listed one) runs as scheduled after all."""
    at = None if body is None else body.at
    skips = await ctx.service.unskip(who, job_id, at)
    return {"job_id": job_id, "skips": [s.as_json() for s in skips]}


async def _runs(
    ctx: WebContext,
    who: Principal,
    *,
    job_id: int | None,
    outcome: str | None,
    since: datetime | None,
    until: datetime | None,
    cursor: str | None,
    limit: int,
    tenant: str | None = None,
    handler: str | None = None,
    source: str | None = None,
    q: str | None = None,
) -> dict[str, Any]:
    if tenant is not None and not who.sees(tenant):
        return {"items": [], "next_cursor": None}
    before = None
    if cursor is not None:
        if not cursor.isdigit() or not 0 < int(cursor) < 2**63:
            raise InvalidInput(
                f"cursor {cursor!r} is not a cursor returned by this API",
                field="cursor",
                value=cursor,
            )
        before = int(cursor)
    rows = await ctx.service.lists.runs(
        tenant=tenant or who.scope,
        job_id=job_id,
        outcome=outcome,
        handler=handler,
        source=source,
        q=q,
        since=since,
        until=until,
        before_id=before,
        limit=limit + 1,
    )
    page = rows[:limit]
    return {"items": page, "next_cursor": str(page[-1]["id"]) if len(rows) > limit else None}


def _iso_only(value: object) -> object:
    """Refuse the Unix timestamps pydantic would otherwise read as instants: ISO-8601 only."""
    if isinstance(value, str) and not _ISO_DATE.match(value):
        raise ValueError("expected an ISO-8601 instant")
    return value


def _utc(value: datetime | None) -> datetime | None:
    """A filter's instant without an offset is UTC, as the dashboard's and a backfill's."""
    return None if value is None else utc_if_naive(value)


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]")
Since = Annotated[
    datetime | None,
    BeforeValidator(_iso_only),
    AfterValidator(_utc),
    Query(description="scheduled_for >= since (ISO-8601; without an offset: UTC)."),
]
Until = Annotated[
    datetime | None,
    BeforeValidator(_iso_only),
    AfterValidator(_utc),
    Query(description="scheduled_for < until (ISO-8601; without an offset: UTC)."),
]


@router.get("/runs", response_model=RunPage, summary="List runs")
async def list_runs(
    who: Who,
    ctx: Ctx,
    job_id: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    tenant: Text = None,
    outcome: Outcome | None = None,
    handler: Text = None,
    source: Text = None,
    q: Search = None,
    since: Since = None,
    until: Until = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> dict[str, Any]:
    """Runs newest first, by job, tenant, outcome, the job's handler, source or name (``q``)
    and a range of scheduled_for; each with its output and every attempt."""
    return await _runs(
        ctx,
        who,
        tenant=tenant,
        handler=handler,
        source=source,
        q=q,
        job_id=job_id,
        outcome=outcome,
        since=since,
        until=until,
        cursor=cursor,
        limit=limit,
    )


@router.get(
    "/jobs/{job_id}/runs",
    response_model=RunPage,
    responses={404: _ERR},
    summary="List a job's runs",
)
async def list_job_runs(
    job_id: JobId,
    who: Who,
    ctx: Ctx,
    outcome: Outcome | None = None,
    since: Since = None,
    until: Until = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> dict[str, Any]:
    """Runs of one job, newest first (404 if the job is not visible)."""
    await ctx.service.job(who, job_id)
    return await _runs(
        ctx,
        who,
        job_id=job_id,
        outcome=outcome,
        since=since,
        until=until,
        cursor=cursor,
        limit=limit,
    )


@router.get(
    "/jobs/{job_id}/history",
    response_model=History,
    responses={404: _ERR},
    summary="A job's audit trail",
)
async def job_history(job_id: JobId, who: Who, ctx: Ctx, limit: Limit = 100) -> dict[str, Any]:
    """Every create, update, pause, resume, trigger, backfill, skip of the job, newest first:
    when (the database's clock), source, actor, revision and the changed fields (404 if not
    visible)."""
    return {"items": await ctx.service.history(who, job_id, limit)}


@router.get("/runs/{run_id}", response_model=Run, responses={404: _ERR}, summary="Show a run")
async def get_run(run_id: RunId, who: Who, ctx: Ctx) -> dict[str, Any]:
    """One run with its output, error and every attempt (node, start, end, outcome, error)."""
    return await ctx.service.run(who, run_id)


@router.get("/cluster", response_model=Cluster, summary="Nodes, shards, leader, counts")
async def cluster(who: Who, ctx: Ctx) -> dict[str, Any]:
    """Every registered node (liveness by heartbeat age), the leader, shard ownership, and the
    job counts and worst lag of the token's tenant (admin: all)."""
    return await ctx.service.cluster(who)


@router.get("/calendars", response_model=list[Calendar], summary="List exclusion calendars")
async def list_calendars(who: Who, ctx: Ctx) -> list[dict[str, Any]]:
    """The exclusion calendars of the token's tenant (admin: all), with the jobs naming each."""
    return await ctx.service.store.list_calendars(who.scope)


@router.put(
    "/calendars/{name}",
    response_model=Calendar,
    responses={403: _ERR},
    summary="Create or replace an exclusion calendar",
)
async def put_calendar(
    name: Annotated[str, Path(min_length=1, max_length=64)],
    body: CalendarIn,
    who: Who,
    ctx: Ctx,
    tenant: Text = None,
) -> dict[str, Any]:
    """Dates and/or a country's (subdivision's) public holidays on which the jobs that name the
    calendar do not run: each such occurrence is recorded as skipped, reason ``calendar NAME``."""
    return await ctx.service.put_calendar(who, tenant, name, body.model_dump())


@router.delete(
    "/calendars/{name}",
    status_code=204,
    response_class=Response,
    responses={403: _ERR, 404: _ERR, 409: _ERR},
    summary="Delete an exclusion calendar",
)
async def delete_calendar(
    name: Annotated[str, Path(min_length=1, max_length=64)],
    who: Who,
    ctx: Ctx,
    tenant: Text = None,
) -> Response:
    """Delete the calendar (409 while a job names it)."""
    await ctx.service.store.delete_calendar(
        tenant or who.tenant or "default", name, writer=ctx.service.writer(who)
    )
    return Response(status_code=204)


@router.get("/schedule/next", response_model=SchedulePreview, summary="Preview a schedule")
async def schedule_next(
    who: Who,
    schedule: Annotated[
        str,
        Query(min_length=1, max_length=200, description="A schedule (cron, @every, @at...)."),
    ],
    timezone: Annotated[
        str, Query(min_length=1, max_length=64, description="IANA time zone.")
    ] = "UTC",
    count: Annotated[int, Query(ge=1, le=PREVIEW_MAX, description="How many.")] = 5,
    after: Annotated[
        datetime | None,
        BeforeValidator(_iso_only),
        AfterValidator(_utc),
        Query(description="Start instant (ISO-8601; without an offset: UTC)."),
    ] = None,
) -> dict[str, Any]:
    """The next occurrences of a schedule in UTC and in its zone, and the schedule in words, as
    ``pgpulse schedule next --json`` gives them (``after``: default now, to the second; an
    ``@every`` grid is anchored there). Any token may ask: it reads nothing stored."""
    start = after or datetime.now(UTC).replace(microsecond=0)
    check_text("schedule", schedule)
    check_text("timezone", timezone)
    return await asyncio.to_thread(schedule_preview, schedule, timezone, count, start)


@router.get("/limits", response_model=list[KeyLimit], summary="List limits of concurrency keys")
async def list_limits(who: Who, ctx: Ctx) -> list[dict[str, Any]]:
    """The limits of the token's tenant (admin: all), each with the occurrences its key's jobs
    run now, how many jobs name the key and how many of them wait, due."""
    return await ctx.service.store.list_limits(who.scope)


@router.put(
    "/limits/{key}",
    response_model=KeyLimit,
    responses={403: _ERR},
    summary="Set the limit of a concurrency key",
)
async def put_limit(
    key: Annotated[str, Path(min_length=1, max_length=200)],
    body: KeyLimitIn,
    who: Who,
    ctx: Ctx,
    tenant: Text = None,
) -> dict[str, Any]:
    """At most ``max_running`` occurrences of the tenant's jobs whose ``concurrency_key`` is
    ``key`` run at once, across every node; the others wait, due (docs/policies.md)."""
    where = tenant or who.tenant or "default"
    store = ctx.service.store
    await store.set_limit(where, key, body.max_running, writer=ctx.service.writer(who))
    return next(row for row in await store.list_limits(where) if row["key"] == key)


@router.delete(
    "/limits/{key}",
    status_code=204,
    response_class=Response,
    responses={403: _ERR, 404: _ERR},
    summary="Delete the limit of a concurrency key",
)
async def delete_limit(
    key: Annotated[str, Path(min_length=1, max_length=200)],
    who: Who,
    ctx: Ctx,
    tenant: Text = None,
) -> Response:
    """Delete the limit: the key's jobs are no longer limited (they keep the key)."""
    await ctx.service.store.delete_limit(
        tenant or who.tenant or "default", key, writer=ctx.service.writer(who)
    )
    return Response(status_code=204)
