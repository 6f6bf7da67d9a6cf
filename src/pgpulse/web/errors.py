"""How the HTTP edge refuses: one JSON error body and its status codes (what a request body may
be, in size and type: :mod:`pgpulse.web.bodies`).

Every refusal has the body ``{"error": {"code", "message", "field", "value"}}`` naming the
refused field and value (docs/design.md, invariant 11), and writes nothing:

=====  =====================================================================================
400    the body is not JSON (truncated, malformed), or is empty where the route needs one
401    no token, a malformed, unknown or revoked token (``WWW-Authenticate: Bearer``)
403    the token may not do this (another tenant's name on create, a ``shell`` job)
404    no such job or run for this token — another tenant's answers exactly the same
409    the job's state does not allow the change (pause a completed job, trigger a paused one)
413    the request body is larger than the limit (``--max-body``, default 64 KiB)
415    the body's ``Content-Type`` is not one the API reads as JSON (:mod:`pgpulse.web.bodies`)
422    a field is refused (schedule, time zone, payload, handler, http target, query values)
503    the database does not answer
=====  =====================================================================================
"""

from __future__ import annotations

import json
import logging
import re
from datetime import date, datetime, time, timedelta
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from pgpulse.core.errors import DatabaseUnavailable, InvalidInput, NotFound, PulseError
from pgpulse.core.json_limits import too_deep, too_long_integer
from pgpulse.core.policy import Forbidden, PayloadTooLarge
from pgpulse.core.wording import did_you_mean
from pgpulse.db.tokens import TokenNotFound
from pgpulse.web.filters import BadFilter
from pgpulse.web.service import NoSuchJob, NoSuchRun

log = logging.getLogger(__name__)

#: Longest text of a refused value echoed back in an error body, characters.
MAX_ECHO_CHARS = 300


class Unauthorized(PulseError):
    """The request has no valid bearer token (missing, malformed, unknown or revoked)."""


def _encodable(value: Any) -> Any:
    """``value`` with every string UTF-8 can encode: a lone surrogate (which JSON can carry
    escaped, and Python decodes) becomes its backslash escape, in keys and nested values too,
    so no refusal fails while it is rendered."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(v) for v in value]
    return value


def _as_sent(value: Any) -> Any:
    """``value`` as JSON would carry it: an instant, a date or a time as its ISO 8601 text (what
    a client sends), bytes as text, and anything else JSON cannot hold as its ``str`` — never a
    Python repr such as ``datetime.datetime(2026, 12, 1, 15, 0)``."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): _as_sent(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_as_sent(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _echo(value: Any) -> Any:
    """``value`` made JSON-safe (:func:`_as_sent`) and short enough to echo back."""
    value = _as_sent(value)
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except ValueError:  # NaN or infinity
        value = text = str(value)
    if len(text) <= MAX_ECHO_CHARS:
        return value
    return (value if isinstance(value, str) else text)[:MAX_ECHO_CHARS] + "…"


def error_body(code: str, message: str, field: str | None, value: Any) -> dict[str, Any]:
    """The one error body shape of the API (every string in it encodable as UTF-8)."""
    error = {"code": code, "message": message, "field": field, "value": _echo(value)}
    return {"error": _encodable(error)}


def status_of(exc: PulseError) -> tuple[int, str]:
    """HTTP status and error code for a Pulse error."""
    if isinstance(exc, Unauthorized):
        return 401, "unauthorized"
    if isinstance(exc, Forbidden):
        return 403, "forbidden"
    if isinstance(exc, NoSuchJob | NoSuchRun | NotFound | TokenNotFound):
        return 404, "not_found"
    if isinstance(exc, PayloadTooLarge):
        return 413, "payload_too_large"
    if isinstance(exc, InvalidInput):
        conflict = (exc.field in ("status", "revision") and not isinstance(exc, BadFilter)) or (
            exc.field == "calendar" and "in use" in str(exc)
        )
        return (409, "conflict") if conflict else (422, "invalid_input")
    if isinstance(exc, DatabaseUnavailable):
        return 503, "database_unavailable"
    return 400, "refused"


def pulse_error_response(exc: PulseError) -> JSONResponse:
    """The JSON response refusing ``exc``."""
    status, code = status_of(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        error_body(code, exc.message, exc.field, exc.value), status, headers=headers
    )


