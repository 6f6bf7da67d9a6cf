"""Real receivers on 127.0.0.1 for the notifier tests: an HTTP server (stdlib ``http.server`` in a
thread of its own, so a slow answer does not depend on the test's event loop) and an SMTP server
(``aiosmtpd``, with or without TLS and login). Both record what they received, as received.

The HTTP receiver checks the webhook signature with the recipe of docs/alerts.md, written out
here again on purpose (not by calling :func:`pgpulse.alerts.notifiers.webhook.verify_signature`), so
the documented recipe and the sender are held to each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import urlsplit

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session


def free_port() -> int:
    """A TCP port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def documented_signature_check(secret: str, header: str, body: bytes, now: float) -> bool:
    """docs/alerts.md, "Verifying a delivery", step by step."""
    # 1. Split the header on "," into key=value pairs; take t and every v1.
    pairs = [item.split("=", 1) for item in header.split(",") if "=" in item]
    stamps = [value for key, value in pairs if key.strip() == "t"]
    candidates = [value for key, value in pairs if key.strip() == "v1"]
    if len(stamps) != 1 or not (stamps[0].isascii() and stamps[0].isdigit()):
        return False
    # 2. Refuse a timestamp more than five minutes from the receiver's clock.
    if abs(now - int(stamps[0])) > 300:
        return False
    # 3. HMAC-SHA256 over "<t>." followed by the raw body, under the secret, as lower-case hex.
    expected = hmac.new(
        secret.encode(), stamps[0].encode() + b"." + body, hashlib.sha256
    ).hexdigest()
    # 4. Compare in constant time with each v1.
    return any(hmac.compare_digest(expected.encode(), c.encode()) for c in candidates)


@dataclass
class Received:
    """One HTTP request as the receiver read it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    signature_ok: bool | None
    at: float

    def json(self) -> Any:
        import json

        return json.loads(self.body)


@dataclass
class HttpReceiver:
    """An HTTP/1.1 server on 127.0.0.1 that records every request.

    Paths: ``/hook`` 200; ``/fail`` 500; ``/busy`` 429 with ``Retry-After: 7``; ``/unavailable``
    503 with an HTTP-date ``Retry-After`` 30 s after :attr:`date_base`; ``/gone`` 410;
    ``/timeout`` 408; ``/redirect`` 302 to ``/hook``; ``/echo`` 400 quoting the request line
    back; ``/slow`` answers only after :attr:`release` is set (and records when the client hangs
    up); anything else 200 ``OK`` (a check-in endpoint).
    """

    secret: str | None = None
    date_base: float = 1_700_000_000.0
    requests: list[Received] = field(default_factory=list)
    slow_seen: threading.Event = field(default_factory=threading.Event)
    client_gone: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def record(self, request: Received) -> None:
        with self._lock:
            self.requests.append(request)

    def answer(self, path: str, request_line: str) -> tuple[int, dict[str, str], bytes]:
        from email.utils import formatdate

        return {
            "/hook": (200, {}, b'{"ok":true}'),
            "/fail": (500, {}, b"boom"),
            "/busy": (429, {"Retry-After": "7"}, b"slow down"),
            "/unavailable": (
                503,
                {"Retry-After": formatdate(self.date_base + 30, usegmt=True)},
                b"",
            ),
            "/gone": (410, {}, b"archived"),
            "/timeout": (408, {}, b""),
            "/redirect": (302, {"Location": "/hook"}, b""),
            "/echo": (400, {}, f"bad request: {request_line}".encode()),
        }.get(path, (200, {}, b"OK"))


def _handler_for(state: HttpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep the test output clean

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            signature = headers.get("x-pulse-signature")
            ok = (
                None
                if state.secret is None or signature is None
                else documented_signature_check(state.secret, signature, body, time.time())
            )
            parts = urlsplit(self.path)
            state.record(
                Received(self.command, parts.path, parts.query, headers, body, ok, time.time())
            )
            if parts.path == "/slow":
                self._slow()
                return
            status, extra, payload = state.answer(parts.path, self.requestline)
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _slow(self) -> None:
            state.slow_seen.set()
            self.connection.settimeout(0.05)
            while not state.release.is_set():
                try:
                    if self.connection.recv(1) == b"":
                        state.client_gone.set()
                        return
                except TimeoutError:
                    continue
                except OSError:
                    state.client_gone.set()
                    return
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_HEAD = do_PUT = _serve

    return Handler


def run_http_receiver(secret: str | None = None) -> Iterator[HttpReceiver]:
    """Start an :class:`HttpReceiver`; stop it (releasing slow requests) afterwards."""
    state = HttpReceiver(secret=secret)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="http-receiver", daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class SmtpMessage:
    """One message the SMTP receiver accepted."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    tls: bool
    login: tuple[str, str] | None


