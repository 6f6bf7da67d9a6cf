"""Extra occurrences against a real PostgreSQL: a trigger with a payload, a backfill on request
(the exact set that runs), their bounds, and the overlap policies replace and allow
(docs/states.md, "Extra occurrences")."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helpers import add, spec, utc
from pgpulse.core.errors import InvalidInput
from pgpulse.core.model import ClaimKey
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from pgpulse.node.engine import Node
from pgpulse.node.handlers import Handler, RunContext
from test_engine import TRIGGERED_ONLY, running, wait_until
from test_engine import node as engine_node

#: The tests' history is of 2026-01-01: never pruned while they run.
KEEP_RUNS = 10 * 366 * 86400.0


def node(store: Store, dsn: str, handlers: Mapping[str, Handler], **config: Any) -> Node:
    """test_engine's fast node, keeping its history."""
    return engine_node(store, dsn, handlers, keep_runs=KEEP_RUNS, **config)


def history(db: Any) -> list[tuple[str, str, datetime]]:
    """(kind, outcome, scheduled_for) of every run row, in id order."""
    rows = db.execute("SELECT kind, outcome, scheduled_for FROM pgpulse_runs ORDER BY id")
    return [(r["kind"], r["outcome"], r["scheduled_for"]) for r in rows]


def leftovers(db: Any) -> tuple[int, list[int]]:
    """Extra occurrences left, and every batch's count of leases (all must end at 0)."""
    n = db.execute("SELECT count(*) AS n FROM pgpulse_occurrences").fetchone()["n"]
    counts = [r["running"] for r in db.execute("SELECT running FROM pgpulse_batches")]
    return n, counts


async def test_a_trigger_with_a_payload_runs_once_with_it_recorded_as_a_trigger(
    store: Store, dsn: str, db: Any
) -> None:
    seen: list[tuple[dict[str, Any], str, int]] = []

    async def work(ctx: RunContext) -> None:
        seen.append((dict(ctx.payload), ctx.kind, ctx.run_id))

    await add(store, spec("report", schedule=TRIGGERED_ONLY, handler="work", payload={"a": 0}))
    before = db.execute("SELECT scheduled_for FROM pgpulse_jobs").fetchone()["scheduled_for"]
    triggered = await RunControl(store.pool).trigger("default", "report", '{"a": 1, "b": [2]}')
    async with running(node(store, dsn, {"work": work})):
        await wait_until(lambda: history(db))
    assert seen == [({"a": 1, "b": [2]}, "trigger", triggered.occurrence)]
    assert history(db) == [("trigger", "succeeded", triggered.scheduled_for)]
    job = db.execute("SELECT scheduled_for, payload FROM pgpulse_jobs").fetchone()
    assert (job["scheduled_for"], job["payload"]) == (before, {"a": 0})  # the schedule: as it was
    assert leftovers(db) == (0, [0])


async def test_a_trigger_refuses_a_bad_payload_and_a_paused_job_writing_nothing(
    store: Store, db: Any
) -> None:
    await add(store, spec("report", schedule=TRIGGERED_ONLY, handler="work"))
    control = RunControl(store.pool)
    with pytest.raises(InvalidInput, match="payload must be a JSON object"):
        await control.trigger("default", "report", "[1]")
    await store.pause_job("default", "report")
    with pytest.raises(InvalidInput, match="only an idle or running job") as refused:
        await control.trigger("default", "report", {})
    assert (refused.value.field, refused.value.value) == ("status", "paused")
    assert db.execute("SELECT count(*) AS n FROM pgpulse_batches").fetchone()["n"] == 0


#: An hourly job whose history, by 07:30 on 1 January 2026, holds: 01:00 succeeded, 02:00
#: failed, 03:00 and 04:00 skipped (one summary row), and nothing for 05:00 and 06:00.
NOW = utc(2026, 1, 1, 7, 30)
H = [utc(2026, 1, 1, hour) for hour in range(8)]


async def hourly_with_history(store: Store, db: Any) -> int:
    [job_id] = await add(store, spec("hourly", schedule="0 * * * *", handler="work"), now=NOW)
    # the live schedule holds 08:00 but is not claimed in the test: only the backfill runs
    db.execute("UPDATE pgpulse_jobs SET next_run_at = '2100-01-01Z'")
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, finished_at,"
        " occurrences, last_scheduled_for) VALUES"
        " (%(j)s, %(h1)s, 1, 'succeeded', %(h1)s, 1, NULL),"
        " (%(j)s, %(h2)s, 3, 'failed', %(h2)s, 1, NULL),"
        " (%(j)s, %(h3)s, 0, 'skipped', %(h4)s, 2, %(h4)s)",
        {"j": job_id, "h1": H[1], "h2": H[2], "h3": H[3], "h4": H[4]},
    )
    return job_id