#: A step of a pydantic error's location that names a member of a union type (``float`` in
#: ``timeout.float`` for ``float | None``; ``dict[str,any]`` and ``literal['forbid',...]`` in
#: a ``PATCH`` body's ``payload`` and ``overlap``), not a field: left out of the refused
#: field's name.
_UNION_MEMBER = re.compile(
    r"(none|int|float|bool|str|datetime|date|dict|list|literal|[a-z]+(-[a-z]+)+)(\[.*\])?"
)


def _validation_field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] if len(parts) > 1 else parts
    named = parts[:1] + [p for p in parts[1:] if not _UNION_MEMBER.fullmatch(p)]
    return ".".join(named)


#: What a pydantic error type means, in the words Pulse's own refusals use (``must be a whole
#: number``), so an API refusal reads as the CLI's and a file's do; ``{}`` takes the error's
#: context (``ge``, ``expected``...). A type not listed keeps pydantic's message.
_PHRASES: dict[str, str] = {
    "missing": "is required",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    # a lone surrogate (JSON "\ud800"): worded as policy.check_text words one in a payload
    "string_unicode": "holds an unpaired surrogate",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "list_type": "must be a list",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "string_too_short": "must be at least {min_length} characters",
    "string_too_long": "must be at most {max_length} characters",
    "too_short": "must have at least {min_length} items",
    "too_long": "must have at most {max_length} items",
    "extra_forbidden": "is not a field of this request",
    "datetime_type": "must be an ISO 8601 instant such as 2026-12-01T10:00:00Z",
    "datetime_parsing": "must be an ISO 8601 instant such as 2026-12-01T10:00:00Z",
    "datetime_from_date_parsing": "must be an ISO 8601 instant such as 2026-12-01T10:00:00Z",
    "date_type": "must be a date such as 2026-12-24",
    "date_parsing": "must be a date such as 2026-12-24",
    "date_from_datetime_parsing": "must be a date such as 2026-12-24",
    "date_from_datetime_inexact": "must be a date such as 2026-12-24, not a date and time",
}


def _phrase(error: dict[str, Any]) -> str:
    """The refusal's words for one pydantic error (:data:`_PHRASES`; a validator's own
    ``ValueError`` text without pydantic's ``Value error,`` prefix)."""
    kind = str(error.get("type", ""))
    context = {k: _number(v) for k, v in dict(error.get("ctx") or {}).items()}
    if kind == "value_error":
        return str(error.get("msg", "")).removeprefix("Value error, ")
    template = _PHRASES.get(kind)
    if template is None:
        return str(error.get("msg", "invalid"))
    try:
        return template.format(**context)
    except (KeyError, IndexError):
        return template.split(" {", 1)[0]


