"""Smoke tests of ``pgpulse bench``'s pure parts (the benchmark itself prints figures; it is not
a test). They catch a change to queries.sql that the raw-ceiling generator no longer covers."""

from __future__ import annotations

import itertools
import math
import re
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers import pgpulse
from pgpulse.core.schedule import parse_schedule
from pgpulse_tools.bench import (
    checks,
    floor,
    history,
    levers,
    report_cost,
    report_targets,
    scaleout,
    steady,
    stored,
)
from pgpulse_tools.bench import run as bench_run
from pgpulse_tools.bench.ceiling import pgbench_script, run_pgbench
from pgpulse_tools.bench.common import Result, drop_backlogs, drop_db, load_jobs
from pgpulse_tools.bench.peers import add_pulse_ratios
from pgpulse_tools.bench.report import render
from pgpulse_tools.bench.report_targets import floor_rows, targets
from pgpulse_tools.bench.run import cross_figures
from pgpulse_tools.bench.sqltext import split_final, split_final_select
from pgpulse_tools.bench.steady import PERIOD, expected_runs
from pgpulse_tools.bench.writes import WriteMeter, comparison_rows, per_firing


def test_ceiling_script_is_generated_from_every_parameter_of_the_queries() -> None:
    """One transaction per step, as a node's claim loop sends it while its batches come back
    full: the previous batch's completion and the claim whose outcomes the next step completes
    (the next due instant only with ``next_due``, as after a short batch)."""
    script = pgbench_script()
    assert "%(" not in script  # every parameter bound
    assert script.startswith("BEGIN;\n") and script.endswith("FROM claimed \\gset\nCOMMIT;\n")
    assert "next_run_at > " not in script
    assert pgbench_script(next_due=True).endswith("FROM clock;\nCOMMIT;\n")
    assert script.count("\\gset") == 1 and "FROM claimed \\gset\n" in script
    assert "json_to_recordset((:outcomes)::json)" in script
    assert script.count("INSERT INTO pgpulse_runs") == 1  # the history row, once per firing
    assert "FOR UPDATE OF j SKIP LOCKED" in script  # Pulse's own claim, not a copy
    assert "pgpulse_job_history" not in script  # no rare part
    assert "pgpulse_job_history" in pgbench_script(rare=True)


def test_split_final_select_keeps_the_ctes() -> None:
    ctes, final = split_final_select("WITH a AS (SELECT 1 AS x) SELECT x FROM a")
    assert ctes == "WITH a AS (SELECT 1 AS x)" and final == "SELECT x FROM a"
    ctes, final = split_final(
        "WITH a AS (SELECT 1) UPDATE t SET updated_at = 1 RETURNING x", "UPDATE"
    )
    assert ctes == "WITH a AS (SELECT 1)" and final.startswith("UPDATE t SET updated_at")


def test_report_states_each_target_with_its_measure() -> None:
    payload: dict[str, Any] = {
        "meta": {"scale": 0.1},
        "results": [
            {
                "scenario": "4",
                "title": "steady",
                "headers": ["lag p99 ms"],
                "rows": [[12.0]],
                "notes": [],
                "data": {"lag": {"p99": 12.0}},
            },
            {
                "scenario": "6",
                "title": "idle",
                "headers": ["statements/s per node"],
                "rows": [[1.8]],
                "notes": [],
                "data": {"budget": 0.7, "statements_per_node_s": 1.8, "node_cpu_pct": 0.3},
            },
        ],
    }
    rows = targets({r["scenario"]: r for r in payload["results"]})
    assert [
        "steady-state lag p99 not worse than the previous run's",
        "n/a (no previous measurement)",
        "n/a",
    ] in rows
    assert any(row[0].startswith("idle: ≤ 0.70") and row[2] == "**no**" for row in rows)
    page = render(payload, {})
    assert "## Scenario 4: steady" in page and "## The issue's targets" in page
    payload["results"][0]["tables"] = [
        {
            "title": "Per firing",
            "headers": ["step", "WAL bytes"],
            "rows": [["floor", 812.5]],
            "notes": ["cluster-wide"],
        }
    ]
    page = render(payload, {})
    assert "### Per firing" in page and "| floor  | 812         |" in page
    assert "* cluster-wide" in page


def test_a_peer_that_started_none_of_its_steady_runs_has_the_higher_lag() -> None:
    """A peer that fired nothing in the steady-state window has no p99 to print, and an
    unbounded lag: Pulse's is lower (it used to be judged against NaN: not met)."""
    steady = {
        "peer": "Slow 1.0",
        "mode": "steady",
        "runs": 0,
        "missed": 300,
        "lag": {"n": 0, "p99": math.nan},
    }
    drain = {"peer": "Slow 1.0", "mode": "drain", "rate": 100.0}
    peers = Result(
        "7", "peers", [], notes=["Pulse vs Slow 1.0: stale"], data={"runs": [drain, steady]}
    )
    pulse_drain = Result("2", "drain", [], data={"runs": [{"rate": 600.0}]})
    pulse_steady = Result("4", "steady", [], data={"lag": {"p99": 25.0}})
    add_pulse_ratios(peers, pulse_drain, pulse_steady)
    rows = targets({"7": {"data": peers.data}})
    assert [
        "lower lag p99 than Slow 1.0 (none of its steady-state runs started)",
        "25 ms",
        "yes",
    ] in rows
    assert ["≥ 3× the firings/s of Slow 1.0", "6×", "yes"] in rows
    assert peers.notes == [
        "Pulse vs Slow 1.0: 6.0× the firings/s (600 vs 100); lag p99 25.0 ms vs none started"
    ]


