"""The claim, lease and fencing contract of the store, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers import ALL_SHARDS, add, spec, utc
from pgpulse.core.model import ClaimedJob, ClaimKey, Outcome
from pgpulse.core.planner import Advance
from pgpulse.db.claims import CLAIM_SESSION_SETTINGS
from pgpulse.db.database import Session
from pgpulse.db.store import Store
from pgpulse.sql import QUERIES
from pgpulse_tools.bench.common import load_jobs

T0 = utc(2026, 1, 1, 0, 0, 30)
LATER = T0 + timedelta(minutes=5)  # every job created at T0 is due by then
#: The claim routes of a node that has the tests' handler, owning every shard.
NOOP_ALL = {"noop": tuple(ALL_SHARDS)}
#: ... as the claim statement's parameters.
ROUTE_ALL = {
    "route_handlers": ["noop"],
    "route_shards": ["{" + ",".join(map(str, ALL_SHARDS)) + "}"],
}


async def test_eight_concurrent_claimers_never_receive_the_same_job(store: Store) -> None:
    await add(store, *(spec(f"job-{i}") for i in range(400)), now=T0)

    async def claimer(n: int) -> list[int]:
        got: list[int] = []
        while batch := await store.claim_due(f"node-{n}", ALL_SHARDS, 7, lease=30, now=LATER):
            got.extend(job.id for job in batch)
        return got

    results = await asyncio.gather(*(claimer(n) for n in range(8)))
    claimed = [job_id for ids in results for job_id in ids]
    assert len(claimed) == 400
    assert len(set(claimed)) == 400  # nobody received a job twice
    assert sum(1 for ids in results if ids) >= 2  # the work really was shared


async def test_a_claim_row_is_a_claimed_job_field_by_field(store: Store, db: Any) -> None:
    """The store reads ClaimedJob by column name: the claim's columns are its fields (a job
    row is no extra occurrence: its occurrence and kind keep their defaults); and each field
    holds the stored value."""
    [job_id] = await add(
        store, spec("rollup", payload={"k": "v"}, timeout=9, max_attempts=4), now=T0
    )
    cur = db.execute(
        QUERIES["claim_jobs"],
        {"node": "n", "limit": 0, **ROUTE_ALL, "lease": 30, "now": LATER},
    )
    names = [c.name for c in cur.description]
    occurrence_only = {"occurrence", "kind", "upstream_runs", "data_interval_start"}
    assert sorted(names) == sorted(set(ClaimedJob._fields) - occurrence_only)
    [job] = await store.claim_due("n", ALL_SHARDS, 5, lease=30, now=LATER)
    row = db.execute("SELECT run_id FROM pgpulse_jobs").fetchone()
    assert (
        job.id,
        job.name,
        job.payload,
        job.timeout,
        job.max_attempts,
        job.attempt,
        job.fencing_token,
        job.run_id,
        job.scheduled_for,
        job.db_now,
    ) == (job_id, "rollup", {"k": "v"}, 9.0, 4, 1, 1, row["run_id"], utc(2026, 1, 1, 0, 1), LATER)


async def test_a_claimed_jobs_spread_offset_is_computed_by_the_node_as_the_database_does(
    store: Store, db: Any
) -> None:
    """The claim returns a job's spread (seconds), not its offset; the node's offset is the
    one the database stored the job's next_run_at with (pgpulse_spread_offset), and zero for a
    job without a spread."""
    ids = await add(store, spec("spread", spread=50), spec("plain"), now=T0)
    later = LATER + timedelta(minutes=1)  # past every spread instant
    jobs = {j.id: j for j in await store.claim_due("n", ALL_SHARDS, 5, lease=30, now=later)}
    spread, plain = (jobs[i] for i in ids)
    stored = db.execute(
        "SELECT pgpulse_spread_offset(id, spread) AS o FROM pgpulse_jobs WHERE id = %s", (ids[0],)
    ).fetchone()
    assert (spread.spread, spread.spread_offset) == (50.0, stored["o"])
    assert timedelta(0) < spread.spread_offset < timedelta(seconds=50)
    assert (plain.spread, plain.spread_offset) == (0.0, timedelta(0))


async def test_claimed_payloads_are_decoded_and_never_shared(store: Store) -> None:
    """Payloads arrive as binary jsonb; the empty object is made without the JSON decoder, a
    new dict per job (a handler that fills its payload cannot leak into another run)."""
    await add(store, spec("a"), spec("b"), spec("c", payload={"n": 10**30, "s": "é"}), now=T0)
    jobs = {job.name: job for job in await store.claim_due("n", ALL_SHARDS, 5, lease=30, now=LATER)}
    assert jobs["a"].payload == {} == jobs["b"].payload
    assert jobs["a"].payload is not jobs["b"].payload
    assert jobs["c"].payload == {"n": 10**30, "s": "é"}


async def test_a_claimer_skips_rows_locked_by_another_instead_of_waiting(
    store: Store, dsn: str
) -> None:
    ids = await add(store, *(spec(f"job-{i}") for i in range(10)), now=T0)
    async with await psycopg.AsyncConnection.connect(dsn) as holder:
        # Another poller's transaction holds five rows locked and does not commit.
        await holder.execute(
            "SELECT id FROM pgpulse_jobs WHERE id = ANY(%s) FOR UPDATE", (ids[:5],)
        )
        started = time.monotonic()
        batch = await store.claim_due("node-b", ALL_SHARDS, 10, lease=30, now=LATER)
        waited = time.monotonic() - started
        assert sorted(job.id for job in batch) == sorted(ids[5:])
        assert waited < 5  # it did not sit in a lock queue until the holder finished
        await holder.rollback()


async def test_claim_takes_only_owned_shards_and_shows_the_run_running(
    store: Store, db: Any
) -> None:
    """The claim writes only the job row; pgpulse_runs_live shows the attempt as running, under
    the run id the claim handed out (history is written when the attempt ends)."""
    ids = await add(store, *(spec(f"job-{i}") for i in range(128)), now=T0)
    batch = await store.claim_due("node-a", [0, 1], 100, lease=30, now=LATER)
    assert {job.id % 64 for job in batch} <= {0, 1}
    assert len(batch) == sum(1 for i in ids if i % 64 in (0, 1))
    job = batch[0]
    assert job.attempt == 1 and job.fencing_token == 1
    assert job.db_now == LATER
    assert db.execute("SELECT count(*) AS n FROM pgpulse_runs").fetchone() == {"n": 0}
    run = db.execute("SELECT * FROM pgpulse_runs_live WHERE id = %s", (job.run_id,)).fetchone()
    assert (run["outcome"], run["attempts"], run["started_at"], run["fencing_token"]) == (
        "running",
        1,
        LATER,
        1,
    )
    assert run["scheduled_for"] == job.scheduled_for and run["node_id"] == "node-a"
    row = db.execute(
        "SELECT status, lease_expires_at, locked_by FROM pgpulse_jobs WHERE id = %s", (job.id,)
    ).fetchone()
    assert row == {
        "status": "running",
        "lease_expires_at": LATER + timedelta(seconds=30),
        "locked_by": "node-a",
    }


async def test_every_attempt_of_an_occurrence_ends_in_one_history_row_with_the_run_id(
    store: Store, db: Any
) -> None:
    """History is written when an attempt ends: a retry's row is written by the failed attempt,
    hidden in pgpulse_runs_live while the next attempt runs, and updated by its end — one row, the
    id every attempt was handed, attempts 2, started at the second claim."""
    await add(store, spec("flaky"), now=T0)
    [first] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=LATER)
    assert await store.finish_runs(
        [Outcome(first, "retrying", retry_in=0.0, error="boom")], now=LATER, node="node-a"
    ) == {first.key}
    live = "SELECT id, outcome, attempts, node_id, started_at FROM pgpulse_runs_live"
    assert db.execute(live).fetchall() == [
        {
            "id": first.run_id,
            "outcome": "retrying",
            "attempts": 1,
            "node_id": "node-a",
            "started_at": LATER,
        }
    ]
    second_at = LATER + timedelta(seconds=5)
    [second] = await store.claim_due("node-b", ALL_SHARDS, 1, lease=30, now=second_at)
    assert (second.attempt, second.run_id) == (2, first.run_id)
    assert db.execute(live).fetchall() == [
        {
            "id": first.run_id,
            "outcome": "running",
            "attempts": 2,
            "node_id": "node-b",
            "started_at": second_at,
        }
    ]
    done = Outcome(second, "succeeded", advance=Advance(utc(2026, 1, 1, 0, 2)))
    assert await store.finish_runs([done], now=second_at + timedelta(seconds=1), node="node-b") == {
        second.key
    }
    assert db.execute(
        "SELECT id, outcome, attempts, node_id, started_at, finished_at, error FROM pgpulse_runs"
    ).fetchall() == [
        {
            "id": first.run_id,
            "outcome": "succeeded",
            "attempts": 2,
            "node_id": "node-b",
            "started_at": second_at,
            "finished_at": second_at + timedelta(seconds=1),
            "error": None,
        }
    ]
    # the next occurrence is a new run
    [nxt] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=utc(2026, 1, 1, 0, 2))
    assert nxt.attempt == 1 and nxt.run_id > first.run_id


async def test_claim_limit_is_respected_and_not_due_jobs_stay(store: Store) -> None:
    await add(store, *(spec(f"job-{i}") for i in range(5)), now=T0)
    assert await store.claim_due("n", ALL_SHARDS, 2, lease=30, now=LATER) != []
    assert len(await store.claim_due("n", ALL_SHARDS, 2, lease=30, now=LATER)) == 2
    assert len(await store.claim_due("n", ALL_SHARDS, 2, lease=30, now=LATER)) == 1
    assert await store.claim_due("n", ALL_SHARDS, 5, lease=30, now=T0) == []


async def test_stale_token_completion_changes_nothing(store: Store, db: Any) -> None:
    """A zombie (paused past its lease) wakes and tries to complete: fencing refuses it."""
    [job_id] = await add(store, spec("billing"), now=T0)
    [zombie] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=LATER)
    # node-a is paused; its lease expires; the sweeper returns the job; node-b claims it.
    after_lease = LATER + timedelta(seconds=31)
    assert await store.reap_expired_leases(now=after_lease) == 1
    [taker] = await store.claim_due("node-b", ALL_SHARDS, 1, lease=30, now=after_lease)
    assert taker.fencing_token == zombie.fencing_token + 1
    assert taker.attempt == 2 and taker.run_id == zombie.run_id  # same run, next attempt

    before = db.execute("SELECT * FROM pgpulse_jobs WHERE id = %s", (job_id,)).fetchone()
    run_before = db.execute("SELECT * FROM pgpulse_runs WHERE id = %s", (zombie.run_id,)).fetchone()
    wrote = await store.finish_runs(
        [Outcome(zombie, "retrying", retry_in=1.0, error="zombie")], node="node-a"
    )
    assert wrote == set()
    assert db.execute("SELECT * FROM pgpulse_jobs WHERE id = %s", (job_id,)).fetchone() == before
    assert (
        db.execute("SELECT * FROM pgpulse_runs WHERE id = %s", (zombie.run_id,)).fetchone()
        == run_before
    )
    # The zombie cannot renew its lease either; the rightful holder can.
    assert await store.renew([ClaimKey("job", job_id, zombie.fencing_token)], lease=30) == set()
    assert await store.renew([taker.key], lease=30, now=after_lease) == {taker.key}


async def test_a_claim_whose_handler_never_started_is_handed_back_uncounted(
    store: Store, db: Any
) -> None:
    [job_id] = await add(store, spec("cleanup"), now=T0)
    [job] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=LATER)
    assert await store.hand_back([job.key], started=(), reason="shutdown") == (1, 0)
    row = db.execute(
        "SELECT status, attempt, lease_expires_at, last_error FROM pgpulse_jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row == {
        "status": "idle",
        "attempt": 0,
        "lease_expires_at": None,
        "last_error": "shutdown",
    }
    # the attempt did not happen: no history, nothing shown as running
    assert db.execute("SELECT count(*) AS n FROM pgpulse_runs_live").fetchone() == {"n": 0}
    [again] = await store.claim_due("node-b", ALL_SHARDS, 1, lease=30)
    assert again.attempt == 1 and again.run_id == job.run_id  # the same run, attempt 1 again


async def test_a_started_attempt_handed_back_is_recorded_and_the_next_claim_is_attempt_two(
    store: Store, db: Any
) -> None:
    """A stopping node cancelled an attempt whose handler had run: the history keeps it, with
    why it ended, and the occurrence's next claim is its second attempt. Fenced: a stale
    claim hands back nothing."""
    [job_id] = await add(store, spec("report"), now=T0)
    [job] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=LATER)
    stale = ClaimKey("job", job_id, job.fencing_token - 1)
    reason = "handed back by node node-a at shutdown"
    assert await store.hand_back(
        [stale, job.key], started={stale, job.key}, reason=reason, now=LATER
    ) == (1, 1)
    run = db.execute(
        "SELECT id, scheduled_for, attempts, outcome, node_id, fencing_token, started_at, "
        "finished_at, error FROM pgpulse_runs"
    ).fetchall()
    assert run == [
        {
            "id": job.run_id,
            "scheduled_for": job.scheduled_for,
            "attempts": 1,
            "outcome": "retrying",
            "node_id": "node-a",
            "fencing_token": job.fencing_token,
            "started_at": LATER,
            "finished_at": None,
            "error": reason,
        }
    ]
    row = db.execute(
        "SELECT status, attempt, locked_by, last_error FROM pgpulse_jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row == {"status": "idle", "attempt": 1, "locked_by": None, "last_error": reason}
    [again] = await store.claim_due("node-b", ALL_SHARDS, 1, lease=30)
    assert (again.attempt, again.run_id) == (2, job.run_id)  # the same run, its second attempt


async def test_reaper_ignores_live_leases(store: Store) -> None:
    await add(store, spec("a"), spec("b"), now=T0)
    await store.claim_due("node-a", ALL_SHARDS, 2, lease=30, now=LATER)
    assert await store.reap_expired_leases(now=LATER + timedelta(seconds=29)) == 0
    assert await store.reap_expired_leases(now=LATER + timedelta(seconds=31)) == 2


def load_hourly(dsn: str, count: int) -> None:
    """``count`` jobs ``@every 1h``, loaded in bulk as the benchmark loads them (then ANALYZE):
    one falls due each second from T0 + 1 h on, an hour's worth at a time."""
    load_jobs(
        dsn,
        count,
        schedule="@every 1h",
        kind="interval",
        base=T0 + timedelta(hours=1),
        modulo=3600,
        step=1.0,
    )


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(_plan_nodes(child))
    return nodes


