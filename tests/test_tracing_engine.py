"""Tracing inside a running node (the real SDK's in-memory exporter): one span per attempt,
linked to its claim's span, whose traceparent reaches a shell job's environment and an http
job's request headers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helpers import add, spec
from notify_servers import CountingReceiver
from pgpulse.core.egress import HttpAllowList
from pgpulse.db.store import Store
from pgpulse.node import tracing
from pgpulse.node.builtins import BUILTIN_HANDLERS
from test_engine import TRIGGERED_ONLY, node, running, wait_until


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


async def test_attempt_spans_and_their_traceparent_in_shell_and_http_jobs(
    store: Store, dsn: str, db: Any, exporter: InMemorySpanExporter
) -> None:
    receiver = CountingReceiver()
    receiver.start()
    try:
        await add(
            store,
            spec("env", schedule=TRIGGERED_ONLY, handler="shell",
                 payload={"command": 'printf %s "$TRACEPARENT"'}),
            spec("call", schedule=TRIGGERED_ONLY, handler="http",
                 payload={"url": receiver.url("/traced"), "method": "POST"}),
        )  # fmt: skip
        await store.trigger_job("default", "env")
        await store.trigger_job("default", "call")
        options = {"http_allow": HttpAllowList.parse(["127.0.0.1"])}
        n = node(store, dsn, BUILTIN_HANDLERS, allow_shell=True, handler_options=options)
        async with running(n):
            await wait_until(
                lambda: (
                    db.execute(
                        "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
                    ).fetchone()["n"]
                    == 2
                )
            )
    finally:
        receiver.stop()
    spans = exporter.get_finished_spans()
    attempts = {
        (s.attributes or {})["pgpulse.job.name"]: s
        for s in spans
        if s.name.startswith("pgpulse.attempt")
    }
    claims = {s.context.span_id for s in spans if s.name == "pgpulse.claim" and s.context}
    assert set(attempts) == {"env", "call"}
    for span in attempts.values():
        assert span.attributes is not None
        assert span.attributes["pgpulse.outcome"] == "succeeded"
        assert span.attributes["pgpulse.attempt"] == 1
        assert span.attributes["pgpulse.node.id"] == n.node_id
        [link] = span.links
        assert link.context.span_id in claims
    env_span = attempts["env"].context
    assert env_span is not None
    output = db.execute("SELECT output FROM pgpulse_runs r JOIN pgpulse_jobs j ON j.id = r.job_id "
                        "WHERE j.name = 'env'").fetchone()["output"]  # fmt: skip
    # The flags end it: 01 (sampled), or 03 with newer SDKs (also "random trace id").
    assert output[:-2] == f"00-{env_span.trace_id:032x}-{env_span.span_id:016x}-"
    [[request]] = receiver.by_key.values()
    call_span = attempts["call"].context
    assert call_span is not None
    sent = request.headers["traceparent"]
    assert sent[:-2] == f"00-{call_span.trace_id:032x}-{call_span.span_id:016x}-"
    assert json.dumps(dict(attempts["call"].attributes or {}))  # plain JSON-able attributes