def test_pulse_and_a_peer_of_two_different_runs_give_no_ratio() -> None:
    """Scenario 7 kept from one run and scenario 2 from another (``--only 2`` after a full run):
    the machine's load differs between runs, so no ratio is drawn, and the note says n/a."""
    drain = {"peer": "Quick 1.0", "mode": "drain", "rate": 100.0}
    peers = Result("7", "peers", [], data={"runs": [drain], "run": {"started": "t1"}})
    pulse_drain = Result(
        "2", "drain", [], rows=[[2]], data={"runs": [{"rate": 600.0}], "run": {"started": "t2"}}
    )
    cross_figures({"7": peers, "2": pulse_drain})
    assert math.isnan(peers.data["ratios"]["Quick 1.0"]["throughput_ratio"])
    assert peers.notes == [
        "Pulse vs Quick 1.0: n/a (Pulse's drain not measured in this run or untrusted; "
        "Quick 1.0 100/s); lag p99 n/a vs n/a"
    ]
    pulse_drain.data["run"] = {"started": "t1"}  # the same run: the ratio is drawn
    cross_figures({"7": peers, "2": pulse_drain})
    assert peers.data["ratios"]["Quick 1.0"]["throughput_ratio"] == 6.0


def _throughput_results() -> dict[str, Any]:
    """Scenarios 2, 3 and 7 of one run: drains of 1-4 nodes, a trusted sustained ceiling of
    1,000 firings/s, and two peers, the faster at 250 firings/s."""
    runs = [
        {"nodes": n, "rate": rate, "problems": []}
        for n, rate in ((1, 500.0), (2, 900.0), (3, 780.0), (4, 700.0))
    ]
    drains = [
        {"peer": "Fast 1.0", "mode": "drain", "rate": 250.0, "problems": []},
        {"peer": "Slow 2.0", "mode": "drain", "rate": 100.0, "problems": []},
    ]
    return {
        "2": {"data": {"runs": runs}},
        "3": {"data": {"best": 1000.0, "best_cell": {"rate": 1000.0, "problems": []}}},
        "7": {
            "data": {
                "runs": drains,
                "ratios": {
                    name: {
                        "peer_rate": rate,
                        "pulse_rate": 900.0,
                        "throughput_ratio": 900.0 / rate,
                        "peer_p99": 40.0,
                        "pulse_p99": 20.0,
                    }
                    for name, rate in (("Fast 1.0", 250.0), ("Slow 2.0", 100.0))
                },
            }
        },
    }


def test_throughput_of_each_of_two_to_four_nodes_is_judged_on_the_ceiling_and_best_peer() -> None:
    """ "With 2-4 nodes" is each of them (a good 2-node figure does not hide a poor 4-node one),
    against 80 % of the sustained ceiling and 3x the fastest peer of the same run."""
    rows = report_targets.throughput_rows(_throughput_results())
    assert rows == [
        ["throughput ≥ 80% of the sustained ceiling, 2 nodes", "90% (900 of 1,000/s)", "yes"],
        [
            "throughput ≥ 3× the best peer's firings/s, 2 nodes (Fast 1.0: 250/s)",
            "3.60×",
            "yes",
        ],
        ["throughput ≥ 80% of the sustained ceiling, 3 nodes", "78% (780 of 1,000/s)", "**no**"],
        [
            "throughput ≥ 3× the best peer's firings/s, 3 nodes (Fast 1.0: 250/s)",
            "3.12×",
            "yes",
        ],
        ["throughput ≥ 80% of the sustained ceiling, 4 nodes", "70% (700 of 1,000/s)", "**no**"],
        [
            "throughput ≥ 3× the best peer's firings/s, 4 nodes (Fast 1.0: 250/s)",
            "2.80×",
            "**no**",
        ],
    ]
    assert rows == targets(_throughput_results())[: len(rows)]


def test_a_throughput_figure_that_failed_its_check_is_in_no_ratio() -> None:
    """A drained ceiling, an untrusted drain, a peer whose every drain is untrusted (it might
    have been the fastest) and figures of two runs each give n/a with the reason."""
    drained = "the backlog ran out inside the window: a draining rate, not a sustained one"
    results = _throughput_results()
    results["3"]["data"] = {"best": None, "best_cell": {"rate": 1900.0, "problems": [drained]}}
    results["2"]["data"]["runs"][2]["problems"] = ["window 2.9 s < 5 s: mostly ramp-up"]
    results["7"]["data"]["runs"][1]["problems"] = ["window 3.1 s < 5 s: mostly ramp-up"]
    rows = report_targets.throughput_rows(results)
    assert rows[:2] == [
        [
            "throughput ≥ 80% of the sustained ceiling, 2 nodes",
            f"n/a (the ceiling failed its checks: {drained})",
            "n/a",
        ],
        [
            "throughput ≥ 3× the best peer's firings/s, 2 nodes",
            "n/a (Slow 2.0's drain failed its checks: window 3.1 s < 5 s: mostly ramp-up)",
            "n/a",
        ],
    ]
    assert rows[2:4] == [
        [
            f"throughput ≥ {target}, 3 nodes",
            "n/a (this drain failed its checks: window 2.9 s < 5 s: mostly ramp-up)",
            "n/a",
        ]
        for target in ("80% of the sustained ceiling", "3× the best peer's firings/s")
    ]
    results = _throughput_results()
    results["7"]["data"]["run"] = {"started": "2026-12-01T12:00:00+00:00"}
    results["3"]["data"]["run"] = {"started": "2026-11-30T12:00:00+00:00"}
    assert [row[1] for row in report_targets.throughput_rows(results)[:2]] == [
        "n/a (the ceiling is of another run)",
        "n/a (the peers are of another run)",
    ]


