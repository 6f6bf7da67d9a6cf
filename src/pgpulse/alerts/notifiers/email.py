"""The ``email`` notifier: one plain-text message per alert event, over SMTP with ``aiosmtplib``
(docs/alerts.md, "E-mail").

* ``security``: ``starttls`` (default, port 587: the connection is upgraded before anything else
  is said, and a server that cannot is a final failure), ``tls`` (implicit TLS, port 465) or
  ``plain`` (no TLS, port 25; login is refused with it: the password would cross the network in
  clear). Certificates are verified, against the system's CAs or the config's ``tls_ca``.
* The message names the job, the occurrence, the error and the dashboard link. Its
  ``Message-ID`` is derived from the event's delivery key, so a retried delivery is recognisable
  as the same message; ``Auto-Submitted: auto-generated`` (RFC 3834) keeps auto-responders quiet.
* An SMTP 4xx reply, a network error (a TLS handshake included) or a timeout is retryable; a
  5xx reply (recipient unknown, authentication refused) or a server that lacks what the config
  requires (STARTTLS, a login mechanism) is final.

The SMTP host is not held to the address policy of ``http`` jobs: relays are usually on the
node's own network (``localhost``, a private address). Who may configure notifiers is the
caller's rule.

``aiosmtplib`` is imported when a message is sent, not with this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email import policy as email_policy
from email.errors import MessageDefect
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime
from typing import TYPE_CHECKING, Any, ClassVar

from pgpulse.alerts.notifiers import fields
from pgpulse.alerts.notifiers.events import AlertEvent, DeliveryResult, alert_summary, clip, iso_utc
from pgpulse.alerts.notifiers.redaction import MASK, Secret, scrub
from pgpulse.alerts.notifiers.retry import RetryPolicy, classify_smtp_code
from pgpulse.core.extras import MissingExtra
from pgpulse.core.wording import seconds_text

if TYPE_CHECKING:
    import aiosmtplib

    from pgpulse.core.policy import HttpAllowList

SECURITY_MODES = ("starttls", "tls", "plain")
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "plain": 25}
#: The keys of an e-mail notifier's config.
EMAIL_KEYS = (
    fields.ConfigKey("host", "the SMTP server's host name or address", required=True),
    fields.ConfigKey("port", "its port (default 587, 465 or 25 by security)", "integer"),
    fields.ConfigKey("security", "starttls (default), tls or plain"),
    fields.ConfigKey("username", "login name (with password)"),
    fields.ConfigKey("password", "login password (with username)", secret=True),
    fields.ConfigKey("from", "the From address", required=True),
    fields.ConfigKey("to", "one address or a list of 1 to 50", "string|array", required=True),
    fields.ConfigKey("subject_prefix", "put before each subject (default [Pulse])"),
    fields.ConfigKey("tls_ca", "PEM text of the CA certificates to trust"),
    *fields.DELIVERY_KEYS,
)
EMAIL_FIELDS = fields.key_names(EMAIL_KEYS)
#: Most recipients of one notifier.
MAX_RECIPIENTS = 50


def _recipients(config: Mapping[str, Any]) -> tuple[str, ...]:
    value = config.get("to")
    if value is None:
        raise fields.refuse("to", 'is required (e.g. ["ops@example.com"])')
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or len(items) > MAX_RECIPIENTS:
        raise fields.refuse(
            "to", f"must be an address or a list of 1 to {MAX_RECIPIENTS} addresses", value
        )
    return tuple(fields.email_address(f"to[{i}]", item) for i, item in enumerate(items))


def _tls_ca(config: Mapping[str, Any]) -> str | None:
    """PEM text of CA certificates (newlines allowed, unlike the other text fields)."""
    value = config.get("tls_ca")
    if value is None:
        return None
    if not isinstance(value, str) or "\x00" in value or len(value) > 256 * 1024:
        raise fields.refuse("tls_ca", "must be PEM text of CA certificates", type(value).__name__)
    try:
        ssl.create_default_context(cadata=value)
    except (ssl.SSLError, ValueError):
        raise fields.refuse(
            "tls_ca", "is not PEM text of one or more CA certificates", value[:40]
        ) from None
    return value


@dataclass(frozen=True, slots=True)
class EmailConfig:
    """A validated ``email`` notifier. Build with :meth:`from_json`.

    Attributes:
        host: the SMTP server's host name or address.
        port: its port (default by ``security``: 587, 465 or 25).
        security: ``starttls``, ``tls`` or ``plain``.
        username: login name, or ``None`` for no login.
        password: login password (secret), given exactly when ``username`` is.
        sender: the ``From`` address (JSON key ``from``).
        recipients: the ``To`` addresses (JSON key ``to``: one address or a list).
        subject_prefix: put before each subject (default ``[Pulse]``).
        tls_ca: PEM text of the CA certificates to trust instead of the system's, or ``None``.
        timeout: seconds for one delivery attempt, connect to ``QUIT``.
        max_attempts: attempts per delivery before it is given up.
        retry_backoff: base of the exponential backoff between attempts, seconds.
    """

    kind: ClassVar[str] = "email"
    keys: ClassVar[tuple[fields.ConfigKey, ...]] = EMAIL_KEYS
    example: ClassVar[str] = (
        '{"host": "smtp.example.com", "from": "pulse@example.com", "to": ["ops@example.com"]}'
    )

    host: str
    sender: str
    recipients: tuple[str, ...]
    port: int = 587
    security: str = "starttls"
    username: str | None = None
    password: Secret | None = None
    subject_prefix: str = "[Pulse]"
    tls_ca: str | None = None
    timeout: float = 30.0
    max_attempts: int = 12
    retry_backoff: float = 5.0

    @classmethod
    def from_json(cls, config: object) -> EmailConfig:
        """Validate a JSON object (see docs/alerts.md for every field) into a config.

        Raises:
            InvalidNotifierConfig: a key is unknown, a field is missing or refused (an address
                that is not one RFC 5322 address, a login with ``security: plain``...);
                ``field`` is ``"config.<key>"``, and the password is never quoted.
        """
        obj = fields.check_object(config, cls.kind, EMAIL_FIELDS, cls.example)
        host = fields.text(obj, "host", required=True, max_chars=253)
        assert host is not None
        fields.host_name("host", host)
        security = fields.choice(obj, "security", SECURITY_MODES, "starttls")
        port = fields.number(
            obj, "port", default=DEFAULT_PORTS[security], minimum=1, maximum=65535, integer=True
        )
        username = fields.text(obj, "username", max_chars=320)
        password = fields.secret_text(obj, "password")
        if (username is None) != (password is None):
            missing = "password" if password is None else "username"
            raise fields.refuse(
                missing, "is required when the other of username and password is given"
            )
        if password is not None and security == "plain":
            raise fields.refuse(
                "password",
                "is refused with security plain: it would cross the network in clear "
                "(use starttls or tls)",
                secret=True,
            )
        timeout, max_attempts, backoff = fields.delivery_fields(
            obj, timeout=30.0, max_attempts=12, retry_backoff=5.0
        )
        return cls(
            host=host,
            sender=fields.email_address("from", obj.get("from")),
            recipients=_recipients(obj),
            port=int(port),
            security=security,
            username=username,
            password=password,
            subject_prefix=fields.text(obj, "subject_prefix", default="[Pulse]", max_chars=100)
            or "[Pulse]",
            tls_ca=_tls_ca(obj),
            timeout=timeout,
            max_attempts=max_attempts,
            retry_backoff=backoff,
        )

    def to_json(self) -> dict[str, Any]:
        """The stored form, the password included (:meth:`from_json` reads it back). Never
        display it: :meth:`redacted` is the form to show."""
        stored = self._plain_fields()
        if self.password is not None:
            stored["password"] = self.password.reveal()
        return stored

    def redacted(self) -> dict[str, Any]:
        """The config to display: the password shown as ``***``."""
        shown = self._plain_fields()
        if self.password is not None:
            shown["password"] = MASK
        return shown

    def _plain_fields(self) -> dict[str, Any]:
        plain: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "security": self.security,
            "from": self.sender,
            "to": list(self.recipients),
            "subject_prefix": self.subject_prefix,
            "timeout": self.timeout,
            "max_attempts": self.max_attempts,
            "retry_backoff": self.retry_backoff,
        }
        if self.username is not None:
            plain["username"] = self.username
        if self.tls_ca is not None:
            plain["tls_ca"] = self.tls_ca
        return plain

    def retry_policy(self) -> RetryPolicy:
        """The retry policy of this notifier's deliveries."""
        return RetryPolicy(max_attempts=self.max_attempts, backoff=self.retry_backoff)

    async def check_targets(
        self, allow: HttpAllowList, *, resolve_timeout: float = 2.0, allowed_by: str | None = None
    ) -> None:
        """Nothing to check: SMTP relays are not held to the ``http`` jobs' address policy (see
        the module's docstring). Here so every kind of config answers the same call."""