def _number(value: Any) -> Any:
    """A bound as people write it: ``1``, not ``1.0``; ``86400``, not ``86400.0``."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _shown(value: Any) -> str:
    """A refused value as it was sent: JSON (``true``, ``"2"``, ``2.5``), cut at 80 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path (for a 405's ``Allow``)."""
    methods: set[str] = set()
    for route in request.app.routes:
        regex, route_methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and route_methods and regex.match(request.url.path):
            methods |= set(route_methods)
    return sorted(methods)


def _known_fields(request: Request | None, loc: tuple[Any, ...]) -> list[str]:
    """The field names the body model of ``request``'s route takes where ``loc`` (a pydantic
    error's location, ``("body", ..., name)``) points, or ``[]`` where no model is found (a
    query value, a list item, a union)."""
    route = request.scope.get("route") if request is not None else None
    field_info = getattr(getattr(route, "body_field", None), "field_info", None)
    model = getattr(field_info, "annotation", None)
    if not loc or loc[0] != "body":
        return []
    for part in loc[1:-1]:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        info = model.model_fields.get(str(part))
        model = info.annotation if info is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


def _untagged(request: Request | None, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """``loc`` without the member's tag a body that is a union tagged by a field (a notifier's
    ``kind``) puts after ``body``: ``("body", "webhook", "tenant")`` names field ``tenant``."""
    route = request.scope.get("route") if request is not None else None
    field_info = getattr(getattr(route, "body_field", None), "field_info", None)
    if getattr(field_info, "discriminator", None) is None or len(loc) < 3 or loc[0] != "body":
        return loc
    return (loc[0], *loc[2:])


def _tag_refusal(error: dict[str, Any]) -> dict[str, Any] | None:
    """A body's tag (``kind``) missing or not one of its union's, worded as the CLI words it
    (``kind must be one of webhook, email, checkin, got 'pager'``); ``None`` for another
    error."""
    kind = error.get("type")
    if kind not in ("union_tag_invalid", "union_tag_not_found"):
        return None
    context = dict(error.get("ctx") or {})
    parts = [str(p) for p in tuple(error.get("loc", ()))[1:]]
    field = ".".join([*parts, str(context.get("discriminator", "kind")).strip("'")])
    if kind == "union_tag_not_found":
        return error_body("invalid_input", f"{field} is required", field, None)
    tag = context.get("tag")
    expected = str(context.get("expected_tags", "")).replace("'", "")
    message = f"{field} must be one of {expected}, got {tag!r}"
    return error_body("invalid_input", message, field, tag)


def validation_error(
    exc: RequestValidationError, request: Request | None = None
) -> tuple[int, dict[str, Any]]:
    """A request FastAPI refused before the route ran, as (status, :func:`error_body`): 400 for
    a body that is not JSON or is missing, else 422 naming the first field refused. An unknown
    field of ``request``'s body names the nearest known one, as ``pgpulse apply`` does
    (:func:`pgpulse.core.wording.did_you_mean`), and its value is the one sent."""
    first: dict[str, Any] = (
        dict(exc.errors()[0]) if exc.errors() else {"loc": ("body",), "msg": "invalid"}
    )
    first["loc"] = _untagged(request, tuple(first.get("loc", ())))
    tagged = _tag_refusal(first)
    if tagged is not None:
        return 422, tagged
    field = _validation_field(tuple(first.get("loc", ())))
    if first.get("type") == "json_invalid":
        # loc is ("body", character offset), ctx the decoder's own words
        where = tuple(first.get("loc", ()))[1:]
        reason = dict(first.get("ctx") or {}).get("error") or first.get("msg")
        at = f" at character {where[0]}" if where else ""
        return 400, error_body(
            "invalid_json", f"body is not valid JSON: {reason}{at}", "body", None
        )
    if first.get("type") == "missing" and tuple(first.get("loc", ())) == ("body",):
        return 400, error_body(
            "invalid_json", "body is empty: this route takes a JSON object", "body", None
        )
    kind = first.get("type")
    value = None if kind == "missing" else first.get("input")
    got = "" if kind in ("missing", "extra_forbidden") else f", got {_shown(value)}"
    if kind == "extra_forbidden":
        loc = tuple(first.get("loc", ()))
        got = did_you_mean(str(loc[-1]) if loc else "", _known_fields(request, loc))
    message = f"{field} {_phrase(first)}{got}"
    return 422, error_body("invalid_input", message, field, value)


def install_error_handlers(app: FastAPI) -> None:
    """Make every refusal of ``app`` answer with :func:`error_body`."""

    async def on_pulse_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, PulseError)
        return pulse_error_response(exc)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        status, answer = validation_error(exc, request)
        return JSONResponse(answer, status)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "http_error"
        )
        field = "path" if exc.status_code in (404, 405) else "body"
        value = request.url.path if field == "path" else None
        detail = str(exc.detail)
        # FastAPI's body parser says only "error parsing the body" for what Python's JSON
        # parser refuses beyond JSON's grammar: say the rule every path applies.
        cause = exc.__cause__
        if exc.status_code == 400 and isinstance(cause, PulseError):  # bodies.JsonRequest's
            return pulse_error_response(cause)
        if exc.status_code == 400 and isinstance(cause, RecursionError):
            detail = too_deep("body").message
        elif exc.status_code == 400 and type(cause) is ValueError:
            detail = too_long_integer("body").message
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return JSONResponse(
            error_body(code, detail, field, value),
            exc.status_code,
            headers=headers or None,
        )

    async def on_database_error(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "database error on %s %s: %s",
            request.method,
            request.url.path,
            exc,
            extra={"action": "api_database_error"},
        )
        return JSONResponse(
            error_body("database_unavailable", "the database did not answer", None, None), 503
        )

    app.add_exception_handler(PulseError, on_pulse_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(psycopg.OperationalError, on_database_error)
