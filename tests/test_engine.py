"""One node's engine against a real PostgreSQL: claiming, retries, timeouts, leases, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from helpers import add, spec
from pgpulse.alerts import services as alert_services
from pgpulse.core.model import Step, pause_after
from pgpulse.core.sharding import DEFAULT_SHARD_COUNT
from pgpulse.db.store import Store
from pgpulse.node.engine import Node, NodeConfig
from pgpulse.node.handlers import Handler, RunContext

#: A schedule whose next occurrence is months away: a triggered job then runs exactly once in a
#: test, whenever the test runs ("* * * * *" would fire again if the test crossed a minute).
TRIGGERED_ONLY = "0 0 1 1 *"

FAST = {
    "heartbeat_interval": 0.2,
    "lease": 2.0,
    "node_ttl": 1.0,
    "poll_interval": 0.5,
    "drain_timeout": 0.5,
}


#: The nodes this module's current test made (closed after it: :func:`close_nodes`).
_made: list[Node] = []


def node(store: Store, dsn: str, handlers: Mapping[str, Handler], **config: Any) -> Node:
    made = Node(store, dsn, handlers, NodeConfig(**{**FAST, **config}))
    alert_services.register(made)  # as App.run_node does
    _made.append(made)
    return made


@pytest.fixture(autouse=True)
async def close_nodes() -> AsyncIterator[None]:
    """Close the sessions of the nodes a test drove step by step (``run()`` closes its own)."""
    yield
    while _made:
        await _made.pop().close()


@contextlib.asynccontextmanager
async def running(n: Node) -> AsyncIterator[Node]:
    task = asyncio.create_task(n.run())
    async with asyncio.timeout(10):
        await n.started.wait()
    try:
        yield n
    finally:
        n.stop()
        async with asyncio.timeout(10):
            await task


def sleeper() -> tuple[Handler, asyncio.Event]:
    """A handler that sleeps 30 s, and an event set when it is cancelled."""
    cancelled = asyncio.Event()

    async def handler(ctx: RunContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    return handler, cancelled


async def wait_until(predicate: Any, within: float = 30.0) -> None:
    """Poll ``predicate()`` (sync or async) until true; fail after ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            result = predicate()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return
            await asyncio.sleep(0.05)


async def test_two_nodes_split_the_shards_without_overlap(store: Store, dsn: str) -> None:
    a, b = node(store, dsn, {}), node(store, dsn, {})
    await a.start()
    assert a.shards == tuple(range(DEFAULT_SHARD_COUNT))  # alone, it owns everything
    await b.start()
    await a.heartbeat_once()
    assert set(a.shards) | set(b.shards) == set(range(DEFAULT_SHARD_COUNT))
    assert not set(a.shards) & set(b.shards)
    assert a.shards and b.shards


async def test_a_backlog_never_runs_more_attempts_than_slots(
    store: Store, dsn: str, db: Any
) -> None:
    """Invariant 6: 40 due jobs on a node of 3 slots all run, each once, never more than 3 at
    once (an attempt's slot is free once its outcome is decided, before it is written)."""
    now_running, most, ran = 0, 0, []

    async def work(ctx: RunContext) -> None:
        nonlocal now_running, most
        now_running += 1
        most = max(most, now_running)
        await asyncio.sleep(0.02)
        now_running -= 1
        ran.append(ctx.job_name)

    await add(store, *(spec(f"j{i}", schedule=TRIGGERED_ONLY, handler="work") for i in range(40)))
    for i in range(40):
        await store.trigger_job("default", f"j{i}")
    async with running(node(store, dsn, {"work": work}, slots=3)):
        await wait_until(lambda: len(ran) == 40)
        await wait_until(
            lambda: (
                db.execute(
                    "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
                ).fetchone()["n"]
                == 40
            )
        )
    assert (most, sorted(ran)) == (3, sorted(f"j{i}" for i in range(40)))