_FQDN: list[str] = []


async def _local_hostname() -> str:
    """This machine's name for ``EHLO`` (``socket.getfqdn``, which may ask DNS: looked up once
    per process, in a thread)."""
    if not _FQDN:
        _FQDN.append(await asyncio.to_thread(socket.getfqdn))
    return _FQDN[0]


def _one_line(text: str) -> str:
    return " ".join(text.split())


#: SMTP's line endings, and every defect the parser finds raised rather than recorded.
STRICT = email_policy.SMTP.clone(raise_on_defect=True)
#: What opens an RFC 2047 encoded word (``=?utf-8?b?...?=``): a header parser would decode it,
#: so text Pulse puts in a header never holds it as such (see :func:`header_text`).
_ENCODED_WORD_START = "=?"
#: An invisible WORD JOINER put between ``=`` and ``?``: the text reads the same, holds no
#: encoded word, and being non-ASCII is itself sent encoded.
_WORD_JOINER = "\u2060"


class HeaderRefused(ValueError):
    """A header of an alert message would not read back as built (a parser would take part of
    its text as structure); ``name`` is the header's name. The message is not sent."""

    def __init__(self, name: str, given: str, read: str) -> None:
        super().__init__(f"header {name} would read {read!r}, not {given!r}: message not sent")
        self.name = name


