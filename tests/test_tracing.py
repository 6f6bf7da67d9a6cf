"""Tracing with the real OpenTelemetry SDK (an in-memory exporter, not a mock of the SDK): the
attempt's attributes, its link (or parent) to the claim, outcomes and errors, the W3C
traceparent; and, in subprocesses, that nothing of OpenTelemetry is imported with tracing off
or with the extra absent."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from pgpulse.node import tracing

SCHEDULED_FOR = datetime(2024, 3, 10, 2, 30, tzinfo=UTC)
ATTEMPT: dict[str, Any] = {
    "job_id": 42,
    "job_name": "nightly-report",
    "tenant": "acme",
    "handler": "http",
    "scheduled_for": SCHEDULED_FOR,
    "attempt": 2,
    "run_id": 1001,
    "fencing_token": 17,
    "node_id": "node-a",
    "lag": 0.125,
}
#: W3C Trace Context: version 00, trace id, parent (span) id, flags (bit 0: sampled; newer SDKs
#: also set bit 1, "random trace id", of Trace Context level 2).
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    assert tracing.enable(provider) is True
    try:
        yield memory
    finally:
        tracing.disable()
        provider.shutdown()


def spans_by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_one_span_per_attempt_linked_to_its_claim(exporter: InMemorySpanExporter) -> None:
    with tracing.claim_span(node_id="node-a", limit=10) as claim:
        claim.set_claimed(1)
    with tracing.attempt_span(**ATTEMPT, claim=claim) as attempt:
        inside = tracing.current_traceparent()
        attempt.set_outcome("succeeded")
    spans = spans_by_name(exporter)
    claimed, ran = spans["pgpulse.claim"], spans["pgpulse.attempt acme/nightly-report"]
    assert dict(claimed.attributes or {}) == {
        "pgpulse.node.id": "node-a",
        "pgpulse.claim.limit": 10,
        "pgpulse.claim.claimed": 1,
    }
    assert dict(ran.attributes or {}) == {
        "pgpulse.job.id": 42,
        "pgpulse.job.name": "nightly-report",
        "pgpulse.tenant": "acme",
        "pgpulse.handler": "http",
        "pgpulse.scheduled_for": "2024-03-10T02:30:00+00:00",
        "pgpulse.attempt": 2,
        "pgpulse.run.id": 1001,
        "pgpulse.fencing_token": 17,
        "pgpulse.node.id": "node-a",
        "pgpulse.lag_seconds": 0.125,
        "pgpulse.outcome": "succeeded",
    }
    assert ran.parent is None  # a trace of its own...
    assert claimed.context is not None and ran.context is not None
    assert ran.context.trace_id != claimed.context.trace_id
    [link] = ran.links  # ...linked to the claim
    assert (link.context.trace_id, link.context.span_id) == (
        claimed.context.trace_id,
        claimed.context.span_id,
    )
    assert ran.status.status_code == StatusCode.UNSET
    assert inside is not None
    match = TRACEPARENT.match(inside)
    assert match is not None
    trace_id, span_id, flags = match.groups()
    assert (trace_id, span_id) == (f"{ran.context.trace_id:032x}", f"{ran.context.span_id:016x}")
    assert int(flags, 16) & 1 == 1  # sampled
    assert attempt.traceparent == inside


def test_the_claim_as_parent(exporter: InMemorySpanExporter) -> None:
    with tracing.claim_span(node_id="node-a", limit=1) as claim:
        pass
    with tracing.attempt_span(**ATTEMPT, claim=claim, claim_as="parent"):
        pass
    spans = spans_by_name(exporter)
    claimed, ran = spans["pgpulse.claim"], spans["pgpulse.attempt acme/nightly-report"]
    assert ran.parent is not None and claimed.context is not None and ran.context is not None
    assert ran.parent.span_id == claimed.context.span_id
    assert ran.context.trace_id == claimed.context.trace_id
    assert list(ran.links) == []


def test_an_attempt_is_no_child_of_whatever_span_is_current(exporter: InMemorySpanExporter) -> None:
    # The claim's span is current while the attempt starts.
    with (
        tracing.claim_span(node_id="n", limit=1) as claim,
        tracing.attempt_span(**ATTEMPT, claim=claim),
    ):
        pass
    ran = spans_by_name(exporter)["pgpulse.attempt acme/nightly-report"]
    assert ran.parent is None and len(ran.links) == 1


def test_failed_and_cancelled_attempts(exporter: InMemorySpanExporter) -> None:
    with tracing.attempt_span(**ATTEMPT) as attempt:
        attempt.set_outcome("failed", error="command exited with status 2")
    with pytest.raises(RuntimeError), tracing.attempt_span(**(ATTEMPT | {"job_name": "boom"})):
        raise RuntimeError("handler crashed")
    with (
        pytest.raises(asyncio.CancelledError),
        tracing.attempt_span(**(ATTEMPT | {"job_name": "cut"})),
    ):
        raise asyncio.CancelledError
    spans = spans_by_name(exporter)
    failed = spans["pgpulse.attempt acme/nightly-report"]
    assert (failed.status.status_code, failed.status.description) == (
        StatusCode.ERROR,
        "command exited with status 2",
    )
    assert (failed.attributes or {})["pgpulse.outcome"] == "failed"
    crashed = spans["pgpulse.attempt acme/boom"]
    assert crashed.status.status_code == StatusCode.ERROR
    assert (crashed.attributes or {})["pgpulse.outcome"] == "failed"
    assert [event.name for event in crashed.events] == ["exception"]
    cut = spans["pgpulse.attempt acme/cut"]
    assert (cut.attributes or {})["pgpulse.outcome"] == "cancelled"
    assert cut.end_time is not None


async def test_tasks_started_inside_an_attempt_see_its_traceparent(
    exporter: InMemorySpanExporter,
) -> None:
    async def handler() -> str | None:
        await asyncio.sleep(0)
        return tracing.current_traceparent()

    with tracing.attempt_span(**ATTEMPT) as attempt:
        seen = await asyncio.create_task(handler())
        headers = tracing.trace_headers()
    assert seen is not None and seen == attempt.traceparent
    assert headers == {"traceparent": seen}


def test_tracing_off_records_nothing_and_returns_no_traceparent(
    exporter: InMemorySpanExporter,
) -> None:
    tracing.disable()
    assert not tracing.is_enabled()
    first = tracing.attempt_span(**ATTEMPT)
    assert first is tracing.attempt_span(**ATTEMPT)  # one shared do-nothing context manager
    with first as attempt, tracing.claim_span(node_id="n", limit=1) as claim:
        claim.set_claimed(3)
        attempt.set_outcome("succeeded")
        assert tracing.current_traceparent() is None
        assert tracing.trace_headers() == {}
        assert attempt.traceparent is None
    assert exporter.get_finished_spans() == ()


_WITHOUT_OTEL = r"""
import sys
from datetime import datetime, timezone
BLOCK = sys.argv[1] == "absent"

class NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

if BLOCK:
    sys.meta_path.insert(0, NoOpenTelemetry())
import pgpulse
from pgpulse.node import tracing
if BLOCK:
    assert tracing.enable() is False
assert not tracing.is_enabled()
with tracing.claim_span(node_id="n", limit=1) as claim, tracing.attempt_span(
    job_id=1, job_name="j", tenant="t", handler="h", scheduled_for=datetime.now(timezone.utc),
    attempt=1, run_id=1, fencing_token=1, node_id="n", claim=claim,
) as attempt:
    claim.set_claimed(1)
    attempt.set_outcome("succeeded")
    assert tracing.current_traceparent() is None and tracing.trace_headers() == {}
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")))
"""


@pytest.mark.parametrize("otel", ["absent", "installed-but-off"])
def test_nothing_of_opentelemetry_is_imported_without_tracing(otel: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL, otel],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
