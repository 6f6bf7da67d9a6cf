"""Keeping notifier secrets out of everything printed: a :class:`Secret` that never shows itself,
URLs with their secret parts masked, and scrubbing of text that may quote a secret.

What counts as secret (docs/alerts.md, "Secrets"): the webhook's HMAC secret, the SMTP password,
extra header values, and in every URL its userinfo, its query values and every path segment that
looks like a token. A Slack incoming-webhook URL, a Healthchecks ping URL and a Sentry Crons URL
all carry their credential in the path, so a path segment is kept only when it reads as a word
(lower-case letters, ``-``, ``_``, ``.``, up to 24 characters), a short number (up to 6 digits) or a
``{placeholder}``; anything else is shown as ``***``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

from pgpulse.core.constant_time import same_secret
from pgpulse.core.masking import MASK, scrub

__all__ = ["MASK", "Secret", "guard_library_logs", "redact_url", "scrub", "url_secrets"]

_WORD_SEGMENT = re.compile(r"^(?:[a-z][a-z._-]{0,23}|[0-9]{1,6}|\{[a-z_]+\})$")
#: Query values shorter than this are not scrubbed from free text (``?v=1`` is no secret, and
#: replacing every ``1`` in a message would garble it); they are still masked in URLs.
_MIN_SCRUB_CHARS = 4


class Secret:
    """A string that must never be printed: ``repr``, ``str`` and format give ``'***'``.

    Read the value with :meth:`reveal`, only where it is sent (a header, an SMTP login) or
    stored. Two secrets are equal when their values are (compared in constant time).

    Args:
        value: the secret text.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """Return the secret text itself."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return same_secret(self._value, other._value)

    def __hash__(self) -> int:
        return hash((Secret, self._value))


def _netloc(host: str, port: int | None, userinfo: bool) -> str:
    shown = f"[{host}]" if ":" in host else host
    if port is not None:
        shown += f":{port}"
    return f"{MASK}@{shown}" if userinfo else shown


def redact_url(url: str) -> str:
    """``url`` with its userinfo, query values and token-like path segments replaced by ``***``
    (and its fragment dropped): safe to display and log.

    Args:
        url: an absolute URL (anything unparsable comes back as ``***``).

    Returns:
        e.g. ``https://hooks.slack.com/services/***/***/***`` for a Slack webhook URL,
        ``https://hc-ping.com/***`` for a Healthchecks one, ``https://h.test/hook?token=***``.
    """
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return MASK
    if not parts.scheme or host is None:
        return MASK
    segments = [
        seg if not seg or _WORD_SEGMENT.match(seg) else MASK for seg in parts.path.split("/")
    ]
    query = "&".join(f"{name}={MASK}" for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    shown = f"{parts.scheme}://{_netloc(host, port, '@' in parts.netloc)}{'/'.join(segments)}"
    return f"{shown}?{query}" if query else shown


def url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that :func:`redact_url` masks, as they may appear in free text
    (raw and percent-decoded), the whole URL first (when it has any secret part); of the
    userinfo, ``user:password`` and the password (the user name alone would be scrubbed from
    every word that holds it).

    Args:
        url: the URL whose secrets an error message or log line must not quote.
    """
    found = [url] if redact_url(url) != url else []
    try:
        parts = urlsplit(url)
    except ValueError:
        return found
    if "@" in parts.netloc:  # the user name alone is no secret (and may be one letter)
        userinfo = parts.netloc.rsplit("@", 1)[0]
        found += [userinfo, *userinfo.split(":", 1)[1:]]
    found += [seg for seg in parts.path.split("/") if seg and not _WORD_SEGMENT.match(seg)]
    found += [
        value
        for _, value in parse_qsl(parts.query, keep_blank_values=True)
        if len(value) >= _MIN_SCRUB_CHARS
    ]
    found += [unquote(text) for text in found]
    return found


class _ScrubFilter(logging.Filter):
    """Scrubs registered secrets out of the records of a library's logger (``httpx`` logs every
    request's full URL at INFO, and a notifier's URL is a credential)."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secrets: Iterable[str]) -> None:
        with self._lock:
            self._secrets.update(s for s in secrets if len(s) >= _MIN_SCRUB_CHARS)

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            secrets = tuple(self._secrets)
        message = record.getMessage()
        cleaned = scrub(message, secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_LIBRARY_FILTER = _ScrubFilter()
_INSTALLED: set[str] = set()


def guard_library_logs(secrets: Iterable[str], *, loggers: Iterable[str] = ("httpx",)) -> None:
    """Make sure the records of ``loggers`` never show ``secrets`` (installs one scrubbing filter
    on each of those loggers, once per process, and adds ``secrets`` to what it scrubs).

    Args:
        secrets: secret strings of a notifier (its URLs' secret parts, header values...).
        loggers: names of the library loggers that may quote them.
    """
    _LIBRARY_FILTER.add(secrets)
    for name in loggers:
        if name not in _INSTALLED:
            logging.getLogger(name).addFilter(_LIBRARY_FILTER)
            _INSTALLED.add(name)
