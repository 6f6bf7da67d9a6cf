"""The chaos harness's pure parts and its proxy, without node processes: the fault plan, the
workload mix, and the proxy's cut / delay / heal against a tiny echo server."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pgpulse_tools.chaos.faults import (
    CLUSTER_RUN_KINDS,
    FAULT_KINDS,
    RESHARD_COUNTS,
    plan_faults,
)
from pgpulse_tools.chaos.proxy import Proxy, Upstream
from pgpulse_tools.chaos.workload import build_jobs, kinds


def test_a_seed_names_a_plan_and_every_kind_comes_first() -> None:
    plan = plan_faults(42, duration=30, nodes=3, lease=3.0)
    assert plan == plan_faults(42, duration=30, nodes=3, lease=3.0)
    assert plan != plan_faults(43, duration=30, nodes=3, lease=3.0)
    assert {f.kind for f in plan[: len(FAULT_KINDS)]} == set(FAULT_KINDS)
    assert all(2.0 <= f.at < 30 for f in plan)
    assert [f.at for f in plan] == sorted(f.at for f in plan)


@pytest.mark.parametrize("seed", range(20))
def test_a_plan_never_doubles_up_a_node_and_keeps_one_healthy(seed: int) -> None:
    lease, nodes = 4.0, 4
    plan = plan_faults(seed, duration=60, nodes=nodes, lease=lease)
    assert set(Counter(f.kind for f in plan)) == set(FAULT_KINDS)
    node_faults = [f for f in plan if f.kind in {"kill", "pause", "partition", "delay"}]
    for fault in node_faults:
        assert fault.node is not None and 0 <= fault.node < nodes
        others = [g for g in node_faults if g is not fault and g.at <= fault.at < g.at + g.hold]
        assert fault.node not in {g.node for g in others}
        assert len({g.node for g in others} | {fault.node}) <= nodes - 1
    for fault in plan:
        if fault.kind == "pause":
            assert fault.hold > lease  # a zombie: it outlives its lease
        if fault.kind == "join_leave":
            assert fault.node == nodes
        if fault.kind == "pg_restart":
            assert fault.node is None and fault.mode in {"fast", "immediate"}


def test_kinds_can_be_left_out() -> None:
    plan = plan_faults(1, duration=40, nodes=2, lease=3.0, kinds=("kill", "pause"))
    assert {f.kind for f in plan} == {"kill", "pause"}
    with pytest.raises(ValueError, match="unknown fault kinds"):
        plan_faults(1, duration=10, nodes=3, lease=3.0, kinds=("meteor",))


def test_reshard_is_opt_in_and_each_one_changes_the_count() -> None:
    """Default plans never reshard (a seed keeps its plan); asked for, each reshard sets a
    count of RESHARD_COUNTS other than the one before, one at a time."""
    assert all(f.kind != "reshard" for f in plan_faults(5, duration=60, nodes=3, lease=3.0))
    plan = plan_faults(5, duration=60, nodes=3, lease=3.0, kinds=("kill", "reshard"))
    counts = [int(f.mode) for f in plan if f.kind == "reshard"]
    assert len(counts) >= 3 and set(counts) <= set(RESHARD_COUNTS)
    assert all(a != b for a, b in itertools.pairwise([64, *counts]))
    reshards = [f for f in plan if f.kind == "reshard"]
    assert all(a.at + a.hold <= b.at for a, b in itertools.pairwise(reshards))


def test_the_workload_mixes_every_kind_and_policy() -> None:
    jobs = build_jobs(300, lease=4.0, seed=1)
    assert len(jobs) == 300 and len({j.name for j in jobs}) == 300
    assert {j.handler for j in jobs} == {f"chaos.{k.name}" for k in kinds(4.0)}
    assert {j.catch_up for j in jobs} == {"backfill", "skip", "coalesce"}
    assert {j.overlap for j in jobs} == {"forbid", "allow", "replace"}
    # Pulse's default for every policy: more attempts for backfill jobs hid interruptions
    # using attempts up
    assert {j.max_attempts for j in jobs} == {3}
    assert not [j for j in jobs if j.handler == "chaos.slow" and j.catch_up == "backfill"]
    long = [j for j in jobs if j.handler == "chaos.long"]
    assert long and all(j.payload["min"] > 4.0 for j in long)  # outlive the lease
    assert any(len(j.schedule.split()) == 6 for j in jobs)  # cron with seconds
    assert len(build_jobs(7, lease=4.0, seed=1)) == 7


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    """A proxy in front of an echo server; the server's connections are closed after the test
    (a stalled one is still open then: ``Server.close`` leaves accepted connections alone)."""
    accepted: list[asyncio.StreamWriter] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    p = Proxy("test", Upstream("127.0.0.1", port))
    await p.start()
    try:
        yield p
    finally:
        await p.close()
        server.close()
        for writer in accepted:
            writer.close()
        await server.wait_closed()


async def _roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes = b"ping"
) -> bytes:
    writer.write(data)
    await writer.drain()
    return await reader.readexactly(len(data))


async def test_the_proxy_forwards_then_stalls_then_delivers_what_waited(proxy: Proxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    assert await _roundtrip(reader, writer) == b"ping"
    proxy.cut("stall")
    writer.write(b"late")
    await writer.drain()
    with pytest.raises(TimeoutError):  # a silent network: nothing comes back ...
        async with asyncio.timeout(0.3):
            await reader.readexactly(4)
    proxy.heal()  # ... until it heals, and then it all arrives
    async with asyncio.timeout(5):
        assert await reader.readexactly(4) == b"late"
    writer.close()


async def test_the_proxy_drops_connections_and_refuses_new_ones_until_healed(proxy: Proxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    assert await _roundtrip(reader, writer) == b"ping"
    proxy.cut("drop")
    async with asyncio.timeout(5):
        assert await reader.read(10) == b""  # the connection is gone
    reader2, writer2 = await asyncio.open_connection("127.0.0.1", proxy.port)
    async with asyncio.timeout(5):
        assert await reader2.read(10) == b""  # and a new one is turned away
    proxy.heal()
    reader3, writer3 = await asyncio.open_connection("127.0.0.1", proxy.port)
    assert await _roundtrip(reader3, writer3) == b"ping"
    for w in (writer, writer2, writer3):
        w.close()


async def test_the_proxy_delays_each_chunk(proxy: Proxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    proxy.delay(0.2)
    began = time.monotonic()
    assert await _roundtrip(reader, writer) == b"ping"
    assert time.monotonic() - began >= 0.4  # once each way
    proxy.heal()
    began = time.monotonic()
    assert await _roundtrip(reader, writer) == b"ping"
    assert time.monotonic() - began < 0.2
    writer.close()


def test_the_cli_offers_the_chaos_command() -> None:
    from click.testing import CliRunner

    from pgpulse.cli.main import main

    result = CliRunner().invoke(main, ["chaos", "--help"])
    assert result.exit_code == 0
    for option in ("--duration", "--nodes", "--seed", "--jobs", "PGPULSE_CHAOS_SEED"):
        assert option in result.output
    for option in ("--cluster", "--replication", "--pg-bin", "--faults"):
        assert option in result.output


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (["--replication", "async"], "--replication"),
        (["--pg-bin", "/usr"], "--pg-bin"),
        (["--cluster", "--faults", "meteor"], "--faults"),
        (["--faults", ""], "--faults"),
    ],
)
def test_cluster_options_are_refused_where_they_mean_nothing(args: list[str], refused: str) -> None:
    from click.testing import CliRunner

    from pgpulse.cli.main import main

    result = CliRunner().invoke(main, ["chaos", "--duration", "5", *args])
    assert result.exit_code == 2 and refused in result.output, result.output


@pytest.mark.parametrize(
    ("settings", "field_value"),
    [
        ({"kinds": ("failover",)}, "failover"),  # one server: nothing to fail over
        ({"kinds": ("pg_restart",), "replication": "sync"}, "pg_restart"),
        ({"kinds": ("pg_restart",), "database_url": "postgresql://127.0.0.1/x"}, "pg_restart"),
    ],
)
def test_a_fault_the_server_cannot_take_is_refused(
    settings: dict[str, Any], field_value: str
) -> None:
    from pgpulse.core.errors import InvalidInput
    from pgpulse_tools.chaos.runner import ChaosConfig

    with pytest.raises(InvalidInput) as refused:
        ChaosConfig(**settings).fault_kinds()
    assert refused.value.field == "faults" and refused.value.value == field_value


def test_by_default_a_cluster_run_fails_over_instead_of_restarting() -> None:
    from pgpulse_tools.chaos.runner import ChaosConfig

    assert ChaosConfig().fault_kinds() == FAULT_KINDS
    assert set(ChaosConfig(replication="async").fault_kinds()) == (
        set(FAULT_KINDS) - {"pg_restart"} | {"failover", "switchover"}
    )


@pytest.mark.parametrize("seed", range(10))
def test_a_cluster_plan_moves_the_primary_one_move_at_a_time(seed: int) -> None:
    lease = 3.0
    plan = plan_faults(seed, duration=60, nodes=3, lease=lease, kinds=CLUSTER_RUN_KINDS)
    moves = [f for f in plan if f.kind in ("failover", "switchover")]
    assert {f.kind for f in moves} == {"failover", "switchover"}
    assert "pg_restart" not in {f.kind for f in plan}
    for before, after in itertools.pairwise(moves):
        assert after.at >= before.at + before.window + before.hold + lease
    for move in moves:
        assert (0.3 <= move.window <= 1.0) if move.kind == "failover" else move.window == 0
        assert move.node is None


def test_the_journal_keeps_what_the_database_lost(tmp_path: Path) -> None:
    """Four executions as a node journals them; the database kept one whole, one without its
    end, lost one, and one aborted: the merge marks exactly the two losses, and gives a lost end
    the database's instant of it (committed_at), not the journal's."""
    from datetime import timedelta

    from helpers import utc
    from pgpulse_tools.chaos.history import Execution
    from pgpulse_tools.chaos.journal import Journal, merge, read_journals

    journal = Journal(tmp_path)
    sf = utc(2026, 1, 1)
    for n, uid in enumerate(("kept", "endless", "gone", "aborted"), start=1):
        fields = {"job_id": n, "scheduled_for": sf, "attempt": 1, "token": n, "run_id": n}
        journal.started(uid, "node-1", {**fields, "kind": "quick"})
    committed = sf + timedelta(seconds=1)  # the database's instant each statement returned
    journal.ended("kept", "node-1", "applied", True, True, committed_at=committed)
    journal.ended("endless", "node-1", "applied", True, True, committed_at=committed)
    journal.ended("gone", "node-1", "fenced", True, False, committed_at=committed)
    journal.aborted("aborted", "node-1")
    (tmp_path / "node-2.journal").write_bytes(b'{"e": "sta')  # cut short by a SIGKILL
    records = read_journals(tmp_path)
    assert len(records) == 8
    row = Execution(1, 1, sf, 1, 1, "node-1", "quick", sf, sf, "applied", True, True, "kept", 1)
    rows = [
        row,
        replace(row, id=2, job_id=2, token=2, ended_at=None, result=None, uid="endless"),
        replace(row, id=3, job_id=4, token=4, ended_at=None, result=None, uid="aborted"),
    ]
    merged = {e.uid: e for e in merge(rows, records)}
    assert merged["kept"] == row
    assert merged["endless"].result == "applied" and not merged["endless"].in_db
    assert merged["endless"].committed_at == committed != merged["endless"].ended_at
    assert merged["aborted"].ended_at is not None and merged["aborted"].result is None
    assert merged["aborted"].in_db
    gone = merged["gone"]
    assert (gone.id, gone.job_id, gone.token, gone.result, gone.in_db) == (4, 3, 3, "fenced", False)
    assert gone.lease_ok_at_end is False and gone.scheduled_for == sf
    assert gone.committed_at == committed and merged["aborted"].committed_at is None


async def test_the_database_clock_offset_is_read_from_the_tightest_round_trip() -> None:
    """The offset the harness adds to its clock (fault instants, a failover's kill among them)
    is measured over several readings, the slowest replies ignored and the instant of the one
    kept taken mid-trip: a reply held up (a loaded machine) must not set the clock back."""
    from datetime import UTC, datetime, timedelta

    from pgpulse_tools.chaos.runner import clock_offset

    ahead = timedelta(seconds=5)  # the database's clock, against this process's
    replies = iter([0.15, 0.002, 0.12])  # seconds each reply is held up after the reading

    async def read() -> datetime:
        at = datetime.now(UTC) + ahead
        await asyncio.sleep(next(replies))
        return at

    offset = await clock_offset(read, samples=3)
    assert abs(offset - ahead) < timedelta(milliseconds=20)


def test_a_stopping_node_counts_as_hung_only_past_what_pulses_stop_may_take() -> None:
    """A SIGTERMed node exits within its drain timeout plus three steps (the loops' last one,
    the hand-back, the deregistration) of engine.STOP_STEP_TIMEOUT each, a given-up step as long
    again for its cancellation, and its pool's close: the harness waits that long before it
    calls the node hung (it waited drain + 15 s, and aborted a node of seed 7 inside its
    hand-back's cancellation while the primary was switching over)."""
    from pgpulse.node.engine import STOP_STEP_TIMEOUT
    from pgpulse_tools.chaos.cluster import NodeSettings

    settings = NodeSettings(drain_timeout=3.0, heartbeat=0.5)
    every_step_given_up = settings.drain_timeout + 3 * 2 * STOP_STEP_TIMEOUT
    assert settings.stop_grace > every_step_given_up + 5.0  # and the pool's close
    assert settings.stop_grace >= settings.drain_timeout + 20  # README: "+ about 20 s"


async def test_a_join_and_leave_waits_until_the_previous_one_has_stopped_its_node() -> None:
    """Two join_leave faults of the extra node planned closer than its stop takes: the second
    starts it only once the first has seen it exit (else its start is a no-op on a node still
    stopping, and both wait on one exit and record it twice)."""
    from datetime import UTC, datetime
    from typing import cast

    from pgpulse_tools.chaos.cluster import Cluster
    from pgpulse_tools.chaos.faults import Injector, PlannedFault
    from pgpulse_tools.chaos.server import Server

    calls: list[str] = []

    class Extra:
        live = False

        def node_id(self, index: int) -> str:
            return f"node-{index + 1}"

        def running(self, index: int) -> bool:
            return self.live

        async def start(self, index: int) -> None:
            calls.append("start" if not self.live else "start (still stopping)")
            self.live = True

        async def terminate(self, index: int, grace: float | None = None) -> int:
            calls.append("sigterm")
            await asyncio.sleep(0.3)  # it drains
            if self.live:
                calls.append("exited")
            self.live = False
            return 0

    async def no_leader() -> str | None:
        return None

    injector = Injector(
        cast(Cluster, Extra()),
        [],
        cast(Server, None),
        lambda: datetime.now(UTC),
        no_leader,
    )

    async def later(fault: PlannedFault) -> None:
        await asyncio.sleep(fault.at)
        await injector.apply(fault)

    await asyncio.gather(
        later(PlannedFault(0.0, "join_leave", 4, hold=0.1)),
        later(PlannedFault(0.2, "join_leave", 4, hold=0.1)),
    )
    assert calls == ["start", "sigterm", "exited", "start", "sigterm", "exited"]


def test_a_node_ends_even_if_a_handler_was_connecting_as_it_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The workload's handlers leave nothing behind that outlives a node's event loop: a
    handler still connecting (to a server that accepts and never answers) when the node's main
    coroutine ends is cancelled with the loop, and the loop closes at once. (An unclosed
    psycopg_pool pool reconnecting then swallowed the cancellation, and the node never
    exited: three hung nodes in seed 7's soak.)"""
    import socket
    import threading

    from pgpulse_tools.chaos.workload import Connections

    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    port = mute.getsockname()[1]
    monkeypatch.setenv("PGPULSE_DATABASE_URL", f"host=127.0.0.1 port={port} dbname=x")

    async def node() -> None:
        connections = Connections(2)

        async def handler() -> None:
            async with connections.connection():
                pass

        asyncio.get_running_loop().create_task(handler())
        await asyncio.sleep(0.3)  # the handler is connecting as the node's run ends

    runner = threading.Thread(target=asyncio.run, args=(node(),), daemon=True)
    try:
        runner.start()
        runner.join(10)
        assert not runner.is_alive(), "the event loop did not close"
    finally:
        mute.close()


async def test_the_handlers_connections_are_kept_and_checked_before_reuse(
    dsn: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection goes back for the next handler; one that died meanwhile (a failover, a
    restart) is found by the check before it is lent and replaced, not lent to fail."""
    from pgpulse_tools.chaos.workload import Connections

    monkeypatch.setenv("PGPULSE_DATABASE_URL", dsn)
    connections = Connections(2)
    async with connections.connection() as conn:
        pid = (await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone() or {})["pid"]
    async with connections.connection() as again:
        assert again is conn
    db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    async with connections.connection() as fresh:
        row = await (await fresh.execute("SELECT pg_backend_pid() AS pid")).fetchone()
        assert fresh is not conn and row is not None and row["pid"] != pid
    await connections.close()


def test_a_soak_is_a_long_run_then_resharding_during_failovers() -> None:
    """``pgpulse chaos --soak``'s runs: the long run as given (over 10 minutes), then a run on
    a replicated cluster of the harness's own (async unless the soak is on a cluster) whose
    faults move the primary and the shard count, for a quarter of it."""
    from pgpulse.core.errors import InvalidInput
    from pgpulse_tools.chaos.runner import ChaosConfig, soak_configs

    given = ChaosConfig(duration=1200, seed=7, database_url="postgresql://127.0.0.1/x")
    long, resharding = soak_configs(given)
    assert long == given
    assert (resharding.duration, resharding.replication, resharding.seed) == (300, "async", 7)
    assert resharding.database_url is None  # a cluster of its own
    assert {"failover", "switchover", "reshard"} <= set(resharding.fault_kinds())
    assert soak_configs(replace(given, replication="sync"))[1].replication == "sync"
    with pytest.raises(InvalidInput) as refused:
        soak_configs(replace(given, duration=600))
    assert (refused.value.field, refused.value.value) == ("duration", 600)


def test_a_soak_of_ten_minutes_or_less_is_refused_by_the_command() -> None:
    from helpers import pgpulse

    done = pgpulse("chaos", "--soak", "--duration", "300", timeout=120)
    assert done.returncode == 2, done.stderr
    assert "--duration" in done.stderr and "longer than 600s, got 300s" in done.stderr
    assert "Traceback" not in done.stderr
