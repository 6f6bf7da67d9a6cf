"""The chaos checker's chain property on hand-made histories (tools/.../chaos/chains.py): each
downstream occurrence exactly once per succeeded upstream occurrence, a skipped one per failed
upstream run, and no downstream run lost; and the workload's chain jobs."""

from __future__ import annotations

from datetime import datetime, timedelta

from helpers import utc
from pgpulse_tools.chaos.chains import CHAINS, chain_flows, chain_jobs, chain_summary
from pgpulse_tools.chaos.checker import check
from pgpulse_tools.chaos.history import Execution, History, Job, Run

T0 = utc(2026, 1, 1, 12)
A, B, C = 1, 2, 3
JOBS = (
    Job(A, "chain0-a", "@every 2s", "UTC", "chaos.chain", "backfill", T0, "idle", T0),
    Job(B, "chain0-b", "@after", "UTC", "chaos.chain", "skip", T0, "idle"),
    Job(C, "chain0-c", "@after", "UTC", "chaos.chain", "skip", T0, "idle"),
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def history(runs: list[Run], applied: list[int]) -> History:
    """A history of ``runs`` whose extra runs ``applied`` wrote their effect."""
    executions = tuple(
        Execution(
            i,
            r.job_id,
            r.scheduled_for,
            1,
            1,
            "n1",
            "chain",
            at(0),
            at(1),
            "applied",
            run_id=r.id,
            occurrence=r.kind,
        )
        for i, r in enumerate(r for r in runs if r.id in applied)
    )
    return History(
        executions=executions,
        run_events=(),
        runs=tuple(runs),
        jobs=JOBS,
        faults=(),
        settle_at=at(0),
        checked_at=at(30),
        lease=4.0,
        heartbeat=0.5,
    )


def chain(t: float, ids: tuple[int, int, int], *, c_outcome: str = "succeeded") -> list[Run]:
    """An occurrence at T0 + t flowing down: a's scheduled run, b's and c's after runs."""
    a, b, c = ids
    return [
        Run(A, at(t), "succeeded", 1, 1, id=a),
        Run(B, at(t), "succeeded", 1, 1, id=b, kind="after"),
        Run(C, at(t), c_outcome, 1, 1, id=c, kind="after"),
    ]


def test_a_clean_chain_passes() -> None:
    runs = chain(2, (10, 11, 12)) + chain(4, (20, 21, 22), c_outcome="queued")
    made = history(runs, [11, 12, 21])
    assert chain_flows(made) == []
    assert chain_summary(made) == f"4 downstream runs (0 skipped) over {CHAINS} chains A → B → C"
    figure = next(f for f in check(made).figures if f.name == "chain flows")
    assert (figure.value, figure.ok) == ("0", True)


def test_a_downstream_run_twice_for_one_upstream_run_is_caught() -> None:
    runs = [*chain(2, (10, 11, 12)), Run(C, at(2), "succeeded", 1, 1, id=13, kind="after")]
    assert chain_flows(history(runs, [11, 12, 13])) == [
        "chain0-c @ 12:00:02.000: 2 runs after 1 succeeded upstream runs"
    ]


def test_a_missing_downstream_and_a_lost_one_are_caught() -> None:
    runs = [*chain(2, (10, 11, 12))[:2], *chain(4, (20, 21, 22))]
    assert chain_flows(history(runs, [11, 21])) == [
        "chain0-c @ 12:00:02.000: 0 runs after 1 succeeded upstream runs",
        "chain0-c r22 @ 12:00:04.000: succeeded, lost",
    ]


def test_a_failed_upstream_run_needs_one_skipped_downstream_run() -> None:
    runs = [
        Run(A, at(2), "failed", 3, 1, id=10),
        Run(B, at(2), "skipped", 0, None, id=11, kind="after"),
        Run(A, at(4), "fenced", 3, 1, id=20),
    ]
    assert chain_flows(history(runs, [])) == [
        "chain0-b @ 12:00:04.000: 0 skipped after 1 failed upstream runs"
    ]


def test_the_workload_holds_chains_of_three_with_no_clock_after_the_head() -> None:
    specs = chain_jobs(7)
    assert [(s.name, s.schedule.startswith("@every"), s.after) for s in specs[:3]] == [
        ("chain0-a", True, ()),
        ("chain0-b", False, ("chain0-a",)),
        ("chain0-c", False, ("chain0-b",)),
    ]
    assert len(specs) == 3 * CHAINS
