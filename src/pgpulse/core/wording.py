"""How Pulse words a count for people: ``1 attempt``, ``2 attempts``, ``0 jobs``.

Pure and tiny, so the runtime (an error text a run records) and the edges (the CLI, the demo)
say counts the same way without importing each other.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from datetime import datetime


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


#: The units a long duration is also said in, largest first (seconds each).
_UNITS = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))


def seconds_text(value: float) -> str:
    """A duration for people, one way everywhere: seconds with at most 3 decimals (never an
    exponent, thousands separated), and from a minute on also in words.

    Args:
        value: the duration in seconds.

    Returns:
        ``"0.25 s"``, ``"30 s"``, ``"90 s (1 min 30 s)"``,
        ``"31,622,400 s (366 d)"`` (not ``3.16224e+07 s``). A measured lag keeps its own
        ``{:.1f} s`` (:mod:`pgpulse.cli.report`); this is for the durations a person configured.
    """
    shown = f"{value:,.3f}".rstrip("0").rstrip(".")
    if abs(value) < 60:
        return f"{shown} s"
    left, parts = round(abs(value)), []
    for unit, size in _UNITS:
        if left >= size:
            parts.append(f"{left // size} {unit}")
            left %= size
    return f"{shown} s ({' '.join(parts)})"


def given(value: object) -> str:
    """A refused value as a refusal quotes it: as the user wrote it where the type was lost on
    the way (a whole number read as a float is ``-1``, not ``-1.0``; the command line reads
    every duration as a float), otherwise its ``repr`` (``'abc'``, ``True``, ``2.5``)."""
    if isinstance(value, float) and value.is_integer():
        return f"{int(value)}"
    return repr(value)


def json_given(value: object) -> str:
    """A refused JSON value (a payload or a part of one) as a refusal quotes it: in JSON's
    spelling (``null``, ``true``, ``"abc"``, ``[1, 2]``), as the user wrote it, not Python's
    (``None``, ``True``); a value JSON cannot spell (never one read from JSON) by its ``repr``."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def unchanged_note(verb: str, name: str, status: str) -> str:
    """The note for a pause or resume that leaves job ``name`` as it is, one wording for the
    CLI and the dashboard: ``nightly was paused already; no change`` (``verb`` ``"pause"``),
    ``nightly is idle, not paused; no change`` (``"resume"``; ``status`` is the job's)."""
    if verb == "pause":
        return f"{name} was paused already; no change"
    return f"{name} is {status}, not paused; no change"


def withdrawn_note(name: str) -> str:
    """The note of a resume that withdraws the pause requested while job ``name`` ran, one
    wording for the CLI and the dashboard."""
    return (
        f"{name} will not pause: the pause requested while it ran is withdrawn (its run and "
        "the occurrences after it go on)"
    )


def pending_pause(status: str, until: datetime | None) -> str:
    """A job's status while its pause waits for its run's end (``job pause`` of a running
    job), one wording for the CLI and the dashboard:
    ``running; pauses when its run ends until 2026-12-24T08:00:00+00:00``."""
    return f"{status}; pauses when its run ends" + (
        f" until {until.isoformat(timespec='seconds')}" if until else ""
    )


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the choice nearest ``value`` (a mistyped zone, field or
    handler), or ``""`` when none is near: :func:`difflib.get_close_matches` at its default
    cutoff (0.6), any case."""
    if not isinstance(value, str):
        return ""
    folded = {choice.lower(): choice for choice in choices}
    near = difflib.get_close_matches(value.lower(), folded, n=1)
    return f" (did you mean {folded[near[0]]!r}?)" if near else ""