async def test_a_backfill_dry_run_classifies_the_range_and_writes_nothing(
    store: Store, db: Any
) -> None:
    await hourly_with_history(store, db)
    control = RunControl(store.pool)
    plan = await control.backfill("default", "hourly", start=H[1], end=H[6], dry_run=True, now=NOW)
    assert [(p.scheduled_for, p.status, p.selected) for p in plan.plan] == [
        (H[1], "succeeded", False),
        (H[2], "failed", True),
        (H[3], "skipped", True),
        (H[4], "skipped", True),
        (H[5], "missing", True),
        (H[6], "missing", True),
    ]
    assert plan.batch_id is None
    only_failed = await control.backfill(
        "default", "hourly", start=H[1], end=H[6], only=("failed",), dry_run=True, now=NOW
    )
    assert only_failed.selected == [H[2]]
    every = await control.backfill(
        "default", "hourly", start=H[1], end=H[6], only=("all",), newest_first=True,
        dry_run=True, now=NOW,
    )  # fmt: skip
    assert every.selected == [H[6], H[5], H[4], H[3], H[2], H[1]]
    assert db.execute("SELECT count(*) AS n FROM pgpulse_occurrences").fetchone()["n"] == 0


async def test_a_backfill_runs_exactly_the_selected_occurrences_once_beside_the_history(
    store: Store, dsn: str, db: Any
) -> None:
    """Succeeded, failed, skipped and never-run occurrences in one range: the default selection
    runs the failed, skipped and never-run ones, each once, as rows of their own marked
    backfill; the schedule's rows stay as they were; a second request for the same range while
    the first is queued adds nothing."""
    await hourly_with_history(store, db)
    ran: list[tuple[datetime, str]] = []

    async def work(ctx: RunContext) -> None:
        ran.append((ctx.scheduled_for, ctx.kind))

    control = RunControl(store.pool)
    first = await control.backfill("default", "hourly", start=H[1], end=H[6], now=NOW)
    again = await control.backfill("default", "hourly", start=H[1], end=H[6], now=NOW)
    assert first.selected == H[2:7]
    assert (again.selected, again.batch_id) == ([], None)  # all queued already
    async with running(node(store, dsn, {"work": work}, slots=3)):
        await wait_until(lambda: len(ran) == 5)
        await wait_until(lambda: leftovers(db) == (0, [0]))
    assert sorted(ran) == [(at, "backfill") for at in H[2:7]]
    assert history(db) == [
        ("scheduled", "succeeded", H[1]),
        ("scheduled", "failed", H[2]),
        ("scheduled", "skipped", H[3]),
        *[("backfill", "succeeded", at) for at in H[2:7]],
    ]
    # ran once: a repeated request, or one of a part of the range, finds nothing left to run
    for start, end in ((H[1], H[6]), (H[3], H[4])):
        dry = await control.backfill(
            "default", "hourly", start=start, end=end, dry_run=True, now=NOW
        )
        assert {p.status for p in dry.plan} == {"succeeded"}
        assert dry.selected == []
        done = await control.backfill("default", "hourly", start=start, end=end, now=NOW)
        assert (done.selected, done.batch_id) == ([], None)
    assert len(history(db)) == 8


async def test_the_newest_run_of_an_occurrence_decides_what_a_backfill_selects(
    store: Store, db: Any
) -> None:
    """A failed occurrence a backfill ran with success is succeeded; a succeeded one whose
    backfill (``--only all``) failed is failed again; a skipped or never-run one that a backfill
    ran is no longer missing."""
    job_id = await hourly_with_history(store, db)
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, finished_at, kind)"
        " VALUES (%(j)s, %(h1)s, 1, 'failed', %(now)s, 'backfill'),"
        " (%(j)s, %(h2)s, 1, 'succeeded', %(now)s, 'backfill'),"
        " (%(j)s, %(h3)s, 1, 'succeeded', %(now)s, 'backfill'),"
        " (%(j)s, %(h5)s, 1, 'failed', %(now)s, 'backfill'),"
        " (%(j)s, %(h5)s, 1, 'succeeded', %(now)s, 'backfill')",
        {"j": job_id, "now": NOW, "h1": H[1], "h2": H[2], "h3": H[3], "h5": H[5]},
    )
    plan = await RunControl(store.pool).backfill(
        "default", "hourly", start=H[1], end=H[6], dry_run=True, now=NOW
    )
    assert [(p.scheduled_for, p.status, p.selected) for p in plan.plan] == [
        (H[1], "failed", True),
        (H[2], "succeeded", False),
        (H[3], "succeeded", False),
        (H[4], "skipped", True),
        (H[5], "succeeded", False),
        (H[6], "missing", True),
    ]


