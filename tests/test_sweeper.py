"""Leadership and lease sweeping, carried by each node's heartbeat (docs/design.md, "Cluster
behaviour"): one leader at a time, held on the heartbeat session; backup reaping by the others;
pruning by the leader; one statement per idle heartbeat."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
import pytest

from helpers import ALL_SHARDS, add, spec
from pgpulse.db.claims import LEADER_LOCK_KEY
from pgpulse.db.database import AsyncConn, ConnectionSource, Session, connect
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from pgpulse.node.engine import Node
from test_engine import TRIGGERED_ONLY, node, wait_until

#: Advisory locks are per database: the suite's other databases on the same server have leaders
#: of their own (two test workers share one server).
THIS_DATABASE = "database = (SELECT oid FROM pg_database WHERE datname = current_database())"


async def _leave(*nodes: Node) -> None:
    """Close the nodes' heartbeat sessions (as a drain does): a leader's lock goes with it."""
    for n in nodes:
        await n.sweeper.session.close()


def _actions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.action for r in caplog.records if r.name == "pgpulse.node.sweeper"]  # type: ignore[attr-defined]


async def _leaders(store: Store) -> list[tuple[str, bool | None]]:
    return [(n["node_id"], n["leader"]) for n in await store.cluster_nodes(ttl=10)]


async def test_the_leader_reaps_expired_leases(
    store: Store, dsn: str, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await add(store, spec("x"))
    await store.trigger_job("default", "x")
    [claimed] = await store.claim_due("dead-node", ALL_SHARDS, 1, lease=30)
    db.execute("UPDATE pgpulse_jobs SET lease_expires_at = now() - interval '0.5 second'")
    a, b = node(store, dsn, {}, node_id="a"), node(store, dsn, {}, node_id="b")
    caplog.set_level(logging.INFO, logger="pgpulse.node.sweeper")
    try:
        await a.start()  # its first heartbeat takes the lock, and reaps as the leader
        await b.start()
        assert a.sweeper.is_leader and not b.sweeper.is_leader
        assert await _leaders(store) == [("a", True), ("b", False)]
    finally:
        await _leave(a, b)
    assert _actions(caplog) == ["leader_elected", "leases_reaped"]
    job = db.execute("SELECT status, last_error FROM pgpulse_jobs").fetchone()
    assert job == {"status": "idle", "last_error": "lease of node dead-node expired"}
    # the lost attempt is written to history: the run's row, as the claim handed it out
    run = db.execute(
        "SELECT id, outcome, error, attempts, node_id, fencing_token, started_at FROM pgpulse_runs"
    ).fetchone()
    assert run == {
        "id": claimed.run_id,
        "outcome": "retrying",
        "error": "lease of node dead-node expired",
        "attempts": 1,
        "node_id": "dead-node",
        "fencing_token": claimed.fencing_token,
        "started_at": claimed.db_now,
    }


async def test_a_node_that_does_not_lead_reaps_only_long_expired_leases(
    store: Store, dsn: str, db: Any
) -> None:
    """The backup sweep: while another session holds the lock (a silent leader), a node reaps
    only leases expired longer than ``backup_delay``; once the lock is free it leads."""
    await add(store, spec("recent"), spec("old"))
    for name in ("recent", "old"):
        await store.trigger_job("default", name)
    await store.claim_due("dead-node", ALL_SHARDS, 2, lease=30)
    db.execute(
        "UPDATE pgpulse_jobs SET lease_expires_at = now() - CASE name "
        "WHEN 'recent' THEN interval '5 seconds' ELSE interval '15 seconds' END"
    )
    silent = await connect(dsn, application_name="pgpulse:silent:beat")
    session = Session(dsn, "pgpulse:b:beat")
    beat = Store(session)
    try:
        await silent.execute("SELECT pg_advisory_lock(%s)", (LEADER_LOCK_KEY,))
        first = await beat.heartbeat(
            "b", running=0, shards=(), ttl=10, leading=False, backup_delay=10
        )
        assert (first.leader, first.reaped) == (False, 1)
        assert db.execute("SELECT name FROM pgpulse_jobs WHERE status = 'running'").fetchall() == [
            {"name": "recent"}
        ]
        await silent.close()  # the silent leader's session ends: the next try takes the lock
        # (its backend exits, and releases the lock, a moment after the client closed)
        await wait_until(
            lambda: (
                not db.execute(
                    "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = %s"
                    f" AND {THIS_DATABASE}",  # another test's database has a leader of its own
                    (LEADER_LOCK_KEY,),
                ).fetchone()["n"]
            ),
            within=5,
        )
        second = await beat.heartbeat(
            "b", running=0, shards=(), ttl=10, leading=False, backup_delay=10
        )
        assert (second.leader, second.reaped) == (True, 1)
        third = await beat.heartbeat(
            "b", running=0, shards=(), ttl=10, leading=True, backup_delay=10
        )
        assert (third.leader, third.reaped) == (True, 0)
    finally:
        await silent.close()
        await session.close()
    statuses = db.execute("SELECT DISTINCT status FROM pgpulse_jobs").fetchall()
    assert statuses == [{"status": "idle"}]


async def _sweepable(store: Store, *names: str) -> dict[str, int]:
    """A job for each of ``names``, held as its name's kind says: ``job...`` by a claim of its
    job row, ``occurrence...`` by a claim of a trigger's occurrence (30 s leases, node
    ``dead-node``), ``pause...`` by a pause until an hour from now. Returns their ids by name."""
    specs = [
        spec(name, schedule=TRIGGERED_ONLY, handler="work")
        if name.startswith("occurrence")
        else spec(name)
        for name in names
    ]
    ids = dict(zip(names, await add(store, *specs), strict=True))
    for name in names:
        if name.startswith("job"):
            await store.trigger_job("default", name)
        elif name.startswith("occurrence"):
            await RunControl(store.pool).trigger("default", name, {"n": 1})
        else:
            await store.pause_job("default", name, until=datetime.now(UTC) + timedelta(hours=1))
    await store.claim_due("dead-node", ALL_SHARDS, 10, lease=30, handlers=["noop"])
    await store.finish_and_claim_occurrences(
        [], "dead-node", {"work": tuple(ALL_SHARDS)}, 10, lease=30
    )
    return ids


def _ended(db: Any, ids: Mapping[str, int], ages: Mapping[str, float]) -> None:
    """End the lease or the pause of each job of ``ages`` (by name) that many seconds ago."""
    for name, age in ages.items():
        for table, column, held in (
            ("pgpulse_jobs", "lease_expires_at", "status = 'running' AND id"),
            ("pgpulse_jobs", "paused_until", "status = 'paused' AND id"),
            ("pgpulse_occurrences", "lease_expires_at", "job_id"),
        ):
            db.execute(
                f"UPDATE {table} SET {column} = now() - make_interval(secs => %s)"
                f" WHERE {held} = %s",
                (age, ids[name]),
            )


def _swept(db: Any) -> list[str]:
    """The jobs that are idle and whose occurrences hold no lease, by name: those of
    :func:`_sweepable` whose lease or pause a sweep ended."""
    return [
        r["name"]
        for r in db.execute(
            "SELECT j.name FROM pgpulse_jobs j WHERE j.status = 'idle' AND NOT EXISTS ("
            " SELECT 1 FROM pgpulse_occurrences o"
            " WHERE o.job_id = j.id AND o.lease_expires_at IS NOT NULL) ORDER BY j.name"
        )
    ]


async def test_a_node_that_does_not_lead_and_has_no_backup_delay_sends_no_sweep(
    store: Store, dsn: str, db: Any
) -> None:
    """Without ``backup_delay`` a node that does not lead sends its heartbeat statement alone:
    a lease long expired stays held, a pause long ended stays paused — until the leader's
    next heartbeat, which sweeps them all."""
    ids = await _sweepable(store, "job", "occurrence", "pause")
    a, b = Session(dsn, "pgpulse:a:beat"), Session(dsn, "pgpulse:b:beat")
    try:
        first = await Store(a).heartbeat("a", running=0, shards=(), ttl=10, leading=False)
        assert (first.leader, first.reaped) == (True, 0)  # nothing has ended yet
        _ended(db, ids, dict.fromkeys(ids, 3600))
        for _ in range(2):
            beat = await Store(b).heartbeat("b", running=0, shards=(), ttl=10, leading=False)
            assert (beat.leader, beat.reaped) == (False, 0)
        assert _swept(db) == []
        leader = await Store(a).heartbeat("a", running=0, shards=(), ttl=10, leading=True)
        assert (leader.leader, leader.reaped) == (True, 2)
        assert _swept(db) == ["job", "occurrence", "pause"]
    finally:
        await a.close()
        await b.close()


async def test_a_backup_sweep_waits_backup_delay_for_occurrences_and_pause_ends(
    store: Store, dsn: str, db: Any
) -> None:
    """reap_occurrence_leases and end_pauses as a backup, as reap_job_leases
    (test_a_node_that_does_not_lead_reaps_only_long_expired_leases): only what ended more
    than ``backup_delay`` seconds ago."""
    ages = {"occurrence_old": 15, "occurrence_recent": 5, "pause_old": 15, "pause_recent": 5}
    _ended(db, await _sweepable(store, *ages), ages)
    silent = await connect(dsn, application_name="pgpulse:silent:beat")
    session = Session(dsn, "pgpulse:b:beat")
    try:
        await silent.execute("SELECT pg_advisory_lock(%s)", (LEADER_LOCK_KEY,))
        beat = await Store(session).heartbeat(
            "b", running=0, shards=(), ttl=10, leading=False, backup_delay=10
        )
        assert (beat.leader, beat.reaped) == (False, 1)
        assert _swept(db) == ["occurrence_old", "pause_old"]
    finally:
        await silent.close()
        await session.close()
    [resumed] = db.execute(
        "SELECT name, actor FROM pgpulse_job_history WHERE action = 'resume'"
    ).fetchall()
    assert resumed == {"name": "pause_old", "actor": "node:b"}


async def test_the_sweep_wakes_the_shard_of_each_job_it_returns_and_counts_the_interruption(
    store: Store, dsn: str, db: Any
) -> None:
    """Each statement of the sweep notifies ``pgpulse_wakeup`` with the job id of what it
    returned to the pool (a job row's lease, an occurrence's, an ended pause), so the node that
    polls the shard claims it at once; a lost attempt is an interruption, not a failure."""
    ids = await _sweepable(store, "job", "occurrence", "pause")
    _ended(db, ids, dict.fromkeys(ids, 1))
    listener = await connect(dsn, application_name="test:listen")
    try:
        await listener.execute("LISTEN pgpulse_wakeup")
        assert await store.reap_expired_leases() == 2
        woken = [n.payload async for n in listener.notifies(timeout=5, stop_after=3)]
    finally:
        await listener.close()
    assert sorted(map(int, woken)) == sorted(ids.values())
    assert _swept(db) == ["job", "occurrence", "pause"]
    interruptions = db.execute(
        "SELECT (SELECT interruptions FROM pgpulse_jobs WHERE name = 'job') AS job,"
        " (SELECT interruptions FROM pgpulse_occurrences) AS occurrence"
    ).fetchone()
    assert interruptions == {"job": 1, "occurrence": 1}
    runs = db.execute("SELECT kind, outcome FROM pgpulse_runs ORDER BY kind").fetchall()
    assert runs == [
        {"kind": "scheduled", "outcome": "retrying"},
        {"kind": "trigger", "outcome": "retrying"},
    ]


async def test_a_pooled_heartbeat_takes_no_part_in_leadership(store: Store, db: Any) -> None:
    """A session-level lock taken on a pooled connection would stay with the pool forever."""
    await store.register_node("n1", hostname="h", pid=1, slots=4, handlers=["x"])
    beat = await store.heartbeat("n1", running=0, shards=[0], ttl=10)
    assert (beat.live, beat.leader, beat.reaped) == (("n1",), False, 0)
    locks = db.execute(
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND objid::bigint = %s"
        f" AND {THIS_DATABASE}",
        (LEADER_LOCK_KEY,),
    ).fetchone()
    assert locks == {"n": 0}


async def test_a_leader_whose_session_died_steps_down_and_another_takes_over(
    store: Store, dsn: str, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = node(store, dsn, {}, node_id="a"), node(store, dsn, {}, node_id="b")
    try:
        await a.start()
        await b.start()
        assert await _leaders(store) == [("a", True), ("b", False)]
        killed = db.execute(
            "SELECT pg_terminate_backend(pid, 5000) AS ok FROM pg_stat_activity"
            " WHERE application_name = 'pgpulse:a:beat' AND datname = current_database()"
        ).fetchall()
        assert killed == [{"ok": True}]
        await b.heartbeat_once()  # the lock died with a's session: b takes it at once
        assert b.sweeper.is_leader
        caplog.set_level(logging.INFO, logger="pgpulse.node.sweeper")
        with pytest.raises(psycopg.OperationalError):
            await a.heartbeat_once()  # meets its dead connection
        await a.heartbeat_once()  # reconnected: it knows it no longer leads
        assert not a.sweeper.is_leader and b.sweeper.is_leader
        assert _actions(caplog) == ["leader_lost"]
        assert await _leaders(store) == [("a", False), ("b", True)]
    finally:
        await _leave(a, b)


async def test_a_heartbeat_that_reconnected_does_not_claim_the_lost_lock(
    store: Store, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The session reconnects inside the heartbeat that says "I lead": the new connection does
    not hold the lock, so the node must not believe its answer; the next heartbeat retakes it."""
    a = node(store, dsn, {}, node_id="a")
    try:
        await a.start()
        assert a.sweeper.is_leader
        await a.sweeper.session.close()  # the lock is released with the connection
        caplog.set_level(logging.INFO, logger="pgpulse.node.sweeper")
        await a.heartbeat_once()
        assert not a.sweeper.is_leader
        assert await _leaders(store) == [("a", None)]  # nobody holds the lock
        await a.heartbeat_once()
        assert a.sweeper.is_leader
        assert await _leaders(store) == [("a", True)]
        assert _actions(caplog) == ["leader_lost", "leader_elected"]
    finally:
        await _leave(a)


