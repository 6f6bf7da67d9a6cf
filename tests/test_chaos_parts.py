"""The chaos harness's pure parts and its proxy, without node processes: the fault plan, the
workload mix, and the proxy's cut / delay / heal against a tiny echo server."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from pgpulse_tools.chaos.faults import FAULT_KINDS, plan_faults
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


def test_the_workload_mixes_every_kind_and_policy() -> None:
    jobs = build_jobs(300, lease=4.0, seed=1)
    assert len(jobs) == 300 and len({j.name for j in jobs}) == 300
    assert {j.handler for j in jobs} == {f"chaos.{k.name}" for k in kinds(4.0)}
    assert {j.catch_up for j in jobs} == {"backfill", "skip", "coalesce"}
    assert all(j.max_attempts >= 10 for j in jobs if j.catch_up == "backfill")
    assert not [j for j in jobs if j.handler == "chaos.slow" and j.catch_up == "backfill"]
    long = [j for j in jobs if j.handler == "chaos.long"]
    assert long and all(j.payload["min"] > 4.0 for j in long)  # outlive the lease
    assert any(len(j.schedule.split()) == 6 for j in jobs)  # cron with seconds
    assert len(build_jobs(7, lease=4.0, seed=1)) == 7


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    p = Proxy("test", Upstream("127.0.0.1", port))
    await p.start()
    try:
        yield p
    finally:
        await p.close()
        server.close()
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

    from pgpulse.cli import main

    result = CliRunner().invoke(main, ["chaos", "--help"])
    assert result.exit_code == 0
    for option in ("--duration", "--nodes", "--seed", "--jobs", "PGPULSE_CHAOS_SEED"):
        assert option in result.output