async def test_a_backfill_runs_at_most_max_concurrency_at_once(
    store: Store, dsn: str, db: Any
) -> None:
    await hourly_with_history(store, db)
    now_running, most, done = 0, 0, 0

    async def work(ctx: RunContext) -> None:
        nonlocal now_running, most, done
        now_running += 1
        most = max(most, now_running)
        await asyncio.sleep(0.1)
        now_running -= 1
        done += 1

    await RunControl(store.pool).backfill(
        "default", "hourly", start=H[0], end=H[6], only=("all",), max_concurrency=2, now=NOW
    )
    async with running(node(store, dsn, {"work": work}, slots=6)):
        await wait_until(lambda: done == 7)
    assert most == 2
    assert leftovers(db) == (0, [0])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"start": H[6], "end": H[1]}, "to"),
        ({"start": H[1], "end": NOW + timedelta(hours=1)}, "to"),
        ({"start": H[1], "end": H[6], "only": ("some",)}, "only"),
        ({"start": H[1], "end": H[6], "max_concurrency": 0}, "max_concurrency"),
        ({"start": utc(2025, 1, 1), "end": H[6]}, "from"),  # 8,767 hours: fine
    ],
)
async def test_a_backfill_refuses_bad_requests_naming_the_field(
    store: Store, db: Any, kwargs: dict[str, Any], field: str
) -> None:
    await hourly_with_history(store, db)
    control = RunControl(store.pool)
    if field == "from":
        plan = await control.backfill("default", "hourly", dry_run=True, now=NOW, **kwargs)
        assert len(plan.plan) == 8767
        with pytest.raises(InvalidInput, match="more than 10,000 occurrences") as refused:
            await control.backfill("default", "hourly", start=utc(2024, 1, 1), end=H[6], now=NOW)
    else:
        with pytest.raises(InvalidInput) as refused:
            await control.backfill("default", "hourly", now=NOW, **kwargs)
    assert refused.value.field == field
    assert db.execute("SELECT count(*) AS n FROM pgpulse_batches").fetchone()["n"] == 0


async def shut(*nodes: Node) -> None:
    """Stop nodes driven step by step (never run()): cancel their attempts, close sessions."""
    for n in nodes:
        stopped = n.attempts.stop()
        if stopped:
            await asyncio.wait([a.task for a in stopped], timeout=5)
        await n.close()


def sleeper() -> tuple[Handler, asyncio.Event, asyncio.Event]:
    """A handler that sleeps 30 s; events set when it starts and when it is cancelled."""
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(ctx: RunContext) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    return handler, started, cancelled


async def fork_and_start(n: Node) -> None:
    """Claim the due job row (its attempt decides to fork), then write the fork and claim the
    forked occurrence, whose handler starts."""
    assert await n.claim_once() == 1  # the job row
    await wait_until(lambda: n.attempts.waiting == 1)  # decided: forked
    assert await n.claim_once() == 1  # the fork written; its occurrence claimed


async def test_replace_cancels_the_occurrence_running_on_another_node(
    store: Store, dsn: str, db: Any
) -> None:
    """Overlap replace: a new occurrence, claimed on node B, cancels the one node A runs — in
    the database at once (its history row 'cancelled', its lease gone), on A at its next
    renewal, which is refused — and starts."""
    on_a, a_started, a_cancelled = sleeper()
    on_b, b_started, _ = sleeper()
    await add(store, spec("sync", schedule=TRIGGERED_ONLY, handler="h", overlap="replace"))
    a = node(store, dsn, {"h": on_a})
    b = node(store, dsn, {"h": on_b})
    try:
        await a.start()
        first = await store.trigger_job("default", "sync")
        await fork_and_start(a)
        async with asyncio.timeout(5):
            await a_started.wait()
        await b.start()
        b.routes = {"h": tuple(range(64))}  # B claims whatever is due (ownership: an optimisation)
        second = await store.trigger_job("default", "sync")
        await fork_and_start(b)
        async with asyncio.timeout(5):
            await b_started.wait()
        rows = db.execute("SELECT outcome, scheduled_for, error FROM pgpulse_runs").fetchall()
        assert rows == [
            {
                "outcome": "cancelled",
                "scheduled_for": first,
                "error": "replaced by the occurrence at "
                + second.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
                + "Z",
            }
        ]
        assert not a_cancelled.is_set()
        await a.renew_once()  # refused: A cancels its attempt at once
        async with asyncio.timeout(2):
            await a_cancelled.wait()
        live = db.execute(
            "SELECT o.scheduled_for, o.locked_by, b.running FROM pgpulse_occurrences o"
            " JOIN pgpulse_batches b ON b.id = o.batch_id"
        ).fetchall()
        assert live == [{"scheduled_for": second, "locked_by": b.node_id, "running": 1}]
    finally:
        await shut(a, b)


