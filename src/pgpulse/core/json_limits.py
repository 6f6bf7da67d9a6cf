"""The one nesting and number-size rule for structured input (payloads, ``meta``, notifier
configs), on every path: the CLI's JSON options, ``apply``'s TOML, the Python API and the HTTP
API call :func:`check_shape`, and text is parsed by :func:`loads_json`.

Why: a value nested deeper than the HTTP API takes could be stored through another path and
then never be changed through the API; Python's parsers fail on deep nesting with a
``RecursionError`` and on integers over 4,300 digits with a ``ValueError`` (the interpreter's
``sys.int_info.default_max_str_digits``), which reached users as tracebacks. A number no float
holds (``1e999``) is read by Python as infinity, which neither JSON nor PostgreSQL's ``jsonb``
stores and which a refusal would quote as ``inf``: :func:`loads` refuses it where it is read,
quoting it as it was sent (the HTTP API reads its request bodies with it).
"""

from __future__ import annotations

import json
import math
from typing import Any

from pgpulse.core.errors import InvalidInput

#: The deepest a value may sit inside a document: the top level is level 0, ``{"a": 1}``'s
#: ``1`` is at level 1.
MAX_DEPTH = 64
#: The most decimal digits of an integer (Python's own default limit for reading and writing
#: one as text, so a stored value can always be read back and printed).
MAX_INT_DIGITS = 4300
_INT_LIMIT = 10**MAX_INT_DIGITS


def too_deep(field_name: str) -> InvalidInput:
    """The refusal of a document nested more than :data:`MAX_DEPTH` levels."""
    return InvalidInput(
        f"{field_name} is nested more than {MAX_DEPTH} levels deep", field=field_name, value=None
    )


def too_long_integer(field_name: str) -> InvalidInput:
    """The refusal of a document holding an integer of more than :data:`MAX_INT_DIGITS`
    digits."""
    return InvalidInput(
        f"{field_name} holds an integer of more than {MAX_INT_DIGITS:,} digits",
        field=field_name,
        value=None,
    )


def check_shape(field_name: str, value: Any) -> None:
    """Refuse a document nested more than :data:`MAX_DEPTH` levels deep or holding an integer
    of more than :data:`MAX_INT_DIGITS` digits (walks dicts, lists and tuples without
    recursion).

    Args:
        field_name: the document's field (``payload``, ``meta``, ``config``), for the refusal.
        value: the document (any Python value; scalars pass).

    Raises:
        InvalidInput: ``field=field_name``, ``value=None`` (the document is not quoted).
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise too_deep(field_name)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= _INT_LIMIT:
            raise too_long_integer(field_name)


def not_finite(field_name: str, text: str) -> InvalidInput:
    """The refusal of a JSON number no float holds (``1e999``, which Python reads as infinity)
    or of ``NaN`` / ``Infinity`` (which JSON does not have), quoting ``text`` as it was sent."""
    return InvalidInput(
        f"{field_name} must be a finite number, got {text}", field=field_name, value=text
    )


class _Unbounded:
    """A number of a JSON text that no float holds, as it was written (see :func:`loads`)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def loads(text: str | bytes, field_name: str | None = None) -> Any:
    """``json.loads(text)``, refusing a number no float holds (``1e999``, ``-1e400``) and the
    constants JSON does not have (``NaN``, ``Infinity``), which Python would read as infinity
    or NaN: a refusal names the value's place — its path of keys and indexes, under
    ``field_name`` when given (``spread``, ``payload.items.0``; ``body`` for a text that is one
    such number) — and quotes it as it was sent.

    Raises:
        json.JSONDecodeError, RecursionError, ValueError: as :func:`json.loads`.
        InvalidInput: such a number (:func:`not_finite`).
    """
    found: list[_Unbounded] = []

    def number(token: str) -> float | _Unbounded:
        value = float(token)
        if math.isfinite(value):
            return value
        found.append(_Unbounded(token))
        return found[-1]

    def constant(token: str) -> _Unbounded:
        found.append(_Unbounded(token))
        return found[-1]

    value = json.loads(text, parse_float=number, parse_constant=constant)
    if not found:
        return value
    path = [field_name] if field_name else []
    path += _path_to(value, found[0])  # the first in the text, as a parser would stop at it
    raise not_finite(".".join(path) or "body", found[0].text)


def _path_to(document: Any, target: object) -> list[str]:
    """The keys and indexes that lead from ``document`` to ``target`` (by identity), walked
    without recursion."""
    stack: list[tuple[Any, list[str]]] = [(document, [])]
    while stack:
        item, path = stack.pop()
        if item is target:
            return path
        if isinstance(item, dict):
            stack.extend((child, [*path, str(key)]) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, [*path, str(index)]) for index, child in enumerate(item))
    return []


def loads_json(field_name: str, text: str | bytes) -> Any:
    """Parse JSON ``text`` (:func:`loads`: no number beyond a float's range) and check it with
    :func:`check_shape`.

    Raises:
        json.JSONDecodeError: the text is not JSON (the caller words it: it knows whether the
            text may be quoted).
        InvalidInput: nested too deep, or an integer too long (``field=field_name``), or a
            number no float holds (``field`` its path under ``field_name``).
    """
    try:
        value = loads(text, field_name)
    except RecursionError:
        raise too_deep(field_name) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        raise too_long_integer(field_name) from None
    check_shape(field_name, value)
    return value