def _claims(floor_cells: dict[str, Any]) -> dict[str, Any]:
    """Scenario 1 with Pulse's claims of 1 and 100 at two backlogs and two shard counts."""
    return {
        "1": {
            "rows": [
                [0, 64, "claim_due (empty poll)", 0.3, 0.5, 0.9, 1000],
                [500, 64, 1, 0.5, 0.9, 3.0, 1000],
                [500, 64, 100, 2.5, 4.8, 9.0, 1000],
                [50_000, 64, 1, 0.5, 1.0, 3.0, 1000],
                [50_000, 16, 1, 0.5, 1.2, 3.0, 1000],
                [50_000, 64, 100, 2.6, 5.1, 8.0, 1000],
                [50_000, 64, "100, half for another handler", 2.6, 5.0, 8.0, 1000],
            ],
            "data": {"stored": 100_000, "floor": floor_cells},
        }
    }


def test_each_claim_batch_is_judged_against_the_floor_at_every_backlog() -> None:
    """Pulse's p99 over the floor's, same backlog and batch; the row gives the worst cell."""
    by_due = [
        {"due": 500, "claims": {"1": {"p99": 0.8}, "100": {"p99": 3.0}}},
        {"due": 50_000, "claims": {"1": {"p99": 0.9}, "100": {"p99": 4.0}}},
    ]
    results = _claims({"due": 50_000, "claims": by_due[1]["claims"], "by_due": by_due})
    assert report_targets.claim_rows(results) == [
        [
            "claim of 1: p99 ≤ 1.5× the floor's at every backlog "
            "(worst: 50,000 due, 16 shards, 1.2 vs 0.9 ms)",
            "1.33×",
            "yes",
        ],
        [
            "claim of 100: p99 ≤ 1.5× the floor's at every backlog "
            "(worst: 500 due, 64 shards, 4.8 vs 3 ms)",
            "1.60×",
            "**no**",
        ],
    ]
    assert report_targets.claim_rows(_claims({})) == [
        [
            f"claim of {batch}: p99 ≤ 1.5× the floor's at every backlog",
            "n/a (the floor's claims were not measured)",
            "n/a",
        ]
        for batch in (1, 100)
    ]


def test_an_older_results_file_with_the_floor_at_one_backlog_judges_that_backlog_only() -> None:
    old = {"due": 50_000, "claims": {"1": {"p99": 0.9}, "100": {"p99": 4.0}}}
    assert report_targets.claim_rows(_claims(old))[1] == [
        "claim of 100: p99 ≤ 1.5× the floor's at every backlog (worst: 50,000 due, 64 shards, "
        "5.1 vs 4 ms; the floor was timed at 50,000 due only: 500 not judged)",
        "1.27×",
        "yes",
    ]


def test_a_rerun_of_the_steady_state_keeps_the_previous_lag_and_is_judged_against_it() -> None:
    """The previous p99 and revision come from the result being replaced; 1.5x is allowed."""
    run = {"started": "2026-12-02T01:00:00+00:00", "scale": 1.0, "revision": "abc1234"}
    replaced = Result("4", "steady", [], data={"lag": {"p99": 10.0}, "run": run})
    result = Result(
        "4", "steady", [], data={"lag": {"p99": 14.0}, "run": {**run, "revision": "def5678"}}
    )
    steady.carry_previous(result, replaced)
    assert result.data["previous"] == {
        "p99": 10.0,
        "revision": "abc1234",
        "started": "2026-12-02T01:00:00+00:00",
        "scale": 1.0,
    }
    target = (
        "steady-state lag p99 not worse than the previous run's (10 ms at revision `abc1234`; "
        "≤ 1.5× it allowed: two runs of a shared machine)"
    )
    results: dict[str, Any] = {"4": {"data": result.data}}
    assert report_targets.lag_rows(results) == [[target, "14 ms (1.40×)", "yes"]]
    result.data["lag"]["p99"] = 16.0
    assert report_targets.lag_rows(results) == [[target, "16 ms (1.60×)", "**no**"]]
    result.data["run"]["scale"] = 0.1
    assert report_targets.lag_rows(results)[0][1] == (
        "n/a (the previous run was at scale 1, this one at 0.1)"
    )
    first = Result("4", "steady", [], data={"lag": {"p99": 14.0}})
    steady.carry_previous(first, None)
    assert "previous" not in first.data


