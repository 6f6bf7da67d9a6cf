"""Checks shared by the notifier configs: each refusal names the field (``config.<key>``) and its
value, and never quotes a secret (docs/design.md, invariant 11; docs/alerts.md, "Secrets").

Pure except :func:`check_url_target`, which resolves a URL's host to apply the address policy of
``http`` jobs (:mod:`pgpulse.core.policy`): loopback, link-local, private, shared, reserved,
multicast and unspecified addresses are refused unless the operator's allow-list names them.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.headerregistry import Address, HeaderRegistry
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pgpulse.alerts.notifiers.redaction import MASK, Secret, redact_url, scrub, url_secrets
from pgpulse.core.errors import InvalidNotifierConfig
from pgpulse.core.wording import json_given

if TYPE_CHECKING:
    from pgpulse.core.policy import HttpAllowList

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 "token"
#: The characters of a DNS label (RFC 1123: letters, digits, hyphens).
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
#: Longest URL accepted, characters.
MAX_URL_CHARS = 2048


_NOTHING: Any = object()


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key of a notifier kind's JSON config, declared in its config class's ``FIELDS``:
    the keys a config may hold (:func:`check_object`), which of them are secret, and the API's
    per-kind schema of ``config`` (:mod:`pgpulse.web.alerts_api`) derive from the table.

    Attributes:
        name: the JSON key.
        doc: what it holds, in a sentence (units and bounds included).
        json_type: its JSON schema type (``string``, ``number``, ``integer``, ``object``,
            ``array``; several joined by ``|``).
        required: a config must give it.
        secret: its value is never shown back.
    """

    name: str
    doc: str
    json_type: str = "string"
    required: bool = False
    secret: bool = False


#: The delivery keys every notifier kind takes (:func:`delivery_fields`).
DELIVERY_KEYS = (
    ConfigKey("timeout", "seconds for one send, in (0, 300]", "number"),
    ConfigKey("max_attempts", "attempts per delivery, a whole number in [1, 100]", "integer"),
    ConfigKey("retry_backoff", "base of the backoff between attempts, seconds", "number"),
)


def key_names(keys: tuple[ConfigKey, ...]) -> frozenset[str]:
    """The names of ``keys``: what :func:`check_object` lets a config hold."""
    return frozenset(key.name for key in keys)


def refuse(
    key: str, why: str, value: Any = _NOTHING, *, secret: bool = False
) -> InvalidNotifierConfig:
    """The error for a refused field: ``config.<key> <why>[, got <value>]``.

    Args:
        key: the config key (``url``, ``smtp.port``...).
        why: what is wrong, e.g. ``"must be a positive number of seconds"``.
        value: the refused value, quoted in the message unless ``secret`` (omit it for a
            missing field).
        secret: the value is secret: neither the message nor the error's ``value`` holds it.
    """
    field = f"config.{key}"
    if secret:
        return InvalidNotifierConfig(f"{field} {why}", field=field, value=MASK)
    if value is _NOTHING:
        return InvalidNotifierConfig(f"{field} {why}", field=field, value=None)
    return InvalidNotifierConfig(
        f"{field} {why}, got {json_given(value)}", field=field, value=value
    )


def check_object(
    config: object, kind: str, known: frozenset[str], example: str
) -> Mapping[str, Any]:
    """Refuse a config that is not a JSON object, or that has a key the kind does not read (a
    typo such as ``pasword`` must not pass silently; its value is not quoted, it may be secret).
    """
    if not isinstance(config, Mapping):
        raise InvalidNotifierConfig(
            f"config of a {kind} notifier must be a JSON object, e.g. {example}",
            field="config",
            value=None if config is None else type(config).__name__,
        )
    for key in sorted(config, key=str):
        if key not in known:
            raise InvalidNotifierConfig(
                f"config.{key} is not a field of a {kind} notifier "
                f"(fields: {', '.join(sorted(known))})",
                field=f"config.{key}",
                value=MASK,
            )
    return config


