"""The ``email`` notifier against a real SMTP server (``aiosmtpd``) on 127.0.0.1: plain,
STARTTLS with login, implicit TLS (certificates from a test CA made by ``trustme``), refused
recipients and logins, a server that never answers, and cancellation."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import trustme

from notify_servers import SilentServer, SmtpReceiver, free_port, run_smtp_receiver
from pgpulse.alerts.notifiers import AlertEvent, EmailConfig, EmailNotifier, JobRef
from pgpulse.core.errors import InvalidNotifierConfig

PASSWORD = "correct-horse-battery-staple"
EVENT = AlertEvent(
    event_id="ev-17",
    delivery_key="alert/17",
    rule="failures",
    fired_at=datetime(2024, 3, 10, 2, 31, 5, tzinfo=UTC),
    job=JobRef(tenant="acme", name="nightly-report", id=42),
    scheduled_for=datetime(2024, 3, 10, 2, 30, tzinfo=UTC),
    run_id=1001,
    error="command exited with status 2\nrsync: connection unexpectedly closed",
    details={"consecutive_failures": 3},
    dashboard_url="https://pulse.example.com/ui/jobs/42",
)
EXPECTED_BODY = """\
Job failed: acme/nightly-report, occurrence 2024-03-10T02:30:00+00:00

Job:         acme/nightly-report (id 42)
Occurrence:  2024-03-10T02:30:00+00:00
Run:         1001
Rule:        failures (firing)
Fired at:    2024-03-10T02:31:05+00:00

Error:
  command exited with status 2
  rsync: connection unexpectedly closed

Details:
  consecutive_failures: 3

Dashboard: https://pulse.example.com/ui/jobs/42