async def test_an_empty_poll_reads_no_rows_however_many_are_stored(store: Store, dsn: str) -> None:
    """The due bound must be an index condition: nothing due means nothing read (the seed's
    trap, and ours once: a bound joined from a CTE made every idle poll scan every idle row)."""
    await add(store, *(spec(f"job-{i}") for i in range(3000)), now=T0)
    params = {
        "outcomes": "[]",
        "node": "n",
        **ROUTE_ALL,
        "limit": 100,
        "lease": 30,
        "now": T0,
    }
    plans = []
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await conn.execute("ANALYZE pgpulse_jobs")  # plan on statistics, not on a guess
        for name in ("claim_jobs", "next_job_due"):
            cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES[name], params)
            row = await cur.fetchone()
            assert row is not None
            plans.append(_plan_nodes(row[0][0]["Plan"]))
        await conn.rollback()
    claim, ahead_plan = (
        [n for n in plan if n.get("Index Name") == "pgpulse_jobs_due"] for plan in plans
    )
    assert all("Index Cond" in n for n in claim + ahead_plan), plans
    due = [n for n in claim if "<=" in n["Index Cond"]]
    ahead = [n for n in ahead_plan if "<=" not in n["Index Cond"]]
    assert due, "the claim does not use the partial index on idle rows"
    assert all(n["Actual Rows"] == 0 for n in due), due
    # The next due instant (returned when fewer were claimed than asked) reads one index entry.
    assert ahead and all(n["Actual Rows"] == 1 for n in ahead), ahead


