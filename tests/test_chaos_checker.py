"""The chaos checker on hand-made histories: clean ones pass, and each violation it must catch
makes it fail (so the checker itself is proven, not only the engine)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from helpers import utc
from pgpulse_tools.chaos.checker import Verdict, check
from pgpulse_tools.chaos.history import (
    Execution,
    Fault,
    History,
    Job,
    NodeExit,
    Request,
    Run,
    RunEvent,
    dump_history,
    load_history,
)
from pgpulse_tools.chaos.timing import percentile

T0 = utc(2026, 1, 1, 12, 0, 0)  # the job's anchor: it fires at T0+1s, T0+2s, ...


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Recorder:
    """Builds a history the way a run writes it: claims, executions, outcomes."""

    def __init__(self) -> None:
        self.executions: list[Execution] = []
        self.events: list[RunEvent] = []
        self.runs: dict[tuple[int, datetime], Run] = {}
        self.token = 0

    def event(
        self,
        job: int,
        sf: float,
        outcome: str,
        token: int | None,
        node: str | None,
        when: float,
        attempts: int = 1,
    ) -> None:
        self.events.append(
            RunEvent(len(self.events) + 1, job, at(sf), outcome, attempts, token, node, at(when))
        )
        self.runs[(job, at(sf))] = Run(job, at(sf), outcome, attempts, token)

    def run(
        self,
        sf: float,
        *,
        node: str = "n1",
        start: float | None = None,
        duration: float = 0.1,
        result: str | None = "applied",
        recorded: bool = True,
        lease_ok_at_end: bool = True,
        job: int = 1,
        attempt: int = 1,
        token: int | None = None,
        run_id: int | None = None,
        in_db: bool = True,
        journaled: float = 0.0,
    ) -> int:
        """One execution of occurrence ``sf`` (claimed at ``start``); returns its token.

        ``token``: hand out this token (again) instead of the next one. ``in_db=False``: a
        failover lost the claim, the execution's row and its outcome (only the journal has it);
        ``journaled``: the seconds after its commit its node journaled its end (the journal's
        ``ended_at``; ``committed_at`` stays the database's).
        """
        self.token = self.token + 1 if token is None else token
        begin = sf if start is None else start
        if in_db:
            self.event(job, sf, "running", self.token, node, begin, attempt)
        end = begin + duration if result is not None else None
        self.executions.append(
            Execution(
                len(self.executions) + 1,
                job,
                at(sf),
                attempt,
                self.token,
                node,
                "quick",
                at(begin + 0.001),
                None if end is None else at(end + (0.0 if in_db else journaled)),
                result,
                True,
                None if result is None else lease_ok_at_end,
                run_id=run_id,
                in_db=in_db,
                committed_at=None if end is None else at(end),
            )
        )
        if recorded and in_db and end is not None:
            self.event(
                job,
                sf,
                "succeeded" if result == "applied" else "retrying",
                self.token,
                node,
                end + 0.002,
                attempt,
            )
        return self.token

    def history(
        self,
        *,
        faults: tuple[Fault, ...] = (),
        settle: float = 5.5,
        jobs: tuple[Job, ...] | None = None,
        checked: float = 20.0,
        **extra: Any,
    ) -> History:
        return History(
            executions=tuple(self.executions),
            run_events=tuple(self.events),
            runs=tuple(self.runs.values()),
            jobs=jobs if jobs is not None else (JOB,),
            faults=faults,
            settle_at=at(settle),
            checked_at=at(checked),
            lease=4.0,
            heartbeat=0.5,
            **extra,
        )


JOB = Job(1, "tick", "@every 1s", "UTC", "chaos.quick", "backfill", T0, "idle")


def clean(n: int = 5) -> Recorder:
    rec = Recorder()
    for second in range(1, n + 1):
        rec.run(second)
    return rec


def failed(verdict: Verdict) -> set[str]:
    return {f.name for f in verdict.figures if not f.ok}


def test_a_clean_history_passes_with_every_figure_zero() -> None:
    verdict = check(clean().history())
    assert verdict.ok and failed(verdict) == set()
    for name in (
        "duplicates",
        "overlaps",
        "double claims",
        "lost",
        "unrecorded",
        "stuck",
        "node crashes",
        "fenced",
        "re-executed",
        "stale effects",
    ):
        assert verdict.figure(name).value == "0", name
    assert "n=5" in verdict.figure("lag steady").value
    assert "executions" in verdict.table()


def test_an_occurrence_run_again_after_its_recorded_success_is_a_duplicate() -> None:
    rec = clean()
    rec.run(3, node="n2", start=5.5)  # succeeded at 3.1, then ran again
    verdict = check(rec.history())
    assert failed(verdict) == {"duplicates"}
    assert "recorded succeeded" in verdict.figure("duplicates").examples[0]


def test_a_reexecution_after_a_kill_between_effect_and_outcome_is_at_least_once() -> None:
    rec = clean(2)
    rec.run(3, node="n1", recorded=False)  # effect at 3.1, killed before its outcome write
    rec.event(1, 3, "retrying", rec.token, "n1", 7.5)  # reaped
    rec.run(3, node="n2", start=7.6, attempt=2)
    rec.run(4, node="n2", start=7.8)
    rec.run(5, node="n2", start=8.0)
    kill = Fault("kill", "n1", at(3.15), at(4.0), "SIGKILL n1")
    verdict = check(rec.history(faults=(kill,)))
    assert verdict.ok
    assert verdict.figure("duplicates").value == "0"
    assert verdict.figure("re-executed").value == "1"
    assert "kill of n1" in verdict.figure("re-executed").examples[0]


def test_an_interrupted_attempt_with_no_fault_on_its_node_is_a_duplicate() -> None:
    rec = clean(2)
    rec.run(3, node="n1", recorded=False)
    rec.event(1, 3, "retrying", rec.token, "n1", 7.5)
    rec.run(3, node="n2", start=8, attempt=2)
    verdict = check(rec.history(faults=(Fault("kill", "n3", at(3.1), at(4), ""),), settle=3.5))
    assert failed(verdict) == {"duplicates"}
    assert "no fault on its node" in verdict.figure("duplicates").examples[0]


def test_a_zombie_write_accepted_after_its_lease_expired_is_a_duplicate() -> None:
    rec = clean(2)
    rec.run(3, node="n1", duration=6, recorded=False, lease_ok_at_end=False)
    rec.event(1, 3, "retrying", rec.token, "n1", 9.2)  # reaped only after the zombie wrote
    rec.run(3, node="n2", start=9.5, attempt=2)
    pause = Fault("pause", "n1", at(3.5), at(8.9), "SIGSTOP n1")
    verdict = check(rec.history(faults=(pause,), settle=3.5))
    assert failed(verdict) == {"duplicates", "fenced"}  # and the guard never fired
    assert verdict.figure("stale effects").value == "1"
    assert "after its lease had expired" in verdict.figure("duplicates").examples[0]


def test_two_unfenced_executions_at_once_are_an_overlap() -> None:
    rec = clean(2)
    rec.run(3, node="n1", duration=2.0, recorded=False, lease_ok_at_end=False)
    rec.event(1, 3, "retrying", rec.token, "n1", 3.9)  # reaped, yet its handler runs on ...
    rec.run(4, node="n2", start=4.0)  # ... while n2 runs the next occurrence
    verdict = check(rec.history(settle=4.5, jobs=(replace(JOB, catch_up="skip"),)))
    assert failed(verdict) == {"overlaps"}


def test_a_fenced_zombie_is_counted_not_failed() -> None:
    rec = clean(2)
    rec.run(3, node="n1", duration=8, result="fenced", recorded=False, lease_ok_at_end=False)
    rec.event(1, 3, "retrying", 3, "n1", 7.2)
    rec.run(3, node="n2", start=7.4, attempt=2)
    pause = Fault("pause", "n1", at(3.2), at(10.0), "SIGSTOP n1")
    verdict = check(rec.history(faults=(pause,), settle=3.5))
    assert verdict.ok and verdict.figure("fenced").value == "1"
    assert verdict.figure("overlaps").value == "0"  # the fenced one does not count


def test_no_fenced_write_despite_zombies_is_flagged_but_does_not_fail_the_run() -> None:
    pause = Fault("pause", "n1", at(1.5), at(2.0), "SIGSTOP n1")
    verdict = check(clean().history(faults=(pause,)))
    assert verdict.ok and failed(verdict) == {"fenced"}


def test_a_claim_while_another_token_is_open_is_a_double_claim() -> None:
    rec = clean(3)
    rec.event(1, 4, "running", 10, "n1", 4.0)
    rec.event(1, 4, "running", 11, "n2", 4.5)  # n1's claim neither ended nor was reaped
    rec.event(1, 4, "succeeded", 11, "n2", 4.6)
    rec.event(1, 5, "running", 9, "n2", 5.0)  # and a token that went backwards
    rec.event(1, 5, "succeeded", 9, "n2", 5.1)
    verdict = check(rec.history())
    assert "double claims" in failed(verdict)
    assert verdict.figure("double claims").value == "2"


def test_a_backfill_occurrence_without_success_is_lost_and_a_missing_one_unrecorded() -> None:
    rec = clean(3)
    rec.run(4, result="failed")  # recorded 'retrying', never succeeded
    verdict = check(rec.history(settle=5.5))  # 5 is due too, and has no row at all
    assert failed(verdict) == {"lost", "unrecorded"}
    assert verdict.figure("lost").value == "1" and verdict.figure("unrecorded").value == "1"


def test_skipped_occurrences_of_a_skip_job_are_accounted_for() -> None:
    rec = clean(2)
    for second in (3, 4):
        rec.event(1, second, "skipped", None, None, 5.01)
    rec.run(5)
    verdict = check(rec.history(jobs=(replace(JOB, catch_up="skip"),)))
    assert verdict.ok


def test_a_job_running_on_an_expired_lease_after_settling_is_stuck() -> None:
    stuck = replace(JOB, status="running", lease_expires_at=at(10), locked_by="n1")
    assert failed(check(clean().history(jobs=(stuck,), checked=20))) == {"stuck"}
    recent = replace(stuck, lease_expires_at=at(19.5))  # the sweeper may not have run yet
    assert check(clean().history(jobs=(recent,), checked=20)).ok


def test_a_node_that_exits_by_itself_fails_the_run() -> None:
    verdict = check(clean().history(node_exits=(NodeExit("n1", at(3), 1),)))
    assert failed(verdict) == {"node crashes"}


def test_lag_counts_from_the_later_of_due_time_and_the_previous_run_end() -> None:
    rec = Recorder()
    rec.run(1, duration=2.5)  # a slow run: occurrence 2 must wait until 3.5
    rec.run(2, start=3.6)
    rec.run(3, start=4.0)  # inside the fault window below
    delay = Fault("delay", "n1", at(3.8), at(3.9), "")
    steady = check(rec.history(faults=(delay,), settle=3.5)).figure("lag steady").value
    assert steady.startswith("p50 0.001s") and "max 0.099s" in steady and "n=2" in steady
    assert "n=1" in check(rec.history(faults=(delay,), settle=3.5)).figure("lag in faults").value


def test_recovery_runs_from_a_kill_to_the_next_claim_of_each_held_job() -> None:
    rec = clean(2)
    rec.event(1, 3, "running", 3, "n1", 3.0)  # n1 holds occurrence 3 ...
    rec.event(1, 3, "retrying", 3, "n1", 7.5)  # ... is killed at 3.5, reaped at 7.5
    rec.token = 3
    rec.run(3, node="n2", start=7.75, attempt=2)
    kill = Fault("kill", "n1", at(3.5), at(4.5), "")
    verdict = check(rec.history(faults=(kill,), settle=3.5))
    assert verdict.figure("recovery").value.startswith("p50 4.250s")


def test_percentile_is_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile(list(map(float, range(1, 101))), 99) == 99.0
    assert percentile([5.0], 99) == 5.0


def test_a_history_survives_a_round_trip_through_json(tmp_path: Path) -> None:
    history = clean().history(faults=(Fault("kill", "n1", at(1), at(2), "x"),))
    dump_history(history, tmp_path / "h.json")
    assert load_history(tmp_path / "h.json") == history


@pytest.mark.parametrize("bad", ["duplicates", "overlaps"])
def test_the_exit_rule_follows_the_must_be_zero_figures(bad: str) -> None:
    rec = clean(2)
    if bad == "duplicates":
        rec.run(2, node="n2", start=2.5)
    else:
        rec.run(3, duration=1.5)
        rec.run(4, node="n2", start=4.0)
    assert not check(rec.history(settle=2.5)).ok


def test_occurrences_the_job_has_not_reached_yet_are_queued_not_lost() -> None:
    rec = clean(3)  # 4 and 5 are due by the settle point; the job still holds 4 (a backlog)
    rec.event(1, 4, "running", 4, "n1", 5.4)
    behind = replace(JOB, status="running", scheduled_for=at(4), lease_expires_at=at(9.4))
    verdict = check(rec.history(jobs=(behind,), settle=5.5, checked=6))
    assert verdict.ok
    assert verdict.figure("queued at check").value == "2"
    assert verdict.figure("lost").value == "0" and verdict.figure("unrecorded").value == "0"


async def test_the_run_log_records_the_engines_claims_so_a_double_claim_is_caught(
    store: Any, db: Any
) -> None:
    """A claim writes no pgpulse_runs row: the harness logs claims and their
    ends from pgpulse_jobs. Real engine writes give 'running' per claim and 'ended' per end
    (release, finish), the checker finds nothing in them, and a second claim made while one is
    open (a token bumped under a live lease) is caught. Without the claim log every history
    would pass the double-claim check."""
    from helpers import ALL_SHARDS, add, spec
    from pgpulse.core.model import Outcome
    from pgpulse.core.planner import Advance
    from pgpulse_tools.chaos.checker import double_claims
    from pgpulse_tools.chaos.history import RunEvent
    from pgpulse_tools.chaos.runner import Q

    db.execute(Q["create_history"])
    await add(store, spec("billing"), now=utc(2026, 1, 1))
    later = utc(2026, 1, 1, 0, 5)
    [first] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=later)
    assert await store.hand_back([first.key], started=(), reason="stop", now=later) == (1, 0)
    [second] = await store.claim_due("node-b", ALL_SHARDS, 1, lease=30, now=later)
    done = Outcome(second, "succeeded", advance=Advance(utc(2026, 1, 1, 0, 6)))
    assert await store.finish_runs([done], now=later, node="node-b") == {second.key}

    def events() -> list[RunEvent]:
        return [RunEvent.from_row(row) for row in db.execute(Q["read_run_log"]).fetchall()]

    assert [(e.outcome, e.token, e.node_id) for e in events()] == [
        ("running", 1, "node-a"),
        ("ended", 1, "node-a"),
        ("running", 2, "node-b"),
        *sorted([("ended", 2, "node-b"), ("succeeded", 2, "node-b")]),
    ]
    assert double_claims(events()) == []
    [third] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=utc(2026, 1, 1, 0, 6))
    db.execute("UPDATE pgpulse_jobs SET fencing_token = fencing_token + 1, locked_by = 'rogue'")
    [found] = double_claims(events())
    assert f"rogue claimed t{third.fencing_token + 1}" in found and "node-a" in found


async def test_an_execution_during_the_snapshot_is_never_only_in_the_journal(
    dsn: str, db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nodes run while the harness takes its snapshot. An execution that starts and ends
    meanwhile must be in both the journals and the database's snapshot, or in neither: only in
    the journal, the checker takes it for a record a failover lost (seed 7, async: executions
    after the snapshot, two of them re-run after a lease loss, called duplicates)."""
    from psycopg import conninfo

    from pgpulse_tools.chaos import runner
    from pgpulse_tools.chaos.cluster import Cluster, NodeSettings
    from pgpulse_tools.chaos.journal import Journal, read_journals
    from pgpulse_tools.chaos.server import ExternalServer

    db.execute(runner.Q["create_history"])
    journal = Journal(tmp_path)

    def while_reading(folder: Path) -> list[dict[str, Any]]:
        """A node runs an execution from start to end as the harness reads: the journal's
        start, the database's row (start and end committed), the journal's end."""
        fields = {"job_id": 1, "scheduled_for": T0, "attempt": 1, "token": 1, "run_id": 1}
        journal.started("meanwhile", "node-1", {**fields, "kind": "quick"})
        row = db.execute(
            "INSERT INTO chaos_history (uid, job_id, scheduled_for, attempt, token, run_id,"
            " node_id, kind, started_at, ended_at, result, lease_ok_at_start, lease_ok_at_end)"
            " VALUES ('meanwhile', 1, %s, 1, 1, 1, 'node-1', 'quick', clock_timestamp(),"
            " clock_timestamp(), 'applied', true, true) RETURNING ended_at",
            (T0,),
        ).fetchone()
        journal.ended("meanwhile", "node-1", "applied", True, True, committed_at=row["ended_at"])
        return read_journals(folder)

    monkeypatch.setattr(runner, "read_journals", while_reading)
    run = runner._Run(
        runner.ChaosConfig(),
        print,
        ExternalServer(dsn),
        dbname=str(conninfo.conninfo_to_dict(dsn)["dbname"]),
        folder=tmp_path,
    )
    cluster = Cluster(NodeSettings(), lambda _: dsn, tmp_path, run.clock)
    history = await runner._snapshot(run, [], run.clock(), cluster)
    assert [(e.uid, e.in_db) for e in history.executions] == [("meanwhile", True)]


# -- a replicated cluster: failovers, reissued tokens and run ids (invariant 9) ----------------


def failover(died: float, promoted: float, kind: str = "failover") -> Fault:
    return Fault(kind, None, at(died - 0.5), at(died + 2), kind, at(died), at(promoted))


def lost_claim_then_reissued(*, long: bool = False) -> Recorder:
    """Occurrence 3 runs on n1 under t3, all of it in the window a failover loses; after the
    promotion (4.2) n2 is handed t3 again for the same occurrence. ``long``: n1 still runs."""
    rec = clean(2)
    rec.run(3, node="n1", start=3.0, duration=3.0 if long else 0.1, in_db=False)
    rec.run(3, node="n2", start=4.5, token=3)
    rec.run(4, node="n2", start=4.7)
    rec.run(5, node="n2")
    return rec


def test_a_failover_that_lost_a_claim_shows_the_token_reissued_and_the_repeat() -> None:
    history = lost_claim_then_reissued().history(faults=(failover(4.0, 4.2),), replication="async")
    verdict = check(history)
    assert failed(verdict) == {"tokens reissued"}
    assert verdict.figure("occurrences repeated").value == "1"  # information with async
    assert verdict.figure("occurrences repeated").rule == "info"
    assert verdict.figure("duplicates").value == "0"
    assert verdict.figure("double token holders").value == "0"  # n1 was done by then
    assert "lost by the database" in verdict.figure("tokens reissued").examples[0]
    assert verdict.figure("failovers survived").value == "1/1"
    assert verdict.figure("failover to first claim").value.startswith("p50 0.500s")


def test_with_sync_replication_a_repeated_occurrence_fails_the_run() -> None:
    history = lost_claim_then_reissued().history(faults=(failover(4.0, 4.2),), replication="sync")
    assert failed(check(history)) == {"tokens reissued", "occurrences repeated"}


def test_a_lost_effect_journaled_after_the_kill_but_committed_before_it_is_repeated() -> None:
    """Seed 7, async: n1's effect committed at 3.9 on the old primary, killed at 4.0 (so the
    failover lost it), but the loaded node journaled it 1.04 s later, after the kill; n2 ran
    the occurrence again. The checker compares the database's instant of the effect with the
    kill, not the journal's: the loss is the failover's (repeated), not a duplicate."""
    rec = clean(2)
    rec.run(3, node="n1", start=3.0, duration=0.9, in_db=False, journaled=1.04)
    rec.run(3, node="n2", start=5.0)
    rec.run(4, node="n2", start=5.2)
    rec.run(5, node="n2", start=5.4)
    verdict = check(rec.history(faults=(failover(4.0, 4.2),), replication="async"))
    assert verdict.figure("duplicates").value == "0", verdict.figure("duplicates").examples
    repeated = verdict.figure("occurrences repeated")
    assert repeated.value == "1"
    assert "lost by the failover at 12:00:04.000" in repeated.examples[0]
    assert verdict.ok


def test_a_lost_effect_committed_after_the_last_kill_is_a_duplicate() -> None:
    """The other side of the line: an effect the database lost though it committed after the
    last failover's kill has no failover to explain it."""
    rec = clean(2)
    rec.run(3, node="n1", start=4.3, duration=0.2, in_db=False)
    rec.run(3, node="n2", start=5.0)
    verdict = check(rec.history(faults=(failover(4.0, 4.2),), replication="async"))
    assert verdict.figure("duplicates").value == "1"
    assert "no failover" in verdict.figure("duplicates").examples[0]


def test_two_holders_of_one_token_at_once_are_double_token_holders() -> None:
    history = lost_claim_then_reissued(long=True).history(
        faults=(failover(4.0, 4.2),), replication="async"
    )
    verdict = check(history)  # both applied their effect: the worst case, caught four ways
    assert failed(verdict) == {"tokens reissued", "double token holders", "overlaps", "duplicates"}
    assert "n1 @ 12:00:03.001" in verdict.figure("double token holders").examples[0]


def test_an_execution_without_an_end_holds_its_token_until_its_node_is_killed() -> None:
    rec = clean(2)
    rec.run(3, node="n1", start=3.0, result=None, in_db=False)  # SIGKILLed, no end recorded
    rec.run(3, node="n2", start=4.5, token=3)
    rec.run(4, node="n2", start=4.7)
    rec.run(5, node="n2")
    kill = Fault("kill", "n1", at(3.5), at(3.6), "SIGKILL n1")
    holders = check(rec.history(faults=(kill, failover(4.0, 4.2)), replication="async"))
    assert holders.figure("double token holders").value == "0"
    unbounded = check(rec.history(faults=(failover(4.0, 4.2),), replication="async"))
    assert unbounded.figure("double token holders").value == "1"  # held for a lease: 3.0-7.0


def test_a_run_id_given_to_two_occurrences_is_reissued() -> None:
    rec = clean(1)
    rec.run(2, run_id=7, in_db=False)
    rec.run(3, run_id=7)
    rec.run(4, run_id=8)
    rec.run(4, node="n2", run_id=8, start=4.5, attempt=2, result="failed")  # a retry shares it
    verdict = check(rec.history(faults=(failover(2.5, 2.6),), replication="async"))
    assert verdict.figure("run ids reissued").value == "1"
    assert "run id 7 given to 2 occurrences" in verdict.figure("run ids reissued").examples[0]


def test_a_failover_with_no_claim_afterwards_is_not_survived() -> None:
    rec = clean(3)  # nothing claimed after 3.1
    verdict = check(rec.history(faults=(failover(3.5, 3.6),), replication="sync", settle=3.5))
    assert failed(verdict) == {"failovers survived"}
    assert verdict.figure("failovers survived").value == "0/1"
    assert not verdict.ok
    assert "failover to first claim" not in {f.name for f in check(rec.history()).figures}


def _allow_job(executions: int, *, same_run: bool = False) -> History:
    """A job of the ``overlap`` kind (overlap allow, N = 3): ``executions`` occurrences run at
    once from 3 s, each its own occurrence's first claim (token 1, its own run id)."""
    rec = Recorder()
    for i in range(executions):
        rec.run(3 + i * 0.01, start=3.0 + i * 0.01, duration=2.0, token=1,
                run_id=100 if same_run else 100 + i)  # fmt: skip
    rec.executions = [replace(e, kind="overlap") for e in rec.executions]
    return rec.history(settle=2.5, jobs=(replace(JOB, catch_up="skip"),))


def test_an_allow_job_may_run_n_at_once_each_with_its_own_tokens() -> None:
    from pgpulse_tools.chaos.effects import OVERLAP_N, overlaps
    from pgpulse_tools.chaos.tokens import reissued_tokens

    history = _allow_job(OVERLAP_N)
    assert overlaps(history) == []
    assert check(history).figure("allow at once").value == "3 (overlap allow, N = 3)"
    assert reissued_tokens(history) == ([], [])  # token 1 of three occurrences: no reissue


def test_an_allow_job_beyond_n_at_once_is_an_overlap() -> None:
    from pgpulse_tools.chaos.effects import overlaps

    found = overlaps(_allow_job(4))
    assert len(found) == 1 and found[0].startswith("job 1: 4 executions at once at ")


def test_one_token_of_one_occurrence_held_twice_is_still_a_reissue() -> None:
    from pgpulse_tools.chaos.tokens import reissued_tokens

    reissued, doubles = reissued_tokens(_allow_job(2, same_run=True))
    assert len(reissued) == 1 and len(doubles) == 1


def test_forked_occurrences_the_job_row_passed_but_still_to_run_are_queued_not_unrecorded() -> None:
    """Under overlap allow the job row moves on at each fork: an occurrence forked but not yet
    run at the check (read as 'queued' from pgpulse_occurrences) is a backlog, not a loss."""
    rec = clean(3)  # 4 and 5 forked, still pending: the job row holds 6
    for second in (4, 5):
        rec.runs[(1, at(second))] = Run(1, at(second), "queued", 0, 0)
    moved_on = replace(JOB, scheduled_for=at(6))
    verdict = check(rec.history(jobs=(moved_on,), settle=5.5, checked=6))
    assert verdict.ok
    assert verdict.figure("queued at check").value == "2"
    assert verdict.figure("lost").value == "0" and verdict.figure("unrecorded").value == "0"


@pytest.mark.parametrize("policy", ["skip", "coalesce", "backfill"])
def test_an_occurrence_the_engine_fenced_before_its_handler_finished_is_lost_in_every_policy(
    policy: str,
) -> None:
    """Issue 37: a run ended ``fenced`` by the engine (its attempts interrupted by drains and
    kills) without any effect applied is lost, whatever the job's catch-up policy; before, only
    a backfill job's was, and a skip or coalesce occurrence lost that way passed."""
    rec = clean(3)
    for attempt in (1, 2, 3):  # each attempt interrupted before its effect
        rec.run(4, result=None, attempt=attempt, start=4 + attempt / 10)
        rec.event(1, 4, "retrying", rec.token, "n1", 4.05 + attempt / 10, attempt)
    rec.event(1, 4, "fenced", None, "n2", 4.5, attempts=4)
    rec.runs[(1, at(4))] = Run(1, at(4), "fenced", 4, rec.token)
    rec.run(5, start=5.1)
    verdict = check(rec.history(jobs=(replace(JOB, catch_up=policy),)))
    assert failed(verdict) == {"lost"}
    [line] = verdict.figure("lost").examples
    assert f"{policy}) @ 12:00:04.000: fenced after 4 attempts, no effect applied" in line


def test_a_fenced_run_whose_effect_was_applied_is_not_lost() -> None:
    """An attempt that applied its effect and was then interrupted before its outcome: the
    occurrence's work was done, whatever the engine recorded after."""
    rec = clean(3)
    rec.run(4, recorded=False)  # effect applied at 4.1, the outcome never written
    rec.event(1, 4, "retrying", rec.token, "n1", 4.5)  # handed back; ... then fenced later
    rec.runs[(1, at(4))] = Run(1, at(4), "fenced", 11, rec.token)
    rec.run(5)
    verdict = check(rec.history(jobs=(replace(JOB, catch_up="skip"),)))
    assert verdict.figure("lost").value == "0" and failed(verdict) == set()


def test_a_backfill_run_its_handler_failed_is_counted_not_lost() -> None:
    """With Pulse's default max_attempts for every policy (the workload gives backfill jobs no
    more), a flaky handler's planned failures may end a backfill run ``failed``: that is
    max_attempts doing its job, counted in 'failed runs', not lost."""
    rec = clean(3)
    for attempt in (1, 2, 3):
        rec.run(4, result="failed", attempt=attempt, start=4 + attempt / 10, duration=0.05)
    rec.runs[(1, at(4))] = Run(1, at(4), "failed", 3, rec.token)
    rec.run(5)
    verdict = check(rec.history())
    assert verdict.ok and verdict.figure("lost").value == "0"
    assert verdict.figure("failed runs").value == "1"


def test_the_verdict_says_how_many_due_occurrences_it_checked() -> None:
    """Occurrences still queued at the check are not checked: the verdict says how many of
    those due it checked (all, when the backlog drained), and warns when not all."""
    assert check(clean().history()).figure("occurrences checked").value == "5/5"
    rec = clean(3)  # 4 and 5 are due by the settle point; the job still holds 4
    rec.event(1, 4, "running", 4, "n1", 5.4)
    behind = replace(JOB, status="running", scheduled_for=at(4), lease_expires_at=at(9.4))
    verdict = check(rec.history(jobs=(behind,), settle=5.5, checked=6))
    checked = verdict.figure("occurrences checked")
    assert checked.value == "3/5 (2 queued, not checked)" and not checked.ok
    assert verdict.ok  # a backlog is lag, not loss: a warning, not a failure
    assert "WARN" in verdict.table()


# -- triggers, backfills and replace ------------------------------------------------------------


def extra(
    rec: Recorder,
    kind: str,
    run_id: int,
    sf: float,
    *,
    start: float,
    duration: float = 0.1,
    outcome: str = "succeeded",
    result: str | None = "applied",
    batch: int | None = None,
    node: str = "n1",
    token: int = 1,
    lease_ok_at_end: bool = True,
    job: int = 1,
) -> None:
    """One execution of the extra occurrence ``run_id`` (a trigger's or a backfill's: a lease
    and a token of its own), and its run row as it stands at the check (``outcome``)."""
    end = start + duration
    rec.executions.append(
        Execution(
            len(rec.executions) + 1,
            job,
            at(sf),
            1,
            token,
            node,
            "quick",
            at(start),
            None if result is None else at(end),
            result,
            True,
            None if result is None else lease_ok_at_end,
            run_id=run_id,
            committed_at=None if result is None else at(end),
            occurrence=kind,
        )
    )
    rec.events.append(
        RunEvent(
            len(rec.events) + 1,
            job,
            at(sf),
            outcome,
            1,
            token,
            node,
            at(end + 0.002),
            run_id=run_id,
            kind=kind,
        )
    )
    rec.runs[(job, at(sf), run_id)] = Run(  # type: ignore[index]
        job, at(sf), outcome, 1, token, id=run_id, kind=kind, batch_id=batch
    )


def trigger(run_id: int, sf: float) -> Request:
    return Request("trigger", 1, at(sf), run_id=run_id, scheduled_for=at(sf))


def backfill(batch: int, *instants: float, bound: int = 1) -> Request:
    return Request(
        "backfill", 1, at(5.2), batch_id=batch, selected=tuple(at(i) for i in instants),
        only=("all",), max_concurrency=bound,
    )  # fmt: skip


def test_a_backfill_of_an_instant_the_schedule_ran_and_a_trigger_beside_it_pass() -> None:
    """Extra occurrences are identified by run id: a backfill of second 2 (which the schedule
    ran) is not a duplicate of it, and a trigger running beside a forbid job's own run is no
    overlap (triggers and backfills run beside the schedule under every policy)."""
    rec = clean()
    extra(rec, "backfill", 900, 2, start=5.3, batch=7)
    extra(rec, "trigger", 901, 3.05, start=3.05, duration=0.5)  # beside the run of 3
    verdict = check(rec.history(requests=(backfill(7, 2), trigger(901, 3.05))))
    assert verdict.ok and failed(verdict) == set()
    assert verdict.figure("duplicates").value == "0"
    assert verdict.figure("overlaps").value == "0"
    assert verdict.figure("extras checked").value == "2/2 (1 triggers, 1 backfill occurrences)"


def test_a_trigger_run_again_after_its_recorded_success_is_a_duplicate() -> None:
    rec = clean()
    extra(rec, "trigger", 901, 3.05, start=3.05)
    extra(rec, "trigger", 901, 3.05, start=4.5, node="n2", token=2)  # its success was recorded
    verdict = check(rec.history(requests=(trigger(901, 3.05),)))
    assert failed(verdict) == {"duplicates"}
    assert "(trigger r901)" in verdict.figure("duplicates").examples[0]


@pytest.mark.parametrize(
    ("outcome", "result"),
    [("succeeded", None), ("fenced", None), ("cancelled", "applied"), ("skipped", None)],
)
def test_an_extra_occurrence_that_ended_without_its_effect_or_was_cancelled_is_lost(
    outcome: str, result: str | None
) -> None:
    rec = clean()
    extra(rec, "backfill", 900, 2, start=5.3, batch=7, outcome=outcome, result=result)
    verdict = check(rec.history(requests=(backfill(7, 2),)))
    assert failed(verdict) == {"extras lost"}
    assert verdict.figure("extras lost").examples[0].startswith("job 1 backfill r900 @ ")


def test_an_extra_occurrence_its_handler_failed_or_still_queued_is_not_lost() -> None:
    rec = clean()
    extra(rec, "trigger", 901, 3.05, start=3.05, outcome="failed", result="failed")
    extra(rec, "backfill", 900, 2, start=5.3, batch=7, outcome="queued", result=None)
    verdict = check(rec.history(requests=(trigger(901, 3.05), backfill(7, 2))))
    assert verdict.ok
    assert verdict.figure("extras failed").value == "1"
    assert verdict.figure("extras checked").value.startswith("1/2 ")
    assert not verdict.figure("extras checked").ok  # a warning: lag, not loss


def test_an_acknowledged_trigger_or_backfill_instant_with_no_run_is_unrecorded() -> None:
    rec = clean()
    extra(rec, "backfill", 900, 2, start=5.3, batch=7)
    requests = (trigger(902, 4.0), backfill(7, 2, 3))  # no run r902; the batch lacks 3
    verdict = check(rec.history(requests=requests))
    assert failed(verdict) == {"extras unrecorded"}
    lines = verdict.figure("extras unrecorded").examples
    assert "trigger r902" in lines[0] and "no run" in lines[0]
    assert "selected 2, has 1 runs; missing 12:00:03.000" in lines[1]
    # asynchronous replication may lose an acknowledged commit, in a failover killed after
    # the request: information then; one killed before the request explains nothing
    lost = Fault("failover", None, at(5.0), at(6.0), "fail over", died_at=at(5.5))
    verdict = check(rec.history(requests=requests, replication="async", faults=(lost,)))
    assert "extras unrecorded" not in failed(verdict)
    assert verdict.figure("extras lost by a failover").value == "2"
    early = replace(lost, died_at=at(4.5))  # after the trigger (4.0), before the backfill
    verdict = check(rec.history(requests=requests, replication="async", faults=(early,)))
    assert verdict.figure("extras unrecorded").value == "1"
    assert "backfill batch 7" in verdict.figure("extras unrecorded").examples[0]
    verdict = check(rec.history(requests=requests, replication="sync", faults=(lost,)))
    assert verdict.figure("extras unrecorded").value == "2"
    # a request the API did not acknowledge is not checked
    unanswered = replace(trigger(902, 4.0), ok=False, error="TimeoutError")
    assert check(rec.history(requests=(unanswered,))).ok


def _backfill_at_once(n: int) -> History:
    rec = clean()
    for i in range(n):  # n occurrences of batch 7 (bound 2) running at once on three nodes
        extra(rec, "backfill", 900 + i, 1 + i, start=5.3 + i * 0.01, duration=1.0,
              batch=7, node=f"n{i + 1}")  # fmt: skip
    return rec.history(requests=(backfill(7, *range(1, n + 1), bound=2),))


def test_a_backfill_may_run_its_max_concurrency_at_once() -> None:
    verdict = check(_backfill_at_once(2))
    assert verdict.ok and verdict.figure("backfill beyond bound").value == "0"


def test_a_backfill_beyond_its_max_concurrency_fails() -> None:
    verdict = check(_backfill_at_once(3))
    assert failed(verdict) == {"backfill beyond bound"}
    assert (
        "3 at once at 12:00:05.320 (max_concurrency 2)"
        in (verdict.figure("backfill beyond bound").examples[0])
    )


def test_triggers_beside_an_allow_job_do_not_count_against_its_bound() -> None:
    from pgpulse_tools.chaos.effects import OVERLAP_N

    rec = Recorder()
    for i in range(OVERLAP_N):  # N forked occurrences at once, plus a trigger beside them
        rec.run(3 + i * 0.01, start=3.0 + i * 0.01, duration=2.0, token=1, run_id=100 + i)
    rec.executions = [replace(e, kind="overlap") for e in rec.executions]
    extra(rec, "trigger", 901, 3.5, start=3.5, duration=1.0)
    rec.executions[-1] = replace(rec.executions[-1], kind="overlap")
    history = rec.history(settle=2.5, jobs=(replace(JOB, catch_up="skip"),))
    assert check(history).figure("overlaps").value == "0"
    assert check(_allow_job(OVERLAP_N + 1)).figure("overlaps").value == "1"


REPLACE = replace(JOB, name="swap", schedule="@every 2s", overlap="replace", catch_up="skip")


def _replace_job(*, late: float, fault: Fault | None = None) -> History:
    """Occurrence 2 runs from 2.0 on n1; occurrence 4 is forked at 4.0 (2's run recorded
    cancelled, replaced) and starts at 4.05 on n2; 2 writes its effect ``late`` seconds after
    4's start, then 6 runs alone."""
    rec = Recorder()
    rec.run(2, start=2.0, duration=2.05 + late, recorded=False, run_id=2)
    rec.event(1, 2, "ended", rec.token, "n1", 2.01)  # the fork ends the job row's claim
    rec.runs[(1, at(2))] = Run(
        1, at(2), "cancelled", 1, rec.token, id=2,
        error="replaced by the occurrence at 2026-01-01T12:00:04Z",
    )  # fmt: skip
    rec.run(4, node="n2", start=4.05, duration=1.0, run_id=4)
    rec.run(6, node="n2", start=6.0, run_id=6)
    rec.executions = [replace(e, kind="replace") for e in rec.executions]
    return rec.history(settle=6.5, jobs=(REPLACE,), faults=(fault,) if fault else ())


def test_a_replaced_run_stopping_within_a_heartbeat_passes_and_is_counted_replaced() -> None:
    verdict = check(_replace_job(late=0.4))  # heartbeat 0.5
    assert verdict.ok and failed(verdict) == set()
    assert verdict.figure("replaced").value == "1"
    assert verdict.figure("replace overlaps").value == "0"
    assert verdict.figure("lost").value == "0"


def test_a_replaced_run_writing_its_effect_past_its_next_renewal_is_a_replace_overlap() -> None:
    verdict = check(_replace_job(late=0.8))
    assert failed(verdict) == {"replace overlaps"}
    assert (
        "0.799s after n2/r4 (@ 12:00:04.000) started"
        in verdict.figure("replace overlaps").examples[0]
    )


def test_a_replaced_run_late_while_its_node_was_paused_is_excused() -> None:
    pause = Fault("pause", "n1", at(3.9), at(4.8), "SIGSTOP n1")
    verdict = check(_replace_job(late=0.8, fault=pause))
    assert verdict.figure("replace overlaps").value == "0"
    assert verdict.figure("replace late in faults").value == "1"
    assert "replace overlaps" not in failed(verdict)


def test_a_cancelled_run_of_a_job_that_does_not_replace_is_lost() -> None:
    rec = clean(3)
    rec.run(4, recorded=False, result=None)
    rec.event(1, 4, "ended", rec.token, "n1", 4.2)
    rec.runs[(1, at(4))] = Run(1, at(4), "cancelled", 1, rec.token, error="cancelled by x")
    rec.run(5)
    verdict = check(rec.history(jobs=(replace(JOB, catch_up="skip"),)))
    assert failed(verdict) == {"lost"}


def test_a_payload_less_trigger_moves_the_job_row_and_its_instant_must_be_accounted() -> None:
    moved = Request("trigger_job", 1, at(2.4), scheduled_for=at(2.5))
    verdict = check(clean().history(requests=(moved,)))
    assert failed(verdict) == {"extras unrecorded"}
    assert "for 12:00:02.500: no run" in verdict.figure("extras unrecorded").examples[0]
    rec = Recorder()
    for second in (1, 2, 2.5, 3, 4, 5):
        rec.run(second, start=second + 0.05 if second == 2.5 else None)
    verdict = check(rec.history(requests=(moved,)))
    assert verdict.ok and verdict.figure("occurrences checked").value == "6/6"


def test_a_history_with_requests_survives_a_round_trip_through_json(tmp_path: Path) -> None:
    history = _backfill_at_once(2)
    dump_history(history, tmp_path / "h.json")
    assert load_history(tmp_path / "h.json") == history
