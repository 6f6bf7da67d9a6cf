"""Engine bugs the chaos harness found, each as a minimal deterministic reproduction.

Each test states the behaviour design.md promises, and failed before the engine was fixed.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any, cast

from helpers import ALL_SHARDS, add, spec
from pgpulse.engine import Node, NodeConfig
from pgpulse.handlers import RunContext
from pgpulse.model import ClaimedJob
from pgpulse.store import Store
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


class _InstantDispatcher:
    async def dispatch(self, job: ClaimedJob) -> None:
        return None


async def test_a_job_claimed_again_before_the_last_attempts_callback_stays_tracked(
    store: Store, dsn: str
) -> None:
    """Invariant 3: every running attempt is renewed and watched until it ends.

    The interleaving the harness hit: an attempt's outcome commits, the claim loop claims the
    job's next (already due) occurrence, and only then does the first task's done callback run.
    """
    n: Node = node(store, dsn, {})
    n.dispatcher = _InstantDispatcher()  # type: ignore[assignment]
    n._start(_claimed(7, token=1), time.monotonic(), time.monotonic())
    # One loop step each, in this order (sleep(0) is the interleaving, not a wait for a start):
    await asyncio.sleep(0)  # attempt 1 runs to its end; its done callback is now queued
    # the claim loop takes the job again
    n._start(_claimed(7, token=2), time.monotonic(), time.monotonic())
    await asyncio.sleep(0)  # attempt 1's done callback runs
    tracked = n.running.get(7)
    try:
        assert tracked is not None and tracked.job.fencing_token == 2
        # the node's watchdog fires no later than attempt 2's deadline
        watchdog = n._watchdog
        assert watchdog is not None and not watchdog.cancelled()
        assert n._watchdog_at <= tracked.deadline
    finally:
        _stop(n)


def _stop(n: Node) -> None:
    for attempt in list(n.running.values()):
        attempt.task.cancel()
    if n._watchdog is not None:
        n._watchdog.cancel()


class _Forever:
    async def dispatch(self, job: ClaimedJob) -> None:
        await asyncio.Event().wait()


async def test_a_refused_renewal_for_a_finished_attempt_spares_the_next_attempt(
    store: Store, dsn: str
) -> None:
    """Invariant 3: only the attempt whose token lost its lease is cancelled.

    Seen without any fault injected ("lease ... lost (the database refused the renewal)"): the
    renewal is in flight while an attempt's outcome commits and the job is claimed again."""
    n: Node = node(store, dsn, {})
    n.dispatcher = _Forever()  # type: ignore[assignment]
    n._start(_claimed(7, token=1), time.monotonic(), time.monotonic())

    class RacingStore:
        async def renew_leases(self, held: list[tuple[int, int]], *, lease: float) -> set[int]:
            assert held == [(7, 1)]
            # Meanwhile attempt 1 ends (its outcome commits) and the job is claimed again.
            n.running.pop(7).task.cancel()
            n._start(_claimed(7, token=2), time.monotonic(), time.monotonic())
            return set()  # token 1 no longer runs: its renewal is refused

    n.beat = RacingStore()  # type: ignore[assignment]
    try:
        await n.renew_once()
        assert n.running[7].job.fencing_token == 2
        assert n.running[7].stop_reason is None, "attempt 2 was cancelled for attempt 1's lease"
    finally:
        _stop(n)


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
        await silent._beat_session.close()


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


async def test_a_stale_claims_late_outcome_does_not_shield_the_newer_claim(
    store: Store, dsn: str
) -> None:
    """Invariant 3: only the attempt whose outcome is being written escapes cancellation. A
    claim whose lease was lost and whose handler ignored the cancel still reaches its outcome;
    by then the node may run the job again under a newer token, and that attempt must stay
    cancellable (a refused renewal or its own timeout must still stop it)."""
    n: Node = node(store, dsn, {})
    n.dispatcher = _Forever()  # type: ignore[assignment]
    n._start(_claimed(7, token=2), time.monotonic(), time.monotonic())
    await asyncio.sleep(0)  # attempt 2 runs
    try:
        n._finishing(_claimed(7, token=1))  # the stale claim's outcome is queued
        assert n.running[7].finishing is False
        n._finishing(_claimed(7, token=2))
        assert n.running[7].finishing is True
    finally:
        _stop(n)


def test_the_watchdog_takes_a_deadline_already_past_on_uvloop(dsn: str) -> None:
    """A node resumed after a pause arms its watchdog for a deadline already past; uvloop then
    returns a plain Handle (no when()), and the next arming crashed the claim loop (chaos
    harness, node-1 exited with AttributeError)."""
    import uvloop

    async def arm_twice() -> bool:
        n = Node(Store(cast(Any, None)), dsn, {}, NodeConfig(lease=2.0, heartbeat_interval=0.2))
        n._arm_watchdog(time.monotonic() - 1.0)  # past: fires at once
        n._arm_watchdog(time.monotonic() + 5.0)  # later: must keep the earlier arming
        await asyncio.sleep(0.05)
        return n._watchdog is None  # it fired (nothing running: nothing re-armed)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(arm_twice())