async def test_allow_runs_up_to_max_concurrency_occurrences_each_once(
    store: Store, dsn: str, db: Any
) -> None:
    """Overlap allow with N = 3: a backlog of per-second occurrences runs three at a time on a
    node with ten slots, each occurrence once, each with a lease of its own."""
    now_running, most = 0, 0
    ran: list[datetime] = []

    async def work(ctx: RunContext) -> None:
        nonlocal now_running, most
        now_running += 1
        most = max(most, now_running)
        await asyncio.sleep(0.3)
        now_running -= 1
        ran.append(ctx.scheduled_for)

    db_now = db.execute("SELECT now() AS t").fetchone()["t"]
    await add(
        store,
        spec("tick", schedule="* * * * * *", handler="work", catch_up="backfill",
             overlap="allow", max_concurrency=3),
        now=db_now - timedelta(seconds=8),
    )  # fmt: skip
    async with running(node(store, dsn, {"work": work}, slots=10)):
        await wait_until(lambda: len(ran) >= 12)
    assert most == 3
    assert len(set(ran)) == len(ran)  # never two runs of one occurrence
    rows = db.execute(
        "SELECT scheduled_for, attempts FROM pgpulse_runs WHERE outcome = 'succeeded'"
    ).fetchall()
    assert {r["scheduled_for"] for r in rows} >= set(ran[:12])
    assert all(r["attempts"] == 1 for r in rows)


async def test_allow_takes_a_held_occurrence_as_soon_as_a_slot_frees(
    store: Store, dsn: str, db: Any
) -> None:
    """Overlap allow at max_concurrency: the occurrence that fell due meanwhile waits on the
    job row, and starts when the running one ends, not at the next occurrence or poll (the
    sixth trial saw occurrences 4-10 s late skipped, their slot free for seconds)."""
    starts: list[tuple[datetime, float]] = []
    ends: list[float] = []

    async def work(ctx: RunContext) -> None:
        starts.append((ctx.scheduled_for, asyncio.get_running_loop().time()))
        await asyncio.sleep(3.5)
        ends.append(asyncio.get_running_loop().time())

    await add(
        store,
        spec("slow", schedule="@every 3s", handler="work", overlap="allow", max_concurrency=1),
    )
    async with running(node(store, dsn, {"work": work}, slots=4, poll_interval=30.0)):
        await wait_until(lambda: len(starts) >= 3, within=20)
    first, second = starts[1][0] - starts[0][0], starts[2][0] - starts[1][0]
    assert (first, second) == (timedelta(seconds=3), timedelta(seconds=3))  # none skipped
    waited = [start - end for (_, start), end in zip(starts[1:], ends, strict=False)]
    assert all(0 <= w < 0.5 for w in waited), waited  # at once, not 2.5 s later