async def test_an_every_second_job_runs_each_occurrence_once(
    store: Store, dsn: str, db: Any
) -> None:
    seen: list[RunContext] = []

    async def tick(ctx: RunContext) -> str:
        seen.append(ctx)
        return f"tick {ctx.attempt}"

    await add(store, spec("tick", schedule="@every 1s", handler="tick"))
    async with running(node(store, dsn, {"tick": tick})):
        await wait_until(lambda: len(seen) >= 3)
    times = [ctx.scheduled_for for ctx in seen]
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(times)] == [1.0] * (
        len(times) - 1
    )
    # Every attempt that ran had returned before the node stopped, and a stopping node writes
    # the outcomes it decided: one succeeded row per occurrence seen, and nothing else.
    runs = db.execute(
        "SELECT scheduled_for, outcome, attempts, output FROM pgpulse_runs ORDER BY scheduled_for"
    ).fetchall()
    assert len(times) >= 3
    assert runs == [
        {"scheduled_for": at, "outcome": "succeeded", "attempts": 1, "output": "tick 1"}
        for at in times
    ]


async def test_failures_retry_then_succeed_in_the_same_run(store: Store, dsn: str, db: Any) -> None:
    attempts: list[int] = []

    def flaky(ctx: RunContext) -> str:  # a sync handler: runs in a worker thread
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise RuntimeError(f"boom {ctx.attempt}")
        return "ok"

    await add(
        store,
        spec("flaky", schedule=TRIGGERED_ONLY, handler="flaky", max_attempts=3, retry_backoff=0.05),
    )
    await store.trigger_job("default", "flaky")
    async with running(node(store, dsn, {"flaky": flaky})):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
            ).fetchone()["n"]
        )
    assert attempts == [1, 2, 3]
    run = db.execute("SELECT outcome, attempts, error, output FROM pgpulse_runs").fetchone()
    assert run == {"outcome": "succeeded", "attempts": 3, "error": None, "output": "ok"}


async def test_exhausted_attempts_fail_the_run_and_the_job_moves_on(
    store: Store, dsn: str, db: Any
) -> None:
    async def broken(ctx: RunContext) -> None:
        raise ValueError("no upstream")

    await add(
        store,
        spec("broken", schedule="0 0 1 1 *", handler="broken", max_attempts=2, retry_backoff=0.05),
    )
    before = db.execute("SELECT scheduled_for FROM pgpulse_jobs").fetchone()["scheduled_for"]
    occurrence = await store.trigger_job("default", "broken")
    async with running(node(store, dsn, {"broken": broken})):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'failed'"
            ).fetchone()["n"]
        )
    run = db.execute("SELECT scheduled_for, outcome, attempts, error FROM pgpulse_runs").fetchone()
    assert run == {
        "scheduled_for": occurrence,
        "outcome": "failed",
        "attempts": 2,
        "error": "ValueError: no upstream",
    }
    job = db.execute(
        "SELECT status, scheduled_for, attempt, last_outcome FROM pgpulse_jobs"
    ).fetchone()
    assert job == {
        "status": "idle",
        "scheduled_for": before,
        "attempt": 0,
        "last_outcome": "failed",
    }


