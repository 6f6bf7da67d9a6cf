"""The ``checkin`` notifier: ping an outside monitor (Healthchecks.io, Sentry Crons, Cronitor...)
when an attempt starts, succeeds and fails, so that the monitor notices a job that stopped
running even when Pulse itself is down (docs/alerts.md, "Check-ins").

Which URL each phase pings:

* ``url`` alone follows Healthchecks' convention: ``start`` pings ``<url>/start``, ``success``
  pings ``<url>``, ``failure`` pings ``<url>/fail``; each with ``?rid=<run_uuid>``, so the monitor
  pairs an attempt's start with its end and measures its duration.
* ``start_url``, ``success_url``, ``failure_url`` name a phase's URL explicitly (Sentry Crons:
  ``...?status=in_progress``, ``...?status=ok``, ``...?status=error``); a phase without one
  falls back to the rule above when ``url`` is given.
* Every URL may hold placeholders, filled in (percent-encoded) per ping: ``{tenant}``, ``{job}``,
  ``{job_id}``, ``{scheduled_for}`` (ISO-8601, UTC), ``{scheduled_unix}``, ``{run_id}``,
  ``{attempt}``, ``{run_uuid}`` (a UUID per attempt, the same for its start and its end) and
  ``{phase}``. ``{{`` and ``}}`` are literal braces.
* ``events`` chooses which phases are pinged (all three by default).

``POST`` (the default) sends a short plain-text body (the job, the occurrence, the attempt and,
on failure, the error), which Healthchecks shows beside the ping; ``GET`` sends none.
"""

from __future__ import annotations

import string
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, urlsplit

from pgpulse.alerts.notifiers import fields
from pgpulse.alerts.notifiers.events import (
    CHECKIN_PHASES,
    CheckinEvent,
    CheckinPhase,
    DeliveryResult,
    clip,
    iso_utc,
)
from pgpulse.alerts.notifiers.outbound import OutboundRequest, send_request
from pgpulse.alerts.notifiers.redaction import Secret, redact_url, url_secrets
from pgpulse.alerts.notifiers.retry import RetryPolicy

if TYPE_CHECKING:
    import httpx

    from pgpulse.core.policy import HttpAllowList

#: The keys of a checkin notifier's config.
CHECKIN_KEYS = (
    fields.ConfigKey("url", "Healthchecks-style base URL of every phase's ping", secret=True),
    fields.ConfigKey("start_url", "the start ping's URL", secret=True),
    fields.ConfigKey("success_url", "the success ping's URL", secret=True),
    fields.ConfigKey("failure_url", "the failure ping's URL", secret=True),
    fields.ConfigKey("events", "the phases pinged (start, success, failure)", "array"),
    fields.ConfigKey("method", "POST (with a text body, default) or GET"),
    *fields.DELIVERY_KEYS,
)
CHECKIN_FIELDS = fields.key_names(CHECKIN_KEYS)
CHECKIN_METHODS = ("POST", "GET")
PLACEHOLDERS = frozenset(
    {
        "tenant",
        "job",
        "job_id",
        "scheduled_for",
        "scheduled_unix",
        "run_id",
        "attempt",
        "run_uuid",
        "phase",
    }
)
#: Healthchecks' suffixes of the ``start`` and ``failure`` pings (``success`` pings the URL).
HEALTHCHECKS_SUFFIXES: dict[CheckinPhase, str] = {
    "start": "/start",
    "success": "",
    "failure": "/fail",
}
#: The namespace of ``{run_uuid}`` (uuid5 of ``<job id>/<scheduled_for>/<attempt>``).
RUN_UUID_NAMESPACE = uuid.UUID("7a0c3f1e-5b2d-4c8e-9f61-2d4b8e0a9c57")
_FORMATTER = string.Formatter()


def _check_placeholders(key: str, template: Secret) -> None:
    """Refuse unmatched braces, unknown placeholders and format specs in a URL template."""
    try:
        parsed = [
            (name, spec, conv)
            for _, name, spec, conv in _FORMATTER.parse(template.reveal())
            if name is not None
        ]
    except ValueError:
        shown = redact_url(template.reveal())
        raise fields.refuse(
            key, "has an unmatched { or } (write {{ and }} for braces)", shown
        ) from None
    for name, spec, conv in parsed:
        if name not in PLACEHOLDERS:
            known = ", ".join(sorted(PLACEHOLDERS))
            raise fields.refuse(key, f"names an unknown placeholder (known: {known})", name)
        if spec or conv:
            raise fields.refuse(key, "has a placeholder with a format spec or conversion", name)


