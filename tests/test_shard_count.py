"""The shard count as a setting of the database: placement balance and coverage,
the online change (``pgpulse shards set``), the claim at another count, nodes switching."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from helpers import add, pgpulse, spec, utc
from pgpulse.core.errors import InvalidInput
from pgpulse.core.routing import routes_for
from pgpulse.core.sharding import balance_bound, placement, shards_for
from pgpulse.db.resharding import set_shard_count, shard_state
from pgpulse.db.store import Store
from pgpulse.sql import at_shard_count
from test_claim import explain_in_claim_session, load_hourly
from test_engine import node, running, wait_until

T0 = utc(2026, 1, 1, 0, 0, 30)
LATER = T0 + timedelta(minutes=5)
SIXTEEN = [f"node-{i:02d}" for i in range(16)]


async def noop(ctx: Any) -> None:
    """A handler that does nothing."""


def assert_partition(owned: dict[str, tuple[int, ...]], count: int) -> None:
    """Every shard of ``count`` has exactly one owner, and each owns within the bound."""
    shards = sorted(s for mine in owned.values() for s in mine)
    assert shards == list(range(count))
    low, high = balance_bound(count, len(owned))
    assert {len(mine) for mine in owned.values()} <= {low, high}


@pytest.mark.parametrize("count", [64, 128, 1024, 4096])
def test_sixteen_nodes_own_every_shard_once_within_the_bound(count: int) -> None:
    owned = {n: shards_for(n, SIXTEEN, count) for n in SIXTEEN}
    assert_partition(owned, count)
    assert {len(mine) for mine in owned.values()} == {count // 16}  # 16 divides each count
    # One dies, one joins: still a partition of the live ones, within the bound.
    fifteen = SIXTEEN[1:]
    assert_partition({n: shards_for(n, fifteen, count) for n in fifteen}, count)
    seventeen = [*SIXTEEN, "node-new"]
    assert_partition({n: shards_for(n, seventeen, count) for n in seventeen}, count)


def test_a_thousand_nodes_each_own_work_at_4096_shards() -> None:
    nodes = frozenset(f"host-{i}" for i in range(1000))
    owned = placement(nodes, 4096)
    assert_partition(owned, 4096)
    assert {len(mine) for mine in owned.values()} == {4, 5}  # 4096 = 1000 × 4 + 96


def test_every_node_computes_the_same_routes_for_every_handler() -> None:
    live = {n: (("x", "y") if i % 2 else ("x",)) for i, n in enumerate(SIXTEEN)}
    for count in (64, 1024):
        routes = {n: routes_for(n, live[n], live, count) for n in SIXTEEN}
        assert_partition({n: r["x"] for n, r in routes.items()}, count)
        assert_partition({n: r["y"] for n, r in routes.items() if "y" in r}, count)


async def test_the_claim_at_128_shards_claims_its_shards_through_the_count_index(
    store: Store, dsn: str
) -> None:
    ids = await add(store, *(spec(f"job-{i}") for i in range(300)), now=T0)
    done = await set_shard_count(store.pool, 128, wait=0)
    assert done.built == [
        "pgpulse_jobs_due_128",
        "pgpulse_jobs_due_priority_128",
        "pgpulse_occurrences_due_128",
    ]
    assert (done.old, done.new, done.switched) == (64, 128, True)  # no live node to wait for
    store.shard_count = 128
    batch = await store.claim_due("node-a", [3, 100], 300, lease=30, now=LATER)
    assert sorted(job.id for job in batch) == sorted(i for i in ids if i % 128 in (3, 100))
    assert batch  # 300 ids reach both shards
    # The node's claim session plans it once, generically: the due scan is the count's index.
    due, server_version = await _generic_due_scans(dsn, 128, [5, 6], LATER)
    assert {n["Index Name"] for n in due} == {
        "pgpulse_jobs_due_128",
        "pgpulse_jobs_due_priority_128",  # the jobs with a priority: none here
    }
    if server_version >= 170000:
        # The shard is an index condition of the ordered scan: no job of another shard is read.
        assert all("((id % '128'::bigint))::smallint = ANY" in n["Index Cond"] for n in due), [
            n["Index Cond"] for n in due
        ]
        wanted = sum(1 for i in ids if i % 128 in (5, 6))
        assert max(n["Actual Rows"] for n in due) == min(wanted, 10)
    else:
        # PostgreSQL 14-16 cannot put = ANY on a column after the range column into a scan that
        # returns rows in index order: the shard is a filter of the due scan, which stops once
        # it holds its LIMIT (what that reads under a backlog: the test below).
        assert all("smallint = ANY" in n["Filter"] for n in due), due


async def _generic_due_scans(
    dsn: str, count: int, shards: list[int], now: Any, limit: int = 10
) -> tuple[list[dict[str, Any]], int]:
    """The due scans (``next_run_at <=`` in the index condition: the due jobs, the due jobs
    with a priority) of ``claim_jobs`` at ``count``
    shards as a node's claim session runs it (prepared, generic), for a node owning ``shards``
    of handler noop, claiming up to ``limit`` at ``now``; and the server's version number."""
    values = {
        "node": "n",
        "route_handlers": ["noop"],
        "route_shards": ["{" + ",".join(map(str, shards)) + "}"],
        "limit": limit,
        "lease": 30,
        "now": now,
    }
    nodes, server_version = await explain_in_claim_session(
        dsn, at_shard_count("claim_jobs", count), values
    )
    # The due read (next_run_at <=); PostgreSQL 15 also answers the next-wake probe (the
    # earliest future next_run_at, one row) from this index, without a shard condition.
    due = [
        n
        for n in nodes
        if n.get("Relation Name") == "pgpulse_jobs" and "next_run_at <=" in n.get("Index Cond", "")
    ]
    return due, server_version


