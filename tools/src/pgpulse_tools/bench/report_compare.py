"""The before-and-after comparison's figures and table (``pgpulse bench --compare-with``):
which side runs when, each metric's medians, ratio and noise, and the report's section.

Pure: :mod:`pgpulse_tools.bench.compare` measures, this module only computes and formats (the
report imports it to rewrite the page from results.json).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any, Final

from tabulate import tabulate

AFTER: Final[str] = "after"
BEFORE: Final[str] = "before"
#: The order of the metrics' groups in the table.
GROUPS: Final[tuple[str, ...]] = ("cpu", "rate", "claim", "herd", "lag")

HEADERS: Final[list[str]] = [
    "metric",
    "better",
    "after (median)",
    "before (median)",
    "after ÷ before",
    "noise after",
    "noise before",
    "verdict",
]


def order(rounds: int, unit: int = 0) -> list[tuple[int, str]]:
    """The (round, side) sequence of measured unit number ``unit`` of a run: both sides once
    per round, the side that goes first alternating from round to round, and the first round's
    first side alternating from unit to unit (unit 0 starts with after)."""
    out: list[tuple[int, str]] = []
    for number in range(rounds):
        pair = (AFTER, BEFORE) if (number + unit) % 2 == 0 else (BEFORE, AFTER)
        out.extend((number, side) for side in pair)
    return out


def _finite(values: Iterable[float]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def median(values: Iterable[float]) -> float:
    """The median of the finite ``values`` (NaN if none)."""
    found = _finite(values)
    return statistics.median(found) if found else math.nan


def spread(values: Iterable[float]) -> float:
    """The noise of one side's rounds: the largest over the smallest (NaN with fewer than two
    finite figures or a figure not above zero, where the ratio means nothing)."""
    found = _finite(values)
    if len(found) < 2 or min(found) <= 0:
        return math.nan
    return max(found) / min(found)


def judge(after: Sequence[float], before: Sequence[float], better: str) -> dict[str, Any]:
    """Medians, ratio, each side's noise and the verdict of one metric's rounds.

    Args:
        after: the after side's figure of each round.
        before: the before side's.
        better: ``"lower"`` or ``"higher"``: which way the figure improves.

    Returns:
        ``after``, ``before`` (medians), ``ratio`` (after ÷ before), ``noise_after``,
        ``noise_before`` (:func:`spread`), ``noise`` (the larger) and ``verdict``: ``better``
        or ``worse`` when the ratio lies further from 1 than ``noise``, ``within noise``
        otherwise, ``n/a`` when a figure is missing.
    """
    a, b = median(after), median(before)
    ratio = a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan
    noise_a, noise_b = spread(after), spread(before)
    noise = max((n for n in (noise_a, noise_b) if not math.isnan(n)), default=math.nan)
    if math.isnan(ratio) or math.isnan(noise) or ratio <= 0:
        verdict = "n/a"
    else:
        gain = 1 / ratio if better == "lower" else ratio  # > 1: the after side is better
        if gain > noise:
            verdict = "better"
        elif 1 / gain > noise:
            verdict = "worse"
        else:
            verdict = "within noise"
    return {
        "after": a,
        "before": b,
        "ratio": ratio,
        "noise_after": noise_a,
        "noise_before": noise_b,
        "noise": noise,
        "verdict": verdict,
    }


def metric(
    name: str,
    group: str,
    better: str,
    after: Sequence[float],
    before: Sequence[float],
    *,
    untrusted: int = 0,
) -> dict[str, Any]:
    """One compared metric as stored in the JSON (each side's figure of each round)."""
    return {
        "name": name,
        "group": group,
        "better": better,
        "after": list(after),
        "before": list(before),
        "untrusted": untrusted,
    }


def number(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _times(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}×"


def rows(metrics: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The comparison table's rows, grouped (DB CPU, firings/s, claim, herd, lag) in the order
    the metrics were measured within a group."""
    ranked = sorted(
        metrics, key=lambda m: GROUPS.index(m["group"]) if m["group"] in GROUPS else len(GROUPS)
    )
    out: list[list[str]] = []
    for found in ranked:
        figures = judge(found["after"], found["before"], found["better"])
        verdict = figures["verdict"]
        if found.get("untrusted"):
            verdict += f" ({found['untrusted']} round(s) failed a self-check)"
        out.append(
            [
                found["name"],
                found["better"],
                number(figures["after"]),
                number(figures["before"]),
                _times(figures["ratio"]),
                _times(figures["noise_after"]),
                _times(figures["noise_before"]),
                verdict,
            ]
        )
    return out


def side_line(side: str, about: dict[str, Any]) -> str:
    """One side's installation, as :func:`pgpulse_tools.bench.compare.describe` found it."""
    return (
        f"{side}: Pulse {about.get('version', '?')}, revision `{about.get('revision', '?')}`, "
        f"imported from `{about.get('pgpulse', '?')}` by `{about.get('python', '?')}`"
    )


def _schemas(payload: dict[str, Any]) -> str:
    """Which schema each side ran on: the after-code's, unless the before knows fewer
    migrations (then its databases are populated at its own newest)."""
    ours = payload.get(AFTER, {}).get("schema")
    theirs = payload.get(BEFORE, {}).get("schema")
    if isinstance(ours, int) and isinstance(theirs, int) and theirs < ours:
        return f"each side on its own newest migration ({ours} after, {theirs} before)"
    return "both sides on the schema the after-code migrated"


def notes(payload: dict[str, Any]) -> list[str]:
    """The lines under the comparison table."""
    scenarios = payload.get("scenarios", [])
    by_nodes = ", ".join(s for s in scenarios if s != "3")
    return [
        side_line(AFTER, payload.get(AFTER, {})),
        side_line(BEFORE, payload.get(BEFORE, {})),
        f"{payload.get('rounds')} rounds per side for scenarios "
        f"{by_nodes}, interleaved, each round's pair in the other "
        "order than the one before (after before, before after, ...; successive units start "
        "with alternate sides), each on a freshly populated database of the same server; "
        + _schemas(payload),
        "noise = a side's largest round over its smallest; a verdict of better or worse means "
        "after ÷ before lies further from 1 than the larger of the two noises",
    ] + (
        [
            "scenario 3's row: its levers (the unchanged step's two databases, after, against "
            "the frozen pre-issue-31 step, before), in its own interleaved rounds, each a "
            "serial pgbench block"
        ]
        if "3" in scenarios
        else []
    )


def table(payload: dict[str, Any]) -> str:
    """The comparison as a GitHub-markdown table."""
    return tabulate(
        rows(payload.get("metrics", [])), HEADERS, tablefmt="github", disable_numparse=True
    )


def section(payload: dict[str, Any] | None) -> list[str]:
    """The report's "Before and after, one run" section (none without a comparison)."""
    if not payload or not payload.get("metrics"):
        return []
    return [
        "## Before and after, one run",
        "",
        f"*Measured {payload.get('started')} at scale {payload.get('scale')}; "
        f"{payload.get('elapsed_s', math.nan):.0f} s.*",
        "",
        table(payload),
        "",
        *(f"* {line}" for line in notes(payload)),
        "",
    ]


def print_table(payload: dict[str, Any]) -> None:
    """Print the comparison: title, table, notes."""
    print("\n## Before and after, one run\n")
    print(table(payload))
    for line in notes(payload):
        print(f"  * {line}")
    print(flush=True)
