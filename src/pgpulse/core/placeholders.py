"""Placeholders in an ``http`` job's payload (pure): ``{scheduled_for}``,
``{data_interval_start}`` and the other values of the occurrence's context, filled in the URL,
the header values and the body (``body`` text, or the strings of ``json``) when the request is
sent (docs/chains.md, "The occurrence's context").

A placeholder is an identifier in braces; anything else in braces (JSON text, ``{"a": 1}``)
is left as it is. A name that is no placeholder is refused when the job is written
(:func:`check_placeholders`), naming the field; at run time it is left as it is, so a payload
stored before placeholders existed runs as it did.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from pgpulse.core.errors import InvalidPayload

__all__ = ["PLACEHOLDERS", "check_placeholders", "fill_payload"]

#: The placeholders of an ``http`` payload, and what each stands for (instants ISO 8601 in
#: UTC; empty when there is none).
PLACEHOLDERS: dict[str, str] = {
    "scheduled_for": "the occurrence's instant",
    "data_interval_start": "the occurrence before it by the schedule (an upstream's, in a chain)",
    "data_interval_end": "the occurrence's instant (the interval is [start, end))",
    "last_success_at": "when the job last succeeded",
    "last_success_scheduled_for": "the instant of the occurrence that last succeeded",
    "run_id": "the run's id",
    "attempt": "the attempt's number",
    "job": "the job's name",
    "tenant": "the job's tenant",
}

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _texts(payload: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, text) of every string of ``payload`` a placeholder may stand in."""
    found: list[tuple[str, str]] = []
    if isinstance(payload.get("url"), str):
        found.append(("payload.url", payload["url"]))
    headers = payload.get("headers")
    if isinstance(headers, Mapping):
        found += [(f"payload.headers.{k}", v) for k, v in headers.items() if isinstance(v, str)]
    if isinstance(payload.get("body"), str):
        found.append(("payload.body", payload["body"]))

    def walk(path: str, value: Any) -> None:
        if isinstance(value, str):
            found.append((path, value))
        elif isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{path}.{key}", item)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(f"{path}[{i}]", item)

    if "json" in payload:
        walk("payload.json", payload["json"])
    return found


def check_placeholders(payload: Mapping[str, Any]) -> None:
    """Refuse an ``http`` payload whose URL, header values or body name a placeholder that
    does not exist (:data:`PLACEHOLDERS`).

    Raises:
        InvalidPayload: ``field`` is the text's place (``payload.url``,
            ``payload.headers.<name>``, ``payload.body``, ``payload.json.<path>``), ``value``
            the unknown placeholder.
    """
    for place, text in _texts(payload):
        for match in _PLACEHOLDER.finditer(text):
            if match.group(1) not in PLACEHOLDERS:
                known = ", ".join(f"{{{name}}}" for name in PLACEHOLDERS)
                raise InvalidPayload(
                    f"{place} holds {match.group(0)}, which is no placeholder (known: {known})",
                    field=place,
                    value=match.group(0),
                )


def _filler(values: Mapping[str, str], encode: Callable[[str], str]) -> Callable[[str], str]:
    def fill(text: str) -> str:
        return _PLACEHOLDER.sub(
            lambda m: encode(values[m.group(1)]) if m.group(1) in values else m.group(0), text
        )

    return fill


def fill_payload(payload: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, Any]:
    """``payload`` with its placeholders filled from ``values`` (by name; one not in
    ``values`` stays as written): in the URL percent-encoded (an instant's ``+`` must not
    read as a space), elsewhere as they are. ``payload`` itself is not changed."""
    plain = _filler(values, lambda value: value)
    filled = dict(payload)
    if isinstance(filled.get("url"), str):
        filled["url"] = _filler(values, lambda value: quote(value, safe=":"))(filled["url"])
    headers = filled.get("headers")
    if isinstance(headers, Mapping):
        filled["headers"] = {k: plain(v) if isinstance(v, str) else v for k, v in headers.items()}
    if isinstance(filled.get("body"), str):
        filled["body"] = plain(filled["body"])

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return plain(value)
        if isinstance(value, Mapping):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    if "json" in filled:
        filled["json"] = walk(filled["json"])
    return filled