async def test_retries_and_final_failures_say_why_and_when(
    store: Store, dsn: str, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A retry is logged with its error and the next attempt's instant (INFO); a run that
    fails for good is a WARNING with its error."""

    async def broken(ctx: RunContext) -> None:
        raise ValueError(f"no upstream at attempt {ctx.attempt}")

    await add(
        store,
        spec(
            "broken", schedule=TRIGGERED_ONLY, handler="broken", max_attempts=2, retry_backoff=0.2
        ),
    )
    await store.trigger_job("default", "broken")
    caplog.set_level(logging.INFO, logger="pgpulse.node.outcomes")
    async with running(node(store, dsn, {"broken": broken})):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'failed'"
            ).fetchone()["n"]
        )
    records = {r.action: r for r in caplog.records if r.name == "pgpulse.node.outcomes"}  # type: ignore[attr-defined]
    retry, failed = records["run_retrying"], records["run_failed"]
    assert retry.levelno == logging.INFO
    assert retry.error == "ValueError: no upstream at attempt 1"  # type: ignore[attr-defined]
    retry_at = datetime.fromisoformat(retry.retry_at)  # type: ignore[attr-defined]
    message = retry.getMessage()
    assert "ValueError: no upstream at attempt 1" in message and str(retry_at) in message
    # the retry waits 1-2 s; the node's estimate of the instant is within a claim's round trip
    second = db.execute("SELECT started_at FROM pgpulse_runs").fetchone()["started_at"]
    assert abs(second - retry_at) < timedelta(seconds=0.5), (second, retry_at)
    assert failed.levelno == logging.WARNING
    assert failed.error == "ValueError: no upstream at attempt 2"  # type: ignore[attr-defined]
    assert "ValueError: no upstream at attempt 2" in failed.getMessage()


async def test_a_node_without_the_handler_leaves_the_job_due(
    store: Store, dsn: str, db: Any
) -> None:
    """Capability routing: a node claims only jobs whose handler it has. A job of a
    handler no node has is never claimed, never failed: it stays idle and due, while a job due
    with it, of a handler the node has, runs (the same claim would have taken both)."""
    ran = asyncio.Event()

    async def other(ctx: RunContext) -> None:
        ran.set()

    await add(
        store,
        spec("orphan", schedule=TRIGGERED_ONLY, handler="gone"),
        spec("mine", schedule=TRIGGERED_ONLY, handler="other"),
    )
    await store.trigger_job("default", "orphan")
    await store.trigger_job("default", "mine")
    async with running(node(store, dsn, {"other": other})) as n:
        assert n.routes == {"other": tuple(range(DEFAULT_SHARD_COUNT))}
        async with asyncio.timeout(10):
            await ran.wait()
    job = db.execute(
        "SELECT status, last_error, next_run_at <= now() AS due, attempt FROM pgpulse_jobs "
        "WHERE name = 'orphan'"
    ).fetchone()
    assert job == {"status": "idle", "last_error": None, "due": True, "attempt": 0}
    assert db.execute("SELECT count(*) AS n FROM pgpulse_runs").fetchone() == {"n": 1}


async def test_a_run_past_its_timeout_is_cancelled_and_fails(
    store: Store, dsn: str, db: Any
) -> None:
    slow, cancelled = sleeper()

    await add(
        store, spec("slow", schedule=TRIGGERED_ONLY, handler="slow", timeout=0.2, max_attempts=1)
    )
    await store.trigger_job("default", "slow")
    async with running(node(store, dsn, {"slow": slow})):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'failed'"
            ).fetchone()["n"]
        )
    assert cancelled.is_set()
    assert (
        db.execute("SELECT error FROM pgpulse_runs").fetchone()["error"] == "timed out after 0.2 s"
    )


async def test_one_watchdog_times_out_each_run_at_its_own_limit(
    store: Store, dsn: str, db: Any
) -> None:
    """The node's single timer serves every run's timeout: each fails at its own limit (the
    longer one after the shorter re-armed the timer), and a run that ends in time, or has no
    timeout, is not touched."""
    slow, _ = sleeper()

    async def quick(ctx: RunContext) -> str:
        await asyncio.sleep(0.05)
        return "done"

    await add(
        store,
        spec("short", schedule=TRIGGERED_ONLY, handler="slow", timeout=0.3, max_attempts=1),
        spec("long", schedule=TRIGGERED_ONLY, handler="slow", timeout=0.9, max_attempts=1),
        spec("in-time", schedule=TRIGGERED_ONLY, handler="quick", timeout=0.2),
        spec("unbounded", schedule=TRIGGERED_ONLY, handler="quick"),
    )
    for name in ("short", "long", "in-time", "unbounded"):
        await store.trigger_job("default", name)
    async with running(node(store, dsn, {"slow": slow, "quick": quick})):
        await wait_until(
            lambda: (
                db.execute(
                    "SELECT count(*) AS n FROM pgpulse_runs WHERE finished_at IS NOT NULL"
                ).fetchone()["n"]
                == 4
            )
        )
    rows = db.execute(
        "SELECT j.name, r.outcome, r.error, r.output, "
        "extract(epoch FROM r.finished_at - r.started_at)::float8 AS took "
        "FROM pgpulse_runs r JOIN pgpulse_jobs j ON j.id = r.job_id"
    ).fetchall()
    ended = {row["name"]: (row["outcome"], row["error"], row["output"]) for row in rows}
    assert ended == {
        "short": ("failed", "timed out after 0.3 s", None),
        "long": ("failed", "timed out after 0.9 s", None),
        "in-time": ("succeeded", None, "done"),
        "unbounded": ("succeeded", None, "done"),
    }
    took = {row["name"]: row["took"] for row in rows}
    assert 0.3 <= took["short"] < 0.9 <= took["long"], took


async def test_a_timed_out_attempt_that_is_also_cancelled_otherwise_writes_nothing(
    store: Store, dsn: str
) -> None:
    """A timeout is reported only when it is the attempt's one cancellation: an attempt
    stopped (or whose lease is lost) on top of its timeout decides no outcome, and a stop
    hands it back."""
    slow, _ = sleeper()
    await add(store, spec("slow", schedule=TRIGGERED_ONLY, handler="slow", timeout=0.05))
    await store.trigger_job("default", "slow")
    n = node(store, dsn, {"slow": slow})
    await n.start()
    assert await n.claim_once() == 1
    [attempt] = n.attempts
    async with asyncio.timeout(5):
        # One loop step at a time: the watchdog's cancel and the task seeing it are one step
        # apart, and the stop must land between them (no event marks that instant).
        while attempt.stop_reason != "timeout":  # noqa: ASYNC110 - see above
            await asyncio.sleep(0)
    assert n.attempts.stop() == [attempt]  # the timeout fired; before the task sees it, a stop
    async with asyncio.timeout(5):
        await asyncio.wait([attempt.task])
    assert attempt.task.cancelled() and attempt.outcome is None and n.attempts.take() == []
    assert len(n.attempts) == 0


def test_pause_after_a_step() -> None:
    """The claim loop's sleep, decided without a database: outcomes waiting go out at once; a
    full node waits to be woken; otherwise it sleeps until the next due instant (1 ms past
    it), never longer than the poll interval, never less than 0."""
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def step(next_due: datetime | None, db_now: datetime | None = now) -> Step:
        return Step(set(), [], next_due, db_now)

    soon = now + timedelta(seconds=0.25)
    assert pause_after(step(soon), waiting=1, free=3, poll=5.0) == 0.0
    assert pause_after(step(soon), waiting=0, free=0, poll=5.0) is None
    assert pause_after(step(soon), waiting=0, free=3, poll=5.0) == 0.251
    assert pause_after(step(now + timedelta(hours=1)), waiting=0, free=3, poll=5.0) == 5.0
    assert pause_after(step(now - timedelta(seconds=1)), waiting=0, free=3, poll=5.0) == 0.0
    assert pause_after(step(None), waiting=0, free=3, poll=5.0) == 5.0
    assert pause_after(step(soon, db_now=None), waiting=0, free=3, poll=5.0) == 5.0


def test_a_run_past_its_timeout_fails_on_uvloop(dsn: str, db: Any) -> None:
    """Nodes run on uvloop (every command does): the watchdog's timeout and the task's
    uncancel() there report the attempt as timed out, as on asyncio's loop."""
    import uvloop

    from pgpulse.db.database import open_pool

    async def scenario() -> None:
        slow, cancelled = sleeper()
        pool = await open_pool(dsn, application_name="pgpulse-test", max_size=4)
        try:
            store = Store(pool)
            await add(
                store,
                spec("slow", schedule=TRIGGERED_ONLY, handler="slow", timeout=0.2, max_attempts=1),
            )
            await store.trigger_job("default", "slow")
            async with running(node(store, dsn, {"slow": slow})):
                await wait_until(
                    lambda: db.execute(
                        "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'failed'"
                    ).fetchone()["n"]
                )
            assert cancelled.is_set()
        finally:
            await pool.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())
    assert (
        db.execute("SELECT error FROM pgpulse_runs").fetchone()["error"] == "timed out after 0.2 s"
    )


