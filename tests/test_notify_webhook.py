"""The ``webhook`` notifier against a real HTTP receiver on 127.0.0.1: the documented document,
headers and signature as received, retry classification by real answers, timeouts,
cancellation, the shared-client seam, and secrets kept out of results and logs."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from notify_servers import HttpReceiver, free_port, run_http_receiver
from pgpulse.alerts.notifiers import AlertEvent, JobRef, WebhookConfig, WebhookNotifier
from pgpulse.alerts.notifiers.webhook import render_body, verify_signature

HMAC_SECRET = "whsec_Qm9yZWFsVGhpc0lzU2VjcmV0"
TOKEN = "tok_9fK2mQ7xV4pL8zR3"
FIRED_AT = datetime(2024, 3, 10, 2, 31, 5, tzinfo=UTC)
EVENT = AlertEvent(
    event_id="ev-17",
    delivery_key="alert/17",
    rule="failures",
    fired_at=FIRED_AT,
    job=JobRef(tenant="acme", name="nightly-report", id=42),
    scheduled_for=datetime(2024, 3, 10, 2, 30, tzinfo=UTC),
    run_id=1001,
    error="disk full: /var/<spool> & /tmp",
    details={"consecutive_failures": 3},
    dashboard_url="https://pulse.example.com/ui/jobs/42",
)
EXPECTED_TEXT = (
    "Job failed: acme/nightly-report, occurrence 2024-03-10T02:30:00+00:00\n"
    "Error: disk full: /var/&lt;spool&gt; &amp; /tmp\n"
    "https://pulse.example.com/ui/jobs/42"
)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)  # loopback requests must not go to a proxy


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    yield from run_http_receiver(secret=HMAC_SECRET)


def notifier(url: str, **config: Any) -> WebhookNotifier:
    return WebhookNotifier(WebhookConfig.from_json({"url": url, "secret": HMAC_SECRET} | config))


async def test_webhook_posts_the_documented_document_signed(receiver: HttpReceiver) -> None:
    before = int(time.time())
    result = await notifier(receiver.url("/hook")).send(EVENT)
    assert (result.ok, result.retryable, result.error, result.status) == (True, False, None, 200)
    assert result.detail == '{"ok":true}'
    assert 0 < result.elapsed < 5
    [request] = receiver.requests
    assert (request.method, request.path) == ("POST", "/hook")
    assert request.signature_ok is True  # the receiver checked it with the documented recipe
    headers = request.headers
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == "pgpulse-webhook/1"
    assert headers["idempotency-key"] == "alert/17"
    assert headers["x-pulse-event-id"] == "ev-17"
    assert headers["x-pulse-rule"] == "failures"
    assert headers["x-pulse-delivery-attempt"] == "1"
    stamp = int(headers["x-pulse-timestamp"])
    assert before <= stamp <= time.time()
    assert headers["x-pulse-signature"].startswith(f"t={stamp},v1=")
    assert request.json() == {
        "schema_version": 1,
        "event_id": "ev-17",
        "delivery_key": "alert/17",
        "rule": "failures",
        "state": "firing",
        "fired_at": "2024-03-10T02:31:05+00:00",
        "job": {"tenant": "acme", "name": "nightly-report", "id": 42},
        "occurrence": {"scheduled_for": "2024-03-10T02:30:00+00:00", "run_id": 1001},
        "error": "disk full: /var/<spool> & /tmp",
        "details": {"consecutive_failures": 3},
        "dashboard_url": "https://pulse.example.com/ui/jobs/42",
        "text": EXPECTED_TEXT,
    }
    assert request.body == render_body(EVENT)


async def test_signature_verification_refuses_tampering_old_stamps_and_other_secrets(
    receiver: HttpReceiver,
) -> None:
    await notifier(receiver.url("/hook")).send(EVENT)
    [request] = receiver.requests
    header, body, now = request.headers["x-pulse-signature"], request.body, time.time()
    assert verify_signature(HMAC_SECRET, header, body, now=now)
    assert not verify_signature(HMAC_SECRET, header, body.replace(b"acme", b"acmf"), now=now)
    assert not verify_signature("another-secret-of-16+", header, body, now=now)
    assert not verify_signature(HMAC_SECRET, header, body, now=now + 301)
    assert not verify_signature(HMAC_SECRET, header.split(",")[1], body, now=now)  # no t=
    stamp = header.split(",")[0]
    assert verify_signature(HMAC_SECRET, f"{stamp},v1=00,{header.split(',')[1]}", body, now=now)
    # Text from outside is any text: a non-ASCII signature or stamp is refused, never raised.
    assert not verify_signature(HMAC_SECRET, f"{stamp},v1=\u00e9", body, now=now)
    assert not verify_signature(HMAC_SECRET, "t=\u00b2," + header.split(",")[1], body, now=now)


async def test_idempotency_key_is_the_same_on_every_attempt(receiver: HttpReceiver) -> None:
    sender = notifier(receiver.url("/hook"))
    await sender.send(EVENT, attempt=1)
    await sender.send(EVENT, attempt=2)
    first, second = receiver.requests
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"] == "alert/17"
    assert (
        first.headers["x-pulse-delivery-attempt"],
        second.headers["x-pulse-delivery-attempt"],
    ) == ("1", "2")
    assert first.body == second.body
    assert first.signature_ok and second.signature_ok


async def test_slack_format_sends_the_text_alone_and_unsigned_has_no_signature(
    receiver: HttpReceiver,
) -> None:
    config = WebhookConfig.from_json({"url": receiver.url("/hook"), "format": "slack"})
    assert (await WebhookNotifier(config).send(EVENT)).ok
    [request] = receiver.requests
    assert request.json() == {"text": EXPECTED_TEXT}
    assert "x-pulse-signature" not in request.headers
    assert request.signature_ok is None


async def test_a_recovered_cluster_event_without_job_or_occurrence(receiver: HttpReceiver) -> None:
    event = AlertEvent(
        event_id="ev-2", delivery_key="cluster/2", rule="recovered", fired_at=FIRED_AT
    )
    assert (await notifier(receiver.url("/hook")).send(event)).ok
    document = receiver.requests[0].json()
    assert (document["state"], document["job"], document["occurrence"], document["error"]) == (
        "resolved",
        None,
        None,
        None,
    )
    assert document["text"] == "Job recovered (cluster)"


async def test_configured_headers_are_sent_and_cannot_hide_pulse_headers(
    receiver: HttpReceiver,
) -> None:
    sender = notifier(
        receiver.url("/hook"), headers={"Authorization": "Bearer abc", "X-Team": "ops"}
    )
    await sender.send(EVENT)
    headers = receiver.requests[0].headers
    assert (headers["authorization"], headers["x-team"]) == ("Bearer abc", "ops")
    assert headers["idempotency-key"] == "alert/17"


@pytest.mark.parametrize(
    ("path", "status", "retryable", "retry_after"),
    [
        ("/fail", 500, True, None),
        ("/busy", 429, True, 7.0),
        ("/unavailable", 503, True, 30.0),
        ("/timeout", 408, True, None),
        ("/gone", 410, False, None),
        ("/echo", 400, False, None),
    ],
)
async def test_answers_are_classified_for_retry(
    receiver: HttpReceiver, path: str, status: int, retryable: bool, retry_after: float | None
) -> None:
    config = WebhookConfig.from_json({"url": receiver.url(path)})
    sender = WebhookNotifier(config, clock=lambda: receiver.date_base)  # Retry-After dates
    result = await sender.send(EVENT)
    assert (result.ok, result.status, result.retryable, result.retry_after) == (
        False,
        status,
        retryable,
        retry_after,
    )
    assert result.error is not None
    assert result.error.startswith(
        f"POST http://127.0.0.1:{receiver.port}{path} answered {status} "
    )
    delay = config.retry_policy().next_delay(1, result)
    assert (delay is not None) == retryable
    if retry_after is not None:
        assert delay == retry_after


async def test_redirects_are_not_followed_even_by_a_client_that_would(
    receiver: HttpReceiver,
) -> None:
    async with httpx.AsyncClient(follow_redirects=True) as client:
        config = WebhookConfig.from_json({"url": receiver.url("/redirect")})
        result = await WebhookNotifier(config, client=client).send(EVENT)
    assert (result.ok, result.status, result.retryable) == (False, 302, False)
    assert result.error is not None and "redirects are not followed" in result.error
    assert [r.path for r in receiver.requests] == ["/redirect"]


async def test_connection_refused_is_retryable() -> None:
    port = free_port()
    result = await notifier(f"http://127.0.0.1:{port}/hook").send(EVENT)
    assert (result.ok, result.retryable, result.status) == (False, True, None)
    assert result.error is not None
    assert result.error.startswith(f"POST http://127.0.0.1:{port}/hook failed: ConnectError")


async def test_timeout_is_retryable_and_closes_the_connection(receiver: HttpReceiver) -> None:
    result = await notifier(receiver.url("/slow"), timeout=0.3).send(EVENT)
    assert (result.ok, result.retryable) == (False, True)
    assert result.error == f"POST http://127.0.0.1:{receiver.port}/slow timed out after 0.3 s"
    assert 0.3 <= result.elapsed < 5
    assert await asyncio.to_thread(receiver.client_gone.wait, 5)


async def test_cancelled_send_closes_its_connection_and_propagates(receiver: HttpReceiver) -> None:
    task = asyncio.create_task(notifier(receiver.url("/slow"), timeout=60).send(EVENT))
    assert await asyncio.to_thread(receiver.slow_seen.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):  # at once, not when the send's own deadline passes
            await task
    assert await asyncio.to_thread(receiver.client_gone.wait, 5)


async def test_a_shared_client_is_used_and_left_open(receiver: HttpReceiver) -> None:
    seen: list[str] = []

    async def on_request(request: httpx.Request) -> None:
        seen.append(str(request.url))

    async with httpx.AsyncClient(event_hooks={"request": [on_request]}) as client:
        sender = WebhookNotifier(
            WebhookConfig.from_json({"url": receiver.url("/hook")}), client=client
        )
        assert (await sender.send(EVENT)).ok
        assert (await sender.send(EVENT, attempt=2)).ok
        assert not client.is_closed
    assert seen == [receiver.url("/hook")] * 2


async def test_secrets_stay_out_of_results_reprs_and_logs(
    receiver: HttpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # httpx logs each request's full URL at INFO (and another test may have quieted it).
    caplog.set_level(logging.INFO, logger="httpx")
    echoing = notifier(
        receiver.url(f"/echo?token={TOKEN}"), headers={"Authorization": f"Bearer {TOKEN}x"}
    )
    answered = await echoing.send(EVENT)
    refused_port = free_port()
    refused = await notifier(f"http://127.0.0.1:{refused_port}/hooks/{TOKEN}").send(EVENT)
    assert receiver.requests[0].query == f"token={TOKEN}"  # the receiver did get the token
    assert answered.detail is not None and answered.detail.startswith(
        "bad request: POST /echo?token=***"
    )
    assert (
        answered.error
        == f"POST http://127.0.0.1:{receiver.port}/echo?token=*** answered 400 Bad Request"
    )
    assert refused.error is not None and f"127.0.0.1:{refused_port}/hooks/***" in refused.error
    assert "HTTP Request: POST" in caplog.text  # httpx's line is there, scrubbed
    for text in (caplog.text, repr(answered), repr(refused), repr(echoing), repr(echoing.config)):
        assert TOKEN not in text
        assert HMAC_SECRET not in text


def test_payload_is_compact_utf8_json() -> None:
    event = AlertEvent(
        event_id="e",
        delivery_key="k",
        rule="late",
        fired_at=FIRED_AT,
        job=JobRef("été", "tâche", 1),
    )
    body = render_body(event)
    assert body.startswith(b'{"schema_version":1,"event_id":"e","delivery_key":"k","rule":"late",')
    assert '"job":{"tenant":"été","name":"tâche","id":1}'.encode() in body
    assert json.loads(body)["text"] == "Job is late: été/tâche"