def header_text(text: str) -> str:
    """``text`` made fit to be an unstructured header's value (``Subject``, ``X-Pulse-Rule``):
    every run of whitespace, line breaks (CR, LF, U+2028...) and other control characters one
    space, and each ``=?`` written with an invisible word joiner in between, so that no part of
    it is an RFC 2047 encoded word a parser would decode (a decoded word may hold CR LF, which
    would start a header of the sender's choosing)."""
    printable = "".join(ch if ch.isprintable() else " " for ch in text)
    return " ".join(printable.split()).replace(
        _ENCODED_WORD_START, _ENCODED_WORD_START[0] + _WORD_JOINER + _ENCODED_WORD_START[1]
    )


def message_id(config: EmailConfig, event: AlertEvent) -> str:
    """``<pulse.<hash of the delivery key>@<the sender's domain>>``: the same for every attempt
    of one event's delivery, so mail systems and readers can tell a repeat from a new alert."""
    digest = hashlib.sha256(event.delivery_key.encode("utf-8")).hexdigest()[:32]
    domain = config.sender.rsplit("@", 1)[1].rstrip(">")
    return f"<pulse.{digest}@{domain}>"


def email_body(event: AlertEvent) -> str:
    """The plain-text body: what fired, the job, the occurrence, the error, the details and the
    dashboard link."""
    rows: list[tuple[str, str]] = []
    if event.job is not None:  # a name is one line of the body, whatever it holds
        rows.append(("Job", f"{_one_line(event.job.label())} (id {event.job.id})"))
    if event.scheduled_for is not None:
        rows.append(("Occurrence", iso_utc(event.scheduled_for)))
    if event.run_id is not None:
        rows.append(("Run", str(event.run_id)))
    rows += [("Rule", f"{event.rule} ({event.state})"), ("Fired at", iso_utc(event.fired_at))]
    lines = [_one_line(alert_summary(event)), ""]
    lines += [f"{name + ':':<12} {value}" for name, value in rows]
    error = clip(event.error)
    if error:
        lines += ["", "Error:", *(f"  {line}" for line in error.splitlines())]
    if event.details:
        lines += ["", "Details:", *(f"  {key}: {value}" for key, value in event.details.items())]
    if event.dashboard_url:
        lines += ["", f"Dashboard: {event.dashboard_url}"]
    lines += ["", "-- ", f"Sent by Pulse; event {event.event_id}."]
    return "\n".join(lines) + "\n"


