"""Engine bugs the chaos harness found, each as a minimal deterministic reproduction.

Each test states the behaviour docs/design.md promises, and failed before the engine was fixed.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from helpers import ALL_SHARDS, add, spec
from pgpulse.core.model import ClaimedJob, ClaimKey
from pgpulse.db.store import Store
from pgpulse.node.attempts import Attempts
from pgpulse.node.handlers import NodeHandlers, RunContext
from test_engine import node, running, wait_until

#: A DSN nothing listens on: what a node's new sessions meet while PostgreSQL restarts or its
#: network resets connections.
REFUSED = "postgresql://postgres@127.0.0.1:1/pulse?connect_timeout=2"


async def test_a_node_outlives_a_database_that_refuses_its_dedicated_sessions(store: Store) -> None:
    """Invariant 5 / cluster behaviour: a database outage must not kill the node process."""
    n = node(store, REFUSED, {})  # the pool works; LISTEN and the leader session cannot connect
    task = asyncio.create_task(n.run())
    done, _ = await asyncio.wait({task}, timeout=2.0)  # four heartbeats
    n.stop()
    if not done:
        await task
    assert not done, f"the node stopped by itself: {task.exception()!r}"


def _claimed(job_id: int, token: int) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(
        id=job_id,
        tenant="default",
        name="again",
        schedule="@every 1s",
        timezone="UTC",
        handler="noop",
        payload={},
        catch_up="backfill",
        backfill_limit=None,
        misfire_grace=60.0,
        max_attempts=3,
        retry_backoff=1.0,
        timeout=None,
        anchor_at=now,
        scheduled_for=now,
        attempt=1,
        fencing_token=token,
        run_id=1,
        db_now=now,
    )


def _attempts(handlers: dict[str, Any], lease: float = 30.0) -> Attempts:
    """A node's attempt table over ``handlers``, as :class:`Node` builds it."""
    return Attempts(
        NodeHandlers(handlers, "node-a", {}), slots=4, lease=lease, margin=2.0, wake=asyncio.Event()
    )


def _stop(attempts: Attempts) -> None:
    for attempt in attempts:
        attempt.task.cancel()


async def test_a_job_claimed_again_before_the_last_attempts_callback_stays_tracked() -> None:
    """Invariant 3: every running attempt is renewed and watched until it ends.

    The interleaving the harness hit: an attempt's outcome commits, the claim loop claims the
    job's next (already due) occurrence, and only then does the first task end.
    """

    async def instant(ctx: RunContext) -> None:
        return None

    attempts = _attempts({"noop": instant})
    first = attempts.start(_claimed(7, token=1), time.monotonic(), time.monotonic())
    # One loop step each, in this order (sleep(0) is the interleaving, not a wait for a start):
    await asyncio.sleep(0)  # attempt 1 runs to its outcome; its task's end is now queued
    [outcome] = attempts.take()
    attempts.written([outcome], {first.key})  # its outcome commits...
    # ... and the claim loop takes the job again
    second = attempts.start(_claimed(7, token=2), time.monotonic(), time.monotonic())
    await asyncio.sleep(0)  # attempt 1's task ends
    try:
        assert (
            attempts.get(ClaimKey("job", 7, 1)) is None
            and attempts.get(ClaimKey("job", 7, 2)) is second
        )
        assert attempts.leases() == [ClaimKey("job", 7, 2)]
        # the node's watchdog fires no later than attempt 2's deadline
        watchdog_at = attempts.watchdog_at
        assert watchdog_at is not None and watchdog_at <= second.deadline
    finally:
        _stop(attempts)


async def test_an_attempt_stopped_before_its_first_step_ends_and_frees_its_slot() -> None:
    """Invariant 6: a stop that comes before an attempt's task ran at all (claimed and stopped
    in one loop step) still ends the attempt: its slot is free, nothing was decided, and the
    handler never ran (the claim goes back uncounted)."""
    ran: list[int] = []

    async def records(ctx: RunContext) -> None:
        ran.append(ctx.job_id)

    attempts = _attempts({"noop": records})
    attempt = attempts.start(_claimed(7, token=1), time.monotonic(), time.monotonic())
    assert attempts.stop() == [attempt]  # before the task's first step
    async with asyncio.timeout(5):
        await attempt.task
    assert (len(attempts), attempts.free(), attempts.waiting) == (0, 4, 0)
    assert (attempt.started, attempt.outcome, attempt.stop_reason, ran) == (False, None, "stop", [])


