"""Pulse's statements rewritten for pgbench: ``:var`` for its placeholders (``$n`` for PREPARE
is :func:`pgpulse.sql.positional`, which the store itself uses).

The benchmark never keeps its own copy of Pulse's SQL: it takes the text from ``QUERIES`` (so a
change to ``queries.sql`` changes the ceiling too) and only rewrites psycopg's ``%(name)s``
placeholders.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def placeholders(statement: str) -> list[str]:
    """Names of the ``%(name)s`` placeholders of ``statement``, in first-use order."""
    seen: dict[str, None] = {}
    for match in _PLACEHOLDER.finditer(statement):
        seen.setdefault(match.group(1), None)
    return list(seen)


def substitute(statement: str, values: Mapping[str, str]) -> str:
    """Replace each ``%(name)s`` by the SQL expression ``values[name]`` (parenthesised).

    Raises:
        KeyError: a placeholder has no value — the statement grew a parameter this benchmark
            does not know yet (the message names it).
    """
    missing = [name for name in placeholders(statement) if name not in values]
    if missing:
        raise KeyError(
            f"no benchmark value for parameter(s) {', '.join(missing)} of the "
            "statement; update pgpulse/bench/ceiling.py"
        )
    return _PLACEHOLDER.sub(lambda m: f"({values[m.group(1)]})", statement).replace("%%", "%")


def split_final_select(statement: str) -> tuple[str, str]:
    """Split a ``WITH ... SELECT ...`` statement before its last top-level ``SELECT``.

    Returns:
        ``(ctes, final_select)``: ``ctes`` is ``WITH a AS (...), b AS (...)``, so callers can
        append ``, x AS (final_select)`` and read the result in another shape.

    Raises:
        ValueError: the statement is not a CTE ending in a top-level SELECT.
    """
    depth = 0
    last = -1
    upper = statement.upper()
    i = 0
    while i < len(statement):
        ch = statement[i]
        if ch == "'":
            i = statement.index("'", i + 1) + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif (
            depth == 0
            and upper.startswith("SELECT", i)
            and (i == 0 or not statement[i - 1].isalnum())
        ):
            last = i
        i += 1
    if last <= 0 or not upper.lstrip().startswith("WITH"):
        raise ValueError("statement is not WITH ... SELECT ...")
    return statement[:last].rstrip(), statement[last:]
