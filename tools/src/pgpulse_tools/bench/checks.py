"""Self-checks of ``pgpulse bench``: a figure that cannot be true, or was not measured in a
steady state, is shown as such and used in no ratio.

Three checks, each a pure function of a cell's own figures:

* **CPU budget** — ``rate × database CPU per firing`` is the database's CPU seconds per second;
  it cannot exceed the machine's cores (a margin of :data:`CPU_MARGIN` allows for sampling).
  A figure above it means the rate and the CPU were measured over different spans (for
  example, the rate over the seconds until a backlog ran out, the CPU over the whole run).
* **window** — a rate measured over fewer than :data:`MIN_WINDOW_S` seconds is mostly ramp-up.
* **drained** — a throughput measured until its backlog ran out is the rate of a draining
  queue, not a sustained one (the backlog must be sized to outlast the window).

A cell is a ``dict`` of figures with ``rate`` (firings/s), ``db_cpu_ms`` (ms per firing),
``seconds`` (the measured span) and optionally ``drained`` (bool); :func:`judge` adds its
``problems`` (a list of one-line reasons, empty when the figure can be trusted).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final

import psutil

#: Logical CPUs of this machine.
CORES: Final[int] = psutil.cpu_count() or 1
#: Slack on the CPU budget: the meter samples processes every 0.2 s.
CPU_MARGIN: Final[float] = 1.10
#: The shortest span whose rate is taken for a steady state, seconds.
MIN_WINDOW_S: Final[float] = 5.0


def problems(
    *,
    rate: float,
    db_cpu_ms: float,
    seconds: float,
    drained: bool = False,
    cores: int = CORES,
    min_window_s: float = MIN_WINDOW_S,
) -> list[str]:
    """Why a throughput figure cannot be trusted (empty list: it can).

    Args:
        rate: firings per second over ``seconds``.
        db_cpu_ms: the database's CPU milliseconds per firing (NaN when not metered).
        seconds: the span the rate was measured over.
        drained: the backlog ran out before the window closed.
        cores: the machine's logical CPUs.
        min_window_s: the shortest trustworthy span, seconds.

    Returns:
        One line per failed check, naming the figures.
    """
    found: list[str] = []
    if not math.isnan(db_cpu_ms) and rate > 0:
        used = rate * db_cpu_ms / 1000
        if used > cores * CPU_MARGIN:
            found.append(
                f"rate × CPU = {used:.2f} CPU-s/s on a {cores}-core machine: "
                "rate and CPU measured over different spans"
            )
    if not math.isnan(seconds) and seconds < min_window_s:
        found.append(f"window {seconds:.1f} s < {min_window_s:g} s: mostly ramp-up")
    if drained:
        found.append("the backlog ran out inside the window: a draining rate, not a sustained one")
    return found


def judge(cell: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """Set ``cell["problems"]`` from its own figures (see :func:`problems`) and return the cell.

    Args:
        cell: figures with ``rate``, ``db_cpu_ms``, ``seconds`` and optionally ``drained``.
        overrides: keyword arguments passed on to :func:`problems` (``cores``, ...).
    """
    cell["problems"] = problems(
        rate=float(cell.get("rate", math.nan)),
        db_cpu_ms=float(cell.get("db_cpu_ms", math.nan)),
        seconds=float(cell.get("seconds", math.nan)),
        drained=bool(cell.get("drained", False)),
        **overrides,
    )
    return cell


def trusted(cell: dict[str, Any]) -> bool:
    """Whether ``cell`` passed its checks (a cell never judged is trusted, as before)."""
    return not cell.get("problems")


def verdict(cell: dict[str, Any]) -> str:
    """``ok``, or the cell's problems joined for a table column."""
    found = cell.get("problems") or []
    return "ok" if not found else "UNTRUSTED: " + "; ".join(found)


def best_trusted(cells: Iterable[dict[str, Any]], key: str = "rate") -> dict[str, Any] | None:
    """The trusted cell with the highest ``key``, or ``None`` when none is trusted."""
    candidates = [cell for cell in cells if trusted(cell)]
    return max(candidates, key=lambda cell: cell[key]) if candidates else None


def backlog_to_outlast(rate: float, seconds: float, at_least: int, headroom: float = 1.5) -> int:
    """Jobs a backlog needs to still hold work after ``seconds`` at ``rate`` firings/s.

    Args:
        rate: the expected rate, firings per second (an earlier, shorter cell's figure).
        seconds: the window the backlog must outlast.
        at_least: the smallest size to return (the scenario's own size).
        headroom: the factor over ``rate × seconds`` (rates rise as caches warm).
    """
    if math.isnan(rate) or rate <= 0:
        return at_least
    return max(at_least, math.ceil(rate * seconds * headroom / 10_000) * 10_000)