def _headers(config: EmailConfig, event: AlertEvent) -> list[tuple[str, str]]:
    """The message's headers, each value as a reader of the message must get it back."""
    fired = event.fired_at if event.fired_at.tzinfo is not None else event.fired_at.astimezone()
    return [
        ("From", config.sender),
        ("To", ", ".join(config.recipients)),
        ("Subject", header_text(f"{config.subject_prefix} {alert_summary(event)}")),
        ("Date", format_datetime(fired)),
        ("Message-ID", message_id(config, event)),
        ("Auto-Submitted", "auto-generated"),
        ("X-Pulse-Event-Id", header_text(event.event_id)),
        ("X-Pulse-Rule", header_text(event.rule)),
    ]


def build_message(config: EmailConfig, event: AlertEvent) -> EmailMessage:
    """The message of ``event`` for ``config``'s recipients (plain text, UTF-8), with the
    strict policy (:data:`STRICT`).

    Text of outside origin (a job's name, the subject prefix) reaches the headers only through
    :func:`header_text`; and the message is read back before it is sent, so a header whose
    value a parser would read otherwise (or an extra header) is refused rather than sent.

    Raises:
        HeaderRefused: a header would not read back as built; ``name`` says which.
        email.errors.MessageDefect: the read-back found a defect.
    """
    message = EmailMessage(policy=STRICT)
    intended = _headers(config, event)
    for name, value in intended:
        message[name] = value
    message.set_content(email_body(event))
    read = BytesParser(policy=STRICT).parsebytes(message.as_bytes())
    got = [(name, str(value)) for name, value in read.items()]
    wanted = [*intended, ("Content-Type", 'text/plain; charset="utf-8"')]
    for (name, value), (read_name, read_value) in zip(wanted, got, strict=False):
        # A header folded right after its name reads back with the fold's leading space.
        if (name, value) != (read_name, read_value.strip(" ")):
            raise HeaderRefused(name, value, read_value)
    extra = [name for name, _ in got[len(wanted) :] if name not in _MIME_HEADERS]
    if len(got) < len(wanted) or extra:
        raise HeaderRefused(extra[0] if extra else wanted[len(got)][0], "", str(got))
    return message


#: What ``set_content`` adds after ``Content-Type``.
_MIME_HEADERS = frozenset({"Content-Transfer-Encoding", "MIME-Version"})


