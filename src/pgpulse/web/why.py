"""Why an occurrence ran, or did not, on the web: ``GET /api/v1/jobs/{job_id}/why?at=T`` (the
trace of :mod:`pgpulse.core.why` as JSON) and the dashboard's ``/ui/jobs/{job_id}/why?at=T``,
which the occurrence grid's cells and the run page link to.

Authorised as every job read: a job of another tenant answers 404 exactly as a missing one.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict

from pgpulse.core.errors import InvalidInput
from pgpulse.core.why import FATES
from pgpulse.core.zones import check_instant_range, utc_if_naive
from pgpulse.db.why import why
from pgpulse.web.api import Ctx, JobId, Who
from pgpulse.web.bodies import JsonRoute
from pgpulse.web.context import WebContext
from pgpulse.web.dashboard import Session, page
from pgpulse.web.schemas import Error

_ERR: dict[str, Any] = {"model": Error}

api_router = APIRouter(
    prefix="/api/v1",
    responses={400: _ERR, 401: _ERR, 422: _ERR, 503: _ERR},
    route_class=JsonRoute,
)
ui_router = APIRouter(prefix="/ui", include_in_schema=False)

_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}([Tt ]|$)")
At = Annotated[
    str | None,
    Query(
        max_length=64,
        description="The instant asked about: ISO 8601 (UTC without an offset) or `now` "
        "(the default); the trace is of the job's occurrence at or nearest it.",
    ),
]


class WhyTrace(BaseModel):
    """The fate of one occurrence (``pgpulse why``): when it was due, who claimed it, each
    attempt, or what kept it from running, and what Pulse cannot know. Fact objects
    (``scheduled``, ``claim``, ``attempts``, ``skip``, ``pause``, ``waiting_for``,
    ``completed``, ``deleted``) appear when they apply; docs/why.md lists them."""

    model_config = ConfigDict(extra="allow")

    tenant: str
    name: str
    job_id: int | None
    at: str
    occurrence: str | None
    fate: str
    summary: str
    unknown: list[str]
    lines: list[str]


def parse_at(value: str | None) -> datetime | None:
    """``at`` as an aware instant; ``None`` for ``now`` or nothing (the database's now).

    Raises:
        InvalidInput: ``field="at"``: not ISO 8601, or outside the instants Pulse stores.
    """
    if value is None or value.strip().lower() == "now":
        return None
    try:
        if not _ISO.match(value):
            raise ValueError(value)
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(
            f"at {value!r} is not an instant: ISO 8601 (e.g. 2026-12-01T10:00Z) or 'now'",
            field="at",
            value=value,
        ) from None
    return check_instant_range("at", utc_if_naive(moment), value)


@api_router.get(
    "/jobs/{job_id}/why",
    response_model=WhyTrace,
    responses={404: _ERR},
    summary="Why an occurrence ran, or did not",
)
async def job_why(job_id: JobId, who: Who, ctx: Ctx, at: At = None) -> dict[str, Any]:
    """The trace of the job's occurrence at or nearest ``at``: its ``fate`` (one of
    ``succeeded``, ``failed``, ``running``, ``missed``, ``superseded``, ``paused``,
    ``no_handler``... as docs/why.md lists them), the facts behind it, the same trace as
    ``lines`` of text, and what Pulse cannot know (404 if the job is not visible)."""
    instant = parse_at(at)
    await ctx.service.job(who, job_id)
    trace = await why(
        ctx.store, job_id=job_id, at=instant, scope=who.scope, ttl=ctx.settings.node_ttl
    )
    return trace.as_json()


@ui_router.get("/jobs/{job_id}/why", response_class=HTMLResponse)
async def why_page(request: Request, job_id: JobId, session: Session) -> HTMLResponse:
    """The trace of one occurrence of a job, for the occurrence grid's and the run page's
    links."""
    who, token = session
    ctx: WebContext = request.app.state.pulse
    instant = parse_at(request.query_params.get("at"))
    job = await ctx.service.job(who, job_id)
    trace = await why(
        ctx.store, job_id=job_id, at=instant, scope=who.scope, ttl=ctx.settings.node_ttl
    )
    return page(
        request, "why", who, token, job=job, trace=trace.as_json(), meaning=FATES[trace.fate]
    )