async def test_a_handlers_own_timeout_error_is_a_plain_failure(
    store: Store, dsn: str, db: Any
) -> None:
    """Without a job timeout, a TimeoutError raised by the handler is its error, not ours."""

    async def upstream(ctx: RunContext) -> None:
        raise TimeoutError("upstream took too long")

    await add(store, spec("calls", schedule=TRIGGERED_ONLY, handler="upstream", max_attempts=1))
    await store.trigger_job("default", "calls")
    async with running(node(store, dsn, {"upstream": upstream})):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'failed'"
            ).fetchone()["n"]
        )
    assert db.execute("SELECT error FROM pgpulse_runs").fetchone()["error"] == (
        "TimeoutError: upstream took too long"
    )


async def test_an_output_with_nul_characters_is_stored_not_stuck(
    store: Store, dsn: str, db: Any
) -> None:
    """PostgreSQL text cannot hold NUL: the outcome is stored with U+FFFD, the run ends."""

    async def binary(ctx: RunContext) -> str:
        return "head\x00tail"

    await add(store, spec("binary", schedule=TRIGGERED_ONLY, handler="binary"))
    await store.trigger_job("default", "binary")
    async with running(node(store, dsn, {"binary": binary})):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
            ).fetchone()["n"]
        )
    assert db.execute("SELECT output FROM pgpulse_runs").fetchone()["output"] == "head\ufffdtail"


