"""The ``webhook`` notifier: one signed JSON POST per alert event (docs/alerts.md, "Webhook").

* The body is the versioned document of :func:`webhook_payload` (``schema_version`` 1), which
  carries a Slack-compatible ``text`` field, so a Slack (or Mattermost) incoming-webhook URL works
  as is; ``format: "slack"`` sends ``{"text": ...}`` alone.
* ``Idempotency-Key`` is the event's delivery key, the same for every attempt of its delivery.
* With a ``secret``, ``X-Pulse-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`` signs
  ``"<t>." + body`` (the scheme Stripe uses; GitHub's is the same HMAC without the timestamp),
  so a receiver can check both who sent the body and that it is fresh
  (:func:`verify_signature` is the reference recipe).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pgpulse.alerts.notifiers import fields
from pgpulse.alerts.notifiers.events import AlertEvent, DeliveryResult, alert_summary, clip, iso_utc
from pgpulse.alerts.notifiers.outbound import OutboundRequest, send_request
from pgpulse.alerts.notifiers.redaction import MASK, Secret, redact_url, url_secrets
from pgpulse.alerts.notifiers.retry import RetryPolicy
from pgpulse.core.constant_time import same_secret

if TYPE_CHECKING:
    import httpx

    from pgpulse.core.policy import HttpAllowList

#: Version of the webhook document. Adding a field keeps it; removing or changing one bumps it.
SCHEMA_VERSION = 1
SIGNATURE_HEADER = "X-Pulse-Signature"
TIMESTAMP_HEADER = "X-Pulse-Timestamp"
#: Receivers should refuse a signature older (or newer) than this, seconds.
SIGNATURE_TOLERANCE = 300.0
WEBHOOK_FORMATS = ("pulse", "slack")
#: The keys of a webhook's config.
WEBHOOK_KEYS = (
    fields.ConfigKey("url", "the http:// or https:// URL to POST to", required=True, secret=True),
    fields.ConfigKey("secret", "HMAC-SHA256 key of X-Pulse-Signature, 16+ characters", secret=True),
    fields.ConfigKey("headers", "extra request headers, name to value", "object", secret=True),
    fields.ConfigKey("format", "pulse (the whole document) or slack ({text} only)"),
    *fields.DELIVERY_KEYS,
)
WEBHOOK_FIELDS = fields.key_names(WEBHOOK_KEYS)
#: Header names Pulse sets itself (besides every ``X-Pulse-*``).
RESERVED_HEADERS = frozenset(
    {"content-type", "content-length", "host", "transfer-encoding", "user-agent", "idempotency-key"}
)
USER_AGENT = f"pgpulse-webhook/{SCHEMA_VERSION}"
#: Characters of the error kept in the ``text`` field (the ``error`` field has it all).
TEXT_ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """A validated ``webhook`` notifier. Build with :meth:`from_json`.

    Attributes:
        url: where to POST (secret: Slack's and others' URLs are credentials).
        secret: HMAC-SHA256 key of ``X-Pulse-Signature`` (16+ characters), or ``None`` for
            unsigned deliveries.
        headers: extra request headers, e.g. ``Authorization`` (values secret).
        timeout: seconds for one delivery attempt, connect to last byte.
        format: ``pulse`` (the whole document) or ``slack`` (``{"text": ...}`` only).
        max_attempts: attempts per delivery before it is given up.
        retry_backoff: base of the exponential backoff between attempts, seconds.
    """

    kind: ClassVar[str] = "webhook"
    keys: ClassVar[tuple[fields.ConfigKey, ...]] = WEBHOOK_KEYS
    example: ClassVar[str] = '{"url": "https://hooks.example.com/pulse"}'

    url: Secret
    secret: Secret | None = None
    headers: tuple[tuple[str, Secret], ...] = ()
    timeout: float = 10.0
    format: str = "pulse"
    max_attempts: int = 12
    retry_backoff: float = 5.0

    @classmethod
    def from_json(cls, config: object) -> WebhookConfig:
        """Validate a JSON object (see docs/alerts.md for every field) into a config.

        Raises:
            InvalidNotifierConfig: a key is unknown, a field is missing or refused; ``field``
                is ``"config.<key>"``, and no secret is quoted.
        """
        obj = fields.check_object(config, cls.kind, WEBHOOK_FIELDS, cls.example)
        url = fields.http_url(obj, "url", required=True)
        assert url is not None
        timeout, max_attempts, backoff = fields.delivery_fields(
            obj, timeout=10.0, max_attempts=12, retry_backoff=5.0
        )
        return cls(
            url=url,
            secret=fields.secret_text(obj, "secret", min_chars=16),
            headers=fields.headers(obj, "headers", RESERVED_HEADERS),
            timeout=timeout,
            format=fields.choice(obj, "format", WEBHOOK_FORMATS, "pulse"),
            max_attempts=max_attempts,
            retry_backoff=backoff,
        )

    def to_json(self) -> dict[str, Any]:
        """The stored form, secrets included (:meth:`from_json` reads it back). Never display
        it: :meth:`redacted` is the form to show."""
        stored: dict[str, Any] = {"url": self.url.reveal()}
        if self.secret is not None:
            stored["secret"] = self.secret.reveal()
        if self.headers:
            stored["headers"] = {name: value.reveal() for name, value in self.headers}
        return stored | self._plain_fields()

    def redacted(self) -> dict[str, Any]:
        """The config to display: URL masked (see :func:`redact_url`), secret and header values
        shown as ``***``."""
        shown: dict[str, Any] = {"url": redact_url(self.url.reveal())}
        if self.secret is not None:
            shown["secret"] = MASK
        if self.headers:
            shown["headers"] = {name: MASK for name, _ in self.headers}
        return shown | self._plain_fields()

    def _plain_fields(self) -> dict[str, Any]:
        return {
            "timeout": self.timeout,
            "format": self.format,
            "max_attempts": self.max_attempts,
            "retry_backoff": self.retry_backoff,
        }

    def retry_policy(self) -> RetryPolicy:
        """The retry policy of this notifier's deliveries."""
        return RetryPolicy(max_attempts=self.max_attempts, backoff=self.retry_backoff)

    async def check_targets(
        self, allow: HttpAllowList, *, resolve_timeout: float = 2.0, allowed_by: str | None = None
    ) -> None:
        """Apply the ``http`` jobs' address policy to :attr:`url` (see
        :func:`pgpulse.alerts.notifiers.fields.check_url_target`).

        Raises:
            TargetNotAllowed: ``field="config.url"``.
        """
        await fields.check_url_target(
            self.url, "url", allow, resolve_timeout=resolve_timeout, allowed_by=allowed_by
        )


