"""Pausing a running job, through the store at fixed instants: the run ends
and is recorded, then the job is paused (a retry of the run still happens); meanwhile no
pending extra occurrence starts; a resume withdraws the request; ``cancel`` stops the run now
(its lease taken away, recorded cancelled) and moves the job past it; what a paused job lists
as to come."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from helpers import ALL_SHARDS, add, spec, utc
from pgpulse.core.audit import Actor
from pgpulse.core.model import AttemptResult
from pgpulse.db.pausing import CancelledRun, pause_note
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from pgpulse.node.attempts import decide_claim
from pgpulse.node.dispatch import plan_finish
from pgpulse.node.handlers import NodeHandlers
from pgpulse.web.service import upcoming
from run_control_helpers import drain, history, job_row
from test_engine import TRIGGERED_ONLY

T0 = utc(2026, 1, 1)
H = [utc(2026, 1, 1, hour) for hour in range(6)]
ALICE = Actor("cli", "os:alice")
CANCELLED = "cancelled by os:alice (cli): the job was paused, cancelling its run"
OK = AttemptResult(True)


async def hourly_running(store: Store, **fields: Any) -> Any:
    """An hourly job whose 01:00 occurrence node-a runs (claimed at 01:00)."""
    await add(store, spec("hourly", schedule="0 * * * *", **fields), now=T0)
    [claimed] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=600, now=H[1])
    return claimed


def run_rows(db: Any) -> list[dict[str, Any]]:
    return list(
        db.execute(
            "SELECT id, kind, scheduled_for, attempts, outcome, node_id, error, earlier_attempts"
            " FROM pgpulse_runs ORDER BY id"
        ).fetchall()
    )


async def test_a_running_job_pauses_when_its_run_ends_and_nothing_new_starts(
    store: Store, db: Any
) -> None:
    claimed = await hourly_running(store)
    done = await store.pause_job("default", "hourly", reason="deploy", actor=ALICE, now=H[1])
    assert (done.changed, done.written, done.status, done.requested) == (
        True,
        True,
        "running",
        True,
    )
    assert (done.run_id, done.node_id, done.cancelled) == (claimed.run_id, "node-a", ())
    assert pause_note("hourly", done) == (
        f"hourly is running: pauses when this run ends (run {claimed.run_id} on node node-a) "
        "(deploy)"
    )
    job = job_row(db, "hourly")
    assert (job["status"], job["pause_requested"], job["pause_reason"]) == (
        "running",
        True,
        "deploy",
    )
    again = await store.pause_job("default", "hourly", now=H[1])
    assert (again.changed, again.written) == (False, False)
    assert pause_note("hourly", again) == (
        f"hourly is running: pauses when this run ends (run {claimed.run_id} on node node-a), "
        "as asked already; no change"
    )
    [pause] = [h for h in await store.job_history("default", "hourly") if h["action"] == "pause"]
    assert (pause["actor"], pause["changes"]) == (
        "os:alice",
        {"pause_requested": [False, True], "pause_reason": [None, "deploy"]},
    )
    ended = H[1] + timedelta(minutes=10)
    outcome = plan_finish(claimed, OK, ended)
    assert await store.finish_runs([outcome], node="node-a", now=ended) == {claimed.key}
    job = job_row(db, "hourly")
    assert (job["status"], job["pause_requested"], job["scheduled_for"]) == ("paused", False, H[2])
    assert job["pause_reason"] == "deploy"
    assert await drain(store, H[5]) == []  # 02:00 to 05:00 are due: none starts
    assert await history(store) == [("succeeded", H[1], H[1], 1, None)]


async def test_a_retry_of_the_run_still_happens_before_the_pause(store: Store, db: Any) -> None:
    claimed = await hourly_running(store, max_attempts=2)
    await store.pause_job("default", "hourly", now=H[1])
    failed = plan_finish(claimed, AttemptResult(False, "boom"), H[1])
    assert failed.outcome == "retrying"
    await store.finish_runs([failed], node="node-a", now=H[1])
    job = job_row(db, "hourly")
    assert (job["status"], job["pause_requested"]) == ("idle", True)  # the run goes on
    later = H[1] + timedelta(minutes=1)
    [retry] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=600, now=later)
    assert (retry.scheduled_for, retry.attempt, retry.run_id) == (H[1], 2, claimed.run_id)
    await store.finish_runs([plan_finish(retry, OK, later)], node="node-a", now=later)
    job = job_row(db, "hourly")
    assert (job["status"], job["pause_requested"], job["scheduled_for"]) == ("paused", False, H[2])
    [row] = run_rows(db)
    assert (row["outcome"], row["attempts"]) == ("succeeded", 2)
    assert [a["outcome"] for a in row["earlier_attempts"]] == ["retrying"]


async def test_a_pending_trigger_waits_while_a_pause_is_requested_and_a_resume_withdraws_it(
    store: Store, db: Any
) -> None:
    claimed = await hourly_running(store)
    triggered = await RunControl(store.pool).trigger("default", "hourly", {"n": 1}, now=H[1])
    await store.pause_job("default", "hourly", until=H[3], reason="deploy", now=H[1])
    routes = {"noop": tuple(ALL_SHARDS)}
    later = H[1] + timedelta(minutes=1)
    step = await store.finish_and_claim_occurrences([], "node-b", routes, 5, lease=600, now=later)
    assert step.jobs == []  # due, pending, and not started
    assert await store.resume_job("default", "hourly", now=later)  # withdraws the request
    job = job_row(db, "hourly")
    assert (job["status"], job["pause_requested"], job["paused_until"], job["pause_reason"]) == (
        "running",
        False,
        None,
        None,
    )
    [resumed, *_] = await store.job_history("default", "hourly")  # newest first
    assert (resumed["action"], resumed["changes"]) == (
        "resume",
        {"pause_requested": [True, False]},
    )
    step = await store.finish_and_claim_occurrences([], "node-b", routes, 5, lease=600, now=later)
    assert [(j.occurrence, j.payload) for j in step.jobs] == [(triggered.occurrence, {"n": 1})]
    await store.finish_runs([plan_finish(claimed, OK, later)], node="node-a", now=later)
    assert job_row(db, "hourly")["status"] == "idle"  # not paused: the request was withdrawn


async def test_cancel_stops_the_run_now_keeping_its_earlier_attempt(store: Store, db: Any) -> None:
    first = await hourly_running(store, max_attempts=3)
    await store.finish_runs(
        [plan_finish(first, AttemptResult(False, "boom"), H[1])], node="node-a", now=H[1]
    )
    later = H[1] + timedelta(minutes=1)
    [second] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=600, now=later)
    await store.pause_job("default", "hourly", reason="deploy", now=later)  # after the run...
    done = await store.pause_job("default", "hourly", cancel=True, actor=ALICE, now=later)
    assert (done.changed, done.status, done.requested) == (False, "paused", False)
    assert done.pause_reason == "deploy"  # ...then now: its reason kept
    assert done.cancelled == (CancelledRun(second.run_id, "scheduled", H[1], "node-a"),)
    assert pause_note("hourly", done) == (
        f"paused hourly (deploy); run {second.run_id} cancelled (node node-a stops it at its next "
        "lease renewal)"
    )
    [row] = run_rows(db)
    assert (row["id"], row["outcome"], row["attempts"], row["node_id"], row["error"]) == (
        second.run_id,
        "cancelled",
        2,
        "node-a",
        CANCELLED,
    )
    assert [(a["attempt"], a["outcome"], a["error"]) for a in row["earlier_attempts"]] == [
        (1, "retrying", "boom")
    ]
    job = job_row(db, "hourly")
    assert (job["status"], job["scheduled_for"], job["lease_expires_at"], job["run_id"]) == (
        "paused",
        H[2],
        None,
        None,
    )
    assert (job["attempt"], job["last_outcome"], job["last_error"]) == (0, "cancelled", CANCELLED)
    assert (job["pause_requested"], job["pause_reason"]) == (False, "deploy")
    # the holder: its renewal is refused (it cancels the handler), its late write is fenced
    assert await store.renew([second.key], lease=600, now=later) == set()
    late = plan_finish(second, OK, later)
    assert await store.finish_runs([late], node="node-a", now=later) == set()
    assert [r["outcome"] for r in run_rows(db)] == ["cancelled"]
    [pause, *_] = await store.job_history("default", "hourly")
    assert (pause["action"], pause["changes"]) == ("pause", {"cancelled_runs": [None, [row["id"]]]})
    assert await drain(store, H[4]) == []


async def test_cancel_completes_a_one_off_with_nothing_left(store: Store, db: Any) -> None:
    await add(store, spec("launch", schedule="@at 2026-01-01T01:00:00"), now=T0)
    [claimed] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=600, now=H[1])
    done = await store.pause_job("default", "launch", cancel=True, actor=ALICE, now=H[1])
    assert done.status == "completed"
    assert pause_note("launch", done) == (
        f"launch completed: run {claimed.run_id} cancelled (node node-a stops it at its next "
        "lease renewal), and its schedule has no occurrence left"
    )
    job = job_row(db, "launch")
    assert (job["status"], job["paused_until"], job["lease_expires_at"]) == (
        "completed",
        None,
        None,
    )
    assert [r["outcome"] for r in run_rows(db)] == ["cancelled"]


async def test_cancel_stops_running_extra_occurrences_and_keeps_pending_ones(
    store: Store, db: Any
) -> None:
    await add(store, spec("report", schedule=TRIGGERED_ONLY), now=T0)
    control = RunControl(store.pool)
    running = await control.trigger("default", "report", {"n": 1}, now=H[1])
    pending = await control.trigger("default", "report", {"n": 2}, now=H[1] + timedelta(seconds=1))
    routes = {"noop": tuple(ALL_SHARDS)}
    [claimed] = (
        await store.finish_and_claim_occurrences([], "node-b", routes, 1, lease=600, now=H[1])
    ).jobs
    assert claimed.occurrence == running.occurrence
    done = await store.pause_job("default", "report", cancel=True, actor=ALICE, now=H[1])
    assert done.cancelled == (CancelledRun(running.occurrence, "trigger", H[1], "node-b"),)
    assert job_row(db, "report")["status"] == "paused"
    left = db.execute("SELECT id, lease_expires_at FROM pgpulse_occurrences").fetchall()
    assert left == [{"id": pending.occurrence, "lease_expires_at": None}]
    counts = [r["running"] for r in db.execute("SELECT running FROM pgpulse_batches ORDER BY id")]
    assert counts == [0, 0]
    [row] = run_rows(db)
    assert (row["id"], row["kind"], row["outcome"], row["error"]) == (
        running.occurrence,
        "trigger",
        "cancelled",
        CANCELLED,
    )
    assert await store.renew([claimed.key], lease=600, now=H[1]) == set()  # refused
    later = H[1] + timedelta(minutes=1)
    step = await store.finish_and_claim_occurrences([], "node-b", routes, 5, lease=600, now=later)
    assert step.jobs == []  # the pending one waits for the resume
    assert await store.resume_job("default", "report", now=later)
    step = await store.finish_and_claim_occurrences([], "node-b", routes, 5, lease=600, now=later)
    assert [j.occurrence for j in step.jobs] == [pending.occurrence]


async def test_a_fork_with_a_pause_requested_pauses_the_job_and_replaces_nothing(
    store: Store, db: Any
) -> None:
    """Overlap replace: the job row claimed for a second occurrence while the first runs, its
    pause requested: the fork pauses the job row, the new occurrence waits for the resume, and
    the running one is not cancelled (nothing replaces it)."""
    await add(store, spec("sync", schedule=TRIGGERED_ONLY, overlap="replace"), now=T0)
    handlers = NodeHandlers({"noop": lambda ctx: None}, "node-a", {})
    routes = {"noop": tuple(ALL_SHARDS)}
    await store.trigger_job("default", "sync")
    [row_claim] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=600)
    forked = (await decide_claim(row_claim, handlers)).outcome
    assert forked is not None and forked.outcome == "forked"
    assert await store.fork(forked)
    [first] = (await store.finish_and_claim_occurrences([], "node-a", routes, 5, lease=600)).jobs
    await store.trigger_job("default", "sync")
    [row_claim] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=600)
    done = await store.pause_job("default", "sync")
    assert (done.status, done.requested) == ("running", True)
    forked = (await decide_claim(row_claim, handlers)).outcome
    assert forked is not None and await store.fork(forked)
    job = job_row(db, "sync")
    assert (job["status"], job["pause_requested"]) == ("paused", False)
    occurrences = db.execute(
        "SELECT id, lease_expires_at IS NOT NULL AS held FROM pgpulse_occurrences ORDER BY id"
    ).fetchall()
    assert [o["held"] for o in occurrences] == [True, False]
    assert occurrences[0]["id"] == first.occurrence  # still running: not replaced
    assert (await store.finish_and_claim_occurrences([], "node-a", routes, 5, lease=600)).jobs == []
    assert run_rows(db) == []  # nothing cancelled


def test_what_a_paused_or_pausing_job_lists_as_to_come() -> None:
    """After the pause, never inside it nor in the past: a pause whose until passed but that
    the leader has not resumed yet lists the occurrences after the database's now; a running
    job whose pause is requested lists none (no until) or those after its until."""
    row = {
        "schedule": "0 * * * *",
        "timezone": "UTC",
        "anchor_at": T0,
        "scheduled_for": H[1],
        "status": "paused",
        "paused_until": H[2] + timedelta(minutes=30),
        "db_now": H[4] + timedelta(minutes=5),
    }
    assert upcoming(row, 2) == [H[5], H[5] + timedelta(hours=1)]
    assert upcoming({**row, "db_now": H[1]}, 2) == [H[3], H[4]]  # until not passed yet
    running = {**row, "status": "running", "pause_requested": True, "db_now": H[1]}
    assert upcoming({**running, "paused_until": None}) == []
    assert upcoming(running, 1) == [H[3]]
    assert upcoming({**running, "pause_requested": False}, 1) == [H[2]]  # the one after the run
