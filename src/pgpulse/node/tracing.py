"""Optional OpenTelemetry tracing: one span per claim, one span per attempt, and the W3C
``traceparent`` of the running attempt for the ``http`` handler's headers and shell jobs'
environment.

Tracing is off until :func:`enable` is called (a node's option). While it is off, or when the
``otel`` extra (``opentelemetry-api`` + ``opentelemetry-sdk``) is not installed, nothing from
OpenTelemetry is imported and every function here costs one check: :func:`claim_span` and
:func:`attempt_span` hand back a shared do-nothing context manager, and the traceparent helpers
return ``None`` or ``{}``.

Spans (attribute names in the ``pgpulse.`` namespace; instants as ISO-8601 UTC text, durations
in seconds):

* ``pgpulse.claim`` — one claim statement: ``pgpulse.node.id``, ``pgpulse.claim.limit``,
  ``pgpulse.claim.claimed``.
* ``pgpulse.attempt <tenant>/<job>`` — one attempt, from its start to its fenced outcome:
  ``pgpulse.job.id``, ``pgpulse.job.name``, ``pgpulse.tenant``, ``pgpulse.handler``,
  ``pgpulse.scheduled_for``, ``pgpulse.attempt``, ``pgpulse.run.id``,
  ``pgpulse.fencing_token``, ``pgpulse.node.id``, ``pgpulse.lag_seconds`` (start minus
  ``scheduled_for``), ``pgpulse.outcome``. By default an attempt is the root of a trace of its
  own with a *link* to its claim's span (a claim of 25 jobs does not make one trace of 25
  attempts, and a retry on another node is its own trace); ``claim_as="parent"`` makes it a
  child of the claim instead. An attempt that ends in an exception has status ERROR and the
  exception recorded; a cancelled one gets ``pgpulse.outcome = "cancelled"`` unless the caller
  set an outcome first.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

#: The instrumentation scope's name.
TRACER_NAME = "pgpulse"
#: The claim whose attempts are being started: the recorder sets it around starting them, so each
#: attempt's task (which copies the context it was created in) links to its own claim.
CURRENT_CLAIM: contextvars.ContextVar[ClaimTrace | None] = contextvars.ContextVar(
    "pgpulse_claim", default=None
)


@dataclass(slots=True)
class _State:
    tracer: Tracer | None = None


_STATE = _State()


def enable(tracer_provider: TracerProvider | None = None) -> bool:
    """Turn tracing on.

    Args:
        tracer_provider: the provider to create spans with; ``None`` uses OpenTelemetry's
            global one (set by the application, or by ``opentelemetry-instrument``).

    Returns:
        ``True`` if tracing is on; ``False`` if ``opentelemetry-api`` is not installed (then
        nothing changes and nothing is imported).
    """
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    _STATE.tracer = provider.get_tracer(TRACER_NAME)
    return True


def disable() -> None:
    """Turn tracing off: spans started from now on are the do-nothing kind."""
    _STATE.tracer = None


def is_enabled() -> bool:
    """Whether :func:`enable` turned tracing on."""
    return _STATE.tracer is not None


class ClaimTrace:
    """The span of one claim (or nothing, with tracing off): what attempts link to."""

    __slots__ = ("span",)

    def __init__(self, span: Span | None = None) -> None:
        self.span = span

    def set_claimed(self, count: int) -> None:
        """Record how many jobs the claim returned."""
        if self.span is not None:
            self.span.set_attribute("pgpulse.claim.claimed", count)


class AttemptTrace:
    """The span of one attempt (or nothing, with tracing off)."""

    __slots__ = ("outcome", "span")

    def __init__(self, span: Span | None = None) -> None:
        self.span = span
        self.outcome: str | None = None

    def set_outcome(self, outcome: str, *, error: str | None = None) -> None:
        """Record how the attempt ended (``succeeded``, ``failed``, ``retrying``, ``fenced``,
        ``timed_out``...); with ``error``, the span's status is ERROR with that description."""
        self.outcome = outcome
        if self.span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("pgpulse.outcome", outcome)
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error))

    @property
    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of this attempt's span, or ``None`` (tracing off, or a span
        that records nothing)."""
        if self.span is None:
            return None
        from opentelemetry import trace

        return _inject(trace.set_span_in_context(self.span)).get("traceparent")


_OFF_CLAIM: AbstractContextManager[ClaimTrace] = contextlib.nullcontext(ClaimTrace())
_OFF_ATTEMPT: AbstractContextManager[AttemptTrace] = contextlib.nullcontext(AttemptTrace())


def claim_span(*, node_id: str, limit: int) -> AbstractContextManager[ClaimTrace]:
    """A span around one claim statement.

    Args:
        node_id: the claiming node.
        limit: how many jobs it asked for (its free worker slots).

    Returns:
        A context manager giving a :class:`ClaimTrace` to pass to :func:`attempt_span`.
    """
    tracer = _STATE.tracer
    if tracer is None:
        return _OFF_CLAIM
    return _claim(tracer, node_id, limit)


@contextlib.contextmanager
def _claim(tracer: Tracer, node_id: str, limit: int) -> Iterator[ClaimTrace]:
    attributes: dict[str, Any] = {"pgpulse.node.id": node_id, "pgpulse.claim.limit": limit}
    with tracer.start_as_current_span("pgpulse.claim", attributes=attributes) as span:
        yield ClaimTrace(span)


def attempt_span(
    *,
    job_id: int,
    job_name: str,
    tenant: str,
    handler: str,
    scheduled_for: datetime,
    attempt: int,
    run_id: int,
    fencing_token: int,
    node_id: str,
    lag: float | None = None,
    claim: ClaimTrace | None = None,
    claim_as: Literal["link", "parent"] = "link",
) -> AbstractContextManager[AttemptTrace]:
    """A span around one attempt; inside it, :func:`current_traceparent` is the attempt's.

    Args:
        job_id, job_name, tenant, handler: the job.
        scheduled_for: the occurrence (UTC; a naive instant is taken as UTC).
        attempt: the attempt number (1-based).
        run_id: the occurrence's run id.
        fencing_token: the claim's fencing token.
        node_id: the node running the attempt.
        lag: seconds from ``scheduled_for`` to the first attempt's start, if known.
        claim: the claim that handed out this attempt, linked (or parent, see ``claim_as``).
        claim_as: ``link`` (default: the attempt roots a trace of its own) or ``parent``.

    Returns:
        A context manager giving an :class:`AttemptTrace`.
    """
    tracer = _STATE.tracer
    if tracer is None:
        return _OFF_ATTEMPT
    if scheduled_for.tzinfo is None:
        scheduled_for = scheduled_for.replace(tzinfo=UTC)
    attributes: dict[str, Any] = {
        "pgpulse.job.id": job_id,
        "pgpulse.job.name": job_name,
        "pgpulse.tenant": tenant,
        "pgpulse.handler": handler,
        "pgpulse.scheduled_for": scheduled_for.astimezone(UTC).isoformat(),
        "pgpulse.attempt": attempt,
        "pgpulse.run.id": run_id,
        "pgpulse.fencing_token": fencing_token,
        "pgpulse.node.id": node_id,
    }
    if lag is not None:
        attributes["pgpulse.lag_seconds"] = lag
    name = f"pgpulse.attempt {tenant}/{job_name}"
    return _attempt(tracer, name, attributes, claim.span if claim is not None else None, claim_as)


@contextlib.contextmanager
def _attempt(
    tracer: Tracer,
    name: str,
    attributes: dict[str, Any],
    claim: Span | None,
    claim_as: Literal["link", "parent"],
) -> Iterator[AttemptTrace]:
    from opentelemetry import context, trace

    if claim is not None and claim_as == "parent":
        parent = trace.set_span_in_context(claim, context.Context())
        links = []
    else:
        parent = context.Context()  # a root: not the child of whatever span is current
        links = [] if claim is None else [trace.Link(claim.get_span_context())]
    with tracer.start_as_current_span(
        name, context=parent, attributes=attributes, links=links
    ) as span:
        handle = AttemptTrace(span)
        try:
            yield handle
        except BaseException as exc:
            if handle.outcome is None:
                outcome = "cancelled" if not isinstance(exc, Exception) else "failed"
                span.set_attribute("pgpulse.outcome", outcome)
            raise


def _inject(ctx: Any = None) -> dict[str, str]:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=ctx)
    return carrier


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span (inside :func:`attempt_span`: the attempt's),
    or ``None`` with tracing off or no recording span. Pass it as the ``traceparent`` header of
    an ``http`` job's request and as ``TRACEPARENT`` in a shell job's environment."""
    if _STATE.tracer is None:
        return None
    return _inject().get("traceparent")


def trace_headers() -> dict[str, str]:
    """The W3C trace-context headers of the current span (``traceparent`` and, if any,
    ``tracestate``), or ``{}`` with tracing off. For environments, upper-case the names
    (``TRACEPARENT``, ``TRACESTATE``)."""
    if _STATE.tracer is None:
        return {}
    return _inject()
