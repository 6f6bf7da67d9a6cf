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

from typing import TYPE_CHECKING, Protocol

from pgpulse.alerts.notifiers.checkin import CheckinConfig, CheckinNotifier
from pgpulse.alerts.notifiers.email import EmailConfig, EmailNotifier
from pgpulse.alerts.notifiers.events import AlertEvent, CheckinEvent, DeliveryResult, JobRef
from pgpulse.alerts.notifiers.retry import RetryPolicy
from pgpulse.alerts.notifiers.webhook import WebhookConfig, WebhookNotifier
from pgpulse.core.errors import InvalidNotifierConfig

if TYPE_CHECKING:
    import httpx

NotifierConfig = WebhookConfig | EmailConfig | CheckinConfig
#: The config class of each notifier kind.
NOTIFIER_KINDS: dict[str, type[NotifierConfig]] = {
    "webhook": WebhookConfig,
    "email": EmailConfig,
    "checkin": CheckinConfig,
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
    return known.from_json(config)


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
    "DeliveryResult",
    "EmailConfig",
    "EmailNotifier",
    "JobRef",
    "NotifierConfig",
    "RetryPolicy",
    "WebhookConfig",
    "WebhookNotifier",
    "build_notifier",
    "parse_notifier_config",
]