async def test_one_step_writes_outcomes_and_says_when_their_jobs_are_due(
    store: Store, db: Any
) -> None:
    """finish_and_claim writes the outcome, then claims, in one round trip and one
    transaction: the claim sees the outcome, so a backfill job whose next occurrence is
    already due is claimed in the same step (new token, new run); with nothing left to claim,
    the step says when the next job is due."""
    [job_id, hourly] = await add(
        store, spec("a", catch_up="backfill"), spec("hourly", schedule="0 * * * *"), now=T0
    )
    [job] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=30, now=LATER)
    assert job.id == job_id and job.scheduled_for == utc(2026, 1, 1, 0, 1)
    done = Outcome(job, "succeeded", advance=Advance(utc(2026, 1, 1, 0, 2)), output="a\x00b")
    step = await store.finish_and_claim([done], "node-a", NOOP_ALL, 5, lease=30, now=LATER)
    [again] = step.jobs
    assert (step.written, step.db_now) == ({job.key}, LATER)
    assert (again.id, again.scheduled_for) == (job_id, utc(2026, 1, 1, 0, 2))
    assert again.fencing_token == job.fencing_token + 1 and again.run_id != job.run_id
    assert step.next_due == utc(2026, 1, 1, 1, 0)  # the hourly job, the only one idle
    assert hourly not in {j.id for j in step.jobs}
    run = db.execute(
        "SELECT outcome, output FROM pgpulse_runs WHERE id = %s", (job.run_id,)
    ).fetchone()
    assert run == {"outcome": "succeeded", "output": "a\ufffdb"}  # NUL cannot be stored as is


