"""The ASGI app factory: JSON API, dashboard, metrics and health on one FastAPI app.

============================  ==========================================================
``/api/v1/...``               the JSON API (:mod:`pgpulse.web.api`), bearer token
``/api/v1/openapi.json``      its OpenAPI document (no token needed)
``/ui/...``                   the dashboard (:mod:`pgpulse.web.dashboard`), signed in
``/ui/api/v1/...``            the same API for the dashboard's pages: cookie and CSRF value
``/metrics``                  Prometheus metrics (:mod:`pgpulse.node.metrics`), no token
``/healthz``                  200 when the database answers, else 503, no token
============================  ==========================================================

The caller owns the store (and its pool); the app only uses it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.applications import Starlette
from starlette.routing import Route

from pgpulse.core.errors import PulseError
from pgpulse.core.policy import WebSettings
from pgpulse.db.store import Store
from pgpulse.node import metrics
from pgpulse.web import alerts_api, api, dashboard, forms, pages, why
from pgpulse.web.bodies import BodyLimit, JsonBodies
from pgpulse.web.context import WebContext
from pgpulse.web.errors import (
    install_error_handlers,
    pulse_error_response,
    status_of,
    validation_error,
)
from pgpulse.web.filters import BadFilter
from pgpulse.web.schemas import Error

log = logging.getLogger(__name__)

#: Headers of every dashboard response: no framing, no inline script, no referrer leaks.
UI_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


async def _metrics_response(store: Store | None) -> Response:
    body, content_type = await metrics.exposition(store)
    return Response(body, media_type=content_type)


async def _health(store: Store) -> JSONResponse:
    try:
        now = await store.db_now()
    except Exception as exc:  # any failure means "not healthy"; the probe must still answer
        log.warning("health check failed: %s", exc, extra={"action": "health_failed"})
        return JSONResponse({"ok": False}, 503)
    return JSONResponse({"ok": True, "db_now": now.isoformat()})


def _is_page(request: Request) -> bool:
    """Whether a refusal answers a dashboard page (HTML), not the API (JSON): the dashboard's
    own API routes (:data:`pgpulse.web.api.DASHBOARD_API`) answer as the API does."""
    path = request.url.path
    return path.startswith("/ui/") and not path.startswith(api.DASHBOARD_API)


def create_app(store: Store, settings: WebSettings | None = None) -> FastAPI:
    """Build the web app over an open ``store``.

    Args:
        store: an open store (the caller closes its pool after the server stops).
        settings: security and display settings (defaults: no shell jobs, public http
            targets only, 64 KiB bodies).

    Returns:
        The ASGI app, wrapped in the request size limit.
    """
    settings = settings or WebSettings()
    app = FastAPI(
        title="Pulse",
        version="1",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        description="Jobs, runs and cluster of a Pulse scheduler. Every route needs "
        "`Authorization: Bearer <token>` (`pgpulse token create`). "
        'Refusals answer `{"error": {code, message, field, value}}`.',
    )
    app.state.pulse = WebContext.build(store, settings)
    install_error_handlers(app)
    # BodyLimit and JsonBodies answer 413 and 415 before any route runs: every API operation
    # documents them.
    too_large: dict[int | str, dict[str, Any]] = {413: {"model": Error}, 415: {"model": Error}}
    app.include_router(api.router, responses=too_large)
    app.include_router(alerts_api.router, responses=too_large)
    # The dashboard's forms write through the API's own routes (one write path, one
    # authorisation), signed in by the browser's cookie, which is scoped to /ui.
    app.include_router(api.router, prefix="/ui", include_in_schema=False)
    app.include_router(forms.router)  # first: /ui/jobs/new is not the page of job "new"
    app.include_router(dashboard.router)
    app.include_router(pages.router)
    app.include_router(why.api_router, responses=too_large)
    app.include_router(why.ui_router)
    app.mount("/ui/static", StaticFiles(directory=dashboard.WEB_DIR / "static"), name="static")

    async def on_pulse_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PulseError)
        if not _is_page(request):
            return pulse_error_response(exc)
        status = status_of(exc)[0]
        # a refused filter: the same page without its filters is the way back
        back = request.url.path if isinstance(exc, BadFilter) else None
        return dashboard.templates.TemplateResponse(
            request,
            "error.html",
            {"who": None, "status": status, "message": exc.message, "back": back},
            status_code=status,
        )

    async def on_sign_in(request: Request, exc: Exception) -> Response:
        if request.query_params.get("fragment") == "1" or request.method != "GET":
            return JSONResponse({"notice": "signed out"}, 401)
        return RedirectResponse("/ui/login", status_code=303)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        status, answer = validation_error(exc, request)
        if not _is_page(request):
            return JSONResponse(answer, status)
        # a dashboard address FastAPI refused (/ui/jobs/abc): the error page, as for the others
        return dashboard.templates.TemplateResponse(
            request,
            "error.html",
            {"who": None, "status": status, "message": answer["error"]["message"], "back": None},
            status_code=status,
        )

    app.add_exception_handler(PulseError, on_pulse_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(dashboard.SignIn, on_sign_in)

    @app.middleware("http")
    async def ui_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        if request.url.path.startswith("/ui"):
            response.headers.update(UI_HEADERS)
        return response

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=303)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_route() -> Response:
        return await _metrics_response(store)

    @app.get("/healthz", include_in_schema=False)
    async def health() -> JSONResponse:
        return await _health(store)

    app.add_middleware(JsonBodies)
    app.add_middleware(JsonBodies, prefix=api.DASHBOARD_API)
    app.add_middleware(api.DashboardCsrf)  # before the bodies are read
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)  # added last: outermost
    return app


def create_metrics_app(store: Store | None) -> Starlette:
    """A minimal app serving only ``/metrics`` and ``/healthz`` (``node run --metrics``).

    Args:
        store: refreshes the cluster-wide gauges at each scrape; ``None`` serves only this
            process's metrics.
    """

    async def metrics_route(request: Request) -> Response:
        return await _metrics_response(store)

    async def health(request: Request) -> Response:
        if store is None:
            return JSONResponse({"ok": True})
        return await _health(store)

    routes: list[Any] = [Route("/metrics", metrics_route), Route("/healthz", health)]
    return Starlette(routes=routes)