async def test_status_names_this_databases_leader_on_a_shared_server(
    store: Store, dsn: str, server_dsn: str
) -> None:
    """Another Pulse cluster in another database of the same server has its own leader."""
    other = await connect(server_dsn, application_name="pgpulse:other-cluster-node:beat")
    mine = node(store, dsn, {}, node_id="mine")
    try:
        await other.execute("SELECT pg_advisory_lock(%s)", (LEADER_LOCK_KEY,))
        await mine.start()
        assert mine.sweeper.is_leader
        assert await _leaders(store) == [("mine", True)]
    finally:
        await other.close()
        await _leave(mine)


async def test_the_leader_prunes_old_history_and_the_others_do_not(
    store: Store, dsn: str, db: Any
) -> None:
    [job_id] = await add(store, spec("old"))
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, finished_at) "
        "VALUES (%s, now() - interval '3 days', 1, 'succeeded', now() - interval '3 days'),"
        " (%s, now() - interval '1 hour', 1, 'succeeded', now() - interval '1 hour')",
        (job_id, job_id),
    )
    a = node(store, dsn, {}, node_id="a", keep_runs=86400.0)
    b = node(store, dsn, {}, node_id="b", keep_runs=86400.0)
    try:
        await a.start()
        await b.start()
        assert await b.sweeper.prune_once() is None
        assert await a.sweeper.prune_once() == (1, 0)
        assert await a.sweeper.prune_once() is None  # the next one is due in an hour
    finally:
        await _leave(a, b)
    assert db.execute("SELECT count(*) AS n FROM pgpulse_runs").fetchone() == {"n": 1}