async def test_after_a_full_batch_the_next_due_instant_is_asked_only_when_a_batch_is_short(
    store: Store, dsn: str
) -> None:
    """A full batch's next due instant is never read, so the step after a full batch leaves
    next_job_due out, and sends it alone when that batch comes back short after all."""
    await add(store, *(spec(f"job-{i}") for i in range(5)), now=T0)
    await add(store, spec("hourly", schedule="0 * * * *"), now=T0)
    sent: list[list[str]] = []
    send = store._send_step

    async def recording(names: Any, params: dict[str, Any]) -> Any:
        sent.append(list(names))
        return await send(names, params)

    store._send_step = recording  # type: ignore[method-assign]
    steps = [await store.finish_and_claim([], "n", NOOP_ALL, 2, lease=30, now=LATER)]
    steps += [await store.finish_and_claim([], "n", NOOP_ALL, 2, lease=30, now=LATER)]
    steps += [await store.finish_and_claim([], "n", NOOP_ALL, 2, lease=30, now=LATER)]
    assert sent == [
        ["claim_jobs", "next_job_due"],  # nothing known yet: asked
        ["claim_jobs"],  # after a full batch
        ["claim_jobs"],  # after a full batch, and this one is short (one left): asked alone
        ["next_job_due"],
    ]
    assert [len(s.jobs) for s in steps] == [2, 2, 1]
    assert [(s.next_due, s.db_now) for s in steps] == [
        (utc(2026, 1, 1, 1, 0), LATER),
        (None, LATER),
        (utc(2026, 1, 1, 1, 0), LATER),
    ]


