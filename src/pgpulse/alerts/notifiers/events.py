"""What notifiers send and what a send returns: value objects, no I/O.

* :class:`AlertEvent`: one fired alert (a rule of a job, or of the cluster, at one instant) as
  the ``webhook`` and ``email`` notifiers deliver it. Its ``delivery_key`` is the same for every
  attempt of its delivery: receivers drop duplicates by it (the webhook's ``Idempotency-Key``,
  the e-mail's ``Message-ID``).
* :class:`CheckinEvent`: one phase (``start``, ``success``, ``failure``) of one attempt, as the
  ``checkin`` notifier pings it to an outside monitor.
* :class:`DeliveryResult`: the outcome of one send, which never raises for a delivery failure.

The one-line summaries (:func:`alert_title`, :func:`alert_summary`) are shared by the webhook's
``text`` field and the e-mail's subject, so a person reads the same words in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pgpulse.alerts.rules import RULE_KINDS
from pgpulse.core.wording import plural

#: The rules' titles, as people read them (:attr:`RuleKind.title
#: <pgpulse.alerts.rules.RuleKind.title>`; a rule not listed is shown by its name).
RULE_TITLES = {kind.name: kind.title for kind in RULE_KINDS.values() if kind.title}
#: Rules whose event closes an alert rather than opening one (``state: "resolved"``): the one
#: rule whose event is resolved when it fires (``alert_recovered`` in ``sql/alerts.sql``), so the
#: webhook's ``state`` and ``pgpulse alert list``'s agree.
RESOLVING_RULES = frozenset({"recovered"})
#: Longest error text carried in a payload or message, characters (the run keeps the rest).
MAX_ERROR_CHARS = 4096

CheckinPhase = Literal["start", "success", "failure"]
CHECKIN_PHASES: tuple[CheckinPhase, ...] = ("start", "success", "failure")


def iso_utc(instant: datetime) -> str:
    """ISO-8601 text of ``instant`` in UTC (a naive instant is taken to be UTC already)."""
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC).isoformat()


def clip(text: str | None, limit: int = MAX_ERROR_CHARS) -> str | None:
    """``text`` cut to ``limit`` characters, with a marker saying how much was cut."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f" [... {len(text) - limit} more characters]"


@dataclass(frozen=True, slots=True)
class JobRef:
    """The job an event is about.

    Attributes:
        tenant: the job's tenant.
        name: the job's name within its tenant.
        id: the job's id (``pgpulse_jobs.id``).
    """

    tenant: str
    name: str
    id: int

    def label(self) -> str:
        """``tenant/name``, as the CLI and the dashboard name a job."""
        return f"{self.tenant}/{self.name}"


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """One fired alert, as delivered by ``webhook`` and ``email`` notifiers.

    Attributes:
        event_id: the event's id (opaque text; the alert event row's key).
        delivery_key: unique per event, the same for every attempt of its delivery (sent as
            ``Idempotency-Key``; the e-mail's ``Message-ID`` is derived from it).
        rule: the rule that fired (``failures``, ``late``, ``skipped``, ``missed``, ``silence``,
            ``recovered``, or a cluster rule: ``no_live_node``, ``node_died``,
            ``leader_changed``, ``lag``, ``split_brain``, ``db_clock``).
        fired_at: when the event fired (UTC; the database's clock).
        job: the job, or ``None`` for a cluster alert.
        scheduled_for: the occurrence the event is about (UTC), or ``None`` (a ``silence``
            window, a cluster alert).
        run_id: the occurrence's run, if it has one.
        error: the run's error text, if any (clipped to :data:`MAX_ERROR_CHARS`).
        details: rule-specific facts, a JSON object (``{"consecutive_failures": 3}``).
        dashboard_url: a link to the job, run or cluster page of the dashboard, if the cluster
            knows its dashboard's address.
        resolved_at: when the alert was resolved (UTC), if it was by the time this delivery
            was sent: an event sent late (its receiver was down) says what holds then.
    """

    event_id: str
    delivery_key: str
    rule: str
    fired_at: datetime
    job: JobRef | None = None
    scheduled_for: datetime | None = None
    run_id: int | None = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    dashboard_url: str | None = None
    resolved_at: datetime | None = None

    @property
    def state(self) -> Literal["firing", "resolved"]:
        """``resolved`` for a rule that closes an alert (``recovered``), or an event whose
        alert was resolved by the time it is sent; else ``firing``."""
        resolved = self.rule in RESOLVING_RULES or self.resolved_at is not None
        return "resolved" if resolved else "firing"


def alert_title(event: AlertEvent) -> str:
    """The rule's title with its subject: ``Job failed: acme/nightly-report``; for a cluster
    alert, what happened to which node (:func:`cluster_subject`), since a ``format: slack``
    webhook sends this text alone."""
    title = RULE_TITLES.get(event.rule, event.rule)
    if event.job is not None:
        return f"{title}: {event.job.label()}"
    subject = cluster_subject(event.rule, event.details)
    return f"{title}: {subject}" if subject else f"{title} (cluster)"