@dataclass
class SmtpReceiver:
    """Records accepted messages; refuses recipients by their local part: ``nobody@`` with
    550, ``later@`` with 451."""

    messages: list[SmtpMessage] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)
    port: int = 0

    async def handle_RCPT(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        local = address.split("@", 1)[0]
        if local == "nobody":
            return "550 5.1.1 no such user"
        if local == "later":
            return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        content = cast(bytes, envelope.original_content or envelope.content)
        message = message_from_bytes(content, policy=policy.default)
        login = session.auth_data
        self.messages.append(
            SmtpMessage(
                mail_from=str(envelope.mail_from),
                rcpt_tos=list(envelope.rcpt_tos),
                message=message,
                tls=server.transport is not None
                and server.transport.get_extra_info("ssl_object") is not None,
                login=None if login is None else (login.login.decode(), login.password.decode()),
            )
        )
        return "250 OK queued"

    def authenticate(self, login: str, password: str) -> Callable[..., AuthResult]:
        def check(
            server: SMTPServer, session: Session, envelope: Envelope, mechanism: str, data: Any
        ) -> AuthResult:
            assert isinstance(data, LoginPassword)
            self.logins.append((data.login.decode(), data.password.decode()))
            ok = (data.login.decode(), data.password.decode()) == (login, password)
            # handled=False: the server itself answers 535 to a refused login.
            return AuthResult(success=ok, handled=ok, auth_data=data if ok else None)

        return check


def run_smtp_receiver(
    *,
    starttls: ssl.SSLContext | None = None,
    implicit_tls: ssl.SSLContext | None = None,
    login: tuple[str, str] | None = None,
) -> Iterator[SmtpReceiver]:
    """Start an aiosmtpd server on 127.0.0.1 (STARTTLS required when ``starttls`` is given;
    TLS from the first byte with ``implicit_tls``; login required with ``login``)."""
    state = SmtpReceiver(port=free_port())
    kwargs: dict[str, Any] = {}
    if starttls is not None:
        kwargs |= {"tls_context": starttls, "require_starttls": True}
    if login is not None:
        kwargs |= {
            "authenticator": state.authenticate(*login),
            "auth_required": True,
            "auth_require_tls": True,
        }
    controller = Controller(
        state,
        hostname="127.0.0.1",
        port=state.port,
        ssl_context=implicit_tls,
        server_hostname="smtp.test",
        **kwargs,
    )
    controller.start()
    try:
        yield state
    finally:
        controller.stop()


@dataclass
class SilentServer:
    """A TCP server on 127.0.0.1 that accepts connections and never says anything: an SMTP
    server that hangs before its greeting. Records when a client connects and hangs up."""

    port: int = 0
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    hung_up: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connected.set()
        try:
            await reader.read()  # b"" once the client closes
            self.hung_up.set()
        finally:
            writer.close()


@dataclass
class CountingReceiver:
    """A webhook receiver on a fixed 127.0.0.1 port that can be down (nothing listens), up, or
    up and holding its next request unanswered until the client hangs up (a sender killed
    mid-delivery). It counts requests by ``Idempotency-Key``: a receiver that drops a key it has
    seen sees each event once."""

    port: int = field(default_factory=free_port)
    hold_next: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)
    by_key: dict[str, list[Received]] = field(default_factory=dict)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _open: set[socket.socket] = field(default_factory=set)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def requests(self) -> int:
        with self._lock:
            return sum(len(seen) for seen in self.by_key.values())

    def start(self) -> None:
        state = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with state._lock:
                    state._open.add(self.connection)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {name.lower(): value for name, value in self.headers.items()}
                received = Received("POST", self.path, "", headers, body, None, time.time())
                with state._lock:
                    state.by_key.setdefault(headers.get("idempotency-key", ""), []).append(received)
                if state.hold_next.is_set():
                    state.hold_next.clear()
                    state.held.set()
                    self.connection.settimeout(0.05)
                    while True:  # never answer: wait for the client to go away
                        try:
                            if self.connection.recv(1) == b"":
                                return
                        except TimeoutError:
                            continue
                        except OSError:
                            return
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="counting-receiver", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and cut every open connection (a kept-alive one would otherwise go on
        being served by its handler thread: the receiver would not be down)."""
        if self._server is not None:
            with self._lock:
                for sock in self._open:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                self._open.clear()
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
