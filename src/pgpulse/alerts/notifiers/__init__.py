"""Notifiers: where alerts and check-ins go (docs/alerts.md).

Three kinds, each a validated, frozen config (``from_json`` / ``to_json`` / ``redacted``) and a
sender whose ``send`` returns a :class:`DeliveryResult` and never raises for a delivery failure:

* ``webhook`` (:mod:`~pgpulse.alerts.notifiers.webhook`): a signed JSON POST per alert event;
* ``email`` (:mod:`~pgpulse.alerts.notifiers.email`): a plain-text message per alert event,
  over SMTP;
* ``checkin`` (:mod:`~pgpulse.alerts.notifiers.checkin`): a ping to an outside monitor per phase
  of an attempt (start, success, failure).

:mod:`~pgpulse.alerts.notifiers.retry` decides when a failed delivery is tried again. Nothing here
reads the database, and neither ``httpx`` nor ``aiosmtplib`` is imported until something is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pgpulse.alerts.notifiers.checkin import CheckinConfig, CheckinNotifier
from pgpulse.alerts.notifiers.email import EmailConfig, EmailNotifier
from pgpulse.alerts.notifiers.events import AlertEvent, CheckinEvent, DeliveryResult, JobRef
from pgpulse.alerts.notifiers.fields import ConfigKey
from pgpulse.alerts.notifiers.retry import RetryPolicy
from pgpulse.alerts.notifiers.webhook import WebhookConfig, WebhookNotifier
from pgpulse.alerts.rules import Takes
from pgpulse.core.errors import InvalidNotifierConfig

if TYPE_CHECKING:
    import httpx

NotifierConfig = WebhookConfig | EmailConfig | CheckinConfig


@dataclass(frozen=True, slots=True)
class NotifierKind:
    """One kind of notifier, the tagged union's member named by ``kind``: its config class
    (whose ``keys`` are its config's fields, whose ``from_json`` validates and ``to_json`` is
    the stored form), what it takes, and what it sends. :func:`parse_notifier_config`, the CLI's
    ``--kind`` choices, the API's per-kind schema of ``config``
    (:mod:`pgpulse.web.alerts_api`) and which rules may name it
    (:func:`pgpulse.alerts.rules.check_notifier_kinds`) derive from :data:`NOTIFIER_KINDS`.
    Adding a kind is its module (config and sender), its entry here and its sender in
    :func:`build_notifier`.

    Attributes:
        name: the kind.
        config: its config class.
        takes: what it takes (:data:`~pgpulse.alerts.rules.Takes`): alert documents, or the
            check-in pings of a job's attempts; a rule's notifiers take what the rule sends.
        doc: what it sends, in a sentence.
    """

    name: str
    config: type[NotifierConfig]
    takes: Takes
    doc: str

    @property
    def keys(self) -> tuple[ConfigKey, ...]:
        """Its config's keys."""
        return self.config.keys


#: Every notifier kind, in the order messages list them.
NOTIFIER_KINDS: dict[str, NotifierKind] = {
    kind.name: kind
    for kind in (
        NotifierKind("webhook", WebhookConfig, "alerts", "a signed JSON POST per alert event"),
        NotifierKind("email", EmailConfig, "alerts", "a plain-text message per alert event"),
        NotifierKind(
            "checkin", CheckinConfig, "checkins", "a ping to a monitor per phase of an attempt"
        ),
    )
}


class AlertNotifier(Protocol):
    """What the alert delivery loop calls: ``webhook`` and ``email`` notifiers."""

    async def send(self, event: AlertEvent, *, attempt: int = 1) -> DeliveryResult:
        """Deliver ``event`` once; never raise for a delivery failure."""
        ...


def parse_notifier_config(kind: str, config: object) -> NotifierConfig:
    """Validate the config of a notifier of ``kind``.

    Args:
        kind: ``webhook``, ``email`` or ``checkin``.
        config: the JSON object of its fields (docs/alerts.md).

    Raises:
        InvalidNotifierConfig: ``kind`` is unknown (``field="kind"``), or a field is refused
            (``field="config.<key>"``; secrets are never quoted).
    """
    known = NOTIFIER_KINDS.get(kind) if isinstance(kind, str) else None
    if known is None:
        raise InvalidNotifierConfig(
            f"kind must be one of {', '.join(NOTIFIER_KINDS)}, got {kind!r}",
            field="kind",
            value=kind,
        )
    return known.config.from_json(config)


def build_notifier(
    config: NotifierConfig, *, client: httpx.AsyncClient | None = None
) -> WebhookNotifier | EmailNotifier | CheckinNotifier:
    """The sender of ``config``.

    Args:
        config: a validated config.
        client: for ``webhook`` and ``checkin``, a shared ``httpx.AsyncClient`` the caller owns
            (built on the guarded transport; see :mod:`pgpulse.alerts.notifiers.outbound`), or
            ``None``.
    """
    if isinstance(config, WebhookConfig):
        return WebhookNotifier(config, client=client)
    if isinstance(config, CheckinConfig):
        return CheckinNotifier(config, client=client)
    return EmailNotifier(config)


__all__ = [
    "NOTIFIER_KINDS",
    "AlertEvent",
    "AlertNotifier",
    "CheckinConfig",
    "CheckinEvent",
    "CheckinNotifier",
    "ConfigKey",
    "DeliveryResult",
    "EmailConfig",
    "EmailNotifier",
    "JobRef",
    "NotifierConfig",
    "NotifierKind",
    "RetryPolicy",
    "Takes",
    "WebhookConfig",
    "WebhookNotifier",
    "build_notifier",
    "parse_notifier_config",
]