async def test_a_claim_at_128_shards_reads_about_its_limit_under_a_backlog(
    store: Store, dsn: str
) -> None:
    """20,000 due jobs at 128 shards, a node owning half of them claims 10: its due scan reads
    at most twice its limit on every supported version (PostgreSQL 15 once read all 10,000 of
    its shards' due rows and sorted them: 110 ms a claim; docs/scaling.md)."""
    load_hourly(dsn, 20_000)
    await set_shard_count(store.pool, 128, wait=0)
    due, _ = await _generic_due_scans(dsn, 128, list(range(0, 128, 2)), T0 + timedelta(hours=3))
    read = sum(n["Actual Rows"] + n.get("Rows Removed by Filter", 0) for n in due)
    assert 10 <= read <= 20, [(n["Index Cond"], n.get("Filter")) for n in due]


async def test_back_to_64_drops_the_other_counts_indexes(store: Store) -> None:
    await set_shard_count(store.pool, 1024, wait=0)
    assert set((await shard_state(store.pool)).indexes) == {
        "pgpulse_jobs_due_1024",
        "pgpulse_jobs_due_priority_1024",
        "pgpulse_occurrences_due_1024",
    }
    done = await set_shard_count(store.pool, 64, wait=0)
    assert (done.built, done.switched) == ([], True)
    assert sorted(done.dropped) == [
        "pgpulse_jobs_due_1024",
        "pgpulse_jobs_due_priority_1024",
        "pgpulse_occurrences_due_1024",
    ]
    state = await shard_state(store.pool)
    assert (state.shard_count, state.indexes) == (64, {})


@pytest.mark.parametrize("bad", [0, -3, 32769, True, "128"])
async def test_a_bad_shard_count_is_refused_and_changes_nothing(store: Store, bad: Any) -> None:
    with pytest.raises(InvalidInput, match="shard_count must be an integer from 1 to 32768"):
        await set_shard_count(store.pool, bad, wait=0)
    state = await shard_state(store.pool)
    assert (state.shard_count, state.indexes) == (64, {})