async def test_a_node_that_cannot_renew_cancels_its_run_before_the_lease_ends(
    store: Store, dsn: str, db: Any
) -> None:
    """No heartbeat reaches the database (as in a partition): the watchdog self-fences."""
    long, cancelled = sleeper()

    await add(store, spec("long", schedule=TRIGGERED_ONLY, handler="long"))
    await store.trigger_job("default", "long")
    n = node(store, dsn, {"long": long}, lease=1.0, heartbeat_interval=0.4)
    await n.start()
    assert await n.claim_once() == 1  # no run loop: nothing will renew the lease
    async with asyncio.timeout(5):
        await cancelled.wait()
    row = db.execute(
        "SELECT status, lease_expires_at > now() AS lease_left FROM pgpulse_jobs"
    ).fetchone()
    assert row == {"status": "running", "lease_left": True}  # cancelled before expiry
    assert db.execute("SELECT count(*) AS n FROM pgpulse_runs").fetchone() == {"n": 0}  # no end
    assert db.execute("SELECT outcome FROM pgpulse_runs_live").fetchone() == {"outcome": "running"}


async def test_a_refused_renewal_cancels_the_run_at_once(store: Store, dsn: str, db: Any) -> None:
    long, cancelled = sleeper()

    await add(store, spec("long", schedule=TRIGGERED_ONLY, handler="long"))
    await store.trigger_job("default", "long")
    n = node(store, dsn, {"long": long})
    await n.start()
    assert await n.claim_once() == 1
    db.execute("UPDATE pgpulse_jobs SET fencing_token = fencing_token + 1")  # taken over
    await n.renew_once()
    async with asyncio.timeout(2):
        await cancelled.wait()
    assert db.execute("SELECT count(*) AS n FROM pgpulse_runs").fetchone() == {"n": 0}  # no end
    assert db.execute("SELECT outcome FROM pgpulse_runs_live").fetchone() == {"outcome": "running"}


async def test_a_drain_longer_than_the_lease_keeps_renewing_and_lets_the_run_finish(
    store: Store, dsn: str, db: Any
) -> None:
    """SIGTERM lets running work finish within --drain-timeout even when that is longer than
    the lease: the draining node keeps renewing (its watchdog would cancel the run otherwise)."""
    started = asyncio.Event()

    async def slow(ctx: RunContext) -> None:
        started.set()
        await asyncio.sleep(3.0)  # longer than the lease (2 s) after the stop

    await add(store, spec("slow", schedule=TRIGGERED_ONLY, handler="slow"))
    await store.trigger_job("default", "slow")
    n = node(store, dsn, {"slow": slow}, drain_timeout=6.0)
    task = asyncio.create_task(n.run())
    async with asyncio.timeout(10):
        await started.wait()
    n.stop()
    async with asyncio.timeout(15):
        await task
    runs = db.execute("SELECT outcome, attempts FROM pgpulse_runs").fetchall()
    assert runs == [{"outcome": "succeeded", "attempts": 1}]
    assert db.execute("SELECT status FROM pgpulse_jobs").fetchone()["status"] == "idle"