async def test_a_refused_renewal_for_a_finished_attempt_spares_the_next_attempt() -> None:
    """Invariant 3: only the attempt whose token lost its lease is cancelled.

    Seen without any fault injected ("lease ... lost (the database refused the renewal)"): the
    renewal is in flight while an attempt's outcome commits and the job is claimed again."""
    release = asyncio.Event()

    async def waits(ctx: RunContext) -> None:
        await release.wait()

    attempts = _attempts({"noop": waits})
    first = attempts.start(_claimed(7, token=1), time.monotonic(), time.monotonic())
    held, sent = attempts.leases(), time.monotonic()
    assert held == [ClaimKey("job", 7, 1)]
    # While the renewal is in flight, attempt 1 ends (its outcome commits) and the job is
    # claimed again.
    release.set()
    async with asyncio.timeout(5):
        await first.task
    attempts.written(attempts.take(), {first.key})
    release.clear()
    second = attempts.start(_claimed(7, token=2), time.monotonic(), time.monotonic())
    try:
        attempts.renewed(held, set(), sent)  # token 1 no longer runs: its renewal is refused
        assert attempts.get(ClaimKey("job", 7, 2)) is second
        assert second.stop_reason is None, "attempt 2 was cancelled for attempt 1's lease"
    finally:
        _stop(attempts)


async def test_a_stop_tells_which_attempts_started_their_handler() -> None:
    """Only a claim whose handler never started may be handed back uncounted: a stop in the
    same loop step as the claim cancels an attempt that never ran; one stopped later had
    called its handler."""
    called = asyncio.Event()

    async def forever(ctx: RunContext) -> None:
        called.set()
        await asyncio.Event().wait()

    attempts = _attempts({"noop": forever})
    running = attempts.start(_claimed(7, token=1), time.monotonic(), time.monotonic())
    async with asyncio.timeout(5):
        await called.wait()
    called.clear()
    fresh = attempts.start(_claimed(8, token=1), time.monotonic(), time.monotonic())
    assert attempts.stop() == [running, fresh]  # before fresh's task ever ran
    async with asyncio.timeout(5):
        await asyncio.wait([running.task, fresh.task])
    assert (running.started, fresh.started, called.is_set()) == (True, False, False)
    assert running.outcome is None and fresh.outcome is None and len(attempts) == 0


async def test_a_silent_leader_does_not_stop_expired_leases_being_reaped(
    store: Store, dsn: str, db: Any
) -> None:
    """Invariant 5: after the lease timeout the jobs a dead node held are claimable again —
    also when the node that happens to lead is the one that went silent."""
    await add(store, spec("held", schedule="0 0 1 1 *"))
    await store.trigger_job("default", "held")
    silent = node(store, dsn, {}, node_id="paused-node")
    await silent.start()  # it leads (its heartbeat session holds the lock)...
    assert silent.sweeper.is_leader
    await store.claim_due("paused-node", ALL_SHARDS, 1, lease=1.0)
    try:  # ... and then says nothing more, like a SIGSTOPped process

        async def noop(ctx: RunContext) -> None:
            return None

        async with running(node(store, dsn, {"noop": noop}, lease=2.0)):
            await wait_until(
                lambda: (
                    db.execute("SELECT locked_by FROM pgpulse_jobs").fetchone()["locked_by"]
                    != "paused-node"
                ),
                within=8,
            )
    finally:
        await silent.sweeper.session.close()