def _seconds(value: object) -> str:
    return f"{value:.0f} s" if isinstance(value, int | float) else "?"


def cluster_subject(rule: str, details: dict[str, Any]) -> str | None:
    """The subject of a cluster alert, from its ``details`` (pure): ``node t16-a (2 attempts
    running, last heartbeat 2026-12-01T15:02:03+00:00)`` for ``node_died``, ``node b took over
    from a`` for ``leader_changed``, the waits of ``lag`` and ``no_live_node``, the writable
    hosts of ``split_brain``, the step of ``db_clock``; ``None`` when the details say nothing
    (an older event)."""
    if rule == "node_died" and details.get("node"):
        beat = details.get("last_heartbeat")
        return f"node {details['node']} ({_running(details.get('running'))}, last heartbeat {beat})"
    if rule == "leader_changed" and details.get("leader"):
        return f"node {details['leader']} took over from {details.get('previous')}"
    if rule == "lag" and "lag_seconds" in details:
        return (
            f"the most overdue job waits {_seconds(details['lag_seconds'])} "
            f"(threshold {_seconds(details.get('threshold_seconds'))})"
        )
    if rule == "split_brain" and details.get("writable"):
        return (
            f"{', '.join(details['writable'])} accept writes; claims go to {details.get('newest')}"
        )
    if rule == "db_clock" and "step_seconds" in details:
        step = float(details["step_seconds"])
        way = "back" if step < 0 else "forward"
        return f"the database's clock moved {way} {abs(step):.1f} s (node {details.get('node')})"
    if rule == "no_live_node" and details.get("since"):
        return (
            f"none from {details['since']} to {details.get('until')} "
            f"({_seconds(details.get('gap_seconds'))}, threshold "
            f"{_seconds(details.get('threshold_seconds'))}); node {details.get('node')} came back"
        )
    return None


def alert_summary(event: AlertEvent) -> str:
    """One line: the title and the occurrence, e.g.
    ``Job failed: acme/nightly-report, occurrence 2024-03-10T02:30:00+00:00``; for an event
    sent after its alert was resolved, ``..., resolved 2024-03-10T02:35:00+00:00`` (else the
    title alone would say it is still failing)."""
    line = alert_title(event)
    if event.scheduled_for is not None:
        line += f", occurrence {iso_utc(event.scheduled_for)}"
    if event.resolved_at is not None and event.rule not in RESOLVING_RULES:
        line += f", resolved {iso_utc(event.resolved_at)}"
    return line


@dataclass(frozen=True, slots=True)
class CheckinEvent:
    """One phase of one attempt, pinged to an outside monitor by a ``checkin`` notifier.

    Attributes:
        phase: ``start`` (the attempt began), ``success`` or ``failure`` (it ended so).
        job: the job.
        scheduled_for: the occurrence (UTC).
        run_id: the occurrence's run id.
        attempt: the attempt number (1-based).
        error: the failure's error text (``failure`` only).
        duration: seconds the attempt took (``success``, ``failure``).
    """

    phase: CheckinPhase
    job: JobRef
    scheduled_for: datetime
    run_id: int
    attempt: int
    error: str | None = None
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """The outcome of one send. A send never raises for a delivery failure; it returns this.

    Attributes:
        ok: the receiver accepted it (HTTP 2xx; SMTP accepted the message for at least one
            recipient).
        retryable: a later attempt may succeed (5xx, 408, 429, a network error, a timeout, an
            SMTP 4xx reply). ``False`` when ``ok`` or final (another 4xx, an SMTP 5xx reply, a
            refused configuration).
        error: what went wrong, one line with every secret masked; ``None`` when ``ok``.
        status: the HTTP status or the SMTP reply code, when the receiver answered.
        elapsed: seconds the send took.
        retry_after: seconds the receiver asked to wait (``Retry-After``), if it did.
        detail: the start of the receiver's answer (at most 1 KiB, secrets masked), or a note
            (refused recipients, a phase not sent).
    """

    ok: bool
    retryable: bool
    error: str | None
    status: int | None
    elapsed: float
    retry_after: float | None = None
    detail: str | None = None

    @classmethod
    def skipped(cls, reason: str) -> DeliveryResult:
        """A send that had nothing to do (``ok``, no status): ``reason`` goes to ``detail``."""
        return cls(ok=True, retryable=False, error=None, status=None, elapsed=0.0, detail=reason)


def _running(running: object) -> str:
    """``2 attempts running`` (``? attempts running`` when an older event did not say)."""
    if isinstance(running, int) and not isinstance(running, bool):
        return plural(running, "attempt") + " running"
    return "? attempts running"