class _Counting:
    """A connection source that counts what goes through it: the connections borrowed (one per
    Store method on the heartbeat path), the statements sent, and the round trips — a pipeline
    (all its statements share one), or a statement sent outside one."""

    def __init__(self, source: ConnectionSource) -> None:
        self.source = source
        self.borrowed = 0
        self.statements = 0
        self.round_trips = 0

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConn]:
        async with self.source.connection() as conn:
            self.borrowed += 1
            yield cast(AsyncConn, _CountedConnection(conn, self))


class _CountedConnection:
    """A borrowed connection whose statements and pipelines :class:`_Counting` counts."""

    def __init__(self, conn: AsyncConn, counts: _Counting) -> None:
        self._conn = conn
        self._counts = counts
        self._pipelined = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        self._counts.statements += 1
        self._counts.round_trips += not self._pipelined
        return await self._conn.execute(*args, **kwargs)

    @contextlib.asynccontextmanager
    async def pipeline(self) -> AsyncIterator[Any]:
        self._counts.round_trips += 1
        async with self._conn.pipeline() as pipeline:
            self._pipelined = True
            try:
                yield pipeline
            finally:
                self._pipelined = False


async def test_an_idle_node_sends_one_round_trip_per_heartbeat_leader_or_not(
    store: Store, dsn: str
) -> None:
    """The leader's heartbeat and its sweep, and a node's heartbeat and its backup sweep (the
    engine's ``backup_delay``: a node's time-to-live), go over the heartbeat session in one
    pipeline: one round trip, one transaction; nothing goes through the pool."""
    pool = _Counting(store.pool)
    nodes = [node(Store(pool), dsn, {}, node_id=node_id) for node_id in ("a", "b")]
    beats: list[_Counting] = []
    try:
        for n in nodes:
            await n.start()
            beats.append(_Counting(n.sweeper.session))
            n.beat = Store(beats[-1])
        assert [n.sweeper.is_leader for n in nodes] == [True, False]
        assert await nodes[0].sweeper.prune_once() == (0, 0)  # the first prune is at once
        pool.borrowed = 0
        for _ in range(3):
            for n in nodes:
                await n.heartbeat_once()
                await n.sweeper.prune_once()
        assert [b.borrowed for b in beats] == [3, 3]
        assert [b.round_trips for b in beats] == [3, 3]
        assert [b.statements for b in beats] == [15, 15]  # the heartbeat, the sweep's four
        assert pool.borrowed == 0
    finally:
        await _leave(*nodes)


