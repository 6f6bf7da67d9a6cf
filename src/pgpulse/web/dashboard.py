"""The dashboard (``/ui``): server-rendered pages, signed in with an API token.

Pages: jobs (searched, filtered and paginated: status, schedule in words and as expression, next
occurrence in the job's zone, last outcome, lag; failures that need attention), one job
(definition, next occurrences, its occurrence grid, a chart of duration and lag over time, run
history), and the cluster (nodes with their handlers, shards, heartbeats, the leader, a shard
map); the runs and run pages and the alerts slot are in :mod:`pgpulse.web.pages`. Each page's
live part is re-fetched as an HTML fragment (``?fragment=1``) every few seconds by
``static/pulse.js``, so it updates itself without a full reload; without JavaScript the pages
and the pause, resume and trigger buttons still work (plain forms).

Sign-in stores the token in an ``HttpOnly``, ``SameSite=Strict`` cookie scoped to ``/ui``; the
token is checked on every request, so a revoked token signs the browser out at once. Buttons
post a CSRF value derived from the token (:func:`pgpulse.db.tokens.csrf_token`); sign-in and
sign-out, which have no session to derive one from, accept posts from the dashboard's own
pages only (:func:`from_own_page`).
"""

from __future__ import annotations

from datetime import datetime
from importlib import resources
from pathlib import Path as FilePath
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from pgpulse.alerts.store import AlertStore
from pgpulse.core.constant_time import same_secret
from pgpulse.core.errors import InvalidInput, PulseError
from pgpulse.core.skips import skipped_note
from pgpulse.core.wording import unchanged_note, withdrawn_note
from pgpulse.db.pausing import pause_note
from pgpulse.db.tokens import Principal, csrf_token, notice_signature, with_notice
from pgpulse.web import grid
from pgpulse.web.charts import Point, run_chart
from pgpulse.web.context import WebContext
from pgpulse.web.errors import error_body, status_of
from pgpulse.web.filters import OUTCOMES, PAGE_SIZE, STATUSES, choice, next_link, text
from pgpulse.web.reads import decode_job_cursor, encode_job_cursor
from pgpulse.web.service import present_job

COOKIE = "pgpulse_token"
#: Where the package's templates and static files live.
WEB_DIR = FilePath(str(resources.files("pgpulse.web")))
templates = Jinja2Templates(directory=WEB_DIR / "templates")
router = APIRouter(prefix="/ui", include_in_schema=False)
JobId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def _seconds(value: float | None) -> str:
    """A duration for people: ``4.2 ms``, ``1.25 s``, ``60 s``, ``2.5 min``, ``1 h``."""
    if value is None:
        return "–"
    size = abs(value)
    if size < 1:
        return f"{value * 1000:.3g} ms"
    if size < 10:
        return f"{value:.2f} s"
    if size < 120:
        return f"{value:.0f} s"
    return f"{value / 60:.3g} min" if size < 3600 else f"{value / 3600:.3g} h"


def _when(value: datetime | None) -> str:
    return "–" if value is None else value.isoformat(sep=" ", timespec="seconds")


def _when_ms(value: datetime | None) -> str:
    return "–" if value is None else value.isoformat(sep=" ", timespec="milliseconds")


#: How the cluster page shows each node state (cluster_nodes): a badge class, and what it means.
templates.env.globals["node_badge"] = {
    "alive": "idle",
    "draining": "late",
    "stopped": "paused",
    "lost": "failed",
    "unhealthy": "failed",
}
templates.env.globals["node_meaning"] = {
    "alive": "heartbeats within its time-to-live",
    "draining": "stopping: finishing its running attempts",
    "stopped": "stopped by a signal (SIGTERM) and said so: nothing to do",
    "lost": "killed, partitioned or paused: its leases expire and other nodes take its work",
    "unhealthy": "heartbeats, but its last claim failed (the error is below): it fires nothing",
}
templates.env.filters["seconds"] = _seconds
templates.env.filters["when"] = _when
templates.env.filters["when_ms"] = _when_ms


def _notice(request: Request) -> str:
    """The page's ``?notice=``, when a button's redirect signed it for this browser's token
    (:func:`~pgpulse.db.tokens.notice_signature`); else nothing."""
    notice = request.query_params.get("notice", "")
    token = request.cookies.get(COOKIE)
    if not notice or not token:
        return ""
    expected = notice_signature(token, notice)
    return notice if same_secret(request.query_params.get("sig", ""), expected) else ""