async def test_bench_keeps_the_replaced_steady_result_as_the_previous_measurement(
    server_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pgpulse bench --only 4`` reads the scenario-4 result it is about to replace in
    results.json and keeps its p99 and revision in the new one (the scenario itself is stubbed:
    only the runner's merge is under test)."""

    async def fake_steady(dsn: str, scale: float, slots: int) -> Result:
        return Result("4", "steady", ["lag p99 ms"], [[8.0]], data={"lag": {"p99": 8.0}})

    earlier = Result(
        "4",
        "steady",
        ["lag p99 ms"],
        [[10.0]],
        data={
            "lag": {"p99": 10.0},
            "run": {"started": "2026-12-01T00:00:00+00:00", "scale": 0.1, "revision": "abc1234"},
        },
    )
    json_path = tmp_path / "benchmarks" / "results.json"
    bench_run.save_results(json_path, {"4": earlier}, {"started": "2026-12-01T00:00:00+00:00"})
    monkeypatch.setitem(bench_run.SCENARIOS, "4", fake_steady)
    monkeypatch.setattr(bench_run, "background_busy", lambda: 0.0)
    lines: list[str] = []
    await bench_run.run_bench(server_dsn, scale=0.1, only=("4",), out=tmp_path, echo=lines.append)
    kept = bench_run.load_results(json_path)["4"].data
    assert kept["previous"] == {
        "p99": 10.0,
        "revision": "abc1234",
        "started": "2026-12-01T00:00:00+00:00",
        "scale": 0.1,
    }
    row = report_targets.lag_rows({"4": {"data": kept}})[0]
    assert row[1:] == ["8 ms (0.80×)", "yes"]
    assert "10 ms at revision `abc1234`" in (tmp_path / "benchmarks.md").read_text()


def test_the_floor_says_whether_any_design_reaches_three_times_the_best_peer() -> None:
    """The floor's step rate against 3x the fastest peer, with the cores its database work alone
    would take at that rate; n/a when the floor's step failed its checks."""
    results = _throughput_results()
    results["3"]["data"]["floor"] = {"rate": 700.0, "db_cpu_ms": 0.06, "problems": []}
    assert floor_rows(results) == [
        [
            "≥ 3× the firings/s of Fast 1.0: 750/s",
            "900/s",
            "700/s with no Python; its database alone would need 0.04 cores at 750/s",
            "**no**",
        ],
    ]
    results["3"]["data"]["floor"]["problems"] = ["window 2.9 s < 5 s: mostly ramp-up"]
    assert floor_rows(results)[0][2:] == [
        "n/a (the floor failed its checks: window 2.9 s < 5 s: mostly ramp-up)",
        "n/a",
    ]
    assert floor_rows({}) == []


def test_the_floor_claims_completes_fenced_and_records_each_firing_once(server_dsn: str) -> None:
    """The floor is a correct step, or its rate would prove nothing: a claim takes due jobs
    under a new token, a completion with a stale token changes nothing, a completion records
    one history row with the claim's instant and token, and moves the job an hour on."""
    name = f"pgpulse_floor_{uuid.uuid4().hex[:8]}"
    dsn = floor.create(server_dsn, 100, 30, name=name)
    step = re.sub(r"\(:(\w+)\)", r"%(\1)s", floor.FLOOR_SQL["step"])  # pgbench -> psycopg
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            first = conn.execute(step, {"ids": [], "tokens": [], "batch": 20}).fetchone()
            assert first is not None and len(first[0]) == 20 and set(first[1]) == {1}
            stale = conn.execute(step, {"ids": first[0], "tokens": [0] * 20, "batch": 50})
            second = stale.fetchone()
            assert second is not None and len(second[0]) == 10  # the rest of the 30 due
            assert conn.execute("SELECT count(*) FROM floor_runs").fetchone() == (0,)
            done = conn.execute(
                step, {"ids": first[0] + second[0], "tokens": first[1] + second[1], "batch": 50}
            ).fetchone()
            assert done == ([], [])  # all 30 were running when the statement began
            runs = conn.execute(
                "SELECT r.job_id, r.fencing_token, r.scheduled_for + interval '1 hour' "
                "= j.scheduled_for, r.started_at <= r.finished_at, j.status "
                "FROM floor_runs r JOIN floor_jobs j ON j.id = r.job_id ORDER BY 1"
            ).fetchall()
            assert [r[0] for r in runs] == sorted(first[0] + second[0])
            assert {r[1:] for r in runs} == {(1, True, True, "idle")}
            conn.execute(
                "UPDATE floor_jobs SET next_run_at = now() - interval '1 minute' WHERE id <= 5"
            )
        claims = floor.claim_latency(dsn, (1, 5), samples=3)  # each claim is handed back
        assert [(b, c["claimed"], c["claims"]) for b, c in claims.items()] == [(1, 1, 3), (5, 5, 3)]
        assert 0 < claims[1]["p50"] <= claims[1]["max"]
    finally:
        drop_db(server_dsn, name)


def test_the_floor_times_its_claims_at_each_backlog_raised_in_place(server_dsn: str) -> None:
    name = f"pgpulse_floor_{uuid.uuid4().hex[:8]}"
    dsn = floor.create(server_dsn, 100, 10, name=name)
    try:
        levels = floor.claim_latency_by_due(dsn, (10, 30), (1, 25), samples=3)
        assert [
            (level["due"], {b: c["claimed"] for b, c in level["claims"].items()})
            for level in levels
        ] == [(10, {1: 1, 25: 10}), (30, {1: 1, 25: 25})]
        with psycopg.connect(dsn) as conn:  # every claim was handed back: 30 due and idle
            due = conn.execute(
                "SELECT count(*) FROM floor_jobs WHERE status = 'idle' AND next_run_at <= now()"
            ).fetchone()
            assert due == (30,)
    finally:
        drop_db(server_dsn, name)


def test_the_write_meter_counts_what_each_floor_firing_writes(server_dsn: str) -> None:
    """20 floor firings: 20 claims and 20 completions (updates that change an indexed column,
    so none is HOT), 20 history rows; an index entry per non-HOT row version in each full
    index (the two primary keys), at most one in the partial due index; some WAL."""
    name = f"pgpulse_floor_{uuid.uuid4().hex[:8]}"
    dsn = floor.create(server_dsn, 100, 30, name=name)
    step = re.sub(r"\(:(\w+)\)", r"%(\1)s", floor.FLOOR_SQL["step"])  # pgbench -> psycopg
    try:
        meter = WriteMeter(dsn).start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            claimed = conn.execute(step, {"ids": [], "tokens": [], "batch": 20}).fetchone()
            assert claimed is not None
            conn.execute(step, {"ids": claimed[0], "tokens": claimed[1], "batch": 0})
        totals = meter.stop()  # the session has closed: its counters are in
        assert {k: totals[k] for k in ("inserts", "updates", "hot_updates", "deletes")} == {
            "inserts": 20,
            "updates": 40,
            "hot_updates": 0,
            "deletes": 0,
        }
        assert totals["tuples"] == 60
        assert totals["index_entries"] == 40 + 20  # floor_jobs_pkey, floor_runs_pkey
        assert totals["partial_index_entries_max"] == 40  # floor_jobs_due
        assert totals["wal_bytes"] > 0
        each = per_firing(totals, 20, 0.05)
        assert (each["tuples"], each["index_entries"], each["db_cpu_ms"]) == (3, 3, 0.05)
        rows = comparison_rows(
            [("Pulse", {"per_firing": {**each, "tuples": 6.0}}), ("floor", {"per_firing": each})]
        )
        assert rows[-1][:3] == ["Pulse ÷ floor", "1.00×", "2.00×"]
        rows = comparison_rows(
            [
                ("Pulse", {"per_firing": each, "problems": ["short"]}),
                ("floor", {"per_firing": each}),
            ]
        )
        assert set(rows[-1][1:]) == {"n/a"}  # an untrusted cell is in no ratio
    finally:
        drop_db(server_dsn, name)


def test_steady_jobs_are_spread_over_the_minute_at_sub_second_resolution(dsn: str, db: Any) -> None:
    """Scenario 4's load: distinct sub-second anchors, occurrences on them, counted exactly."""
    jobs, duration = 2_000, 30.0
    base = datetime(2026, 1, 1, 12, tzinfo=UTC)
    step = PERIOD / jobs
    load_jobs(
        dsn,
        jobs,
        schedule="@every 60s",
        kind="interval",
        base=base,
        modulo=jobs,
        step=step,
        catch_up="skip",
        misfire_grace=60.0,
    )
    rows = db.execute(
        "SELECT anchor_at, scheduled_for, next_run_at FROM pgpulse_jobs ORDER BY anchor_at"
    ).fetchall()
    anchors = [r["anchor_at"] for r in rows]
    assert all(r["scheduled_for"] == r["next_run_at"] == r["anchor_at"] for r in rows)
    assert len(set(anchors)) == jobs  # no two jobs fall due at the same instant
    assert anchors[0] == base and anchors[-1] < base + timedelta(seconds=PERIOD)
    gaps = {b - a for a, b in itertools.pairwise(anchors)}
    assert gaps <= {timedelta(milliseconds=30) + timedelta(microseconds=d) for d in (-1, 0, 1)}
    # the schedule keeps each anchor's microseconds, and the expected count is the database's
    every = parse_schedule("@every 60s")
    assert all(every.next_after(a, anchor=a) == a + timedelta(minutes=1) for a in anchors)
    end = base + timedelta(seconds=duration)
    due = sum(
        len(every.occurrences_between(a - timedelta(microseconds=1), end, anchor=a, limit=10))
        for a in anchors
    )
    assert expected_runs(jobs, duration, step) == due == 2_000 // 2 + 1


def test_a_rate_whose_cpu_exceeds_the_machine_is_untrusted() -> None:
    """The issue's figure: 59,644 firings/s at 0.084 ms of DB CPU each is 5 CPU-s/s."""
    found = checks.problems(rate=59_644, db_cpu_ms=0.084, seconds=10.0, cores=2)
    assert found == [
        "rate × CPU = 5.01 CPU-s/s on a 2-core machine: rate and CPU measured over different spans"
    ]
    assert checks.problems(rate=20_000, db_cpu_ms=0.09, seconds=10.0, cores=2) == []


def test_a_short_or_drained_window_is_untrusted_and_left_out_of_the_best() -> None:
    short = checks.judge({"rate": 9_000.0, "db_cpu_ms": 0.1, "seconds": 3.0})
    drained = checks.judge({"rate": 8_000.0, "db_cpu_ms": 0.1, "seconds": 9.0, "drained": True})
    steady = checks.judge({"rate": 7_000.0, "db_cpu_ms": 0.1, "seconds": 9.0})
    assert short["problems"] == ["window 3.0 s < 5 s: mostly ramp-up"]
    assert drained["problems"] == [
        "the backlog ran out inside the window: a draining rate, not a sustained one"
    ]
    assert checks.verdict(steady) == "ok"
    assert checks.best_trusted([short, drained, steady]) is steady
    assert checks.best_trusted([short, drained]) is None


def test_a_backlog_is_sized_to_outlast_its_window() -> None:
    assert checks.backlog_to_outlast(20_000, 10.0, 100_000) == 300_000
    assert checks.backlog_to_outlast(1_000, 10.0, 100_000) == 100_000
    assert checks.backlog_to_outlast(float("nan"), 10.0, 100_000) == 100_000


async def test_latency_against_jobs_stored_measures_both_sizes_in_interleaved_rounds(
    server_dsn: str,
) -> None:
    """Scenario 8 at toy sizes: each cell at each size, its samples taken in interleaved rounds
    (one database per size), then the p99 ratios the target reads; the free disk is checked
    before loading and both databases are dropped after."""
    result = await stored.run(server_dsn, 0.1, samples=5, sizes=(600, 1_200))
    cells = [(row[0], row[1]) for row in result.rows]
    labels = ["empty poll", "claim of 1", "claim of 25", "claim of 100"]
    assert cells == [
        *((600, label) for label in labels),
        *((1_200, label) for label in labels),
        *(("1,200 ÷ 600", label) for label in labels),
    ]
    assert set(result.data["p99_ratios"]) == set(labels)
    assert any(note.startswith("free disk before loading") for note in result.notes)
    assert any(note.startswith("1,200 stored: loaded in") for note in result.notes)
    assert all(row[0] == "1,200 ÷ 600" for row in result.rows if row[2] == "")
    # every round's share of every cell at both sizes: ROUNDS × max(5 // ROUNDS, 1) claims
    assert {row[5] for row in result.rows if row[2] != ""} == {stored.ROUNDS}
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname LIKE %s", (stored.DB_NAME + "%",)
        ).fetchone()
    assert left == (0,)
    rows = targets({"8": {"data": result.data}})
    assert [row[0] for row in rows] == [
        f"{label}: p99 at 1,200 stored ≤ 1.2× p99 at 600" for label in labels
    ]


def test_each_lever_applies_to_pulses_schema_and_is_judged_against_the_unchanged_runs(
    dsn: str,
) -> None:
    """Every lever's DDL runs on a migrated database (a schema change would break it), and the
    table puts each cell's DB CPU over the mean of the unchanged runs, untrusted ones aside."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for block in levers.LEVERS.values():
            for statement in levers.statements(block):
                conn.execute(statement)
        indexes: dict[str, str] = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'pgpulse_runs'"
            ).fetchall()
        )
        options = conn.execute(
            "SELECT reloptions FROM pg_class WHERE relname = 'pgpulse_jobs'"
        ).fetchone()
    assert "USING btree (finished_at)" in indexes["pgpulse_runs_finished"]  # before 0009
    assert "pgpulse_runs_unhappy" not in indexes
    assert "pgpulse_runs_recent" not in indexes
    assert options == (["fillfactor=70"],)
    cell = {"rate": 100.0, "db_cpu_ms": 0.1, "per_firing": {"hot_updates": 0.0}, "problems": []}
    table = levers.rows(
        [
            ("as is", cell),
            ("B-tree pgpulse_runs_finished", {**cell, "db_cpu_ms": 0.08}),
            ("no pgpulse_runs_recent", {**cell, "problems": ["short"]}),
            ("as is (again)", {**cell, "db_cpu_ms": 0.1}),
        ]
    )
    assert [row[3] for row in table] == ["1.00×", "0.80×", "n/a", "1.00×"]
    rounds = [{**cell, "db_cpu_ms": v} for v in (0.3, 0.1, 0.2)]
    rounds[0]["problems"] = ["short"]  # an untrusted round is no candidate for the median
    assert levers.median_cell(rounds)["db_cpu_ms"] == 0.1
    assert levers.median_cell(rounds)["rounds_db_cpu_ms"] == [0.3, 0.1, 0.2]


@pytest.mark.skipif(shutil.which("pgbench") is None, reason="pgbench is not installed")
async def test_the_levers_are_measured_serially_each_on_its_own_database(server_dsn: str) -> None:
    """Every lever and floor variant runs interleaved one-client blocks of the same number of
    steps on a database of its own: each block fires its steps' full batches (the backlog
    outlasts every round), its rounds are kept, a block shorter than the minimum is untrusted,
    and no database is left behind."""
    result = Result("3", "ceiling", [], data={"burst_cell": {"batch": 5}})
    try:
        await levers.run(server_dsn, result, rounds=2, block_s=0.05)
    finally:
        drop_backlogs(server_dsn)
    lever_table, variant_table = result.tables
    assert [row[0] for row in lever_table["rows"]] == list(levers.LEVERS)
    assert [row[0] for row in variant_table["rows"]] == list(floor.VARIANTS)
    notes = " ".join(lever_table["notes"])
    assert "serial: each row on its own database" in notes and "serial rate of one client" in notes
    cells = {**result.data["levers"], **result.data["floor_variants"]}
    for name, cell in cells.items():
        assert cell["clients"] == 1 and len(cell["rounds_db_cpu_ms"]) == 2, name
        assert cell["fired"] == (cell["steps"] - 1) * 5 and not cell["drained"], name
        assert cell["per_firing"]["hot_updates"] >= 0, name
        assert any(p.startswith("window") for p in cell["problems"]), name  # 0.05 s < 2 s
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname LIKE 'pgpulse_bench_serial_%'"
        ).fetchone()
    assert left == (0,)


def test_the_floor_variants_add_only_what_they_name(server_dsn: str) -> None:
    """The narrow-row prototype's floors: `widen` makes a job row as wide as Pulse's,
    `pulse_indexes` adds Pulse's four hot-path B-trees, and under `hot_claim` (with
    `fillfactor`) a claim is a HOT update while the completion is not."""
    name = f"pgpulse_floor_{uuid.uuid4().hex[:8]}"
    step = re.sub(r"\(:(\w+)\)", r"%(\1)s", floor.FLOOR_SQL["step"])  # pgbench -> psycopg
    try:
        dsn = floor.create(server_dsn, 100, 30, name=name, variant=("widen", "pulse_indexes"))
        with psycopg.connect(dsn, autocommit=True) as conn:
            width = conn.execute("SELECT avg(pg_column_size(j.*)) FROM floor_jobs j").fetchone()
            indexes = conn.execute(
                "SELECT count(*) FROM pg_indexes WHERE tablename LIKE 'floor_%'"
            ).fetchone()
        assert width is not None and width[0] > floor.PULSE_ROW_PAD
        assert indexes == (3 + 4,)
        dsn = floor.create(server_dsn, 100, 10, name=name, variant=("fillfactor", "hot_claim"))
        meter = WriteMeter(dsn).start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            claimed = conn.execute(step, {"ids": [], "tokens": [], "batch": 20}).fetchone()
            assert claimed is not None and len(claimed[0]) == 10
            done = conn.execute(step, {"ids": claimed[0], "tokens": claimed[1], "batch": 20})
            assert done.fetchone() == ([], [])  # the 10 were completed, none is due
        totals = meter.stop()
        assert (totals["updates"], totals["hot_updates"]) == (20, 10)  # the claims are HOT
    finally:
        drop_db(server_dsn, name)


def test_the_drains_db_cpu_is_judged_against_the_floors_only_when_both_are_trusted() -> None:
    """The issue's first target: DB CPU per firing of the 2-node drain over the floor's step."""
    floor_cell = {"db_cpu_ms": 0.05, "problems": []}
    runs = [
        {"nodes": 1, "rate": 400.0, "db_cpu_ms": 0.2},
        {"nodes": 2, "rate": 600.0, "db_cpu_ms": 0.06, "problems": []},
    ]
    results: dict[str, Any] = {"2": {"data": {"runs": runs}}, "3": {"data": {"floor": floor_cell}}}
    assert targets(results)[-1] == [
        "DB CPU per firing, drain with 2 nodes ≤ 1.3× the floor's (0.060 vs 0.050 ms)",
        "1.20×",
        "yes",
    ]
    results["2"]["data"]["run"] = {"started": "2026-12-01T12:00:00+00:00"}
    assert targets(results)[-1][1:] == ["n/a (the floor is of another run)", "n/a"]
    results["3"]["data"]["run"] = {"started": "2026-12-01T12:00:00+00:00"}
    assert targets(results)[-1][1] == "1.20×"
    floor_cell["problems"] = ["window 2.9 s < 5 s: mostly ramp-up"]
    assert targets(results)[-1][1:] == [
        "n/a (the floor failed its checks: window 2.9 s < 5 s: mostly ramp-up)",
        "n/a",
    ]


@pytest.mark.skipif(shutil.which("pgbench") is None, reason="pgbench is not installed")
@pytest.mark.parametrize("variant", ["as is", *levers.STATEMENT_LEVERS])
def test_the_statement_levers_complete_what_they_claimed_as_the_json_step_does(
    dsn: str, tmp_path: Path, variant: str
) -> None:
    """The ceiling's step and its statement levers' variants (the rare records in every step,
    the one lease-holding table) are correct steps for the benchmark's firings: every batch it
    claims is completed by the next step, fenced, one succeeded history row per firing, each
    job moved to its next hourly occurrence."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()
    assert now is not None
    load_jobs(dsn, 300, schedule="@every 1h", kind="interval", base=now[0] - timedelta(minutes=5),
              modulo=60, step=1.0)  # fmt: skip
    script = tmp_path / "step.sql"
    if variant == levers.ONE_TABLE:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in levers.statements(levers.LEVERS[variant]):
                conn.execute(statement)
    step = pgbench_script() if variant == "as is" else levers.script_of(variant)
    script.write_text(step)
    variables = {"batch": 20, "outcomes": "[]"}
    figures = run_pgbench(dsn, script, clients=1, seconds=1, variables=variables)
    assert figures["tps"] > 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        runs = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE j.scheduled_for = r.scheduled_for + "
            "interval '1 hour' AND r.outcome = 'succeeded') FROM pgpulse_runs r "
            "JOIN pgpulse_jobs j ON j.id = r.job_id"
        ).fetchone()
        running = conn.execute(
            "SELECT count(*) FROM pgpulse_jobs WHERE status = 'running'"
        ).fetchone()
    assert runs is not None and running is not None
    assert runs[0] > 0 and runs[0] == runs[1]
    assert running[0] <= 20  # only the last step's claim is left running