async def test_the_prune_forgets_nodes_silent_for_a_day_unless_a_lease_names_them(
    store: Store, db: Any
) -> None:
    [held, queued] = await add(store, spec("held"), spec("queued"))
    db.execute(
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, last_heartbeat, state) VALUES "
        "('gone', 'h', 1, now() - interval '2 days', 'stopped'),"
        "('holder', 'h', 2, now() - interval '2 days', 'alive'),"
        "('occ-holder', 'h', 3, now() - interval '2 days', 'alive'),"
        "('yesterday', 'h', 4, now() - interval '23 hours', 'stopped')"
    )
    db.execute(
        "UPDATE pgpulse_jobs SET status = 'running', locked_by = 'holder', "
        "lease_expires_at = now() - interval '1 day' WHERE id = %s",
        (held,),
    )
    await RunControl(store.pool).trigger("default", "queued", {"x": 1})  # an occurrence
    db.execute(
        "UPDATE pgpulse_occurrences SET locked_by = 'occ-holder', lease_expires_at = now() "
        "WHERE job_id = %s",
        (queued,),
    )
    assert await store.prune(keep_runs=86400.0) == (0, 1)
    left = db.execute("SELECT node_id FROM pgpulse_nodes ORDER BY node_id").fetchall()
    assert [r["node_id"] for r in left] == ["holder", "occ-holder", "yesterday"]