--\x20
Sent by Pulse; event ev-17.
"""


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def ca_pem(ca: trustme.CA) -> str:
    return ca.cert_pem.bytes().decode()


@pytest.fixture
def plain_server() -> Iterator[SmtpReceiver]:
    yield from run_smtp_receiver()


@pytest.fixture
def starttls_server(server_tls: ssl.SSLContext) -> Iterator[SmtpReceiver]:
    yield from run_smtp_receiver(starttls=server_tls, login=("pulse", PASSWORD))


@pytest.fixture
def tls_server(server_tls: ssl.SSLContext) -> Iterator[SmtpReceiver]:
    yield from run_smtp_receiver(implicit_tls=server_tls)


def notifier(port: int, **config: Any) -> EmailNotifier:
    base = {
        "host": "127.0.0.1",
        "port": port,
        "security": "plain",
        "from": "Pulse <pulse@example.com>",
        "to": ["ops@example.com"],
    }
    return EmailNotifier(EmailConfig.from_json(base | config))


async def test_plain_delivery_is_one_plain_text_message(plain_server: SmtpReceiver) -> None:
    result = await notifier(plain_server.port).send(EVENT)
    assert (result.ok, result.retryable, result.error, result.status) == (True, False, None, 250)
    [received] = plain_server.messages
    assert (received.mail_from, received.rcpt_tos, received.tls) == (
        "pulse@example.com",
        ["ops@example.com"],
        False,
    )
    message = received.message
    assert message["From"] == "Pulse <pulse@example.com>"
    assert message["To"] == "ops@example.com"
    # The stdlib may fold the whole subject onto a continuation line (valid RFC 5322 folding),
    # which leaves a leading space once unfolded: compare the words.
    assert " ".join(message["Subject"].split()) == (
        "[Pulse] Job failed: acme/nightly-report, occurrence 2024-03-10T02:30:00+00:00"
    )
    digest = hashlib.sha256(b"alert/17").hexdigest()[:32]
    assert message["Message-ID"] == f"<pulse.{digest}@example.com>"
    assert message["Date"] == "Sun, 10 Mar 2024 02:31:05 +0000"
    assert message["Auto-Submitted"] == "auto-generated"
    assert (message["X-Pulse-Event-Id"], message["X-Pulse-Rule"]) == ("ev-17", "failures")
    assert message.get_content_type() == "text/plain"
    assert message.get_content().replace("\r\n", "\n") == EXPECTED_BODY


async def test_every_attempt_sends_the_same_message_id(plain_server: SmtpReceiver) -> None:
    sender = notifier(plain_server.port, to=["a@example.com", "b@example.com"])
    assert (await sender.send(EVENT, attempt=1)).ok
    assert (await sender.send(EVENT, attempt=2)).ok
    first, second = plain_server.messages
    assert first.message["Message-ID"] == second.message["Message-ID"]
    assert first.rcpt_tos == ["a@example.com", "b@example.com"]
    assert first.message["To"] == "a@example.com, b@example.com"


async def test_starttls_with_login(starttls_server: SmtpReceiver, ca_pem: str) -> None:
    sender = notifier(
        starttls_server.port,
        security="starttls",
        username="pulse",
        password=PASSWORD,
        tls_ca=ca_pem,
    )
    result = await sender.send(EVENT)
    assert result.ok, result.error
    [received] = starttls_server.messages
    assert received.tls is True
    assert received.login == ("pulse", PASSWORD)
    assert received.message.get_content().replace("\r\n", "\n") == EXPECTED_BODY


async def test_implicit_tls(tls_server: SmtpReceiver, ca_pem: str) -> None:
    result = await notifier(tls_server.port, security="tls", tls_ca=ca_pem).send(EVENT)
    assert result.ok, result.error
    assert [m.tls for m in tls_server.messages] == [True]


async def test_an_untrusted_certificate_is_refused(starttls_server: SmtpReceiver) -> None:
    sender = notifier(
        starttls_server.port, security="starttls", username="pulse", password=PASSWORD
    )
    result = await sender.send(EVENT)  # the test CA is not among the system's
    assert (result.ok, result.retryable) == (False, True)
    assert result.error is not None and "CERTIFICATE_VERIFY_FAILED" in result.error
    assert starttls_server.logins == [] and starttls_server.messages == []


async def test_starttls_required_from_a_server_without_it_is_final(
    plain_server: SmtpReceiver,
) -> None:
    result = await notifier(plain_server.port, security="starttls").send(EVENT)
    assert (result.ok, result.retryable) == (False, False)
    assert result.error == (
        f"SMTP 127.0.0.1:{plain_server.port}: SMTP STARTTLS extension not supported by server."
    )
    assert plain_server.messages == []


async def test_a_refused_login_is_final_and_never_quotes_the_password(
    starttls_server: SmtpReceiver, ca_pem: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgpulse")
    wrong = PASSWORD + "-not"
    sender = notifier(
        starttls_server.port, security="starttls", username="pulse", password=wrong, tls_ca=ca_pem
    )
    result = await sender.send(EVENT)
    assert (result.ok, result.retryable, result.status) == (False, False, 535)
    assert result.error is not None and result.error.startswith(
        f"SMTP 127.0.0.1:{starttls_server.port} answered 535 "
    )
    # The server did see the password (aiosmtplib tries each mechanism offered: PLAIN, LOGIN).
    assert set(starttls_server.logins) == {("pulse", wrong)}
    for text in (repr(result), repr(sender), repr(sender.config), caplog.text):
        assert PASSWORD not in text


async def test_partly_refused_recipients_deliver_to_the_others(plain_server: SmtpReceiver) -> None:
    result = await notifier(plain_server.port, to=["ops@example.com", "nobody@example.com"]).send(
        EVENT
    )
    assert (result.ok, result.status) == (True, 250)
    assert result.detail == "refused recipients: nobody@example.com: 550 5.1.1 no such user"
    assert [m.rcpt_tos for m in plain_server.messages] == [["ops@example.com"]]


@pytest.mark.parametrize(
    ("recipient", "code", "retryable"),
    [("nobody@example.com", 550, False), ("later@example.com", 451, True)],
)
async def test_every_recipient_refused_is_classified_by_the_reply(
    plain_server: SmtpReceiver, recipient: str, code: int, retryable: bool
) -> None:
    result = await notifier(plain_server.port, to=[recipient]).send(EVENT)
    assert (result.ok, result.status, result.retryable) == (False, code, retryable)
    assert result.error is not None and f"{recipient}: {code} " in result.error
    assert plain_server.messages == []


async def test_connection_refused_is_retryable() -> None:
    port = free_port()
    result = await notifier(port).send(EVENT)
    assert (result.ok, result.retryable, result.status) == (False, True, None)
    assert result.error is not None and result.error.startswith(f"SMTP 127.0.0.1:{port} failed: ")


@pytest.fixture
async def silent() -> Any:
    state = SilentServer()
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    async with server:
        yield state
        server.close()


async def test_a_server_that_never_answers_times_out_retryable(silent: SilentServer) -> None:
    result = await notifier(silent.port, timeout=0.3).send(EVENT)
    assert (result.ok, result.retryable) == (False, True)
    assert result.error == f"SMTP 127.0.0.1:{silent.port} timed out after 0.3 s"
    assert 0.3 <= result.elapsed < 5
    async with asyncio.timeout(5):
        await silent.hung_up.wait()


async def test_a_cancelled_send_hangs_up_and_propagates(silent: SilentServer) -> None:
    task = asyncio.create_task(notifier(silent.port, timeout=60).send(EVENT))
    async with asyncio.timeout(5):
        await silent.connected.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):  # at once, not when the send's own deadline passes
            await task
    async with asyncio.timeout(5):
        await silent.hung_up.wait()


def _encoded(text: str, how: str) -> str:
    data = text.encode()
    if how == "b":
        return "=?utf-8?b?" + base64.b64encode(data).decode() + "?="
    return "=?utf-8?q?" + "".join(f"={byte:02X}" for byte in data) + "?="


INJECTED = "x\r\nBcc: evil@attacker.example\r\n\r\nattacker body"
INTENDED_HEADERS = [
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "Auto-Submitted",
    "X-Pulse-Event-Id",
    "X-Pulse-Rule",
    "Content-Type",
    "Content-Transfer-Encoding",
    "MIME-Version",
]


@pytest.mark.parametrize(
    "job_name",
    [
        pytest.param(_encoded(INJECTED, "b"), id="base64_encoded_word"),
        pytest.param(_encoded(INJECTED, "q"), id="quoted_printable_encoded_word"),
        pytest.param("ok " + _encoded(INJECTED, "b") + " ok", id="encoded_word_between_words"),
        pytest.param(INJECTED, id="raw_cr_lf"),
        pytest.param("x\u2028Bcc: evil@attacker.example", id="unicode_line_separator"),
    ],
)
async def test_a_job_name_cannot_add_headers_recipients_or_body(
    plain_server: SmtpReceiver, job_name: str
) -> None:
    """Issue 30: a name whose decoded text holds CR LF put a Bcc: and a body of its own into
    the message. The server must get one message to the configured recipient, with exactly
    Pulse's headers, the name kept on the subject line as text (no encoded word decoded)."""
    event = AlertEvent(
        event_id="ev-1",
        delivery_key="alert/1",
        rule="failures",
        fired_at=datetime(2024, 3, 10, 2, 31, 5, tzinfo=UTC),
        job=JobRef(tenant="acme", name=job_name, id=42),
    )
    result = await notifier(plain_server.port).send(event)
    assert (result.ok, result.error) == (True, None)
    [received] = plain_server.messages
    assert received.rcpt_tos == ["ops@example.com"]
    message = received.message
    assert list(message.keys()) == INTENDED_HEADERS
    subject = " ".join(message["Subject"].split())
    flat = " ".join(job_name.split()).replace("=?", "=\u2060?")
    assert subject == f"[Pulse] Job failed: acme/{flat}"
    assert "\r" not in message["Subject"] and "\n" not in message["Subject"]
    body = message.get_content().replace("\r\n", "\n")
    assert body.startswith(f"Job failed: acme/{' '.join(job_name.split())}\n\nJob:  ")
    assert "\nattacker body" not in body and "\nBcc:" not in body


@pytest.mark.parametrize("field", ["from", "to"])
@pytest.mark.parametrize("line_break", ["\r\n", "\u2028"])
def test_an_address_whose_decoded_name_breaks_the_line_is_refused(
    field: str, line_break: str
) -> None:
    given = _encoded(f"x{line_break}Bcc: evil@attacker.example", "b") + " <pulse@example.com>"
    base = {"host": "127.0.0.1", "from": "pulse@example.com", "to": ["ops@example.com"]}
    with pytest.raises(InvalidNotifierConfig) as caught:
        EmailConfig.from_json(base | {field: given if field == "from" else [given]})
    key = "from" if field == "from" else "to[0]"
    assert caught.value.field == f"config.{key}"
    assert "is not one e-mail address" in str(caught.value)
