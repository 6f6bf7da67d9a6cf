"""Pulse's statements rewritten for pgbench: ``:var`` for its placeholders, and ``$n`` for
``PREPARE`` (:func:`dollar`).

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


def dollar(statement: str) -> tuple[str, tuple[str, ...]]:
    """``statement`` with PostgreSQL's own ``$n`` placeholders for its ``%(name)s`` ones (one
    number per distinct name, in first-use order; ``%%`` becomes ``%``), as ``PREPARE`` takes
    it; and the names in ``$n`` order."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return _PLACEHOLDER.sub(number, statement).replace("%%", "%"), tuple(names)


def _word(char: str) -> bool:
    """Whether ``char`` continues an SQL identifier (a keyword is a whole word)."""
    return char.isalnum() or char == "_"


def split_final_select(statement: str) -> tuple[str, str]:
    """Split a ``WITH ... SELECT ...`` statement before its last top-level ``SELECT``
    (:func:`split_final`)."""
    return split_final(statement, "SELECT")


def split_final(statement: str, keyword: str) -> tuple[str, str]:
    """Split a ``WITH ...`` statement before its last top-level ``keyword`` (``SELECT``,
    ``UPDATE``...).

    Returns:
        ``(ctes, final)``: ``ctes`` is ``WITH a AS (...), b AS (...)``, so callers can append
        ``, x AS (final)`` and read the result in another shape.

    Raises:
        ValueError: the statement is not a CTE ending in a top-level ``keyword``.
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
            and upper.startswith(keyword, i)
            and (i == 0 or not _word(statement[i - 1]))
            and not _word(statement[i + len(keyword) : i + len(keyword) + 1])
        ):
            last = i
        i += 1
    if last <= 0 or not upper.lstrip().startswith("WITH"):
        raise ValueError(f"statement is not WITH ... {keyword} ...")
    return statement[:last].rstrip(), statement[last:]