templates.env.globals["notice"] = _notice


class SignIn(Exception):
    """The browser is not signed in (no cookie, or a revoked token): go to the sign-in page."""


#: The most alert events read for the nav's count of open ones (a count past it shows as
#: this many and more).
OPEN_ALERTS_READ = 1000


def visible_alerts(who: Principal, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The alert (or silence) rows ``who`` may see: every one for an admin; a tenant token's
    own jobs' only, none of the cluster's (as the API's ``GET /api/v1/alerts``)."""
    return [r for r in rows if who.admin or (r["tenant"] is not None and who.sees(r["tenant"]))]


async def signed_in(request: Request) -> tuple[Principal, str]:
    """The principal of the browser's token cookie and the token. Raises :class:`SignIn`.

    For a whole page (a GET, not a refresh's fragment) it also counts the open alerts (not
    acknowledged, not resolved) the token sees, for the nav (``request.state.open_alerts``).
    """
    token = request.cookies.get(COOKIE)
    ctx: WebContext = request.app.state.pulse
    who = await ctx.tokens.authenticate(token) if token else None
    if who is None or token is None:
        raise SignIn()
    if request.method == "GET" and request.query_params.get("fragment") != "1":
        rows = await AlertStore(ctx.store.pool).list_alerts(open_only=True, limit=OPEN_ALERTS_READ)
        open_rows = [r for r in visible_alerts(who, rows) if r["state"] == "open"]
        request.state.open_alerts = len(open_rows)
        request.state.open_alerts_more = len(rows) == OPEN_ALERTS_READ
    return who, token


Session = Annotated[tuple[Principal, str], Depends(signed_in)]


def page(request: Request, name: str, who: Principal, token: str, **data: Any) -> HTMLResponse:
    """Render page ``name`` (``name.html``), or its live part alone (``_name.html``) for the
    refresh script's ``?fragment=1``, with the signed-in context every template uses."""
    fragment = request.query_params.get("fragment") == "1"
    ctx: WebContext = request.app.state.pulse
    return templates.TemplateResponse(
        request,
        f"_{name}.html" if fragment else f"{name}.html",
        {
            "who": who,
            "csrf": csrf_token(token),
            "page": name,
            "refresh_ms": int(ctx.settings.refresh_seconds * 1000),
            "open_alerts": getattr(request.state, "open_alerts", 0),
            "open_alerts_more": getattr(request.state, "open_alerts_more", False),
            **data,
        },
        headers={"Cache-Control": "no-store"},
    )


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request) -> HTMLResponse:
    """The sign-in form."""
    return templates.TemplateResponse(request, "login.html", {"error": None})


def from_own_page(request: Request) -> bool:
    """Whether a form post comes from this dashboard's own pages, not another site's.

    Sign-in and sign-out carry no anti-forgery value (no session exists before sign-in), so a
    cross-site form could sign a browser in with an attacker's token (login CSRF) or out. The
    browser says where a post comes from: ``Sec-Fetch-Site`` (every current browser; only
    ``same-origin``, or ``none`` for a request the user made, are accepted), else ``Origin``
    (must name this server's host and port, as its ``Host`` header does). A post with neither
    header is refused: every current browser sends ``Origin`` on a form post (Fetch standard,
    "append a request `Origin` header"), so it is not a post from these pages, and a script
    has the API and its bearer token instead of the sign-in form.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    host = request.headers.get("host", "").lower()
    return origin != "null" and urlsplit(origin).netloc.lower() == host


_FOREIGN = "This request did not come from this dashboard's own page: open /ui/login here."


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    """Check the posted token; on success set the cookie and go to the jobs page. A post from
    another site's page is refused with 403 and sets nothing (:func:`from_own_page`)."""
    if not from_own_page(request):
        return templates.TemplateResponse(
            request, "login.html", {"error": _FOREIGN}, status_code=403
        )
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    ctx: WebContext = request.app.state.pulse
    if not token or await ctx.tokens.authenticate(token) is None:
        return templates.TemplateResponse(
            request, "login.html", {"error": "That token is unknown or revoked."}, status_code=401
        )
    response = RedirectResponse("/ui/", status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        path="/ui",
        secure=ctx.settings.secure_cookies,
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Forget the token cookie (not for a post from another site's page: 403)."""
    if not from_own_page(request):
        return templates.TemplateResponse(
            request, "login.html", {"error": _FOREIGN}, status_code=403
        )
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.get("/", response_class=HTMLResponse)
async def jobs_page(request: Request, session: Session) -> HTMLResponse:
    """The visible jobs, searched (``q``: name or handler) and filtered (tenant for an admin,
    status, handler, source, last outcome), a page at a time; the failures that need attention
    and the job counts."""
    who, token = session
    ctx: WebContext = request.app.state.pulse
    tenant = text(request, "tenant") if who.admin else None
    filters = {
        "q": text(request, "q"),
        "status": choice(request, "status", STATUSES),
        "handler": text(request, "handler"),
        "source": text(request, "source"),
        "last_outcome": choice(request, "last_outcome", OUTCOMES),
    }
    cursor = text(request, "cursor")
    rows = await ctx.service.lists.jobs(
        tenant=tenant or who.scope,
        after=decode_job_cursor(cursor) if cursor else None,
        limit=PAGE_SIZE + 1,
        **filters,
    )
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    last = rows[-1] if rows else None
    return page(
        request,
        "jobs",
        who,
        token,
        jobs=[present_job(r) for r in rows],
        recent=await ctx.service.lists.recent_runs([r["id"] for r in rows]),
        filters={**filters, "tenant": tenant},
        statuses=STATUSES,
        outcomes=OUTCOMES,
        next_page=next_link(request, encode_job_cursor(last["tenant"], last["name"]))
        if more and last
        else None,
        counts=await ctx.service.store.cluster_counts(tenant=who.scope),
        attention=await ctx.service.lists.attention(tenant=who.scope),
        lost_nodes=[
            n
            for n in await ctx.service.store.cluster_nodes(ttl=ctx.settings.node_ttl)
            if n["state"] == "lost"
        ],
        now=await ctx.store.db_now(),
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(request: Request, job_id: JobId, session: Session) -> HTMLResponse:
    """One job: definition, next occurrences, its occurrence grid (the last days, one cell per
    occurrence), duration and lag chart, run history, and the definition's own history (the
    audit trail's latest 20 changes)."""
    who, token = session
    ctx: WebContext = request.app.state.pulse
    job = await ctx.service.job(who, job_id)
    runs = await ctx.service.lists.runs(tenant=who.scope, job_id=job_id, limit=50)
    points = [
        Point(r["scheduled_for"], r["duration"], r["lag"])
        for r in reversed(runs)
        if r["started_at"] is not None
    ]
    history = await ctx.service.history(who, job_id, 20)
    alerts = AlertStore(ctx.store.pool)
    key = (job["tenant"], job["name"])
    rules = [r for r in await alerts.list_rules(job=key) if r["job_id"] == job_id]
    open_alerts = [
        r
        for r in await alerts.list_alerts(job=key, open_only=True, limit=50)
        if r["job_id"] == job_id
    ]
    now = await ctx.store.db_now()
    after = grid.window(job, now)
    cells = grid.occurrence_grid(
        job,
        await ctx.service.lists.grid_runs(job_id, after=after, until=now, limit=4 * grid.CELLS),
        after=after,
        now=now,
    )
    return page(
        request,
        "job",
        who,
        token,
        job=job,
        runs=runs,
        chart=run_chart(points),
        history=history,
        rules=rules,
        job_alerts=open_alerts,
        cells=cells,
        legend=grid.legend(cells),
        grid_since=after,
    )


@router.get("/cluster", response_class=HTMLResponse)
async def cluster_page(request: Request, session: Session) -> HTMLResponse:
    """Nodes with their capabilities (handlers), shards and heartbeats, the leader, the shard
    map (each of the database's shards and its owner), job counts."""
    who, token = session
    ctx: WebContext = request.app.state.pulse
    cluster = await ctx.service.cluster(who)
    live = [n["node_id"] for n in cluster["nodes"] if n["alive"]]
    shard_map = [
        {
            "shard": shard,
            "owners": cluster["shards"]["owners"].get(str(shard), []),
            "colour": live.index(owners[0]) % 8
            if (owners := cluster["shards"]["owners"].get(str(shard)))
            else None,
        }
        for shard in range(cluster["shards"]["count"])
    ]
    return page(
        request,
        "cluster",
        who,
        token,
        cluster=cluster,
        shard_map=shard_map,
        palette={node: index % 8 for index, node in enumerate(live)},
        now=await ctx.store.db_now(),
    )


def _pause_options(form: dict[str, list[str]]) -> dict[str, Any]:
    """A pause button's optional ``reason`` and ``until`` (an instant, or a duration from now
    as ``job pause --until`` takes it: ``2h``), blank ones left out, and its "cancel the
    current run" box (``cancel``: as ``job pause --cancel``)."""
    options: dict[str, Any] = {}
    reason = (form.get("reason") or [""])[0].strip()
    until = (form.get("until") or [""])[0].strip()
    if reason:
        options["reason"] = reason
    if until:
        options["until"] = until
    if (form.get("cancel") or [""])[0]:
        options["cancel"] = True
    return options


@router.post("/jobs/{job_id}/{verb}")
async def job_action(request: Request, job_id: JobId, verb: str, session: Session) -> Response:
    """Pause, resume or trigger a job from a button (CSRF-checked). Answers JSON to the page's
    script (``Accept: application/json``), else redirects back with a notice."""
    who, token = session
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    wants_json = "application/json" in request.headers.get("accept", "")
    if verb not in ("pause", "resume", "trigger", "skip") or not same_secret(
        (form.get("csrf") or [""])[0], csrf_token(token)
    ):
        body = error_body(
            "forbidden", "stale page or unknown action: reload and retry", "csrf", None
        )
        return (
            JSONResponse(body, 403) if wants_json else HTMLResponse(body["error"]["message"], 403)
        )
    ctx: WebContext = request.app.state.pulse
    try:
        before = await ctx.service.job(who, job_id)
        done = None
        if verb == "skip":
            listed = await ctx.service.skip(who, job_id, _skip_options(form))
            return _answer(
                form, job_id, token, wants_json, f"{before['name']}: {skipped_note(listed)}", 200
            )
        if verb == "pause":
            after, done = await ctx.service.pause(who, job_id, _pause_options(form))
        else:
            after = await ctx.service.act(who, job_id, verb)
        notice = f"{verb}d {before['name']}" if verb != "trigger" else f"triggered {before['name']}"
        if verb == "pause":
            notice += (
                f" until {_when(after['paused_until'])}" if after["paused_until"] else ""
            ) + (f": {after['pause_reason']}" if after["pause_reason"] else "")
        if done is not None and (note := pause_note(before["name"], done)) is not None:
            notice = note  # its pause requested while it runs, or runs cancelled
        elif verb == "resume" and before["pause_requested"] and before["status"] != "paused":
            notice = withdrawn_note(before["name"])
        elif (verb == "pause" and before["status"] == "paused") or (
            verb == "resume" and before["status"] not in ("paused", "failed")
        ):  # the store left the job as it is: say so as the CLI does
            notice = unchanged_note(verb, before["name"], before["status"])
        status = 200
    except PulseError as exc:
        notice, status = exc.message, status_of(exc)[0]
    return _answer(form, job_id, token, wants_json, notice, status)


def _answer(
    form: dict[str, list[str]], job_id: int, token: str, wants_json: bool, notice: str, status: int
) -> Response:
    """A button's answer: JSON to the page's script, else a redirect back with the notice."""
    if wants_json:
        return JSONResponse({"notice": notice}, status)
    # The page's forms say where they were; a post without it goes back to the job's page.
    back = (form.get("next") or [f"/ui/jobs/{job_id}"])[0]
    back = back if back.startswith("/ui/") and "//" not in back else "/ui/"
    return RedirectResponse(with_notice(back.split("?")[0], token, notice), status_code=303)


def _skip_options(form: dict[str, list[str]]) -> dict[str, Any]:
    """The skip button's ``count`` (a whole number; the store bounds it) and ``reason``.

    Raises:
        InvalidInput: ``count`` is not a whole number (``field="next"``).
    """
    count = (form.get("count") or ["1"])[0].strip() or "1"
    if not count.isdecimal():
        raise InvalidInput(
            f"next {count!r} is not a count from 1 to 100", field="next", value=count
        )
    reason = (form.get("reason") or [""])[0].strip()
    return {"count": int(count), "at": None, "reason": reason or None}