async def test_a_step_with_a_skip_or_an_auto_pause_writes_them_beside_plain_outcomes(
    store: Store, db: Any
) -> None:
    """A node sends the step without its rare parts unless its batch needs one: a batch that
    mixes a plain outcome, one that skipped occurrences and one that pauses its job writes the
    skip summary row and the pause's audit row; the next plain batch writes neither."""
    ids = await add(store, spec("plain"), spec("skips"), spec("pauses"), now=T0)
    jobs = {j.id: j for j in await store.claim_due("node-a", ALL_SHARDS, 3, lease=30, now=LATER)}
    plain, skips, pauses = (jobs[i] for i in ids)
    nxt, first, last = utc(2026, 1, 1, 0, 9), utc(2026, 1, 1, 0, 6), utc(2026, 1, 1, 0, 8)
    batch = [
        Outcome(plain, "succeeded", advance=Advance(nxt)),
        Outcome(skips, "succeeded", advance=Advance(nxt, 3, first, last)),
        Outcome(pauses, "failed", advance=Advance(nxt), status="paused", pause_reason="3 failed"),
    ]  # fmt: skip
    assert await store.finish_runs(batch, node="node-a", now=LATER) == {
        j.key for j in jobs.values()
    }
    summary = db.execute(
        "SELECT job_id, scheduled_for, occurrences, last_scheduled_for FROM pgpulse_runs "
        "WHERE outcome = 'skipped'"
    ).fetchall()
    assert summary == [
        {"job_id": skips.id, "scheduled_for": utc(2026, 1, 1, 0, 6), "occurrences": 3,
         "last_scheduled_for": utc(2026, 1, 1, 0, 8)}
    ]  # fmt: skip
    audit = db.execute(
        "SELECT job_id, actor FROM pgpulse_job_history WHERE action = 'pause'"
    ).fetchall()
    assert audit == [{"job_id": pauses.id, "actor": "node:node-a"}]
    again = await store.claim_due("node-a", ALL_SHARDS, 3, lease=30, now=nxt)
    assert sorted(j.id for j in again) == sorted((plain.id, skips.id))  # the paused one stays
    later = [Outcome(j, "succeeded", advance=Advance(nxt + timedelta(minutes=1))) for j in again]
    assert len(await store.finish_runs(later, node="node-a", now=nxt)) == 2
    counts = db.execute(
        "SELECT (SELECT count(*) FROM pgpulse_runs WHERE outcome = 'skipped') AS skips,"
        " (SELECT count(*) FROM pgpulse_job_history WHERE action = 'pause') AS pauses"
    ).fetchone()
    assert counts == {"skips": 1, "pauses": 1}  # the plain batch wrote neither