def _slack_escape(text: str) -> str:
    """Slack's three control characters, escaped as its message formatting asks."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhook_text(event: AlertEvent) -> str:
    """The ``text`` field: the summary line, the error's start, and the dashboard link."""
    lines = [_slack_escape(alert_summary(event))]
    error = clip(event.error, TEXT_ERROR_CHARS)
    if error:
        lines.append(_slack_escape(f"Error: {error}"))
    if event.dashboard_url:
        lines.append(event.dashboard_url)
    return "\n".join(lines)


def webhook_payload(event: AlertEvent) -> dict[str, Any]:
    """The webhook document of ``event`` (schema version :data:`SCHEMA_VERSION`, documented
    field by field in docs/alerts.md)."""
    job = event.job
    return {
        "schema_version": SCHEMA_VERSION,
        "event_id": event.event_id,
        "delivery_key": event.delivery_key,
        "rule": event.rule,
        "state": event.state,
        "fired_at": iso_utc(event.fired_at),
        "job": None if job is None else {"tenant": job.tenant, "name": job.name, "id": job.id},
        "occurrence": None
        if event.scheduled_for is None
        else {"scheduled_for": iso_utc(event.scheduled_for), "run_id": event.run_id},
        "error": clip(event.error),
        "details": event.details,
        "dashboard_url": event.dashboard_url,
        "text": webhook_text(event),
    }


