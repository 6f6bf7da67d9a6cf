"""Notifier configs, their redaction and the delivery retry policy: pure, no network (except the
address-policy checks, which resolve nothing but literal addresses and ``localhost``)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pgpulse.alerts.notifiers import (
    CheckinConfig,
    DeliveryResult,
    EmailConfig,
    RetryPolicy,
    WebhookConfig,
    parse_notifier_config,
)
from pgpulse.alerts.notifiers.redaction import Secret, redact_url, scrub, url_secrets
from pgpulse.alerts.notifiers.retry import (
    classify_http_status,
    classify_smtp_code,
    parse_retry_after,
)
from pgpulse.core.errors import InvalidNotifierConfig
from pgpulse.core.policy import HttpAllowList, TargetNotAllowed

SLACK_TOKEN = "xZ7kQ2mP9vR4tL8nB3cF6hJ1"
SLACK_URL = f"https://hooks.slack.com/services/T0123ABCD/B0456EFGH/{SLACK_TOKEN}"
HC_UUID = "5bf66975-d4c7-4bf5-bcc8-b8d8a82ea278"
HMAC_SECRET = "whsec_Qm9yZWFsVGhpc0lzU2VjcmV0"
PASSWORD = "correct-horse-battery-staple"
SECRETS = (
    SLACK_TOKEN,
    "T0123ABCD",
    "B0456EFGH",
    HC_UUID,
    HMAC_SECRET,
    PASSWORD,
    "Bearer s3cr3t-t0ken",
)


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked into {text!r}"


# --- redaction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (SLACK_URL, "https://hooks.slack.com/services/***/***/***"),
        (f"https://hc-ping.com/{HC_UUID}", "https://hc-ping.com/***"),
        (f"https://hc-ping.com/{HC_UUID}/start?rid=1", "https://hc-ping.com/***/start?rid=***"),
        (
            "https://user:pw@h.test:8443/hook?token=abc123&v=1#frag",
            "https://***@h.test:8443/hook?token=***&v=***",
        ),
        (
            "https://o1.ingest.sentry.io/api/4501/cron/nightly-backup/0123456789abcdef0123456789abcdef/",
            "https://o1.ingest.sentry.io/api/4501/cron/nightly-backup/***/",
        ),
        ("http://[::1]:8080/checkin/{job}/{phase}", "http://[::1]:8080/checkin/{job}/{phase}"),
        ("not a url", "***"),
    ],
)
def test_redact_url_masks_credentials_and_token_like_segments(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_secret_never_prints_itself() -> None:
    secret = Secret(PASSWORD)
    for text in (repr(secret), str(secret), f"{secret}", f"{secret!r}", f"{[secret]}"):
        assert PASSWORD not in text
    assert secret.reveal() == PASSWORD
    assert secret == Secret(PASSWORD) and secret != Secret("other")
    assert len({secret, Secret(PASSWORD)}) == 1


def test_scrub_masks_whole_urls_before_their_parts() -> None:
    message = f"POST {SLACK_URL} failed; token {SLACK_TOKEN}"
    assert scrub(message, url_secrets(SLACK_URL)) == "POST *** failed; token ***"


# --- webhook config -----------------------------------------------------------------------


def test_webhook_config_round_trip_and_defaults() -> None:
    given = {
        "url": SLACK_URL,
        "secret": HMAC_SECRET,
        "headers": {"Authorization": "Bearer s3cr3t-t0ken"},
    }
    config = WebhookConfig.from_json(given)
    assert (config.timeout, config.format, config.max_attempts, config.retry_backoff) == (
        10.0,
        "pulse",
        12,
        5.0,
    )
    assert WebhookConfig.from_json(config.to_json()) == config
    assert config.to_json()["url"] == SLACK_URL
    assert config.retry_policy() == RetryPolicy(max_attempts=12, backoff=5.0)


def test_webhook_config_redacted_view_repr_and_json_hold_no_secret() -> None:
    config = WebhookConfig.from_json(
        {
            "url": SLACK_URL,
            "secret": HMAC_SECRET,
            "headers": {"Authorization": "Bearer s3cr3t-t0ken"},
        }
    )
    shown = config.redacted()
    assert shown == {
        "url": "https://hooks.slack.com/services/***/***/***",
        "secret": "***",
        "headers": {"Authorization": "***"},
        "timeout": 10.0,
        "format": "pulse",
        "max_attempts": 12,
        "retry_backoff": 5.0,
    }
    for text in (json.dumps(shown), repr(config), str(config)):
        assert_no_secret(text)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (None, "config"),
        ([], "config"),
        ({}, "config.url"),
        ({"url": 5}, "config.url"),
        ({"url": "ftp://h.test/x"}, "config.url"),
        ({"url": "https:///no-host"}, "config.url"),
        ({"url": "https://h.test/a b"}, "config.url"),
        ({"url": "https://h.test\\@evil.test/"}, "config.url"),
        ({"url": "https://h.test/\r\nX: y"}, "config.url"),
        ({"url": "https://{job}.h.test/"}, "config.url"),
        ({"url": "https://h.test/", "secret": "short"}, "config.secret"),
        ({"url": "https://h.test/", "secret": 12345678901234567}, "config.secret"),
        ({"url": "https://h.test/", "headers": {"Bad Name": "x"}}, "config.headers"),
        (
            {"url": "https://h.test/", "headers": {"Idempotency-Key": "x"}},
            "config.headers.Idempotency-Key",
        ),
        (
            {"url": "https://h.test/", "headers": {"X-Pulse-Rule": "x"}},
            "config.headers.X-Pulse-Rule",
        ),
        ({"url": "https://h.test/", "headers": {"X-A": "a\r\nX-B: b"}}, "config.headers.X-A"),
        ({"url": "https://h.test/", "timeout": 0}, "config.timeout"),
        ({"url": "https://h.test/", "timeout": 301}, "config.timeout"),
        ({"url": "https://h.test/", "timeout": True}, "config.timeout"),
        ({"url": "https://h.test/", "format": "teams"}, "config.format"),
        ({"url": "https://h.test/", "max_attempts": 0}, "config.max_attempts"),
        ({"url": "https://h.test/", "max_attempts": 2.5}, "config.max_attempts"),
        ({"url": "https://h.test/", "retry_backoff": float("nan")}, "config.retry_backoff"),
        ({"url": "https://h.test/", "sekret": HMAC_SECRET}, "config.sekret"),
    ],
)
def test_webhook_config_refusals_name_the_field(config: Any, field: str) -> None:
    with pytest.raises(InvalidNotifierConfig) as caught:
        WebhookConfig.from_json(config)
    assert caught.value.field == field
    assert str(caught.value).startswith(field)


def test_refusals_never_quote_a_secret() -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("webhook", {"url": SLACK_URL, "secret": "short", "timeout": 0}),
        ("webhook", {"url": SLACK_URL + " x"}),
        ("webhook", {"url": SLACK_URL, "sekret": HMAC_SECRET}),  # a typo'd key: value not quoted
        ("webhook", {"url": SLACK_URL, "headers": {"Authorization": "Bearer s3cr3t-t0ken\n"}}),
        ("webhook", {"url": SLACK_URL, "headers": {"X-Pulse-Job": "Bearer s3cr3t-t0ken"}}),
        ("email", {"host": "smtp.test", "from": "a@b.test", "to": "c@d.test", "pasword": PASSWORD}),
        (
            "email",
            {"host": "smtp.test", "from": "a@b.test", "to": "c@d.test", "password": PASSWORD},
        ),
        (
            "email",
            {
                "host": "smtp.test",
                "from": "a@b.test",
                "to": "c@d.test",
                "username": "u",
                "password": PASSWORD,
                "security": "plain",
            },
        ),
        ("checkin", {"url": f"https://hc-ping.com/{HC_UUID}/{{nope}}"}),
        ("checkin", {"url": f"https://hc-ping.com/{HC_UUID}/{{"}),
        ("checkin", {"url": f"https://hc-ping.com/{HC_UUID}", "events": ["begin"]}),
    ]
    for kind, config in cases:
        with pytest.raises(InvalidNotifierConfig) as caught:
            parse_notifier_config(kind, config)
        assert_no_secret(str(caught.value))
        assert_no_secret(repr(caught.value.value))


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(
        InvalidNotifierConfig, match="kind must be one of webhook, email, checkin, got 'pager'"
    ) as caught:
        parse_notifier_config("pager", {})
    assert caught.value.field == "kind"


async def test_webhook_address_policy_refuses_loopback_and_private_unless_allowed() -> None:
    for url in (
        "http://127.0.0.1:9/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest",
        "http://localhost/x",
        "http://192.0.0.192/latest",  # Python 3.11.7's tables call it global
        "http://[fec0::1]/x",
        "http://[64:ff9b::c000:c0]/x",
        "http://2130706433/x",
    ):
        config = WebhookConfig.from_json({"url": url})
        with pytest.raises(TargetNotAllowed) as caught:
            await config.check_targets(HttpAllowList())
        assert caught.value.field == "config.url"
        assert str(caught.value).startswith("config.url ")
    await WebhookConfig.from_json({"url": "http://127.0.0.1:9/hook"}).check_targets(
        HttpAllowList.parse(["127.0.0.1"])
    )
    await WebhookConfig.from_json({"url": "http://hooks.internal/x"}).check_targets(
        HttpAllowList.parse(["*.internal", "hooks.internal"])
    )


async def test_address_policy_refusal_masks_the_url() -> None:
    config = WebhookConfig.from_json(
        {"url": f"http://10.0.0.5/services/T0123ABCD/B0456EFGH/{SLACK_TOKEN}"}
    )
    with pytest.raises(TargetNotAllowed) as caught:
        await config.check_targets(HttpAllowList())
    assert caught.value.value == "http://10.0.0.5/services/***/***/***"
    assert "10.0.0.5 (private)" in str(caught.value)
    assert_no_secret(str(caught.value))


# --- email config -------------------------------------------------------------------------


def test_email_config_defaults_ports_by_security_and_round_trips() -> None:
    base = {
        "host": "smtp.example.com",
        "from": "Pulse <pulse@example.com>",
        "to": "ops@example.com",
    }
    assert EmailConfig.from_json(base).port == 587
    assert EmailConfig.from_json(base | {"security": "tls"}).port == 465
    assert EmailConfig.from_json(base | {"security": "plain"}).port == 25
    config = EmailConfig.from_json(
        base | {"username": "pulse", "password": PASSWORD, "to": ["a@x.test", "B <b@x.test>"]}
    )
    assert config.recipients == ("a@x.test", "B <b@x.test>")
    assert config.sender == "Pulse <pulse@example.com>"
    assert EmailConfig.from_json(config.to_json()) == config
    assert config.redacted()["password"] == "***"
    for text in (json.dumps(config.redacted()), repr(config)):
        assert_no_secret(text)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"host": None}, "config.host"),
        ({"host": "smtp example"}, "config.host"),
        ({"host": "smtp.test\r\nRCPT TO:<x@y>"}, "config.host"),
        ({"port": 0}, "config.port"),
        ({"port": 70000}, "config.port"),
        ({"security": "ssl"}, "config.security"),
        ({"from": "not-an-address"}, "config.from"),
        ({"from": "a@b.test, c@d.test"}, "config.from"),
        ({"from": "a@b.test\r\nBcc: x@y.test"}, "config.from"),
        ({"to": []}, "config.to"),
        ({"to": None}, "config.to"),
        ({"to": ["ok@x.test", "@nolocal"]}, "config.to[1]"),
        ({"to": "ops"}, "config.to[0]"),
        ({"username": "u"}, "config.password"),
        ({"password": PASSWORD}, "config.username"),
        ({"username": "u", "password": PASSWORD, "security": "plain"}, "config.password"),
        (
            {"tls_ca": "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"},
            "config.tls_ca",
        ),
        ({"timeout": -1}, "config.timeout"),
        ({"subject_prefix": ""}, "config.subject_prefix"),
    ],
)
def test_email_config_refusals_name_the_field(change: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {
        "host": "smtp.example.com",
        "from": "pulse@example.com",
        "to": "ops@example.com",
    }
    config = {key: value for key, value in (base | change).items() if value is not None}
    with pytest.raises(InvalidNotifierConfig) as caught:
        EmailConfig.from_json(config)
    assert caught.value.field == field
    assert str(caught.value).startswith(field)


async def test_email_has_no_address_policy_for_its_relay() -> None:
    config = EmailConfig.from_json({"host": "127.0.0.1", "from": "a@b.test", "to": "c@d.test"})
    await config.check_targets(HttpAllowList())  # a relay on the node's own machine is fine


# --- checkin config -----------------------------------------------------------------------


def test_checkin_config_derives_healthchecks_urls() -> None:
    config = CheckinConfig.from_json({"url": f"https://hc-ping.com/{HC_UUID}"})
    assert [(phase, url.reveal()) for phase, url in config.urls] == [
        ("start", f"https://hc-ping.com/{HC_UUID}/start?rid={{run_uuid}}"),
        ("success", f"https://hc-ping.com/{HC_UUID}?rid={{run_uuid}}"),
        ("failure", f"https://hc-ping.com/{HC_UUID}/fail?rid={{run_uuid}}"),
    ]
    assert CheckinConfig.from_json(config.to_json()) == config
    assert config.redacted()["url"] == "https://hc-ping.com/***"
    assert_no_secret(repr(config) + json.dumps(config.redacted()))


def test_checkin_config_explicit_urls_and_events() -> None:
    sentry = "https://o1.ingest.sentry.io/api/1/cron/{job}/0123456789abcdef0123456789abcdef/"
    config = CheckinConfig.from_json(
        {
            "start_url": sentry + "?status=in_progress&check_in_id={run_uuid}",
            "success_url": sentry + "?status=ok&check_in_id={run_uuid}",
            "events": ["success", "start"],
            "method": "GET",
        }
    )
    assert config.events == ("start", "success")
    assert config.template_for("failure") is None
    with pytest.raises(InvalidNotifierConfig, match="phase failure has no failure_url") as caught:
        CheckinConfig.from_json({"start_url": sentry, "success_url": sentry})
    assert caught.value.field == "config.url"


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "config.url"),
        ({"url": "https://h.test/{nope}"}, "config.url"),
        ({"url": "https://h.test/{job!r}"}, "config.url"),
        ({"url": "https://h.test/{job:>10}"}, "config.url"),
        ({"url": "https://h.test/{}"}, "config.url"),
        ({"url": "https://h.test/}"}, "config.url"),
        ({"url": "https://h.test/", "failure_url": "mailto:x@y"}, "config.failure_url"),
        ({"url": "https://h.test/", "events": []}, "config.events"),
        ({"url": "https://h.test/", "events": "start"}, "config.events"),
        ({"url": "https://h.test/", "method": "DELETE"}, "config.method"),
    ],
)
def test_checkin_config_refusals_name_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidNotifierConfig) as caught:
        CheckinConfig.from_json(config)
    assert caught.value.field == field


async def test_checkin_address_policy_checks_every_url() -> None:
    config = CheckinConfig.from_json(
        {"url": "https://93.184.215.14/ping", "failure_url": "http://192.168.1.9/fail"}
    )
    with pytest.raises(TargetNotAllowed) as caught:
        await config.check_targets(HttpAllowList())
    assert caught.value.field == "config.failure_url"


# --- retry policy -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, "ok"),
        (204, "ok"),
        (302, "final"),
        (400, "final"),
        (401, "final"),
        (404, "final"),
        (408, "retry"),
        (410, "final"),
        (422, "final"),
        (429, "retry"),
        (500, "retry"),
        (503, "retry"),
    ],
)
def test_classify_http_status(status: int, verdict: str) -> None:
    assert classify_http_status(status) == verdict


def test_classify_smtp_code() -> None:
    assert [classify_smtp_code(code) for code in (250, 354, 421, 451, 535, 550, 554)] == [
        "ok",
        "ok",
        "retry",
        "retry",
        "final",
        "final",
        "final",
    ]


def test_parse_retry_after_seconds_and_dates() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(" 0 ", now) == 0.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:15:00 GMT", now) == 100.0  # now + 100 s
    assert parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now) == 0.0  # in the past
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("-5", now) is None
    assert parse_retry_after(None, now) is None


def _result(
    *, ok: bool = False, retryable: bool = True, retry_after: float | None = None
) -> DeliveryResult:
    return DeliveryResult(
        ok=ok,
        retryable=retryable,
        error=None if ok else "x",
        status=None,
        elapsed=0.0,
        retry_after=retry_after,
    )


def test_retry_policy_backs_off_exponentially_with_jitter_and_stops() -> None:
    policy = RetryPolicy(max_attempts=4, backoff=2.0)
    rng = random.Random(7)
    delays = [policy.next_delay(attempt, _result(), rng) for attempt in (1, 2, 3)]
    for delay, ceiling in zip(delays, (2.0, 4.0, 8.0), strict=True):
        assert delay is not None and ceiling / 2 <= delay <= ceiling
    assert policy.next_delay(4, _result(), rng) is None  # the last attempt
    assert policy.next_delay(1, _result(ok=True, retryable=False), rng) is None
    assert policy.next_delay(1, _result(retryable=False), rng) is None


def test_retry_policy_honours_retry_after_up_to_its_cap() -> None:
    policy = RetryPolicy(max_attempts=5, backoff=1.0, max_retry_after=60.0)
    rng = random.Random(1)
    assert policy.next_delay(1, _result(retry_after=30.0), rng) == 30.0
    assert policy.next_delay(1, _result(retry_after=86400.0), rng) == 60.0
    short = policy.next_delay(3, _result(retry_after=0.1), rng)
    assert short is not None and 2.0 <= short <= 4.0  # the backoff, when longer


# --- imports ------------------------------------------------------------------------------

_ISOLATED = r"""
import sys, types
from pathlib import Path
# Load pgpulse's modules without the __init__ of pgpulse and pgpulse.alerts (which load the
# engine and the alert store), so what these modules import themselves is what shows in
# sys.modules.
for name, path in [("pgpulse", Path(sys.argv[1])), ("pgpulse.alerts", Path(sys.argv[1], "alerts"))]:
    package = types.ModuleType(name)
    package.__path__ = [str(path)]
    sys.modules[name] = package
import pgpulse.alerts.notifiers, pgpulse.alerts.notifiers.webhook
import pgpulse.alerts.notifiers.email, pgpulse.alerts.notifiers.checkin
from pgpulse.alerts.notifiers import parse_notifier_config, build_notifier
for kind, config in [
    ("webhook", {"url": "https://hooks.example.com/x", "secret": "0123456789abcdef"}),
    ("email", {"host": "smtp.example.com", "from": "a@example.com", "to": "b@example.com"}),
    ("checkin", {"url": "https://hc-ping.com/abc"}),
]:
    build_notifier(parse_notifier_config(kind, config))
stacks = {"httpx", "httpcore", "aiosmtplib", "opentelemetry", "psycopg", "fastapi", "uvicorn"}
heavy = sorted(m for m in sys.modules if m.split(".")[0] in stacks)
print(",".join(heavy))
"""


def test_notify_imports_no_http_or_smtp_stack() -> None:
    source = Path(__file__).resolve().parents[1] / "src" / "pgpulse"
    done = subprocess.run(
        [sys.executable, "-c", _ISOLATED, str(source)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
