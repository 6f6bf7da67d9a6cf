"""Pulse on a replicated PostgreSQL: a primary and a streaming standby on 127.0.0.1 (the chaos
harness's :class:`ReplicatedServer`: real servers, real replication through a proxy the test can
cut), through failovers, switchovers and a server that turns read-only.

The servers run the embedded server's programs, or — when the suite runs on the machine's
PostgreSQL (``PGPULSE_TEST_DATABASE_URL``) — that server's own programs if they are installed
(``/usr/lib/postgresql/<major>/bin``), so CI covers two major versions. Nodes connect as users
do: one multi-host DSN, ``target_session_attrs=read-write``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo
from psycopg.rows import dict_row

from helpers import ALL_SHARDS, add, cluster_pg_bin, pgpulse, spec
from pgpulse.app import connect
from pgpulse.core.errors import DatabaseUnavailable
from pgpulse.db.database import primary_dsn
from pgpulse.db.run_control import RunControl
from pgpulse_tools.chaos.replication import ReplicatedServer, Replication, initdb_template

pytestmark = [pytest.mark.timeout(60), pytest.mark.server_programs]


@pytest.fixture(scope="session")
def pg_bin() -> Path | None:
    """The cluster's PostgreSQL programs (``None``: the embedded server's)."""
    return cluster_pg_bin()


@pytest.fixture(scope="session")
def cluster_template(pg_bin: Path | None) -> Iterator[Path]:
    """One initdb for the session; every cluster copies it."""
    folder = Path(tempfile.mkdtemp(prefix="pgpulse-test-template-"))
    try:
        yield asyncio.run(initdb_template(folder, pg_bin))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


ClusterFactory = Callable[[Replication], contextlib.AbstractAsyncContextManager[ReplicatedServer]]


@pytest.fixture
def replicated(pg_bin: Path | None, cluster_template: Path) -> ClusterFactory:
    """``async with replicated("sync") as cluster``: a started primary + standby, stopped (by
    their pids) and deleted at the end of the block."""

    @contextlib.asynccontextmanager
    async def make(replication: Replication) -> AsyncIterator[ReplicatedServer]:
        cluster = ReplicatedServer(
            None, replication, pg_bin, max_connections=60, template=cluster_template
        )
        await cluster.start()
        try:
            yield cluster
        finally:
            await cluster.close()

    return make


async def _rows(dsn: str, query: str, params: dict[str, Any] | None = None) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, row_factory=dict_row, connect_timeout=3
    ) as conn:
        return await (await conn.execute(query, params)).fetchall()


async def _until(what: str, check: Callable[[], Awaitable[bool]], within: float) -> float:
    """Poll ``check`` until true; return the seconds it took. Raises AssertionError naming
    ``what`` after ``within`` seconds (errors of a server in transition count as false)."""
    began = time.monotonic()
    while True:
        with contextlib.suppress(psycopg.Error):
            if await check():
                return time.monotonic() - began
        if time.monotonic() - began > within:
            raise AssertionError(f"not within {within:g}s: {what}")
        await asyncio.sleep(0.05)


# -- the lost-WAL token test -------------------------------------------------------------------


def _epoch(timeline: int) -> int:
    """The epoch of tokens and run ids handed out on ``timeline`` (queries.sql, "Epochs")."""
    return (timeline - 1) << 48


async def _due_job(cluster: ReplicatedServer) -> None:
    """Migrate the primary and make one job due now, replicated to the standby."""
    async with connect(cluster.admin_dsn(), max_size=1) as store:
        await add(store, spec("billing", schedule="0 0 1 1 *"))
        await store.trigger_job("default", "billing")
    await cluster.replayed()


async def _claim(cluster: ReplicatedServer, node: str) -> Any:
    """One claim with Pulse's own claim statement, on whichever server is primary."""
    async with connect(cluster.admin_dsn(), max_size=1, migrate=False) as store:
        [job] = await store.claim_due(node, ALL_SHARDS, 1, lease=30)
        return job


async def test_a_claim_lost_in_a_failover_never_shares_its_token_or_run_id(
    replicated: ClusterFactory,
) -> None:
    """Asynchronous replication: node A's claim commits on the primary after replication was
    cut, the primary dies, the standby is promoted; node B claims the same job there. The two
    claims must never hold the same fencing token or run id, and A's fenced write must change
    nothing on the new primary (before epochs: same token, same run id, and A's renewal
    succeeded). B's token and run id carry the new timeline's epoch: above anything timeline 1
    handed out."""
    async with replicated("async") as cluster:
        await _due_job(cluster)
        await cluster.cut_replication()
        a = await _claim(cluster, "node-a")  # acknowledged; never reaches the standby
        await cluster.crash_primary()
        await cluster.promote()
        b = await _claim(cluster, "node-b")
        assert (a.id, a.scheduled_for) == (b.id, b.scheduled_for)  # the same occurrence ...
        assert b.fencing_token != a.fencing_token, f"token t{a.fencing_token} handed out twice"
        assert b.run_id != a.run_id, f"run id {a.run_id} handed out twice"
        assert (a.fencing_token, a.run_id) == (1, 1)  # timeline 1: epoch 0
        assert b.fencing_token == _epoch(2) + 1 > a.fencing_token  # the token still grows
        assert b.run_id > _epoch(2)
        async with connect(cluster.admin_dsn(), max_size=1, migrate=False) as store:
            renewed = await store.renew([a.key], lease=30)
        assert not renewed, "node A's stale claim renewed its lease on the new primary"