class EmailNotifier:
    """Sends alert events as e-mail through one SMTP server.

    Args:
        config: the notifier's config.
    """

    kind: ClassVar[str] = "email"

    def __init__(self, config: EmailConfig) -> None:
        self.config = config
        self._where = f"SMTP {config.host}:{config.port}"
        self._secrets = () if config.password is None else (config.password.reveal(),)
        self._tls: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"EmailNotifier({self._where!r}, to={list(self.config.recipients)!r})"

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context(cadata=self.config.tls_ca)
        return self._tls

    def _client(self, local_hostname: str) -> aiosmtplib.SMTP:
        try:
            import aiosmtplib
        except ModuleNotFoundError as exc:
            raise MissingExtra("alerts", "an e-mail notifier") from exc

        config = self.config
        return aiosmtplib.SMTP(
            hostname=config.host,
            port=config.port,
            use_tls=config.security == "tls",
            start_tls=config.security == "starttls",
            username=config.username,
            password=None if config.password is None else config.password.reveal(),
            tls_context=None if config.security == "plain" else self._tls_context(),
            local_hostname=local_hostname,
            # No aiosmtplib timeouts: the one deadline in send() bounds the whole exchange.
            # (aiosmtplib's own go through asyncio.wait_for, which on Python 3.11 can swallow a
            # cancellation that arrives as the connection completes.)
            timeout=None,
        )

    def _result(
        self, started: float, *, error: str | None, retryable: bool, status: int | None
    ) -> DeliveryResult:
        return DeliveryResult(
            ok=error is None,
            retryable=retryable,
            error=None if error is None else scrub(_one_line(error), self._secrets),
            status=status,
            elapsed=time.monotonic() - started,
        )

    async def send(self, event: AlertEvent, *, attempt: int = 1) -> DeliveryResult:
        """Send ``event`` as one message. Never raises for a delivery failure (see
        :class:`~pgpulse.alerts.notifiers.events.DeliveryResult`); a cancellation closes the
        connection and propagates.

        Args:
            event: the alert event.
            attempt: which attempt of this event's delivery this is (1-based; the message is
                the same on every attempt).
        """
        try:
            import aiosmtplib
        except ModuleNotFoundError as exc:
            raise MissingExtra("alerts", "an e-mail notifier") from exc
        started = time.monotonic()
        try:
            message = build_message(self.config, event)
        except (HeaderRefused, MessageDefect) as exc:
            return self._result(started, error=str(exc), retryable=False, status=None)
        smtp = self._client(await _local_hostname())
        where = self._where
        try:
            async with asyncio.timeout(self.config.timeout):
                await smtp.connect()
                refused, _ = await smtp.send_message(message)
                with contextlib.suppress(aiosmtplib.SMTPException):
                    await smtp.quit()
        except TimeoutError:
            return self._result(
                started,
                error=f"{where} timed out after {seconds_text(self.config.timeout)}",
                retryable=True,
                status=None,
            )
        except aiosmtplib.SMTPRecipientsRefused as exc:
            codes = [r.code for r in exc.recipients]
            said = "; ".join(f"{r.recipient}: {r.code} {r.message}" for r in exc.recipients)
            return self._result(
                started,
                error=f"{where} refused every recipient ({said})",
                retryable=any(classify_smtp_code(code) == "retry" for code in codes),
                status=codes[0] if codes else None,
            )
        except aiosmtplib.SMTPResponseException as exc:
            return self._result(
                started,
                error=f"{where} answered {exc.code} {exc.message}",
                retryable=classify_smtp_code(exc.code) == "retry",
                status=exc.code,
            )
        except (aiosmtplib.SMTPServerDisconnected, aiosmtplib.SMTPConnectError, OSError) as exc:
            return self._result(
                started,
                error=f"{where} failed: {type(exc).__name__}: {exc}",
                retryable=True,
                status=None,
            )
        except aiosmtplib.SMTPException as exc:  # STARTTLS or AUTH not offered, and the like
            return self._result(started, error=f"{where}: {exc}", retryable=False, status=None)
        finally:
            smtp.close()  # synchronous: a cancelled send leaves no connection behind
        result = self._result(started, error=None, retryable=False, status=250)
        if refused:
            said = "; ".join(
                f"{rcpt}: {reply.code} {reply.message}" for rcpt, reply in refused.items()
            )
            result = DeliveryResult(
                ok=True,
                retryable=False,
                error=None,
                status=250,
                elapsed=result.elapsed,
                detail=scrub(f"refused recipients: {said}", self._secrets),
            )
        return result
