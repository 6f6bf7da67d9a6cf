"""Split brain: the old primary left running beside the promoted one, both accepting
writes. Two real PostgreSQL servers (the replication tests' :class:`ReplicatedServer`: a primary
and a streaming standby, replication cut, the standby promoted: timelines 1 and 2), a real node
on the multi-host DSN that lists the old primary first (where libpq goes), a real webhook
receiver, ``pgpulse status`` as a process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from helpers import add, apgpulse, spec
from notify_servers import HttpReceiver, run_http_receiver
from pgpulse.alerts import services as alert_services
from pgpulse.alerts.store import AlertStore
from pgpulse.app import connect
from pgpulse.core.egress import HttpAllowList
from pgpulse.node.engine import Node, NodeConfig
from pgpulse.node.handlers import RunContext
from pgpulse.node.split_brain import HostRole, host_dsn, hosts_of, judge
from test_replication import (  # noqa: F401  (fixtures: pytest finds them by name)
    ClusterFactory,
    _rows,
    _until,
    cluster_template,
    pg_bin,
)
from test_replication import replicated as replicated  # the fixture, by its name

pytestmark = [pytest.mark.timeout(120), pytest.mark.server_programs]

LOCAL = HttpAllowList.parse(["127.0.0.1"])


@pytest.fixture
def hook() -> Iterator[HttpReceiver]:
    yield from run_http_receiver()


async def noop(ctx: RunContext) -> None:
    """A handler that does nothing."""


async def _runs(dsn: str, node: str) -> int:
    [row] = await _rows(
        dsn, "SELECT count(*) AS n FROM pgpulse_runs WHERE node_id = %(n)s", {"n": node}
    )
    return int(row["n"])


async def _events(dsn: str) -> list[dict[str, Any]]:
    return await _rows(
        dsn,
        "SELECT e.id, e.dedupe_key, e.resolved_at,"
        " (SELECT count(*) FROM pgpulse_alert_deliveries d WHERE d.event_id = e.id) AS deliveries"
        " FROM pgpulse_alert_events e WHERE e.rule = 'split_brain' ORDER BY e.id",
    )


async def test_a_node_on_a_split_brain_claims_on_the_newest_primary_only_and_says_so_once(
    replicated: ClusterFactory, hook: HttpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """pg1 (timeline 1, first in the DSN) and pg2 (promoted: timeline 2) both take writes. The
    node must claim on pg2 only — never on pg1, where libpq's read-write choice would put it —
    fire the split_brain alert once (one event, one webhook call) while it lasts, close it when
    pg1 stops, and ``pgpulse status`` (and ``--check``) must say split brain."""
    caplog.set_level(logging.INFO)
    async with replicated("async") as cluster:
        dsn = cluster.admin_dsn()
        async with connect(dsn, max_size=2) as store:
            await add(store, spec("tick", schedule="* * * * * *"))
            alerts = AlertStore(store.pool)
            await alerts.add_notifier("ops", "webhook", {"url": hook.url("/hook")}, allow=LOCAL)
            await alerts.set_rule("split_brain", ["ops"])
        await cluster.replayed()
        old = cluster.primary
        await cluster.cut_replication()
        await cluster.promote()
        new = cluster.primary
        assert await old.query("SELECT pg_is_in_recovery()") == [False]  # still a primary
        config = NodeConfig(
            node_id="node-a",
            heartbeat_interval=0.2,
            lease=2.0,
            node_ttl=1.0,
            poll_interval=0.5,
            drain_timeout=0.5,
            alert_interval=0.5,
            split_brain_every=1,
            handler_options={"http_allow": LOCAL},
        )
        async with connect(dsn, max_size=4, migrate=False) as store:
            node = Node(store, dsn, {"noop": noop}, config)
            alert_services.register(node)  # as App.run_node does
            task = asyncio.create_task(node.run())
            try:
                async with asyncio.timeout(20):
                    await node.started.wait()

                async def ran_on_new() -> bool:
                    return await _runs(new.dsn(), "node-a") >= 3

                async def delivered() -> bool:
                    return len(hook.requests) >= 1

                async def listens_on_new() -> bool:
                    [row] = await _rows(
                        new.dsn(),
                        "SELECT count(*) AS n FROM pg_stat_activity"
                        " WHERE application_name = 'pgpulse:node-a:listen'",
                    )
                    return bool(row["n"] == 1)

                await _until("3 runs of tick on the new primary", ran_on_new, within=30)
                await _until("node-a listens on the new primary", listens_on_new, within=10)
                await _until("the split_brain alert delivered", delivered, within=10)
                shown = await apgpulse("status", dsn=dsn)
                checked = await apgpulse("status", "--check", dsn=dsn)
                events = await _events(new.dsn())
                assert await _runs(old.dsn(), "node-a") == 0  # never claimed on pg1
                await old.stop("fast")

                async def closed() -> bool:
                    return all(e["resolved_at"] is not None for e in await _events(new.dsn()))

                await _until("the split_brain alert closed", closed, within=10)
            finally:
                node.stop()
                async with asyncio.timeout(20):
                    await task
    assert shown.returncode == 0, shown.stderr
    first = shown.stdout.splitlines()[0]
    assert first.startswith("SPLIT BRAIN: "), shown.stdout
    assert f"127.0.0.1:{new.port} (timeline 2)" in first
    assert f"127.0.0.1:{old.port} (timeline 1)" in first
    assert f"claim on 127.0.0.1:{new.port} only" in first
    assert checked.returncode == 1 and "SPLIT BRAIN" in checked.stderr, checked
    assert len(events) == 1 and events[0]["deliveries"] == 1, events
    assert [r.json()["rule"] for r in hook.requests] == ["split_brain"]
    said = [r for r in caplog.records if getattr(r, "action", None) == "split_brain"]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert [r for r in caplog.records if getattr(r, "action", None) == "split_brain_over"]


def test_the_newest_timeline_wins_and_a_tie_goes_to_the_dsns_first() -> None:
    """judge() on values: one writable host is no split brain (a standby or a silent host
    does not count); of several, the highest timeline is where claims go, and on a tie the
    first in the DSN, as libpq would choose."""
    a1, b2 = HostRole("a", 5432, True, 1), HostRole("b", 5433, True, 2)
    assert judge([a1, HostRole("b", 5433, False, None), HostRole("c", 1, None, None)]) is None
    found = judge([a1, b2])
    assert found is not None and found.newest == b2 and found.others == (a1,)
    assert found.key == "cluster/split_brain/a:5432@1,b:5433@2"
    tie = judge([HostRole("a", 5432, True, 3), HostRole("b", 5433, True, 3)])
    assert tie is not None and tie.newest.host == "a" and "same timeline" in tie.line()


def test_each_host_of_a_multi_host_dsn_is_asked_on_its_own() -> None:
    """hosts_of() and host_dsn() on both DSN spellings: one port for all, or one per host."""
    uri = "postgresql://pulse@h1:5432,h2:6432/pulse?target_session_attrs=read-write"
    assert hosts_of(uri) == [("h1", 5432), ("h2", 6432)]
    assert hosts_of("host=a,b port=5433 dbname=x") == [("a", 5433), ("b", 5433)]
    one = host_dsn(uri, 1, timeout=2)
    assert hosts_of(one) == [("h2", 6432)]
    assert "connect_timeout=2" in one and "dbname=pulse" in one


async def test_a_running_node_leaves_the_old_primary_when_a_standby_is_promoted_beside_it(
    replicated: ClusterFactory,
) -> None:
    """The usual way in: the node runs on pg1 (claims there), then pg2 is promoted while pg1
    keeps running. Within its next checks the node claims on pg2, and pg1 gets no claim of it
    from then on (its runs there stop growing while pg2's grow by 3)."""
    async with replicated("async") as cluster:
        dsn = cluster.admin_dsn()
        async with connect(dsn, max_size=2) as store:
            await add(store, spec("tick", schedule="* * * * * *"))
        old = cluster.primary
        config = NodeConfig(
            node_id="node-a",
            heartbeat_interval=0.2,
            lease=2.0,
            node_ttl=1.0,
            poll_interval=0.5,
            drain_timeout=0.5,
            split_brain_every=1,
        )
        async with connect(dsn, max_size=4, migrate=False) as store:
            node = Node(store, dsn, {"noop": noop}, config)
            alert_services.register(node)  # as App.run_node does
            task = asyncio.create_task(node.run())
            try:

                async def ran(dsn: str, at_least: int) -> bool:
                    return await _runs(dsn, "node-a") >= at_least

                await _until("a run on pg1", lambda: ran(old.dsn(), 1), within=30)
                await cluster.replayed()
                await cluster.cut_replication()
                await cluster.promote()
                new = cluster.primary
                replicated_runs = await _runs(new.dsn(), "node-a")  # pg1's, streamed before
                fresh = replicated_runs + 1
                await _until("a fresh run on pg2", lambda: ran(new.dsn(), fresh), within=30)
                on_old = await _runs(old.dsn(), "node-a")
                later = await _runs(new.dsn(), "node-a") + 3
                await _until("3 more runs on pg2", lambda: ran(new.dsn(), later), within=30)
                assert await _runs(old.dsn(), "node-a") == on_old
                assert node.split_brain is not None and node.split_brain.current is not None
                assert node.split_brain.current.newest.port == new.port
            finally:
                node.stop()
                async with asyncio.timeout(20):
                    await task
