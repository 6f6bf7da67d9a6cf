"""The ``checkin`` notifier against a real HTTP check-in endpoint on 127.0.0.1: Healthchecks'
suffixes and run ids, explicit per-phase URLs with placeholders (Sentry Crons style), phases
not pinged, failures, and the monitor's key kept out of messages and logs."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from notify_servers import HttpReceiver, free_port, run_http_receiver
from pgpulse.alerts.notifiers import CheckinConfig, CheckinEvent, CheckinNotifier, JobRef
from pgpulse.alerts.notifiers.checkin import run_uuid

HC_UUID = "5bf66975-d4c7-4bf5-bcc8-b8d8a82ea278"
SENTRY_KEY = "0123456789abcdef0123456789abcdef"
JOB = JobRef(tenant="acme", name="nightly-report", id=42)
SCHEDULED_FOR = datetime(2024, 3, 10, 2, 30, tzinfo=UTC)


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
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def endpoint() -> Iterator[HttpReceiver]:
    yield from run_http_receiver()


def event(phase: str, *, attempt: int = 1, job: JobRef = JOB, **extra: Any) -> CheckinEvent:
    return CheckinEvent(
        phase=phase,  # type: ignore[arg-type]
        job=job,
        scheduled_for=SCHEDULED_FOR,
        run_id=1001,
        attempt=attempt,
        **extra,
    )


def notifier(**config: Any) -> CheckinNotifier:
    return CheckinNotifier(CheckinConfig.from_json(config))


async def test_healthchecks_style_pings_start_success_and_fail(endpoint: HttpReceiver) -> None:
    sender = notifier(url=endpoint.url(f"/ping/{HC_UUID}"))
    results = [
        await sender.send(event("start")),
        await sender.send(event("success", duration=2.5)),
        await sender.send(event("start", attempt=2)),
        await sender.send(event("failure", attempt=2, error="exit status 2", duration=0.25)),
    ]
    assert [(r.ok, r.status, r.detail) for r in results] == [(True, 200, "OK")] * 4
    assert [(r.method, r.path) for r in endpoint.requests] == [
        ("POST", f"/ping/{HC_UUID}/start"),
        ("POST", f"/ping/{HC_UUID}"),
        ("POST", f"/ping/{HC_UUID}/start"),
        ("POST", f"/ping/{HC_UUID}/fail"),
    ]
    rids = [r.query for r in endpoint.requests]
    first, second = run_uuid(event("start")), run_uuid(event("start", attempt=2))
    assert first != second and uuid.UUID(str(first)).version == 5
    assert rids == [f"rid={first}", f"rid={first}", f"rid={second}", f"rid={second}"]
    assert endpoint.requests[0].headers["content-type"] == "text/plain; charset=utf-8"
    assert [r.body.decode() for r in endpoint.requests] == [
        "start: acme/nightly-report occurrence 2024-03-10T02:30:00+00:00 attempt 1 (run 1001)\n",
        "success: acme/nightly-report occurrence 2024-03-10T02:30:00+00:00 attempt 1 (run 1001)"
        " after 2.500 s\n",
        "start: acme/nightly-report occurrence 2024-03-10T02:30:00+00:00 attempt 2 (run 1001)\n",
        "failure: acme/nightly-report occurrence 2024-03-10T02:30:00+00:00 attempt 2 (run 1001)"
        " after 0.250 s\nexit status 2\n",
    ]


async def test_explicit_urls_with_placeholders_get_and_phases_not_pinged(
    endpoint: HttpReceiver,
) -> None:
    base = endpoint.url(f"/api/1/cron/{{job}}/{SENTRY_KEY}/")
    sender = notifier(
        start_url=base + "?status=in_progress&check_in_id={run_uuid}",
        success_url=base + "?status=ok&check_in_id={run_uuid}",
        events=["start", "success"],
        method="GET",
    )
    job = JobRef(tenant="acme", name="nightly report/eu", id=7)
    assert (await sender.send(event("start", job=job))).ok
    assert (await sender.send(event("success", job=job))).ok
    skipped = await sender.send(event("failure", job=job, error="boom"))
    assert (skipped.ok, skipped.status, skipped.detail) == (
        True,
        None,
        "phase failure is not in config.events",
    )
    check_in = run_uuid(event("start", job=job))
    assert [(r.method, r.path, r.query, r.body) for r in endpoint.requests] == [
        (
            "GET",
            f"/api/1/cron/nightly%20report%2Feu/{SENTRY_KEY}/",
            f"status=in_progress&check_in_id={check_in}",
            b"",
        ),
        (
            "GET",
            f"/api/1/cron/nightly%20report%2Feu/{SENTRY_KEY}/",
            f"status=ok&check_in_id={check_in}",
            b"",
        ),
    ]


async def test_every_placeholder_is_filled_in_percent_encoded(endpoint: HttpReceiver) -> None:
    template = "/t/{tenant}/{job}/{job_id}/{scheduled_unix}/{run_id}/{attempt}/{phase}"
    sender = notifier(
        failure_url=endpoint.url(template + "?at={scheduled_for}&u={run_uuid}&x={{y}}"),
        events=["failure"],
    )
    assert (await sender.send(event("failure", attempt=3))).ok
    [request] = endpoint.requests
    assert request.path == "/t/acme/nightly-report/42/1710037800/1001/3/failure"
    assert request.query == (
        f"at=2024-03-10T02%3A30%3A00%2B00%3A00&u={run_uuid(event('failure', attempt=3))}&x={{y}}"
    )


async def test_failures_are_classified_and_never_quote_the_key(
    endpoint: HttpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.INFO, logger="httpx")  # another test may have quieted it
    gone = await notifier(url=endpoint.url("/gone")).send(event("success"))
    assert (gone.ok, gone.status, gone.retryable) == (False, 410, False)
    port = free_port()
    refused = await notifier(url=f"http://127.0.0.1:{port}/ping/{HC_UUID}").send(event("start"))
    assert (refused.ok, refused.retryable) == (False, True)
    assert refused.error is not None
    assert refused.error.startswith(
        f"POST http://127.0.0.1:{port}/ping/***/start?rid=*** failed: ConnectError"
    )
    slow = await notifier(
        start_url=endpoint.url(f"/slow?key={HC_UUID}"), events=["start"], timeout=0.2
    ).send(event("start"))
    assert (slow.ok, slow.retryable, slow.error) == (
        False,
        True,
        f"POST http://127.0.0.1:{endpoint.port}/slow?key=*** timed out after 0.2 s",
    )
    assert "HTTP Request: POST" in caplog.text
    for text in (caplog.text, repr(gone), repr(refused), repr(slow)):
        assert HC_UUID not in text