def test_scale_out_shares_and_splits_are_judged_from_the_reported_shards() -> None:
    """Scenario 10: every shard exactly once is a split; the share is max/min per node."""
    halves = {"bench-1": list(range(32)), "bench-2": list(range(32, 64))}
    assert scaleout.partitioned(halves)
    assert scaleout.share(halves) == (32, 32)
    assert not scaleout.partitioned({"bench-1": list(range(63))})  # shard 63 unowned
    assert not scaleout.partitioned({"a": list(range(64)), "b": [5]})  # shard 5 twice
    assert scaleout.share({"a": list(range(60)), "b": [60, 61, 62, 63]}) == (60, 4)
    assert scaleout.share({}) == (0, 0)
    misfit = scaleout.row_of({"nodes": 32, "fits": False, "error": "1 node(s) exited early"})
    assert misfit[:2] == [32, "did not fit"] and len(misfit) == len(scaleout.HEADERS)


def test_scale_out_waits_for_the_live_nodes_to_split_the_shards(dsn: str, db: Any) -> None:
    """A killed node still within its TTL is ignored; a split missing a shard times out."""
    for node, shards in (("bench-1", range(0, 40)), ("bench-2", range(40, 64)), ("bench-3", [])):
        db.execute(
            "INSERT INTO pgpulse_nodes (node_id, hostname, pid, slots, handlers, shell, state,"
            " started_at, last_heartbeat, ttl, shards)"
            " VALUES (%s, 'h', 1, 4, '{noop}', 'off', 'alive', now(), now(), 6, %s)",
            (node, list(shards)),
        )
    seconds, seen = scaleout.wait_split(dsn, {"bench-1", "bench-2"})
    assert seconds >= 0 and scaleout.share(seen) == (40, 24)
    waited, seen = scaleout.wait_split(dsn, {"bench-1", "bench-3"}, timeout=0.3)
    assert math.isnan(waited) and set(seen) == {"bench-1", "bench-3"}
    waited, _ = scaleout.wait_split(
        dsn, {"bench-1", "bench-2", "bench-3"}, must_own="bench-3", timeout=0.3
    )
    assert math.isnan(waited)  # split, but the joiner owns nothing yet


