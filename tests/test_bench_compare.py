"""The before-and-after comparison of ``pgpulse bench --compare-with``: its pure parts (which
side runs when, medians, ratio, noise, verdict, the table and the report's section)."""

from __future__ import annotations

import math
import sys

import pytest

from pgpulse_tools.bench import levers
from pgpulse_tools.bench.compare import describe, lever_metrics, runtime
from pgpulse_tools.bench.report import render
from pgpulse_tools.bench.report_compare import (
    AFTER,
    BEFORE,
    judge,
    metric,
    order,
    rows,
    section,
    spread,
)


def test_each_round_runs_both_sides_the_first_alternating() -> None:
    a, b = AFTER, BEFORE
    assert [side for _, side in order(3)] == [a, b, b, a, a, b]
    assert [side for _, side in order(3, unit=1)] == [b, a, a, b, b, a]
    sequence = order(4)
    assert [number for number, _ in sequence] == [0, 0, 1, 1, 2, 2, 3, 3]
    for number in range(4):
        assert {side for n, side in sequence if n == number} == {a, b}


def test_the_ratio_is_after_over_before_and_the_noise_each_sides_spread() -> None:
    found = judge([10.0, 12.0, 11.0], [20.0, 22.0, 21.0], "lower")
    assert found["after"] == 11.0 and found["before"] == 21.0
    assert math.isclose(found["ratio"], 11 / 21)
    assert math.isclose(found["noise_after"], 1.2)
    assert math.isclose(found["noise_before"], 1.1)
    assert math.isclose(found["noise"], 1.2)
    assert found["verdict"] == "better"
    # the same figures when higher is better: after is worse, beyond the noise
    assert judge([10.0, 12.0, 11.0], [20.0, 22.0, 21.0], "higher")["verdict"] == "worse"


def test_a_difference_inside_the_runs_own_noise_is_no_verdict() -> None:
    # after is 10 % slower by the medians, but a side's rounds differ by 1.5×
    assert judge([11.0, 10.0, 15.0], [10.0, 10.5, 9.8], "lower")["verdict"] == "within noise"
    # beyond it
    assert judge([13.0, 13.5, 13.2], [10.0, 10.5, 9.8], "lower")["verdict"] == "worse"
    assert judge([13.0, 13.5, 13.2], [10.0, 10.5, 9.8], "higher")["verdict"] == "better"


def test_missing_figures_give_no_verdict() -> None:
    assert math.isnan(spread([5.0]))
    assert math.isnan(spread([0.0, 3.0]))
    assert math.isclose(spread([2.0, math.nan, 4.0]), 2.0)
    assert judge([math.nan, math.nan, math.nan], [1.0, 1.1, 1.2], "lower")["verdict"] == "n/a"
    assert judge([1.0], [1.0], "lower")["verdict"] == "n/a"


def test_the_table_groups_the_metrics_and_counts_failed_checks() -> None:
    metrics = [
        metric("lag p99 ms", "lag", "lower", [100.0, 110.0, 105.0], [100.0, 104.0, 102.0]),
        metric("firings/s, 2 nodes", "rate", "higher", [3000.0, 3100.0], [2000.0, 2050.0]),
        metric("DB CPU ms/firing", "cpu", "lower", [0.1, 0.11], [0.2, 0.21], untrusted=1),
    ]
    found = rows(metrics)
    assert [row[0] for row in found] == ["DB CPU ms/firing", "firings/s, 2 nodes", "lag p99 ms"]
    assert found[0][1:] == [
        "lower",
        "0.105",
        "0.205",
        "0.51×",
        "1.10×",
        "1.05×",
        "better (1 round(s) failed a self-check)",
    ]
    assert found[1][4] == "1.51×" and found[1][7] == "better"
    assert found[2][4] == "1.03×" and found[2][7] == "within noise"


def test_scenario_3s_levers_give_the_step_before_and_after() -> None:
    data = {
        "burst_cell": {"batch": 50},
        "levers": {
            "as is": {"db_cpu_ms": 0.1, "rounds_db_cpu_ms": [0.1, 0.12]},
            levers.BEFORE_31: {"db_cpu_ms": 0.2, "rounds_db_cpu_ms": [0.2, 0.19]},
            "as is (again)": {"db_cpu_ms": 0.11, "rounds_db_cpu_ms": [0.11, 0.09]},
            levers.ONE_TABLE: {"db_cpu_ms": 0.3, "rounds_db_cpu_ms": [0.3, 0.3]},
        },
    }
    (found,) = lever_metrics(data)
    assert found["after"] == [0.1, 0.12, 0.11, 0.09]
    assert found["before"] == [0.2, 0.19]
    assert "batch 50" in found["name"] and found["better"] == "lower"
    assert lever_metrics({"levers": {}}) == []


def test_the_report_has_the_comparison_only_when_one_was_run() -> None:
    payload = {
        "meta": {"started": "t0"},
        "results": [],
        "compare": {
            "started": "t0",
            "scale": 0.01,
            "rounds": 3,
            "scenarios": ["1", "3"],
            "after": {"revision": "abc"},
            "before": {"revision": "def"},
            "metrics": [metric("claim p99 ms, batch 1", "claim", "lower", [1, 2, 3], [1, 2, 3])],
            "elapsed_s": 60.0,
        },
    }
    page = render(payload, {})
    assert "## Before and after, one run" in page
    assert "| claim p99 ms, batch 1 | lower" in page
    assert "revision `def`" in page and "scenario 3's row" in page
    del payload["compare"]
    assert "## Before and after" not in render(payload, {})
    assert section(None) == []


@pytest.mark.parametrize(
    ("python", "says"),
    [
        ("/nonexistent/python", "'/nonexistent/python' cannot be run: No such file or directory"),
        ("/bin/true", "'/bin/true' is not a Python that describes its Pulse"),
        (sys.executable + "-not-there", "cannot be run: No such file or directory"),
    ],
)
def test_an_interpreter_that_cannot_run_the_before_side_is_refused_in_one_line(
    python: str, says: str
) -> None:
    """``--compare-with`` is checked by running it before any database is made: what cannot
    run is one line, never a traceback (the command prints it and exits 2)."""
    with pytest.raises(RuntimeError) as refused:
        describe(runtime(python, "before"))
    assert says in str(refused.value) and "\n" not in str(refused.value)