async def test_a_failed_step_writes_no_outcome(store: Store, db: Any) -> None:
    """The outcome and the claim commit together or not at all (one transaction; the node
    sends the outcome again with its next step)."""
    [job_id] = await add(store, spec("a"), now=T0)
    [job] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=LATER)
    done = Outcome(job, "succeeded", advance=Advance(utc(2026, 1, 1, 0, 2)))
    before = db.execute("SELECT * FROM pgpulse_jobs WHERE id = %s", (job_id,)).fetchone()
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        # 40000 is no smallint: the claim fails after the outcome was sent
        await store.finish_and_claim([done], "node-a", {"noop": (40000,)}, 1, lease=30, now=LATER)
    assert db.execute("SELECT * FROM pgpulse_jobs WHERE id = %s", (job_id,)).fetchone() == before
    step = await store.finish_and_claim([done], "node-a", NOOP_ALL, 0, lease=30, now=LATER)
    assert step.written == {job.key} and step.jobs == [] and step.next_due is None


async def test_a_node_claims_with_one_generic_plan_and_no_jit(store: Store, dsn: str) -> None:
    """The claim session prepares the claim at its first use and plans it once per session (a
    generic plan, not ~1 ms of planning per call), and never JIT-compiles it."""
    await add(store, *(spec(f"job-{i}") for i in range(20)), now=T0)
    session = Session(dsn, "pgpulse:test:claim", CLAIM_SESSION_SETTINGS)
    claimer = Store(session)
    try:
        for _ in range(8):
            assert len(await claimer.claim_due("n", ALL_SHARDS, 1, lease=30, now=LATER)) == 1
        async with session.connection() as conn:
            cur = await conn.execute(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            )
            prepared = await cur.fetchall()
            jit = await (await conn.execute("SELECT current_setting('jit') AS jit")).fetchone()
    finally:
        await session.close()
    [claim] = [row for row in prepared if "SKIP LOCKED" in row["statement"]]
    assert (claim["generic_plans"], claim["custom_plans"]) == (8, 0)  # prepared at once
    assert jit == {"jit": "off"}


