"""Smoke tests of ``pgpulse bench``'s pure parts (the benchmark itself prints figures; it is not
a test). They catch a change to queries.sql that the raw-ceiling generator no longer covers."""

from __future__ import annotations

from pgpulse.bench.ceiling import pgbench_script
from pgpulse.bench.report import render, targets
from pgpulse.bench.sqltext import placeholders, split_final_select, to_positional
from pgpulse.sql import QUERIES


def test_ceiling_script_is_generated_from_every_parameter_of_the_queries() -> None:
    script = pgbench_script()
    claim, finish = script.split("\\gset\n")
    assert "%(" not in script
    assert "FOR UPDATE OF j SKIP LOCKED" in claim  # Pulse's own claim, not a copy
    assert "pulse_claim" in claim and "scheduled_jobs" in finish


def test_positional_rewrite_numbers_each_name_once() -> None:
    text, names = to_positional(QUERIES["claim_due"])
    assert names == placeholders(QUERIES["claim_due"])
    assert "%(" not in text and f"${len(names)}" in text


def test_split_final_select_keeps_the_ctes() -> None:
    ctes, final = split_final_select("WITH a AS (SELECT 1 AS x) SELECT x FROM a")
    assert ctes == "WITH a AS (SELECT 1 AS x)" and final == "SELECT x FROM a"


def test_report_states_each_target_with_its_measure() -> None:
    payload = {"meta": {"scale": 0.1}, "results": [
        {"scenario": "4", "title": "steady", "headers": ["lag p99 ms"], "rows": [[12.0]],
         "notes": [], "data": {"lag": {"p99": 12.0}}},
        {"scenario": "6", "title": "idle", "headers": ["statements/s per node"],
         "rows": [[1.8]], "notes": [],
         "data": {"budget": 0.7, "statements_per_node_s": 1.8, "node_cpu_pct": 0.3}},
    ]}
    rows = targets({r["scenario"]: r for r in payload["results"]})
    assert ["steady-state lag p99 < 50 ms", "12 ms", "yes"] in rows
    assert any(row[0].startswith("idle: ≤ 0.70") and row[2] == "**no**" for row in rows)
    page = render(payload, {})
    assert "## Scenario 4: steady" in page and "## The issue's targets" in page
