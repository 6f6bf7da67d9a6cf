"""How Pulse words a count for people: ``1 attempt``, ``2 attempts``, ``0 jobs``.

Pure and tiny, so the runtime (an error text a run records) and the edges (the CLI, the demo)
say counts the same way without importing each other.
"""

from __future__ import annotations


def plural(count: float, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, the noun in the plural unless ``count`` is exactly 1.

    Args:
        count: how many (an int, or seconds as a float: ``1.0`` is singular, ``0.5`` is not).
        noun: the singular (``"attempt"``, ``"occurrence"``).
        many: the plural when it is not ``noun + "s"`` (``plural(n, "entry", "entries")``).

    Returns:
        ``"1 attempt"``, ``"3 attempts"``, ``"1,000 jobs"`` (thousands separated, as the CLI
        prints large counts), ``"0.5 seconds"``.
    """
    shown = f"{count:,}" if isinstance(count, int) else f"{count:g}"
    return f"{shown} {noun if count == 1 else many or noun + 's'}"
