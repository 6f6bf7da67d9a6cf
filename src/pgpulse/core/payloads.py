"""The payload checks of the built-in handlers, by handler name (pure: no I/O).

Job creation (:meth:`pgpulse.core.jobs.JobSpec.create`) and a run's own payload
(:mod:`pgpulse.db.run_control`) call them up front (docs/design.md, invariant 11: refuse bad
input at the boundary); the handlers of :mod:`pgpulse.node.builtins` call them again, because a
payload may have been stored by an older version. Every refusal is an
:class:`~pgpulse.core.errors.InvalidPayload` whose ``field`` is ``payload`` or ``payload.<key>``
and whose ``value`` is the refused value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from pgpulse.core.errors import InvalidPayload
from pgpulse.core.masking import mask_url
from pgpulse.core.wording import did_you_mean, json_given

SHELL_FIELDS = frozenset({"command", "stdin", "env", "user", "cwd", "shell"})
HTTP_FIELDS = frozenset(
    {"url", "method", "headers", "json", "body", "timeout", "expect_status", "follow_redirects"}
)
CELERY_FIELDS = frozenset({"task", "args", "kwargs", "queue", "headers", "expires"})
RQ_FIELDS = frozenset({"func", "args", "kwargs", "queue", "timeout"})
HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"})
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 "token"


# --- shared checks ----------------------------------------------------------------------


def _refuse(field: str, value: Any, why: str) -> InvalidPayload:
    return InvalidPayload(f"{field} {why}, got {json_given(value)}", field=field, value=value)


def check_keys(payload: Mapping[str, Any], known: frozenset[str], example: str) -> None:
    """Refuse a payload that is not an object or holds a key outside ``known`` (a typo such
    as ``taks`` must not pass silently), naming the first such key.

    Raises:
        InvalidPayload: ``field`` is ``payload`` or ``payload.<key>``.
    """
    if not isinstance(payload, Mapping):
        raise _refuse("payload", payload, "must be a JSON object")
    unknown = sorted(set(payload) - known)
    if unknown:
        raise InvalidPayload(
            f"payload.{unknown[0]} is not a field of this handler"
            f"{did_you_mean(unknown[0], known)} (fields: {', '.join(sorted(known))}; "
            f"e.g. {example})",
            field=f"payload.{unknown[0]}",
            value=payload[unknown[0]],
        )


def check_name_field(payload: Mapping[str, Any], key: str, *, required: bool) -> None:
    """``payload[key]``, when given (or ``required``), is a non-empty string without NUL or
    blanks at either end (a task, function or queue name).

    Raises:
        InvalidPayload: ``field`` is ``payload.<key>``.
    """
    value = _given_string(payload, key, required=required)
    if value is not None and (not value or value != value.strip() or "\x00" in value):
        raise _refuse(
            f"payload.{key}", value, "must be a non-empty name without NUL or surrounding blanks"
        )


def check_call_fields(payload: Mapping[str, Any]) -> None:
    """``args`` is a list and ``kwargs`` an object, when given: what the task is called with.

    Raises:
        InvalidPayload: ``field`` is ``payload.args`` or ``payload.kwargs``.
    """
    args = payload.get("args")
    if args is not None and not isinstance(args, list):
        raise _refuse("payload.args", args, "must be a JSON array")
    kwargs = payload.get("kwargs")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise _refuse("payload.kwargs", kwargs, "must be a JSON object")


def check_seconds(payload: Mapping[str, Any], key: str) -> None:
    """``payload[key]``, when given, is a positive number of seconds.

    Raises:
        InvalidPayload: ``field`` is ``payload.<key>``.
    """
    value = payload.get(key)
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
    ):
        raise _refuse(f"payload.{key}", value, "must be a positive number of seconds")


# --- one validator per built-in handler --------------------------------------------------


def _given_string(payload: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    """``payload[key]``, a string, or ``None`` when it is absent and not ``required``.

    Raises:
        InvalidPayload: absent but required, or not a string (``field`` is ``payload.<key>``).
    """
    field = f"payload.{key}"
    if key not in payload:
        if required:
            raise InvalidPayload(
                f'{field} is required (e.g. {{"{key}": ...}})', field=field, value=None
            )
        return None
    value = payload[key]
    if not isinstance(value, str):
        raise _refuse(field, value, "must be a string")
    return value


def _check_text(payload: Mapping[str, Any], key: str, *, required: bool = False) -> None:
    value = _given_string(payload, key, required=required)
    if value is None:
        return
    if required and not value.strip():
        raise _refuse(f"payload.{key}", value, "must not be empty")
    if "\x00" in value:
        raise _refuse(f"payload.{key}", value, "must not contain NUL characters")


def _check_str_map(
    payload: Mapping[str, Any],
    key: str,
    name_ok: Callable[[str], bool],
    value_ok: Callable[[str], bool],
    value_rule: str,
) -> None:
    field = f"payload.{key}"
    value = payload.get(key)
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise _refuse(field, value, "must be an object of string to string")
    for name, item in value.items():
        if not isinstance(name, str) or not name_ok(name):
            raise _refuse(f"{field}", name, "has an invalid name")
        if not isinstance(item, str) or not value_ok(item):
            raise _refuse(f"{field}.{name}", item, f"must be a string {value_rule}")


def validate_shell_payload(payload: Mapping[str, Any]) -> None:
    """Check a ``shell`` job's payload without running anything.

    Args:
        payload: ``{"command": str, "stdin"?: str, "env"?: {str: str}, "user"?: str,
            "cwd"?: str, "shell"?: str}``. Any other key is refused (it would be a typo).

    Raises:
        InvalidPayload: a field is missing, of the wrong type, empty (``command``, ``user``,
            ``cwd``) or holds a NUL character; an env name is empty or holds ``=``. ``field`` is
            ``"payload.<key>"`` and ``value`` the refused value. Whether ``user`` exists and
            ``cwd`` is a directory is checked when the command runs, on the node that runs it.
    """
    if not isinstance(payload, Mapping):
        raise _refuse("payload", payload, "must be a JSON object")
    check_keys(payload, SHELL_FIELDS, '{"command": "backup.sh --full"}')
    _check_text(payload, "command", required=True)
    _check_text(payload, "stdin")
    for key in ("user", "cwd", "shell"):
        if key in payload:
            _check_text(payload, key, required=True)
    _check_str_map(
        payload,
        "env",
        name_ok=lambda name: bool(name) and "=" not in name and "\x00" not in name,
        value_ok=lambda value: "\x00" not in value,
        value_rule="without NUL characters",
    )


def validate_http_payload(payload: Mapping[str, Any]) -> None:
    """Check an ``http`` job's payload without sending anything.

    Args:
        payload: ``{"url": str, "method"?: str, "headers"?: {str: str}, "json"?: any,
            "body"?: str, "timeout"?: seconds, "expect_status"?: [int],
            "follow_redirects"?: bool}``. Any other key is refused.

    Raises:
        InvalidPayload: ``url`` is not an ``http``/``https`` URL with a host; ``method`` is not
            one of :data:`HTTP_METHODS`; a header name is not an RFC 9110 token or a value holds
            CR, LF or NUL; both ``json`` and ``body`` are given; ``body`` is not a string;
            ``timeout`` is not a positive number; ``expect_status`` is not a non-empty list of
            status codes (100-599); ``follow_redirects`` is not a boolean. ``field`` is
            ``"payload.<key>"`` and ``value`` the refused value.
    """
    if not isinstance(payload, Mapping):
        raise _refuse("payload", payload, "must be a JSON object")
    check_keys(payload, HTTP_FIELDS, '{"url": "https://example.com/hook", "method": "POST"}')
    _check_text(payload, "url", required=True)
    url = payload["url"]
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        host = None
    if host is None or parts.scheme.lower() not in ("http", "https"):
        # Quoted masked: a stored payload's refusal becomes a run error, which alerts quote.
        shown = mask_url(url)
        raise _refuse("payload.url", shown, "must be an http:// or https:// URL with a host")
    method = payload.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in HTTP_METHODS:
        raise _refuse("payload.method", method, f"must be one of {', '.join(sorted(HTTP_METHODS))}")
    _check_str_map(
        payload,
        "headers",
        name_ok=lambda name: bool(_HEADER_NAME_RE.match(name)),
        value_ok=lambda value: not any(c in value for c in "\r\n\x00"),
        value_rule="without CR, LF or NUL characters",
    )
    if "json" in payload and "body" in payload:
        raise _refuse("payload.body", payload["body"], "cannot be given together with payload.json")
    _check_text(payload, "body")
    timeout = payload.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise _refuse("payload.timeout", timeout, "must be a positive number of seconds")
    expect = payload.get("expect_status")
    if expect is not None and (
        not isinstance(expect, list)
        or not expect
        or not all(type(code) is int and 100 <= code <= 599 for code in expect)
    ):
        raise _refuse(
            "payload.expect_status",
            expect,
            "must be a non-empty list of HTTP status codes (100-599)",
        )
    follow = payload.get("follow_redirects", False)
    if not isinstance(follow, bool):
        raise _refuse("payload.follow_redirects", follow, "must be true or false")


def validate_celery_payload(payload: Mapping[str, Any]) -> None:
    """Check a ``celery`` job's payload without sending anything.

    Args:
        payload: ``{"task": str, "args"?: list, "kwargs"?: object, "queue"?: str,
            "headers"?: object, "expires"?: seconds}``. Any other key is refused (a broker
            is the node's setting, never a payload's).

    Raises:
        InvalidPayload: a key is unknown, ``task`` is missing or not a non-empty string,
            ``args`` is not a list, ``kwargs`` or ``headers`` not an object, ``queue`` not a
            non-empty string, ``expires`` not a positive number. ``field`` is
            ``"payload.<key>"`` and ``value`` the refused value.
    """
    check_keys(payload, CELERY_FIELDS, '{"task": "proj.tasks.add", "args": [2, 3]}')
    check_name_field(payload, "task", required=True)
    check_name_field(payload, "queue", required=False)
    check_call_fields(payload)
    headers = payload.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise InvalidPayload(
            f"payload.headers must be a JSON object, got {json_given(headers)}",
            field="payload.headers",
            value=headers,
        )
    check_seconds(payload, "expires")


def validate_rq_payload(payload: Mapping[str, Any]) -> None:
    """Check an ``rq`` job's payload without enqueueing anything.

    Args:
        payload: ``{"func": str, "args"?: list, "kwargs"?: object, "queue"?: str,
            "timeout"?: seconds}``. Any other key is refused.

    Raises:
        InvalidPayload: ``field`` is ``"payload.<key>"`` and ``value`` the refused value.
    """
    check_keys(payload, RQ_FIELDS, '{"func": "proj.jobs.report", "args": [1]}')
    check_name_field(payload, "func", required=True)
    check_name_field(payload, "queue", required=False)
    check_call_fields(payload)
    check_seconds(payload, "timeout")


#: The payload check of each built-in handler, by handler name: job creation runs it up front, the
#: handler again as it runs.
PAYLOAD_VALIDATORS: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "shell": validate_shell_payload,
    "http": validate_http_payload,
    "celery": validate_celery_payload,
    "rq": validate_rq_payload,
}

#: The names of the built-in handlers (:data:`pgpulse.node.builtins.BUILTIN_HANDLERS`' keys).
BUILTIN_HANDLER_NAMES = frozenset(PAYLOAD_VALIDATORS)