async def _claim_occurrence(cluster: ReplicatedServer, node: str) -> Any:
    """One claim of an extra occurrence, with Pulse's own statement, on the primary."""
    async with connect(cluster.admin_dsn(), max_size=1, migrate=False) as store:
        routes = {"noop": tuple(ALL_SHARDS)}
        [job] = (await store.finish_and_claim_occurrences([], node, routes, 1, lease=30)).jobs
        return job


async def test_an_occurrence_claim_lost_in_a_failover_never_shares_its_token_or_run_id(
    replicated: ClusterFactory,
) -> None:
    """The lost-WAL failover for an extra occurrence (a trigger with a payload): its claim on
    the old primary and the one on the new primary never hold the same token, and an
    occurrence made after the promotion has a run id of the new timeline's epoch, so none of
    the ids the lost WAL held is handed out again."""
    async with replicated("async") as cluster:
        async with connect(cluster.admin_dsn(), max_size=1) as store:
            await add(store, spec("billing", schedule="0 0 1 1 *"))
            made = await RunControl(store.pool).trigger("default", "billing", {"n": 1})
        await cluster.replayed()
        await cluster.cut_replication()
        a = await _claim_occurrence(cluster, "node-a")  # acknowledged; never reaches the standby
        await cluster.crash_primary()
        await cluster.promote()
        b = await _claim_occurrence(cluster, "node-b")
        assert a.occurrence == b.occurrence == made.occurrence  # the same occurrence ...
        assert (a.fencing_token, b.fencing_token) == (1, _epoch(2) + 1)  # ... never one token
        async with connect(cluster.admin_dsn(), max_size=1, migrate=False) as store:
            assert await store.renew([a.key], lease=30) == set()
            later = await RunControl(store.pool).trigger("default", "billing", {"n": 2})
        assert later.occurrence > _epoch(2) > made.occurrence


