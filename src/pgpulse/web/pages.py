"""The dashboard's history pages: runs (searched, filtered, paginated), one run with every
attempt, and the alerts slot.

Filters arrive as query parameters, checked by :mod:`pgpulse.web.filters`. Pages are keyset
cursors, as in the API (:mod:`pgpulse.web.reads`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse

from pgpulse.web.context import WebContext
from pgpulse.web.dashboard import Session, page
from pgpulse.web.filters import (
    OUTCOMES,
    PAGE_SIZE,
    choice,
    instant,
    next_link,
    run_cursor,
    text,
)

router = APIRouter(prefix="/ui", include_in_schema=False)
RunId = Annotated[int, Path(ge=1, le=2**63 - 1)]


@router.get("/runs", response_class=HTMLResponse)
async def runs_page(request: Request, session: Session) -> HTMLResponse:
    """Runs of every visible job, newest first: search (job name), filters (tenant for an
    admin, outcome, handler, source, ``since <= scheduled_for < until`` in UTC) and pages of
    :data:`PAGE_SIZE`."""
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
    rows = await ctx.service.lists.runs(
        tenant=tenant or who.scope,
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
        filters={**filters, "tenant": tenant, "since": since, "until": until},
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
    """The alerts slot: open alerts, their deliveries and silences belong here (the alert
    engine, issue 20 items 1-3, fills ``_alerts.html``)."""
    who, token = session
    return page(request, "alerts", who, token)
