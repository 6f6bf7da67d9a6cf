"""Shard ownership: which of the 64 shards each live node polls. Pure, no I/O.

A job's shard is ``id % SHARD_COUNT`` (a generated column, see the initial migration). Shards are
placed on a consistent-hash ring of the live nodes (``uhashring``, ketama-compatible), so a node
joining or leaving moves only about its own share of shards. Ownership is an optimisation, never
a correctness condition: two nodes that briefly poll one shard are kept apart by SKIP LOCKED and
fencing (design.md, "Cluster behaviour").
"""

from __future__ import annotations

from collections.abc import Collection
from functools import lru_cache

from uhashring import HashRing

#: Number of shards; fixed by the ``shard_id`` column of ``pgpulse_jobs``.
SHARD_COUNT = 64
#: Points per node on the ring; 1,000 keeps 64 shards within about ±25% of an even split.
VNODES = 1000


@lru_cache(maxsize=64)
def _placement(nodes: frozenset[str], shard_count: int) -> dict[str, tuple[int, ...]]:
    ring = HashRing(nodes={node: {"vnodes": VNODES} for node in sorted(nodes)})
    owned: dict[str, list[int]] = {node: [] for node in nodes}
    for shard in range(shard_count):
        owned[ring.get_node(f"shard-{shard}")].append(shard)
    return {node: tuple(shards) for node, shards in owned.items()}


def shards_for(
    node: str, live_nodes: Collection[str], shard_count: int = SHARD_COUNT
) -> tuple[int, ...]:
    """Return the shards ``node`` owns among ``live_nodes``, ascending.

    Args:
        node: this node's id; counted as live even if missing from ``live_nodes`` (a node
            that just registered polls before it sees its own heartbeat).
        live_nodes: ids of the nodes alive by the database's clock.
        shard_count: number of shards.

    Returns:
        The owned shard ids. Every shard has exactly one owner for a given set of nodes, and
        every node computes the same placement from the same set.
    """
    nodes = frozenset(live_nodes) | {node}
    return _placement(nodes, shard_count)[node]