async def test_a_failovers_kill_time_is_when_the_old_primary_stopped_accepting_writes(
    replicated: ClusterFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos checker tells an effect the failover lost from a duplicate by the kill time:
    it must be the instant every process of the old primary has its SIGKILL (its backends
    commit until then), not an instant read before the kill began."""
    from pgpulse_tools.chaos import postgres

    signalled: list[datetime] = []
    kill_tree = postgres.kill_tree

    def recorded(pid: int) -> list[int]:
        pids = kill_tree(pid)
        signalled.append(datetime.now(UTC))
        return pids

    monkeypatch.setattr(postgres, "kill_tree", recorded)
    async with replicated("async") as cluster:
        move = await cluster.fail_over(
            "failover", down=0.0, window=0.0, clock=functools.partial(datetime.now, UTC)
        )
    assert signalled and move.died_at >= signalled[0]  # the first kill_tree: the failover's
    assert move.promoted_at >= move.died_at


async def test_with_sync_replication_a_claim_that_waited_for_the_standby_is_never_acknowledged(
    replicated: ClusterFactory,
) -> None:
    """The same cut with synchronous replication: A's claim waits for the standby, the primary
    dies under it, and A is told nothing was claimed; B's claim is then the only one (passes
    today: what sync replication guarantees)."""
    async with replicated("sync") as cluster:
        await _due_job(cluster)
        await cluster.cut_replication()
        a = asyncio.create_task(_claim(cluster, "node-a"))
        await asyncio.sleep(0.5)
        assert not a.done()  # waiting for a standby it cannot reach
        await cluster.crash_primary()
        with pytest.raises((psycopg.OperationalError, DatabaseUnavailable)):
            await a  # the outcome is unknown to A: never "claimed"
        await cluster.promote()
        b = await _claim(cluster, "node-b")
        # the first claim that ever happened, on timeline 2
        assert (b.fencing_token, b.attempt) == (_epoch(2) + 1, 1)


# -- nodes through failovers (real node processes) ---------------------------------------------


@contextlib.contextmanager
def node_process(dsn: str, node_id: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``pgpulse node run`` as users run it (its own process, the CLI's loop), dry-running
    shell jobs; a 30 s poll, so only a notification makes it claim a triggered job at once.
    Stopped by its pid (SIGTERM, then SIGKILL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGPULSE_")}
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "pgpulse", "--database-url", dsn, "--log-level", "INFO"),
                *("node", "run", "--node-id", node_id, "--shell-dry-run", "--lease", "3"),
                *("--heartbeat", "0.5", "--poll", "30", "--drain-timeout", "1"),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def _ping_job(cluster: ReplicatedServer) -> None:
    async with connect(cluster.admin_dsn(), max_size=1) as store:
        await add(
            store, spec("ping", schedule="0 0 1 1 *", handler="shell", payload={"command": "true"})
        )


async def _beats_on_primary(cluster: ReplicatedServer, node: str, since: datetime) -> bool:
    """Whether ``node`` heartbeated on the current primary after ``since`` and holds the
    leader lock there (its heartbeat session does)."""
    rows = await _rows(
        cluster.primary.dsn(),
        "SELECT (SELECT last_heartbeat > %(since)s FROM pgpulse_nodes WHERE node_id = %(node)s)"
        " AS beat, EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        "  WHERE l.locktype = 'advisory' AND l.granted"
        "   AND a.application_name = 'pgpulse:' || %(node)s || ':beat') AS leads,"
        " EXISTS (SELECT 1 FROM pg_stat_activity"
        "  WHERE application_name = 'pgpulse:' || %(node)s || ':listen') AS listens",
        {"since": since, "node": node},
    )
    return bool(rows[0]["beat"] and rows[0]["leads"] and rows[0]["listens"])


async def _trigger_reaches(cluster: ReplicatedServer, node: str) -> float:
    """Trigger ``ping`` on the current primary; return the seconds (database clock) from the
    trigger to its claim by ``node``, once the run succeeded (AssertionError after 5 s)."""
    async with connect(cluster.admin_dsn(), max_size=1, migrate=False) as store:
        occurrence = await store.trigger_job("default", "ping")

    async def ran() -> bool:
        rows = await _rows(
            cluster.primary.dsn(),
            "SELECT node_id, outcome FROM pgpulse_runs r JOIN pgpulse_jobs j ON j.id = r.job_id"
            " WHERE j.name = 'ping' AND r.scheduled_for = %(at)s",
            {"at": occurrence},
        )
        return bool(rows) and rows[0]["outcome"] == "succeeded"

    await _until(f"the trigger at {occurrence} ran", ran, within=5)
    [row] = await _rows(
        cluster.primary.dsn(),
        "SELECT r.node_id, extract(epoch FROM r.started_at - r.scheduled_for)::float8 AS lag"
        " FROM pgpulse_runs r WHERE r.scheduled_for = %(at)s",
        {"at": occurrence},
    )
    assert row["node_id"] == node
    return float(row["lag"])


async def _primary_now(cluster: ReplicatedServer) -> datetime:
    [row] = await _rows(cluster.primary.dsn(), "SELECT now() AS now")
    now: datetime = row["now"]
    return now


@pytest.mark.slow
async def test_a_node_follows_a_failover_and_a_switchover_and_hears_triggers_at_once(
    replicated: ClusterFactory, tmp_path: Path
) -> None:
    """One node on a multi-host DSN. After a failover (SIGKILL + promote) and a switchover
    (clean stop + promote, the old primary rejoining first in the DSN), it heartbeats and leads
    on the new primary, LISTENs there, and a trigger there reaches it within a second."""
    async with replicated("sync") as cluster:
        await _ping_job(cluster)
        with node_process(cluster.admin_dsn(), "node-a", tmp_path / "node-a.log"):
            since = await _primary_now(cluster)
            await _until(
                "node-a up", lambda: _beats_on_primary(cluster, "node-a", since), within=20
            )
            assert await _trigger_reaches(cluster, "node-a") < 1.0
            for kind in ("failover", "switchover"):
                moved = await cluster.fail_over(kind, down=0.0, window=0.0, clock=_clock)
                await _until(
                    f"node-a heartbeats, leads and listens on {moved.new} after the {kind}",
                    functools.partial(_beats_on_primary, cluster, "node-a", moved.promoted_at),
                    within=5,
                )
                lag = await _trigger_reaches(cluster, "node-a")
                assert lag < 1.0, f"a trigger after the {kind} took {lag:.2f}s"


def _clock() -> datetime:
    return datetime.now(UTC)


@pytest.mark.slow
async def test_a_node_on_a_server_that_turns_read_only_moves_to_the_primary(
    replicated: ClusterFactory, tmp_path: Path
) -> None:
    """The node runs on pg1 (first in its DSN). pg2 is promoted (replication cut: the two part
    ways), then pg1 turns read-only under the node's live sessions (default_transaction_read_only
    and a reload, as a server becoming a standby would refuse writes). The node must notice and
    move: heartbeat, lead and listen on pg2 within a few heartbeats, and claim a trigger there
    within a second."""
    async with replicated("async") as cluster:
        await _ping_job(cluster)
        old = cluster.primary
        with node_process(cluster.admin_dsn(), "node-a", tmp_path / "node-a.log"):
            since = await _primary_now(cluster)
            await _until(
                "node-a up", lambda: _beats_on_primary(cluster, "node-a", since), within=20
            )
            await cluster.replayed()
            await cluster.cut_replication()
            await cluster.promote()
            await old.query("ALTER SYSTEM SET default_transaction_read_only = on")
            await old.query("SELECT pg_reload_conf()")
            flipped = await _primary_now(cluster)
            await _until(
                f"node-a heartbeats, leads and listens on {cluster.primary.name}",
                lambda: _beats_on_primary(cluster, "node-a", flipped),
                within=3,
            )
            assert await _trigger_reaches(cluster, "node-a") < 1.0


# -- the harness itself --------------------------------------------------------------------------


async def test_a_cluster_that_fails_to_start_leaves_no_folder_and_no_server(
    pg_bin: Path | None, tmp_path: Path
) -> None:
    """The standby cannot be made (its "template" is no data folder, so the primary never
    starts): the start raises, and neither a folder nor a postmaster is left."""
    parent = Path(tempfile.mkdtemp(prefix="pgpulse-test-failed-"))
    os.chmod(parent, 0o755)  # PostgreSQL's user must traverse it
    not_a_pgdata = Path(tempfile.mkdtemp(prefix="pgpulse-test-empty-"))
    os.chmod(not_a_pgdata, 0o755)
    cluster = ReplicatedServer(parent, "sync", pg_bin, template=not_a_pgdata)
    try:
        with pytest.raises(DatabaseUnavailable):
            await cluster.start()
        assert os.listdir(parent) == []
        assert not any(m.running for m in cluster.members)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
        shutil.rmtree(not_a_pgdata, ignore_errors=True)


def test_a_multi_host_dsn_goes_to_the_primary_unless_it_says_otherwise() -> None:
    """Every writing session of a node asks libpq for a read-write server when its DSN names
    several hosts and no target_session_attrs; a DSN that chose, or names one host, is kept."""
    two = "host=a,b port=5432,5433 dbname=pulse"
    assert conninfo.conninfo_to_dict(primary_dsn(two))["target_session_attrs"] == "read-write"
    uri = "postgresql://pulse@a:5432,b:5433/pulse"
    assert conninfo.conninfo_to_dict(primary_dsn(uri))["target_session_attrs"] == "read-write"
    chosen = "host=a,b dbname=pulse target_session_attrs=primary"
    assert primary_dsn(chosen) == chosen
    assert primary_dsn("host=a dbname=pulse") == "host=a dbname=pulse"


# -- a read replica for what people browse ---------------------------------------------------


async def test_lists_come_from_the_read_replica_and_writes_go_to_the_primary(
    replicated: ClusterFactory,
) -> None:
    """``--read-database-url`` on a real streaming standby. Replication is cut after job
    ``billing``, then ``late`` is created on the primary: ``job list`` and ``status`` through
    the replica show the standby's past (billing only), ``job pause late`` — a lookup and a
    write — reaches the primary, and without the replica DSN the list is the primary's."""
    async with replicated("async") as cluster:
        await _due_job(cluster)  # billing, replayed on the standby
        await cluster.cut_replication()
        async with connect(cluster.admin_dsn(), max_size=1, migrate=False) as store:
            await add(store, spec("late", schedule="0 0 1 1 *"))
        primary, replica = cluster.admin_dsn(), cluster.standby.dsn()
        env = {"PGPULSE_READ_DATABASE_URL": replica}
        listed = await asyncio.to_thread(pgpulse, "job", "list", "--json", dsn=primary, env=env)
        assert listed.returncode == 0, listed.stderr
        assert [job["name"] for job in json.loads(listed.stdout)] == ["billing"]
        status = await asyncio.to_thread(pgpulse, "status", "--json", dsn=primary, env=env)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["jobs"]["total"] == 1
        paused = await asyncio.to_thread(pgpulse, "job", "pause", "late", dsn=primary, env=env)
        assert paused.returncode == 0, paused.stderr
        [row] = await _rows(primary, "SELECT status FROM pgpulse_jobs WHERE name = 'late'")
        assert row["status"] == "paused"
        everything = await asyncio.to_thread(pgpulse, "job", "list", "--json", dsn=primary)
        assert [job["name"] for job in json.loads(everything.stdout)] == ["billing", "late"]