def render_body(event: AlertEvent, format: str = "pulse") -> bytes:
    """The exact bytes POSTed (and signed): compact UTF-8 JSON."""
    document = webhook_payload(event) if format == "pulse" else {"text": webhook_text(event)}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``f"{timestamp}.".encode() + body`` under ``secret`` (UTF-8)."""
    signed = f"{timestamp}.".encode() + body
    return hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    """The value of ``X-Pulse-Signature``: ``t=<timestamp>,v1=<hex signature>``."""
    return f"t={timestamp},v1={sign(secret, timestamp, body)}"


def verify_signature(
    secret: str,
    header: str,
    body: bytes,
    *,
    now: float,
    tolerance: float = SIGNATURE_TOLERANCE,
) -> bool:
    """Check an ``X-Pulse-Signature`` header as a receiver should (docs/alerts.md, "Verifying
    a delivery"): some ``v1`` equals the HMAC of ``"<t>." + body``, and ``t`` is within
    ``tolerance`` seconds of ``now``.

    Args:
        secret: the notifier's secret.
        header: the header's value, ``t=...,v1=...`` (several ``v1`` entries may appear).
        body: the raw request body, byte for byte as received.
        now: the receiver's clock, seconds since the epoch.
        tolerance: the largest accepted age (or lead) of ``t``, seconds.
    """
    stamps: list[str] = []
    signatures: list[str] = []
    for item in header.split(","):
        name, _, value = item.strip().partition("=")
        if name == "t":
            stamps.append(value)
        elif name == "v1":
            signatures.append(value)
    # isascii: "²" and other digits of other scripts pass isdigit but not int().
    if len(stamps) != 1 or not (stamps[0].isascii() and stamps[0].isdigit()):
        return False
    timestamp = int(stamps[0])
    if abs(now - timestamp) > tolerance:
        return False
    expected = sign(secret, timestamp, body)
    return any(same_secret(candidate, expected) for candidate in signatures)


class WebhookNotifier:
    """Sends alert events to one webhook.

    Args:
        config: the notifier's config.
        client: a shared ``httpx.AsyncClient`` the caller owns (the seam for a guarded
            transport, see :mod:`pgpulse.alerts.notifiers.outbound`), or ``None`` for a client per
            send.
        clock: seconds since the epoch, for the signature's timestamp and ``Retry-After``
            dates (tests pass a fixed one).
    """

    kind: ClassVar[str] = "webhook"

    def __init__(
        self,
        config: WebhookConfig,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._client = client
        self._clock = clock
        self._secrets = tuple(url_secrets(config.url.reveal())) + tuple(
            value.reveal() for _, value in config.headers
        )
        if config.secret is not None:
            self._secrets += (config.secret.reveal(),)
        self._shown_url = redact_url(config.url.reveal())

    def __repr__(self) -> str:
        return f"WebhookNotifier(url={self._shown_url!r})"

    def headers(self, event: AlertEvent, body: bytes, *, attempt: int) -> Mapping[str, str]:
        """The request headers of one delivery attempt (the configured ones first, Pulse's
        after, so none of Pulse's can be overridden)."""
        timestamp = int(self._clock())
        sent = {name: value.reveal() for name, value in self.config.headers}
        sent |= {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": event.delivery_key,
            "X-Pulse-Event-Id": event.event_id,
            "X-Pulse-Rule": event.rule,
            "X-Pulse-Delivery-Attempt": str(attempt),
            TIMESTAMP_HEADER: str(timestamp),
        }
        if self.config.secret is not None:
            sent[SIGNATURE_HEADER] = signature_header(self.config.secret.reveal(), timestamp, body)
        return sent

    async def send(self, event: AlertEvent, *, attempt: int = 1) -> DeliveryResult:
        """POST ``event`` once. Never raises for a delivery failure (see
        :class:`~pgpulse.alerts.notifiers.events.DeliveryResult`); a cancellation closes the
        connection and propagates.

        Args:
            event: the alert event.
            attempt: which attempt of this event's delivery this is (1-based), sent as
                ``X-Pulse-Delivery-Attempt``.
        """
        body = render_body(event, self.config.format)
        request = OutboundRequest(
            method="POST",
            url=self.config.url.reveal(),
            shown_url=self._shown_url,
            headers=self.headers(event, body, attempt=attempt),
            body=body,
            timeout=self.config.timeout,
            secrets=self._secrets,
        )
        return await send_request(request, client=self._client, clock=self._clock)