def _check_string(key: str, value: object, *, secret: bool, max_chars: int) -> str:
    if not isinstance(value, str):
        shown = type(value).__name__ if secret else value
        raise refuse(key, "must be a string", shown, secret=secret)
    if _CONTROL.search(value):
        raise refuse(
            key, "must not contain control characters (CR, LF, NUL...)", value, secret=secret
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise refuse(key, "holds an unpaired surrogate", MASK, secret=secret) from None
    if len(value) > max_chars:
        raise refuse(key, f"must be at most {max_chars} characters", len(value), secret=secret)
    return value


def text(
    config: Mapping[str, Any],
    key: str,
    *,
    required: bool = False,
    default: str | None = None,
    max_chars: int = 1000,
) -> str | None:
    """A non-empty string without control characters, or ``default`` when absent."""
    if key not in config or config[key] is None:
        if required:
            raise refuse(key, "is required")
        return default
    value = _check_string(key, config[key], secret=False, max_chars=max_chars)
    if not value.strip():
        raise refuse(key, "must not be empty", value)
    return value


def secret_text(
    config: Mapping[str, Any], key: str, *, min_chars: int = 1, max_chars: int = 1000
) -> Secret | None:
    """A secret string (never quoted back), or ``None`` when absent."""
    if key not in config or config[key] is None:
        return None
    value = _check_string(key, config[key], secret=True, max_chars=max_chars)
    if len(value) < min_chars:
        raise refuse(key, f"must be at least {min_chars} characters", secret=True)
    return Secret(value)


def number(
    config: Mapping[str, Any],
    key: str,
    *,
    default: float,
    minimum: float,
    maximum: float,
    integer: bool = False,
    exclusive_minimum: bool = False,
) -> float:
    """A finite number in [minimum, maximum] (or (minimum, maximum]), whole if ``integer``."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise refuse(key, "must be a number", value)
    low_ok = value > minimum if exclusive_minimum else value >= minimum
    if not low_ok or value > maximum:
        bracket = "(" if exclusive_minimum else "["
        raise refuse(key, f"must be in {bracket}{minimum:g}, {maximum:g}]", value)
    if integer and int(value) != value:
        raise refuse(key, "must be a whole number", value)
    return float(value)


def choice(config: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    """One of ``choices`` (compared as given), or ``default`` when absent."""
    value = config.get(key, default)
    if value not in choices:
        raise refuse(key, f"must be one of {', '.join(choices)}", value)
    return str(value)


def is_host_name(host: str) -> bool:
    """Whether ``host`` is a DNS host name (RFC 1123 labels of 1-63 letters, digits and inner
    hyphens, dot-separated, an optional final dot, at most 253 characters) or an IP address
    (IPv6 with or without brackets).

    One pass over the text, no regular expression: a backtracking pattern for this took time
    doubling with each character of a name that almost matches (``"a" * 27 + "!"``: 8 s).
    """
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return True
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > 253:
        return False
    return all(
        0 < len(label) <= 63
        and not label.startswith("-")
        and not label.endswith("-")
        and _LABEL_CHARS.issuperset(label)
        for label in name.split(".")
    )


def host_name(key: str, host: str) -> None:
    """Refuse ``host`` unless it is a DNS host name or an IP address (:func:`is_host_name`)."""
    if not is_host_name(host):
        raise refuse(key, "is not a host name or an IP address", host)


def email_address(key: str, value: object) -> str:
    """One RFC 5322 address (``ops@example.com`` or ``Pulse <pulse@example.com>``), parsed by
    the standard library's header parser; returned in its normal form. The parser's own
    crashes on some malformed text (``pulse@``: an IndexError in Python 3.11) are refusals."""
    given = text({key: value}, key, required=True, max_chars=320)
    assert given is not None
    try:
        header = HeaderRegistry()("To", given)
    except (IndexError, ValueError, TypeError, AttributeError):
        raise refuse(key, "is not one e-mail address (e.g. ops@example.com)", value) from None
    addresses: tuple[Address, ...] = getattr(header, "addresses", ())
    if (
        header.defects
        or len(addresses) != 1
        # Decoded encoded words must not bring a line break or control character back in.
        or not str(addresses[0]).isprintable()
        or not addresses[0].username
        or not addresses[0].domain
    ):
        raise refuse(key, "is not one e-mail address (e.g. ops@example.com)", value)
    return str(addresses[0])


def http_url(config: Mapping[str, Any], key: str, *, required: bool) -> Secret | None:
    """An absolute ``http``/``https`` URL with a host and no credentials in its host part.

    The URL is treated as a secret (it often is: Slack, Healthchecks): refusals quote it with its
    secret parts masked. ``{placeholders}`` may appear in the path and query, never in the host.
    Backslashes are refused (parsers disagree whether ``\\`` ends the host: a classic way past
    an address check).
    """
    if key not in config or config[key] is None:
        if required:
            raise refuse(key, 'is required (e.g. "https://hooks.example.com/pulse")')
        return None
    raw = config[key]
    if isinstance(raw, bool | int | float):  # a number holds no URL's secret: quote it
        raise refuse(key, "must be a string", raw)
    if not isinstance(raw, str):  # an array or object might: say what it is, not what it holds
        kind = "an array" if isinstance(raw, list | tuple) else "an object"
        raise refuse(key, f"must be a string, got {kind}")
    shown = redact_url(raw)
    _check_string(key, raw, secret=True, max_chars=MAX_URL_CHARS)
    if "\\" in raw or " " in raw:
        raise refuse(key, "must not contain spaces or backslashes", shown)
    try:
        parts = urlsplit(raw)
        host, _port = parts.hostname, parts.port
    except ValueError:
        raise refuse(key, "is not a valid URL", shown) from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise refuse(key, "must be an http:// or https:// URL with a host", shown)
    if "{" in parts.netloc or "}" in parts.netloc:
        raise refuse(key, "may hold {placeholders} in its path and query only", shown)
    return Secret(raw)


def headers(
    config: Mapping[str, Any], key: str, reserved: frozenset[str]
) -> tuple[tuple[str, Secret], ...]:
    """Extra request headers: names are RFC 9110 tokens, neither in ``reserved`` (lower case) nor
    starting with ``X-Pulse-``; values are secret (an ``Authorization`` header), never quoted
    back."""
    value = config.get(key)
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise refuse(key, "must be an object of header name to value", type(value).__name__)
    found: list[tuple[str, Secret]] = []
    for name in value:
        if not isinstance(name, str) or not HEADER_NAME.match(name):
            raise refuse(key, "has a header name that is not an RFC 9110 token", name)
        if name.lower() in reserved or name.lower().startswith("x-pulse-"):
            raise refuse(f"{key}.{name}", "is set by Pulse and cannot be configured", name)
        item = _check_string(f"{key}.{name}", value[name], secret=True, max_chars=8192)
        found.append((name, Secret(item)))
    return tuple(found)


async def check_url_target(
    url: Secret,
    key: str,
    allow: HttpAllowList,
    *,
    resolve_timeout: float = 2.0,
    allowed_by: str | None = None,
) -> None:
    """Refuse a URL whose host is not allowed by the address policy of ``http`` jobs.

    Seam: the policy is :func:`pgpulse.core.policy.check_http_target` (imported here, when a
    config is written, so neither ``import pgpulse.alerts.notifiers`` nor a send loads the web
    edge). A connect-time check of the resolved addresses (against DNS rebinding) belongs to the
    HTTP transport the sender is given, not to this config-time check.

    Args:
        url: the URL (checked for shape already).
        key: its config key, for the error's field.
        allow: the operator's allow-list (``--http-allow``).
        resolve_timeout: seconds to resolve the host name.
        allowed_by: the option that would allow the URL where it is written, for the message
            (default: the HTTP edge's, :data:`pgpulse.core.policy.SERVER_ALLOW`).

    Raises:
        TargetNotAllowed: ``field="config.<key>"``; the value is the URL with its secret parts
            masked.
    """
    from pgpulse.core.policy import SERVER_ALLOW, TargetNotAllowed, WebSettings, check_http_target

    raw = url.reveal()
    settings = WebSettings(http_allow=allow, resolve_timeout=resolve_timeout)
    try:
        await check_http_target({"url": raw}, settings, allowed_by=allowed_by or SERVER_ALLOW)
    except TargetNotAllowed as exc:
        shown = redact_url(raw)
        message = scrub(str(exc).replace(raw, shown), url_secrets(raw))
        message = message.replace("payload.url", f"config.{key}")
        raise TargetNotAllowed(message, field=f"config.{key}", value=shown) from None


def delivery_fields(
    config: Mapping[str, Any], *, timeout: float, max_attempts: int, retry_backoff: float
) -> tuple[float, int, float]:
    """``(timeout, max_attempts, retry_backoff)`` of a notifier, the given defaults when absent.

    ``timeout``: seconds for one send, in (0, 300]; ``max_attempts``: attempts per delivery, a
    whole number in [1, 100]; ``retry_backoff``: base of the backoff, seconds, in [0.001, 3600].
    """
    return (
        number(config, "timeout", default=timeout, minimum=0, maximum=300, exclusive_minimum=True),
        int(
            number(
                config, "max_attempts", default=max_attempts, minimum=1, maximum=100, integer=True
            )
        ),
        number(config, "retry_backoff", default=retry_backoff, minimum=0.001, maximum=3600),
    )
