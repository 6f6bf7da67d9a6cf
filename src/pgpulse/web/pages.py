"""The dashboard's history pages: runs (searched, filtered, paginated), one run with every
attempt, and the alerts (events with their deliveries, acknowledgements, silences).

Filters arrive as query parameters, checked by :mod:`pgpulse.web.filters`. Pages are keyset
cursors, as in the API (:mod:`pgpulse.web.reads`).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from pgpulse.alerts.store import AlertStore, SilenceNotFound
from pgpulse.core.access import token_writer
from pgpulse.core.constant_time import same_secret
from pgpulse.db.tokens import csrf_token, with_notice
from pgpulse.web.context import WebContext
from pgpulse.web.dashboard import Session, page, visible_alerts
from pgpulse.web.filters import (
    OUTCOMES,
    PAGE_SIZE,
    choice,
    instant,
    job_filter,
    next_link,
    run_cursor,
    text,
)

router = APIRouter(prefix="/ui", include_in_schema=False)
RunId = Annotated[int, Path(ge=1, le=2**63 - 1)]


@router.get("/runs", response_class=HTMLResponse)
async def runs_page(request: Request, session: Session) -> HTMLResponse:
    """Runs of every visible job, newest first: search (job name), filters (tenant for an
    admin, outcome, handler, source, ``since <= scheduled_for < until`` in UTC, ``job``: one
    job's id, from its page) and pages of :data:`PAGE_SIZE`."""
    who, token = session
    ctx: WebContext = request.app.state.pulse
    tenant = text(request, "tenant") if who.admin else None
    filters = {
        "q": text(request, "q"),
        "outcome": choice(request, "outcome", OUTCOMES),
        "handler": text(request, "handler"),
        "source": text(request, "source"),
    }
    since, until = instant(request, "since"), instant(request, "until")
    job_id = job_filter(request)
    rows = await ctx.service.lists.runs(
        tenant=tenant or who.scope,
        job_id=job_id,
        q=filters["q"],
        outcome=filters["outcome"],
        handler=filters["handler"],
        source=filters["source"],
        since=since,
        until=until,
        before_id=run_cursor(request),
        limit=PAGE_SIZE + 1,
    )
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    return page(
        request,
        "runs",
        who,
        token,
        runs=rows,
        filters={**filters, "tenant": tenant, "since": since, "until": until, "job": job_id},
        outcomes=OUTCOMES,
        next_page=next_link(request, str(rows[-1]["id"])) if more else None,
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def run_page(request: Request, run_id: RunId, session: Session) -> HTMLResponse:
    """One run: its occurrence, outcome, lag from the first attempt, every attempt (node,
    start, end, outcome, error) and the captured output."""
    who, token = session
    ctx: WebContext = request.app.state.pulse
    run = await ctx.service.run(who, run_id)
    attempts = [dict(a) for a in run["attempt_log"]]
    for attempt in attempts:
        start, end = attempt["started_at"], attempt["ended_at"]
        attempt["lag"] = None if start is None else (start - run["scheduled_for"]).total_seconds()
        attempt["duration"] = (
            None if start is None or end is None else (end - start).total_seconds()
        )
    return page(request, "run", who, token, run=run, attempts=attempts)


@router.get("/alerts", response_class=HTMLResponse)
async def alerts_page(request: Request, session: Session) -> HTMLResponse:
    """Alert events (newest first, open ones on top), each with its deliveries, and the
    silences in force. A tenant token sees its jobs' alerts, not the cluster's (as the API's
    ``GET /api/v1/alerts``)."""
    who, token = session
    ctx: WebContext = request.app.state.pulse
    alerts = AlertStore(ctx.store.pool)
    rows = visible_alerts(who, await alerts.list_alerts(limit=200))
    rows.sort(key=lambda r: (r["state"] != "open", -r["id"]))
    silences = visible_alerts(who, await alerts.list_silences())
    return page(request, "alerts", who, token, alerts=rows, silences=silences)


async def _csrf_ok(request: Request, token: str) -> bool:
    """Whether a button's form carries this session's CSRF value (the dashboard's own page
    sent it)."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    return same_secret((form.get("csrf") or [""])[0], csrf_token(token))


@router.post("/alerts/{alert_id}/acknowledge")
async def acknowledge_alert(request: Request, alert_id: RunId, session: Session) -> Response:
    """Acknowledge an alert from its button (CSRF-checked; an alert the token cannot see is
    refused as missing), then back to the alerts page with a notice."""
    who, token = session
    if not await _csrf_ok(request, token):
        return HTMLResponse("stale page: reload and retry", 403)
    ctx: WebContext = request.app.state.pulse
    alerts = AlertStore(ctx.store.pool)
    seen = await alerts.list_alerts(alert_id=alert_id, limit=1)
    if not seen or not (who.admin or (seen[0]["tenant"] and who.sees(seen[0]["tenant"]))):
        notice = f"no alert with id {alert_id}"
    else:
        await alerts.acknowledge(alert_id, by=f"token {who.token_id}")
        notice = "acknowledged"
    return RedirectResponse(with_notice("/ui/alerts", token, notice), status_code=303)


@router.post("/silences/{silence_id}/end")
async def end_silence(request: Request, silence_id: RunId, session: Session) -> Response:
    """End a silence now from its button (CSRF-checked; as the API's ``DELETE
    /api/v1/silences/{id}``: a tenant token ends its jobs' silences, one it cannot see is
    refused as missing), then back to the alerts page with a notice."""
    who, token = session
    if not await _csrf_ok(request, token):
        return HTMLResponse("stale page: reload and retry", 403)
    ctx: WebContext = request.app.state.pulse
    writer = token_writer(who.token_id, who.tenant, admin=who.admin, shell_allowed=False)
    try:
        await AlertStore(ctx.store.pool).end_silence(silence_id, writer=writer)
        notice = f"silence {silence_id} ended"
    except SilenceNotFound as exc:
        notice = exc.message
    return RedirectResponse(with_notice("/ui/alerts", token, notice), status_code=303)
