"""Credentials kept out of what people read: URLs masked by component, free
text scrubbed without garbling it; an http job's run error, and a notifier's refusal."""

from __future__ import annotations

import pytest

from helpers import pgpulse
from pgpulse.alerts.notifiers.redaction import url_secrets
from pgpulse.core.masking import mask_url, scrub, url_credentials


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h.test/hook", "https://h.test/hook"),
        ("https://svc:Pa55word@h.test/x", "https://svc:***@h.test/x"),
        ("https://svc@h.test/x", "https://svc@h.test/x"),
        (
            "https://h.test:8443/report/daily?api_key=sk_live_4eC39Hq&format=csv",
            "https://h.test:8443/report/daily?api_key=***&format=***",
        ),
        ("https://h.test/x?sk_live_4eC39Hq", "https://h.test/x?***"),
        ("https://h.test/x?a=1#access_token=zzz", "https://h.test/x?a=***#***"),
        ("https://u:p%40ss@[::1]:8080/?t=%2Fx", "https://u:***@[::1]:8080/?t=***"),
    ],
)
def test_mask_url_masks_the_password_and_query_values(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_a_short_credential_is_scrubbed_only_where_it_stands_alone() -> None:
    text = "payload.url targets a private address; pw: pw, pwd"
    assert scrub(text, ["a", "pw"]) == "payload.url targets *** private address; ***: ***, pwd"
    long_secret = "sk_live_4eC39Hq"
    assert scrub(f"key{long_secret}x and {long_secret}", [long_secret]) == "key***x and ***"


def test_the_user_name_alone_is_no_credential() -> None:
    url = "https://a:Pa55word@h.test/x?token=abcd1234&v=1"
    assert set(url_credentials(url)) == {url, "a:Pa55word", "Pa55word", "abcd1234"}
    assert "a" not in url_secrets(url)


def test_a_one_letter_user_name_leaves_the_refusal_readable(dsn: str) -> None:
    """A notifier URL with the user name ``a`` to a private address: the refusal masks the
    userinfo and reads as written (each ``a`` of it was ``***``)."""
    url = "https://a:Pa55word@10.0.0.1/hook?token=abcd1234"
    refused = pgpulse(
        "notifier", "add", "hook", "--kind", "webhook", "--config", f'{{"url": "{url}"}}', dsn=dsn
    )
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "error: invalid value for --config: config.url 'https://***@10.0.0.1/hook?token=***' "
        "targets 10.0.0.1 (private); such addresses are refused unless this command's "
        "--http-allow"
    )
    assert "Pa55word" not in refused.stderr and "abcd1234" not in refused.stderr


@pytest.mark.parametrize(
    ("dsn", "secret", "said"),
    [
        (
            "postgresql://svc:Hunter%2Hunter2@db/pulse",
            "Hunter%2Hunter2",
            "error: database_url 'postgresql://svc:***@db/pulse' is not a valid DSN: invalid "
            'percent-encoded token: "***"\n',
        ),
        (
            "postgresql://svc@db/pulse?password=Hun%zzter2",
            "zzter2",
            "error: database_url 'postgresql://svc@db/pulse?password=***' is not a valid DSN: "
            'invalid percent-encoded token: "***"\n',
        ),
        (
            "host=db password='Hun ter2",
            "ter2",
            "error: database_url 'host=db password=***' is not a valid DSN: unterminated quoted "
            "string in connection info string\n",
        ),
        ("postgresql://svc:p@ss%zz@db/pulse", "ss%zz", None),
        ("postgresql://svc:p@ssword@db.invalid/pulse", "ssword", None),
    ],
)
def test_a_dsn_password_is_never_printed(dsn: str, secret: str, said: str | None) -> None:
    """A driver's refusal quotes the DSN token it could not read: `status` prints none of the
    password."""
    shown = pgpulse("--database-url", dsn, "status", env={"PGPULSE_DATABASE_URL": ""})
    assert shown.returncode in (2, 3), shown.stderr
    assert secret not in shown.stderr
    if said is not None:
        assert shown.stderr == said