async def test_graceful_stop_hands_unfinished_claims_back(store: Store, dsn: str, db: Any) -> None:
    """A stop cancels what the drain did not finish and hands it back at once; the attempt's
    handler had started, so the history keeps it (the next claim is attempt 2)."""
    started = asyncio.Event()

    async def stuck(ctx: RunContext) -> None:
        started.set()
        await asyncio.sleep(30)

    await add(store, spec("stuck", schedule=TRIGGERED_ONLY, handler="stuck"))
    await store.trigger_job("default", "stuck")
    n = node(store, dsn, {"stuck": stuck})
    async with running(n):
        async with asyncio.timeout(10):
            await started.wait()
    reason = (
        f"handed back by node {n.node_id} at shutdown: unfinished after the drain timeout (0.5 s)"
    )
    job = db.execute("SELECT status, attempt, locked_by, last_error FROM pgpulse_jobs").fetchone()
    assert job == {"status": "idle", "attempt": 1, "locked_by": None, "last_error": reason}
    run = db.execute("SELECT attempts, outcome, node_id, error FROM pgpulse_runs").fetchone()
    assert run == {"attempts": 1, "outcome": "retrying", "node_id": n.node_id, "error": reason}
    state = db.execute("SELECT state FROM pgpulse_nodes").fetchone()["state"]
    assert state == "stopped"


async def test_a_node_that_knows_the_handler_revives_the_failed_job(
    store: Store, dsn: str, db: Any
) -> None:
    """A job a node of schema 1 failed for want of its handler (nodes no longer do: they claim
    only what they can run) is brought back by a node that has the handler."""
    ran = asyncio.Event()

    async def late(ctx: RunContext) -> None:
        ran.set()

    await add(store, spec("late", schedule=TRIGGERED_ONLY, handler="late"))
    await store.trigger_job("default", "late")
    db.execute(
        "UPDATE pgpulse_jobs SET status = 'failed', last_error = 'handler ''late'' is not "
        "registered on node old-node'"
    )
    async with running(node(store, dsn, {"late": late})):
        async with asyncio.timeout(10):
            await ran.wait()
    job = db.execute("SELECT status, last_error, last_outcome FROM pgpulse_jobs").fetchone()
    assert job == {"status": "idle", "last_error": None, "last_outcome": "succeeded"}


async def test_a_timed_out_claim_logs_why(
    store: Store, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A claim that times out (here: pgpulse_jobs locked by another session for longer than
    half the lease) logs the exception's type, not an empty reason (a bare
    'claim failed: ' says nothing: TimeoutError's text is empty)."""

    async def noop(ctx: RunContext) -> None:
        pass

    # a node with a handler: one with none has nothing to claim, and sends no claim
    async with running(node(store, dsn, {"noop": noop}, lease=1.0, heartbeat_interval=0.2)):
        with (
            caplog.at_level(logging.WARNING, logger="pgpulse.node.engine"),
            psycopg.connect(dsn) as blocker,
        ):
            blocker.execute("LOCK TABLE pgpulse_jobs IN ACCESS EXCLUSIVE MODE")
            async with asyncio.timeout(10):
                # no event to wait on: poll the captured records (bounded by the timeout)
                while not any(getattr(r, "action", "") == "claim_failed" for r in caplog.records):  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            blocker.rollback()
    failures = [r.getMessage() for r in caplog.records if r.getMessage().startswith("claim failed")]
    assert failures and all(m == "claim failed: TimeoutError" for m in failures), failures
    beats = [r.getMessage() for r in caplog.records if r.getMessage().startswith("heartbeat")]
    assert all(m.endswith("failed: TimeoutError") for m in beats), beats  # side loops too