def _healthchecks_url(base: Secret, phase: CheckinPhase) -> Secret:
    """Healthchecks' URL of ``phase``: the suffix on the path, ``rid={run_uuid}`` in the query."""
    parts = urlsplit(base.reveal())
    path = parts.path.rstrip("/") + HEALTHCHECKS_SUFFIXES[phase]
    query = f"{parts.query}&rid={{run_uuid}}" if parts.query else "rid={run_uuid}"
    return Secret(parts._replace(path=path, query=query).geturl())


@dataclass(frozen=True, slots=True)
class CheckinConfig:
    """A validated ``checkin`` notifier. Build with :meth:`from_json`.

    Attributes:
        urls: the URL template of each pinged phase (secret: monitors put their key in it).
        method: ``POST`` (with a text body) or ``GET``.
        timeout: seconds for one ping.
        max_attempts: attempts per ping (check-ins are quick: 3 by default).
        retry_backoff: base of the backoff between a ping's attempts, seconds.
        given: the URL fields as configured (``url``, ``start_url``...), for :meth:`to_json`.
    """

    kind: ClassVar[str] = "checkin"
    keys: ClassVar[tuple[fields.ConfigKey, ...]] = CHECKIN_KEYS
    example: ClassVar[str] = '{"url": "https://hc-ping.com/<uuid>"}'

    urls: tuple[tuple[CheckinPhase, Secret], ...]
    given: tuple[tuple[str, Secret], ...]
    events: tuple[CheckinPhase, ...] = CHECKIN_PHASES
    method: str = "POST"
    timeout: float = 10.0
    max_attempts: int = 3
    retry_backoff: float = 1.0

    @classmethod
    def from_json(cls, config: object) -> CheckinConfig:
        """Validate a JSON object (see docs/alerts.md for every field) into a config.

        Raises:
            InvalidNotifierConfig: a key is unknown, a URL is not http(s) or names an unknown
                placeholder, a pinged phase has no URL, ``events`` is not a non-empty list of
                phases; ``field`` is ``"config.<key>"``, and no URL is quoted unmasked.
        """
        obj = fields.check_object(config, cls.kind, CHECKIN_FIELDS, cls.example)
        given: list[tuple[str, Secret]] = []
        for key in ("url", "start_url", "success_url", "failure_url"):
            template = fields.http_url(obj, key, required=False)
            if template is not None:
                _check_placeholders(key, template)
                given.append((key, template))
        events = _events(obj)
        explicit = dict(given)
        urls: list[tuple[CheckinPhase, Secret]] = []
        for phase in events:
            template = explicit.get(f"{phase}_url")
            if template is None and "url" in explicit:
                template = _healthchecks_url(explicit["url"], phase)
            if template is None:
                raise fields.refuse("url", f"is required: phase {phase} has no {phase}_url")
            urls.append((phase, template))
        timeout, max_attempts, backoff = fields.delivery_fields(
            obj, timeout=10.0, max_attempts=3, retry_backoff=1.0
        )
        return cls(
            urls=tuple(urls),
            given=tuple(given),
            events=events,
            method=fields.choice(obj, "method", CHECKIN_METHODS, "POST"),
            timeout=timeout,
            max_attempts=max_attempts,
            retry_backoff=backoff,
        )

    def to_json(self) -> dict[str, Any]:
        """The stored form, URLs included (:meth:`from_json` reads it back). Never display it:
        :meth:`redacted` is the form to show."""
        return {key: url.reveal() for key, url in self.given} | self._plain_fields()

    def redacted(self) -> dict[str, Any]:
        """The config to display: every URL with its secret parts masked."""
        return {key: redact_url(url.reveal()) for key, url in self.given} | self._plain_fields()

    def _plain_fields(self) -> dict[str, Any]:
        return {
            "events": list(self.events),
            "method": self.method,
            "timeout": self.timeout,
            "max_attempts": self.max_attempts,
            "retry_backoff": self.retry_backoff,
        }

    def retry_policy(self) -> RetryPolicy:
        """The retry policy of one ping."""
        return RetryPolicy(max_attempts=self.max_attempts, backoff=self.retry_backoff)

    def template_for(self, phase: CheckinPhase) -> Secret | None:
        """The URL template ``phase`` pings, or ``None`` if it is not pinged."""
        return dict(self.urls).get(phase)

    async def check_targets(
        self, allow: HttpAllowList, *, resolve_timeout: float = 2.0, allowed_by: str | None = None
    ) -> None:
        """Apply the ``http`` jobs' address policy to every configured URL.

        Raises:
            TargetNotAllowed: ``field="config.<key>"`` of the first refused URL.
        """
        for key, url in self.given:
            await fields.check_url_target(
                url, key, allow, resolve_timeout=resolve_timeout, allowed_by=allowed_by
            )