def test_scale_out_placement_shows_the_64_shard_cap() -> None:
    """Beyond 64 nodes some own no shard (pigeonhole); 4 nodes each own some of the 64."""
    table = scaleout.placement_table((4, 100), (64,))
    four, hundred = table["rows"]
    assert four[:2] == [4, 64] and four[3] >= 1 and four[4] == 0 and four[2] >= 16
    assert hundred[:2] == [100, 64] and hundred[3] == 0 and hundred[4] >= 100 - 64
    assert len(table["headers"]) == len(four)


def test_bench_refuses_an_unknown_scenario_naming_the_twelve(dsn: str) -> None:
    """`pgpulse bench --only 13`: one line naming --only and the scenarios, exit 2."""
    done = pgpulse("bench", "--only", "13", dsn=dsn)
    assert done.returncode == 2
    assert "'13': scenarios are 1,2,3,4,5,6,7,8,9,10,11,12" in done.stderr


async def test_the_history_cell_prunes_one_day_from_both_tables(server_dsn: str) -> None:
    """Scenario 11 on 1,600 rows over 8 days: both tables (0019's, and 0023's partitioned one)
    got every row, and each prune (DELETE + VACUUM; the leader's prune, dropping the first day's
    partition) left exactly the seven newer days."""
    figures = await history.measure_all(server_dsn, 1_600)
    for table in history.TABLES:
        assert figures[table]["rows_left"] == 1_400, (table, figures[table])
        assert figures[table]["insert_wal"] > 0 and figures[table]["read_p50_ms"] > 0
    assert figures["parted"]["pruned"] == 200
    assert figures["parted"]["partitions"] == 8 + 4 + 1  # the days, 4 ahead of the prune, default


