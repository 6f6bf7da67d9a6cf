"""Keeping credentials out of text people read: URLs masked by component, and scrubbing of free
text (a driver's or a library's error) that may quote a credential.

Masking works on a URL's parts, never on substrings of it: the userinfo's password and every
query parameter's value are credentials (``https://u:pw@h/p?token=t`` is shown as
``https://u:***@h/p?token=***``); the scheme, user name, host, port and path stay readable.
Free text is scrubbed of the credentials themselves; a short one (under
:data:`ANYWHERE_CHARS` characters) only where it stands alone, so that a one-letter password
does not turn every word holding that letter into ``***``.

Standard library only: the database layer, the handlers and the notifiers all use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

MASK = "***"
#: A credential at least this long is scrubbed wherever it appears in free text; a shorter one
#: only as a whole token (not inside a longer run of letters and digits).
ANYWHERE_CHARS = 8
#: A URL's part shorter than this is not scrubbed from free text on its own (``?v=1`` holds no
#: secret, and every ``1`` of a message is not one); the URL and its ``user:password`` are.
MIN_PART_CHARS = 4


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace each secret in ``text`` with ``***``, longest first (so a URL is masked whole
    before its parts are); a secret shorter than :data:`ANYWHERE_CHARS` only where no letter or
    digit touches it on either side.

    Args:
        text: a message that may quote a secret (an exception's text, a server's answer).
        secrets: the secret strings; empty ones are ignored.
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        if len(secret) >= ANYWHERE_CHARS:
            text = text.replace(secret, MASK)
        else:
            text = re.sub(rf"(?<![^\W_]){re.escape(secret)}(?![^\W_])", MASK, text)
    return text


def _query_items(query: str) -> list[tuple[str, str | None]]:
    """``query``'s parameters as written: ``(name, value)``, value ``None`` for a bare one."""
    items: list[tuple[str, str | None]] = []
    for part in query.split("&"):
        if part:
            name, sep, value = part.partition("=")
            items.append((name, value if sep else None))
    return items


def mask_url(url: str) -> str:
    """``url`` with its userinfo password, every query parameter's value (a bare parameter
    whole) and its fragment replaced by ``***``; everything else as written.

    Args:
        url: a URL as a user wrote it (``https://u:pw@h/p?token=t``); text that is not a URL
            (no ``//`` authority, unparsable) is returned masked whole unless it holds no
            ``@``, ``?`` or ``#``.

    Returns:
        e.g. ``https://u:***@h/p?token=***``.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, has_password, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if has_password else netloc
    elif not parts.netloc and any(c in url for c in "@?#"):
        return MASK
    query = "&".join(
        MASK if value is None else f"{name}={MASK}" for name, value in _query_items(parts.query)
    )
    masked = parts._replace(netloc=netloc, query=query, fragment=MASK if parts.fragment else "")
    return masked.geturl()


def url_credentials(url: str) -> list[str]:
    """The credentials of ``url`` that :func:`mask_url` masks, as free text may quote them (as
    written and percent-decoded): the whole URL (when it holds any), its ``user:password``, and
    the password, each query value and the fragment when at least :data:`MIN_PART_CHARS` long.
    The user name alone is not among them.

    Args:
        url: the URL whose credentials a message must not quote.
    """
    whole = [url] if mask_url(url) != url else []
    try:
        parts = urlsplit(url)
    except ValueError:
        return whole
    found: list[str] = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        if ":" in userinfo:
            whole.append(userinfo)
            found.append(userinfo.split(":", 1)[1])
    found += [value if value is not None else name for name, value in _query_items(parts.query)]
    found.append(parts.fragment)
    found = [text for text in found if len(text) >= MIN_PART_CHARS]
    everything = whole + found
    return [*everything, *(unquote(text) for text in everything)]