def _events(config: Mapping[str, Any]) -> tuple[CheckinPhase, ...]:
    value = config.get("events")
    if value is None:
        return CHECKIN_PHASES
    if (
        not isinstance(value, list)
        or not value
        or any(item not in CHECKIN_PHASES for item in value)
    ):
        raise fields.refuse(
            "events", f"must be a non-empty list of {', '.join(CHECKIN_PHASES)}", value
        )
    return tuple(phase for phase in CHECKIN_PHASES if phase in value)


def run_uuid(event: CheckinEvent) -> uuid.UUID:
    """The attempt's UUID: the same for its ``start`` and its end, new for each attempt."""
    name = f"{event.job.id}/{iso_utc(event.scheduled_for)}/{event.attempt}"
    return uuid.uuid5(RUN_UUID_NAMESPACE, name)


def render_url(template: str, event: CheckinEvent) -> str:
    """``template`` with its placeholders filled in from ``event``, each value percent-encoded
    (``/`` too, so a job name cannot change the URL's path)."""
    values = {
        "tenant": event.job.tenant,
        "job": event.job.name,
        "job_id": event.job.id,
        "scheduled_for": iso_utc(event.scheduled_for),
        "scheduled_unix": int(event.scheduled_for.timestamp()),
        "run_id": event.run_id,
        "attempt": event.attempt,
        "run_uuid": run_uuid(event),
        "phase": event.phase,
    }
    return template.format_map({name: quote(str(value), safe="") for name, value in values.items()})


def checkin_body(event: CheckinEvent) -> str:
    """The text body of a ``POST`` ping."""
    line = (
        f"{event.phase}: {event.job.label()} occurrence {iso_utc(event.scheduled_for)} "
        f"attempt {event.attempt} (run {event.run_id})"
    )
    if event.duration is not None:
        line += f" after {event.duration:.3f} s"
    error = clip(event.error)
    return f"{line}\n{error}\n" if error else f"{line}\n"


class CheckinNotifier:
    """Pings one outside monitor for each phase of an attempt.

    Args:
        config: the notifier's config.
        client: a shared ``httpx.AsyncClient`` the caller owns (the seam for a guarded
            transport, see :mod:`pgpulse.alerts.notifiers.outbound`), or ``None`` for a client per
            ping.
        clock: seconds since the epoch, for ``Retry-After`` dates.
    """

    kind: ClassVar[str] = "checkin"

    def __init__(
        self,
        config: CheckinConfig,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._client = client
        self._clock = clock
        self._secrets = tuple(s for _, url in config.urls for s in url_secrets(url.reveal()))

    def __repr__(self) -> str:
        return f"CheckinNotifier(events={list(self.config.events)!r})"

    async def send(self, event: CheckinEvent, *, attempt: int = 1) -> DeliveryResult:
        """Ping the URL of ``event.phase`` once (a phase not in ``events`` is not pinged: the
        result is ``ok`` with a note). Never raises for a delivery failure; a cancellation
        closes the connection and propagates.

        Args:
            event: the phase of the attempt to report.
            attempt: which attempt of this ping it is (1-based; unused in the request).
        """
        template = self.config.template_for(event.phase)
        if template is None:
            return DeliveryResult.skipped(f"phase {event.phase} is not in config.events")
        url = render_url(template.reveal(), event)
        post = self.config.method == "POST"
        request = OutboundRequest(
            method=self.config.method,
            url=url,
            shown_url=redact_url(url),
            headers={"Content-Type": "text/plain; charset=utf-8"} if post else {},
            body=checkin_body(event).encode("utf-8") if post else None,
            timeout=self.config.timeout,
            secrets=self._secrets + tuple(url_secrets(url)),
        )
        return await send_request(request, client=self._client, clock=self._clock)