def test_bench_without_its_extra_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """In the main .venv (no matplotlib, no peers): one line naming what to run, exit 2."""
    import importlib.util

    from pgpulse_tools.commands import BENCH_MODULES

    missing = [name for name in BENCH_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        pytest.skip("the bench extra is installed here")
    done = pgpulse("bench", "--report-only", "--out", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.startswith("error: pgpulse bench needs the bench extra: ")
    assert done.stderr.endswith("creates .venv-bench with the extra\n")
    assert len(done.stderr.splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_the_narrow_row_section_quotes_each_prototype_over_its_own_baseline() -> None:
    """The page's narrow-row section: the wide floor over the floor, the HOT claim over the
    floor with fillfactor 70, the ids-only claim over Pulse's unchanged step; a missing or
    untrusted cell gives n/a, never a ratio."""
    ok = {"rate": 100.0, "seconds": 8.0, "problems": []}
    variants = {
        "floor": {**ok, "db_cpu_ms": 0.05},
        "floor, Pulse's row width": {**ok, "db_cpu_ms": 0.055},
        "floor, fillfactor 70": {**ok, "db_cpu_ms": 0.04},
        "floor, fillfactor 70, HOT claim": {**ok, "db_cpu_ms": 0.036},
        "floor, Pulse's indexes": {**ok, "db_cpu_ms": 0.06, "problems": ["short"]},
    }
    ids_only = "claim returns id, token, occurrence only (definitions cached)"  # an older run's
    lever_cells = {"as is": {**ok, "db_cpu_ms": 0.1}, ids_only: {**ok, "db_cpu_ms": 0.097}}
    results = {"3": {"data": {"floor_variants": variants, "levers": lever_cells}}}
    assert report_cost.prototype_lines(results) == [
        "* a job row as wide as Pulse's: 1.10× its baseline's DB CPU per firing",
        "* Pulse's hot-path B-trees: n/a (not measured, or a cell failed its checks) its "
        "baseline's DB CPU per firing",
        "* a HOT claim (beside fillfactor 70 alone): 0.90× its baseline's DB CPU per firing",
        "* Pulse's claim returning no definitions: 0.97× its baseline's DB CPU per firing",
    ]
    assert report_cost.prototype_lines({}) == []
    assert "## Index entries per firing" in report_cost.section(results)