def _dollar(statement: str) -> tuple[str, tuple[str, ...]]:
    """``statement`` with PostgreSQL's own ``$n`` placeholders for its ``%(name)s`` ones (one
    number per name, in first-use order), as the driver prepares it; and the names in order."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return re.sub(r"%\((\w+)\)s", number, statement).replace("%%", "%"), tuple(names)


async def _explain_generic_claim(
    dsn: str,
    limit: int,
    now: Any,
    outcomes: str = "[]",
    meanwhile: Callable[[], None] | None = None,
    name: str = "claim_jobs",
) -> list[dict[str, Any]]:
    """The plan nodes of statement ``name`` of the claim step as a node's claim session runs it
    (prepared, generic), with the shards written as a constant: the planner then knows every
    due row qualifies, the worst case for its estimates (and how the pgbench ceiling runs it).
    With ``meanwhile``, the plan is made first (an execute that writes and claims nothing), then
    ``meanwhile`` runs, then the explained execute: a session keeps its generic plan however the
    tables change."""
    shards = "ARRAY['{" + ",".join(map(str, ALL_SHARDS)) + "}']"
    values = {
        "outcomes": outcomes,
        "node": "n",
        **ROUTE_ALL,
        "limit": limit,
        "lease": 30,
        "now": now,
    }
    warm = None if meanwhile is None else ({"outcomes": "[]", "limit": 0}, meanwhile)
    nodes, _ = await explain_in_claim_session(
        dsn, QUERIES[name].replace("%(route_shards)s", shards), values, warm=warm
    )
    return nodes


async def explain_in_claim_session(
    dsn: str,
    statement: str,
    values: dict[str, Any],
    *,
    warm: tuple[dict[str, Any], Callable[[], None]] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """The plan nodes of ``statement`` (``%(name)s`` placeholders) executed with ``values`` as
    a node's claim session runs it (prepared, generic: claims.CLAIM_SESSION_SETTINGS), in a
    transaction rolled back; and the server's version number. With ``warm`` (overrides of
    ``values``, a callable), the plan is made first by an execute with the overrides, then the
    callable runs, then the explained execute: a session keeps its generic plan however the
    tables change."""
    text, names = _dollar(statement)

    def args(**override: Any) -> sql.Composed:
        return sql.SQL(", ").join(sql.Literal({**values, **override}[name]) for name in names)

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for setting, value in CLAIM_SESSION_SETTINGS.items():
            await conn.execute("SELECT set_config(%s, %s, false)", (setting, value))
        await conn.execute(f"PREPARE claim AS {text}")
        if warm is not None:
            overrides, meanwhile = warm
            await conn.execute(sql.SQL("EXECUTE claim({})").format(args(**overrides)))
            meanwhile()
        await conn.execute("BEGIN")
        cur = await conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim({})").format(args())
        )
        row = await cur.fetchone()
        await conn.execute("ROLLBACK")
        version = conn.info.server_version
    assert row is not None
    return _plan_nodes(row[0][0]["Plan"]), version


async def test_the_generic_claim_plan_reads_only_what_it_claims(store: Store, dsn: str) -> None:
    """The plan a node's claim session uses is index-driven whatever the backlog: nothing due
    reads no row; a claim of 5 among 100,000 due reads no more than 5 rows at any step (a
    generic plan once merge-joined the whole primary key: 60 ms for 50 rows at 300,000 due)."""
    load_hourly(dsn, 100_000)
    idle = await _explain_generic_claim(dsn, 100, T0)
    due = [
        n
        for n in idle
        if n.get("Index Name") == "pgpulse_jobs_due" and "<=" in n.get("Index Cond", "")
    ]
    assert due and all(n["Actual Rows"] == 0 for n in due), due
    # ... and finding the next due instant reads the one index entry after now
    idle = await _explain_generic_claim(dsn, 100, T0, name="next_job_due")
    assert max(n["Actual Rows"] for n in idle) == 1, [
        (n["Node Type"], n.get("Index Name"), n["Actual Rows"]) for n in idle
    ]
    backlog = await _explain_generic_claim(dsn, 5, T0 + timedelta(hours=3))
    assert max(n["Actual Rows"] for n in backlog) == 5, [
        (n["Node Type"], n.get("Index Name"), n["Actual Rows"]) for n in backlog
    ]
    assert not [n for n in backlog if n["Node Type"] == "Seq Scan"]


async def test_the_claim_never_reads_the_due_jobs_of_handlers_it_has_no_route_for(
    store: Store, dsn: str, db: Any
) -> None:
    """Capability routing: of 20,000 due jobs, the older half need a handler the
    claiming node lacks; a claim of 5 along the node's route (noop) still reads no more than 5
    rows at any step, and claims only noop jobs: its cost does not depend on how many due jobs
    it cannot run (they would all stand before its first one in due order)."""
    load_hourly(dsn, 20_000)
    db.execute(
        "UPDATE pgpulse_jobs SET handler = 'elsewhere', next_run_at = next_run_at - interval "
        "'1 hour', scheduled_for = scheduled_for - interval '1 hour' WHERE mod(id, 2) = 0"
    )
    db.execute("VACUUM ANALYZE pgpulse_jobs")
    backlog = await _explain_generic_claim(dsn, 5, T0 + timedelta(hours=3))
    assert max(n["Actual Rows"] for n in backlog) == 5, [
        (n["Node Type"], n.get("Index Name"), n["Actual Rows"]) for n in backlog
    ]
    claimed = await store.claim_due(
        "n", ALL_SHARDS, 5, lease=30, handlers=["noop"], now=T0 + timedelta(hours=3)
    )
    assert len(claimed) == 5 and {job.handler for job in claimed} == {"noop"}
    assert (
        await store.claim_due(
            "n", ALL_SHARDS, 5, lease=30, handlers=["missing"], now=T0 + timedelta(hours=3)
        )
        == []
    )


async def test_the_generic_step_plan_finds_each_finished_run_by_its_keys(
    store: Store, dsn: str, db: Any
) -> None:
    """Finishing a batch reads only the rows it finishes, whatever the statistics were when the
    claim session planned it. Here they are a fresh install's: pgpulse_runs analyzed while empty,
    no job running. A plan made from them scanned all of pgpulse_runs for each finished run (and
    read every running job through pgpulse_jobs_leases); with 4,000 history rows and 60 jobs
    running, finishing 3 must read at most 3 rows at any step, and write 3 history rows."""
    await add(store, *(spec(f"job-{i}") for i in range(60)), now=T0)
    db.execute("VACUUM ANALYZE pgpulse_jobs")
    db.execute("VACUUM ANALYZE pgpulse_runs")  # empty
    claimed = await store.claim_due("n", ALL_SHARDS, 60, lease=30, now=LATER)

    def history_grows() -> None:  # the plan is made while the history is empty, used once not
        db.execute(
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, finished_at) "
            "SELECT j.id, %s - make_interval(mins => k), 1, 'succeeded', %s "
            "FROM pgpulse_jobs j, generate_series(1, 66) AS k",
            (T0, T0),
        )

    finished = claimed[:3]
    nxt = [(job.scheduled_for + timedelta(minutes=1)).isoformat() for job in finished]
    ended = [
        {
            "job_id": job.id,
            "token": job.fencing_token,
            "status": "idle",
            "scheduled_for": at,
            "next_run_at": at,
            "retry_in": 0.0,
            "reset_attempt": True,
            "outcome": "succeeded",
            "error": None,
            "output": None,
            "skips": 0,
            "skip_from": None,
            "skip_to": None,
            "skip_reason": None,
            "run_id": job.run_id,
            "run_scheduled_for": job.scheduled_for.isoformat(),
            "attempt": job.attempt,
            "node": "n",
        }
        for job, at in zip(finished, nxt, strict=True)
    ]
    plan = await _explain_generic_claim(
        dsn, 0, LATER, json.dumps(ended), history_grows, name="finish_jobs"
    )
    reads = [
        (
            n["Node Type"],
            n.get("Relation Name"),
            n.get("Index Name"),
            n["Actual Rows"] * n["Actual Loops"],
        )
        for n in plan
        if n.get("Relation Name")
    ]
    writes = sorted(
        (n["Operation"], n["Relation Name"], n["Actual Rows"])
        for n in plan
        if n["Node Type"] == "ModifyTable"
    )
    # the three were written, each with its history row
    assert writes == [("Insert", "pgpulse_runs", 3), ("Update", "pgpulse_jobs", 3)], reads
    assert max(rows for _, _, _, rows in reads) == 3, "\n".join(map(str, reads))
    assert not [n for n in plan if n["Node Type"] == "Seq Scan"], reads