async def test_the_token_guard_refuses_a_zombie_only_once_a_newer_token_was_seen(
    store: Store, dsn: str, db: Any
) -> None:
    """The README's guard ("accept a write only if its token is at least the largest one
    seen") cannot refuse a zombie whose lease expired when no newer owner has shown up yet:
    with a silent leader (above) nobody takes over, so the zombie's late write is accepted and
    the occurrence runs again after the reap. Documents the limit the harness measures as
    "stale effects"; passes today."""
    [job_id] = await add(store, spec("fenced", schedule="0 0 1 1 *"))
    await store.trigger_job("default", "fenced")
    [zombie] = await store.claim_due("zombie", ALL_SHARDS, 1, lease=0.2)
    db.execute("UPDATE pgpulse_jobs SET lease_expires_at = now() - interval '1 second'")
    seen = {job_id: 0}

    def guarded_write(job: ClaimedJob) -> bool:
        if job.fencing_token < seen[job.id]:
            return False
        seen[job.id] = job.fencing_token
        return True

    assert guarded_write(zombie)  # expired, yet accepted: no newer token exists anywhere
    await store.reap_expired_leases()
    [owner] = await store.claim_due("owner", ALL_SHARDS, 1, lease=30)
    assert owner.scheduled_for == zombie.scheduled_for  # the same occurrence runs again
    assert guarded_write(owner) and not guarded_write(zombie)


async def test_a_stale_claims_late_outcome_does_not_shield_the_newer_claim() -> None:
    """Invariant 3: only the attempt whose outcome is being written escapes cancellation. A
    claim whose lease was lost and whose handler ignored the cancel still reaches its outcome;
    by then the node may run the job again under a newer token, and that attempt must stay
    cancellable (a refused renewal or its own timeout must still stop it)."""
    stubborn = asyncio.Event()

    async def ignores_one_cancel(ctx: RunContext) -> None:
        if ctx.fencing_token == 1:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await stubborn.wait()  # ignores the cancel and goes on
            return
        await asyncio.Event().wait()

    attempts = _attempts({"noop": ignores_one_cancel})
    stale = attempts.start(_claimed(7, token=1), time.monotonic(), time.monotonic())
    await asyncio.sleep(0)  # attempt 1 runs
    attempts.renewed([stale.key], set(), time.monotonic())  # its lease is lost: cancelled
    assert stale.stop_reason == "lease_lost"
    newer = attempts.start(_claimed(7, token=2), time.monotonic(), time.monotonic())
    try:
        stubborn.set()
        async with asyncio.timeout(5):
            await stale.task
        assert stale.outcome is not None  # the stale claim's outcome is on its way
        attempts.renewed([stale.key, newer.key], set(), time.monotonic())  # both refused
        assert newer.stop_reason == "lease_lost"  # the newer claim is still cancelled
        async with asyncio.timeout(5):
            await asyncio.wait([newer.task])
        assert newer.task.cancelled() and newer.outcome is None
        assert attempts.take() == [stale.outcome]  # for fencing to refuse
    finally:
        _stop(attempts)


def test_the_watchdog_takes_a_deadline_already_past_on_uvloop() -> None:
    """A node resumed after a pause arms its watchdog for a deadline already past; uvloop then
    returns a plain Handle (no when()), and the next arming crashed the claim loop (chaos
    harness, node-1 exited with AttributeError)."""
    import uvloop

    async def arm_twice() -> tuple[str | None, bool, float | None, float]:
        async def forever(ctx: RunContext) -> None:
            await asyncio.Event().wait()

        attempts = _attempts({"noop": forever}, lease=4.0)
        now = time.monotonic()
        paused = attempts.start(_claimed(7, token=1), now - 10.0, now)  # deadline long past
        later = attempts.start(_claimed(8, token=1), now, now)  # must keep the earlier arming
        try:
            async with asyncio.timeout(5):
                await asyncio.wait([paused.task])  # the watchdog fired at once
            return (
                paused.stop_reason,
                later.stop_reason is None,
                attempts.watchdog_at,
                later.deadline,
            )
        finally:
            _stop(attempts)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        reason, spared, watchdog_at, deadline = runner.run(arm_twice())
    assert (reason, spared, watchdog_at) == ("lease_lost", True, deadline)