def test_the_cli_sets_and_shows_the_count_and_refuses_bad_input(dsn: str) -> None:
    refused = pgpulse("shards", "set", "0", dsn=dsn)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: invalid value for COUNT: must be an integer from 1 to 32768, got 0"
    ]
    done = pgpulse("shards", "set", "256", "--wait", "0", dsn=dsn)
    assert done.returncode == 0, done.stderr
    assert "shard count 256 published (was 64)" in done.stdout
    again = pgpulse("shards", "set", "256", "--wait", "0", dsn=dsn)  # the fifth trial's "was 256"
    assert again.returncode == 0, again.stderr
    assert "shard count already 256" in again.stdout.splitlines()
    shown = json.loads(pgpulse("shards", "show", "--json", dsn=dsn).stdout)
    assert shown["shard_count"] == 256
    assert shown["indexes"] == {
        "pgpulse_jobs_due_256": True,
        "pgpulse_jobs_due_priority_256": True,
        "pgpulse_occurrences_due_256": True,
    }


async def test_running_nodes_switch_to_a_new_count_and_split_it(store: Store, dsn: str) -> None:
    """Two running nodes (sub-second heartbeats): a count published while they run is taken
    at their next heartbeats; `set` returns once both report it, and they split its shards."""
    async with (
        running(node(store, dsn, {"noop": noop})) as a,
        running(node(store, dsn, {"noop": noop})) as b,
    ):
        await wait_until(lambda: len(set(a.shards) | set(b.shards)) == 64 and a.shards and b.shards)
        assert (a.shard_count, b.shard_count) == (64, 64)
        done = await set_shard_count(store.pool, 512, wait=10, ttl=5)
        assert done.switched and done.built == [
            "pgpulse_jobs_due_512",
            "pgpulse_jobs_due_priority_512",
            "pgpulse_occurrences_due_512",
        ]
        assert (a.shard_count, b.shard_count) == (512, 512)
        assert_partition({"a": a.shards, "b": b.shards}, 512)
        assert (a.routes, b.routes) == ({"noop": a.shards}, {"noop": b.shards})
        state = await shard_state(store.pool, ttl=5)
        assert state.nodes == {a.node_id: 512, b.node_id: 512} and state.switched


async def test_a_heartbeat_sends_the_live_set_only_when_it_changed(store: Store) -> None:
    """Issue 23: the heartbeat returns the live nodes once per change, not every beat."""
    for name in ("n1", "n2"):
        await store.register_node(name, hostname="h", pid=1, slots=4, handlers=["noop"], ttl=10)
    first = await store.heartbeat("n1", running=0, shards=[], ttl=10, shard_count=64)
    assert first.live == ("n1", "n2") and first.handlers == {"n1": ("noop",), "n2": ("noop",)}
    assert first.shard_count == 64 and len(first.members) == 32  # an md5 digest
    same = await store.heartbeat("n1", running=0, shards=[], ttl=10, known=first.members)
    assert (same.live, same.handlers, same.members) == (None, None, first.members)
    await store.stop_node("n2", hostname="h", pid=1)
    changed = await store.heartbeat("n1", running=0, shards=[], ttl=10, known=first.members)
    assert changed.live == ("n1",) and changed.members != first.members


async def test_the_status_headline_names_a_shard_count_that_is_not_64(
    store: Store, dsn: str
) -> None:
    """README: the live nodes' shards add up to the shard count; `status`'s headline names the
    count when it is not the default 64, and says how many are owned while they move."""

    def headline() -> str:
        shown = pgpulse("status", dsn=dsn)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout.splitlines()[0].split(" — ")[0]

    await store.register_node("n1", hostname="h", pid=1, slots=4, handlers=["noop"], ttl=60)
    await store.heartbeat("n1", running=0, shards=list(range(64)), ttl=60, shard_count=64)
    assert headline() == "1 node alive, leader none yet, 0 jobs due"
    await set_shard_count(store.pool, 128, wait=0)
    await store.heartbeat("n1", running=0, shards=list(range(100)), ttl=60, shard_count=128)
    assert (
        headline() == "1 node alive, leader none yet, 0 jobs due, shards moving (100 of 128 owned)"
    )
    await store.heartbeat("n1", running=0, shards=list(range(128)), ttl=60, shard_count=128)
    assert headline() == "1 node alive, leader none yet, 0 jobs due, 128 shards"
