"""Request bodies at the HTTP edge: how large they may be, and what they are read as.

Two ASGI middlewares wrap the whole app, outermost first:

* :class:`BodyLimit` refuses a body over ``--max-body`` bytes with 413 before any route runs.
* :class:`JsonBodies` makes every body sent to the API (``/api/...``: ``POST``, ``PUT``,
  ``PATCH``) read as JSON. The API
  takes only JSON bodies, so the ``Content-Type`` matters only to say "this is not JSON":
  none, ``application/json`` and ``application/*+json`` are JSON; so are
  ``application/x-www-form-urlencoded`` (what ``curl -d`` sends unless told otherwise) and
  ``text/plain``, which would otherwise reach the route as raw bytes and be refused with a
  message about dictionaries; any other type (``multipart/form-data``, ``application/xml``...)
  is refused with 415 naming it. A body read so and not valid JSON gets the API's 400
  (:mod:`pgpulse.web.errors`). The API authenticates by bearer token only, which a cross-site
  form cannot send, so reading a form-typed body as JSON opens nothing. The dashboard's
  routes (``/ui/...``) keep their HTML forms.

The API's routes (:class:`JsonRoute`) parse a JSON body with
:func:`pgpulse.core.json_limits.loads`: a number no float holds (``"spread": 1e999``, which Python
reads as infinity) or ``NaN`` is refused with 422 naming its field and quoting it as sent
(``spread must be a finite number, got 1e999``), not as the ``inf`` it would be read as.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from pgpulse.core.json_limits import loads
from pgpulse.web.errors import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The methods whose requests carry a body the API reads.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: Content types whose body the API reads as JSON although they do not say so.
READ_AS_JSON = frozenset({"", "application/x-www-form-urlencoded", "text/plain"})


async def send_refusal(send: Send, status: int, body: dict[str, Any]) -> None:
    """Answer ``status`` with the JSON ``body`` (compact, as every other API answer) and close
    the connection (the request's body may be left unread)."""
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def media_type(header: bytes | None) -> str:
    """The media type of a ``Content-Type`` header, lower case, without its parameters
    (``""`` when there is none)."""
    if header is None:
        return ""
    return header.decode("latin-1").split(";", 1)[0].strip().lower()


def is_json(media: str) -> bool:
    """Whether ``media`` declares JSON (RFC 8259 ``application/json``, RFC 6839 ``+json``)."""
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class JsonBodies:
    """ASGI middleware: the API reads every body as JSON, whatever ``Content-Type`` short of
    another format it is sent with (module docstring).

    Args:
        app: the wrapped ASGI app.
        prefix: the paths it applies to (the API's).
    """

    def __init__(self, app: ASGIApp, prefix: str = "/api/") -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not scope["path"].startswith(self.prefix)
            or scope["method"] not in BODY_METHODS
        ):
            await self.app(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope.get("headers", []) if k != b"content-type"]
        declared = dict(scope.get("headers", [])).get(b"content-type")
        media = media_type(declared)
        if media in READ_AS_JSON:
            headers.append((b"content-type", b"application/json"))
            scope = {**scope, "headers": headers}
        elif not is_json(media):
            await send_refusal(
                send,
                415,
                error_body(
                    "unsupported_media_type",
                    f"Content-Type {media!r} is not JSON: the API reads request bodies as JSON "
                    "(send Content-Type: application/json)",
                    "content-type",
                    media,
                ),
            )
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: refuse request bodies larger than ``limit`` bytes with 413.

    A declared ``Content-Length`` over the limit is refused before reading; otherwise the body
    is read (never more than ``limit + 1`` bytes kept) and handed on unchanged.

    Args:
        app: the wrapped ASGI app.
        limit: largest accepted body, bytes.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def _refuse(self, send: Send, size: str) -> None:
        message = f"request body is larger than {self.limit} bytes"
        await send_refusal(send, 413, error_body("payload_too_large", message, "body", size))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(send, declared.decode("latin-1"))
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send, f">{self.limit}")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class JsonRequest(Request):
    """A request whose JSON body is parsed by :func:`pgpulse.core.json_limits.loads` (module
    docstring); its refusal reaches the error handlers as the cause of FastAPI's 400
    (:func:`pgpulse.web.errors.install_error_handlers` answers it with 422)."""

    async def json(self) -> Any:
        """The body as JSON (parsed once).

        Raises:
            InvalidInput: a number no float holds, named by its path in the body.
        """
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class JsonRoute(APIRoute):
    """An API route that reads its body as a :class:`JsonRequest` (``APIRouter(route_class=
    JsonRoute)``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler, given the request as a :class:`JsonRequest`."""
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return route