async def test_an_occurrence_is_fenced_reaped_and_finished_as_its_next_attempt(
    store: Store, db: Any
) -> None:
    """Invariants 2, 3 and 5 per occurrence, statement by statement: a claim gives a lease and a
    token; a stale token renews and writes nothing; an expired lease is reaped (the lost attempt
    counted, the batch's count released) and the next claim is attempt 2 of the same run."""
    from pgpulse.core.model import AttemptResult
    from pgpulse.node.dispatch import plan_finish

    await add(store, spec("report", schedule=TRIGGERED_ONLY, handler="work"))
    done = await RunControl(store.pool).trigger("default", "report", {"n": 1})
    shards = {"work": tuple(range(64))}
    # capability routing: a node whose routes lack the handler never claims (nor reads) it
    elsewhere = await store.finish_and_claim_occurrences(
        [], "z", {"other": tuple(range(64))}, 5, lease=30
    )
    assert (elsewhere.jobs, elsewhere.next_due) == ([], None)
    # ... nor counts it due: the job-row step's probe goes along the same routes
    other = await store.finish_and_claim([], "z", {"other": tuple(range(64))}, 5, lease=30)
    mine = await store.finish_and_claim([], "a", shards, 5, lease=30)
    assert (other.occurrences_due, mine.occurrences_due) == (None, done.scheduled_for)
    first = await store.finish_and_claim_occurrences([], "a", shards, 5, lease=30)
    [job] = first.jobs
    assert (job.occurrence, job.attempt, job.fencing_token, job.key) == (
        done.occurrence, 1, 1, ("occurrence", done.occurrence, 1),
    )  # fmt: skip
    assert (await store.finish_and_claim_occurrences([], "b", shards, 5, lease=30)).jobs == []
    stale = ClaimKey("occurrence", done.occurrence, 7)
    assert await store.renew([stale], lease=30) == set()  # a stale token renews nothing
    db.execute("UPDATE pgpulse_occurrences SET lease_expires_at = now() - interval '1 s'")
    assert await store.reap_expired_leases() == 1  # the heartbeat's sweep
    assert leftovers(db) == (1, [0])
    assert history(db) == [("trigger", "retrying", done.scheduled_for)]
    [again] = (await store.finish_and_claim_occurrences([], "b", shards, 5, lease=30)).jobs
    assert (again.attempt, again.fencing_token) == (2, 2)
    # while attempt 2 runs, the live view shows it with attempt 1 as its earlier one (20b)
    live = db.execute(
        "SELECT outcome, attempts, earlier_attempts, first_started_at, kind"
        " FROM pgpulse_runs_live WHERE id = %s",
        (done.occurrence,),
    ).fetchall()
    assert [(r["outcome"], r["attempts"], r["kind"]) for r in live] == [("running", 2, "trigger")]
    [earlier] = live[0]["earlier_attempts"]
    assert (earlier["attempt"], earlier["node_id"], earlier["outcome"]) == (1, "a", "retrying")
    late = plan_finish(job, AttemptResult(True), job.db_now)  # the zombie of attempt 1
    assert (await store.finish_and_claim_occurrences([late], "a", {}, 0, lease=30)).written == set()
    assert leftovers(db) == (1, [1])
    ok = plan_finish(again, AttemptResult(True), again.db_now)
    step = await store.finish_and_claim_occurrences([ok], "b", {}, 0, lease=30)
    assert step.written == {again.key}
    assert leftovers(db) == (0, [0])
    row = db.execute("SELECT id, attempts, outcome, node_id, kind FROM pgpulse_runs").fetchone()
    assert row == {
        "id": done.occurrence, "attempts": 2, "outcome": "succeeded", "node_id": "b",
        "kind": "trigger",
    }  # fmt: skip
    # the run row keeps every attempt: the reaped attempt 1 of node a before the latest
    [kept] = db.execute("SELECT earlier_attempts FROM pgpulse_runs").fetchone()["earlier_attempts"]
    assert (kept["attempt"], kept["node_id"], kept["fencing_token"]) == (1, "a", 1)
    assert kept["outcome"] == "retrying" and "expired" in kept["error"]


async def test_a_stopping_node_hands_an_occurrence_back(store: Store, db: Any) -> None:
    await add(store, spec("report", schedule=TRIGGERED_ONLY, handler="work"))
    await RunControl(store.pool).trigger("default", "report", {})
    await RunControl(store.pool).trigger("default", "report", {})
    started, unstarted = (
        await store.finish_and_claim_occurrences([], "a", {"work": tuple(range(64))}, 5, lease=30)
    ).jobs
    handed = await store.hand_back(
        [started.key, unstarted.key], started={started.key}, reason="stop"
    )
    assert handed == (2, 1)
    rows = db.execute("SELECT attempt, lease_expires_at FROM pgpulse_occurrences ORDER BY id")
    assert [(r["attempt"], r["lease_expires_at"]) for r in rows] == [(1, None), (0, None)]
    assert [o for _, o, _ in history(db)] == ["retrying"]
    assert leftovers(db)[1] == [0, 0]


async def test_pruning_forgets_old_batches_whose_occurrences_all_ran(store: Store, db: Any) -> None:
    await add(store, spec("report", schedule=TRIGGERED_ONLY, handler="work", overlap="replace"))
    control = RunControl(store.pool)
    await control.trigger("default", "report", {})  # still to run: kept
    db.execute("INSERT INTO pgpulse_batches (job_id, kind) SELECT id, 'overlap' FROM pgpulse_jobs")
    db.execute("INSERT INTO pgpulse_batches (job_id, kind) SELECT id, 'backfill' FROM pgpulse_jobs")
    later = db.execute("SELECT now() + interval '2 days' AS t").fetchone()["t"]
    await store.prune(keep_runs=86400.0, now=later)
    kinds = [r["kind"] for r in db.execute("SELECT kind FROM pgpulse_batches ORDER BY id")]
    assert kinds == ["trigger", "overlap"]  # the backfill with nothing left went
