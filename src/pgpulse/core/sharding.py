"""Shard ownership: which of the database's shards each live node polls. Pure, no I/O.

A job's shard is ``id % shard_count``; the count is a setting of the database
(``pgpulse_cluster.shard_count``, 64 until changed: :mod:`pgpulse.db.resharding`). Shards are
placed by **consistent hashing with bounded loads**: each node has :data:`POINTS` points on a
hash ring, and each shard, in order, walks clockwise from its own point to the first node that
still has room. A node has room below ``⌊shards / nodes⌋``, and at it while fewer than
``shards mod nodes`` nodes have taken one more. So every node owns ``⌊shards / nodes⌋`` or
``⌈shards / nodes⌉`` shards (:func:`balance_bound`), and a join or a death moves one to ten
times the average share (scenario 10's placement table), not every shard.

Every node computes the same placement from the same set of live nodes. The ring points of a
node are hashed once per process (cached by node id), so a membership change costs one sort of
``POINTS × nodes`` integers and a walk of the shards (about 20 ms for 1,000 nodes and 1,024
shards), and an unchanged set costs a cache lookup (:func:`placement`).

Ownership is an optimisation, never a correctness condition: two nodes that briefly poll one
shard are kept apart by SKIP LOCKED and fencing, and a shard that no node polls for a heartbeat
only waits (docs/design.md, "Cluster behaviour").
"""

from __future__ import annotations

import hashlib
import threading
from bisect import bisect_left, insort
from collections.abc import Collection
from functools import lru_cache

#: The shard count of a database that never changed it (migration 0010's default; the
#: ``shard_id`` column that migration 0001 stores is ``id % 64``).
DEFAULT_SHARD_COUNT = 64
#: The largest shard count: a shard id is a ``smallint`` (``pgpulse_nodes.shards``).
MAX_SHARD_COUNT = 32768
#: Ring points per node. With bounded loads the balance no longer depends on it; more points
#: make shorter walks and fewer moves when a node joins or leaves.
POINTS = 64


def _hash(key: str) -> int:
    """A 64-bit hash of ``key``, the same in every process (unlike :func:`hash`)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


@lru_cache(maxsize=8192)
def _node_points(node: str) -> tuple[int, ...]:
    return tuple(_hash(f"{node}#{i}") for i in range(POINTS))


@lru_cache(maxsize=8)
def _shard_points(shard_count: int) -> tuple[int, ...]:
    return tuple(_hash(f"shard-{shard}") for shard in range(shard_count))


def balance_bound(shard_count: int, nodes: int) -> tuple[int, int]:
    """The fewest and most shards :func:`placement` gives a node: ``(⌊S/N⌋, ⌈S/N⌉)``.

    Args:
        shard_count: the database's shard count ``S`` (at least 1).
        nodes: how many nodes share them ``N`` (at least 1).
    """
    low, extra = divmod(shard_count, nodes)
    return low, low + (1 if extra else 0)


class _Ring:
    """The hash ring of the last set of nodes placed (sorted points, and the node of each), kept
    so the next set, a node more or less, is one merge away instead of a full sort. Shared by
    the threads that place (a lock guards it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: frozenset[str] = frozenset()
        self._points: list[int] = []
        self._owner: dict[int, str] = {}

    def of(self, nodes: frozenset[str]) -> tuple[list[int], dict[int, str]]:
        """The ring of ``nodes``: its points ascending, and the node of each point."""
        with self._lock:
            gone, new = self._nodes - nodes, nodes - self._nodes
            if len(gone) + len(new) > len(nodes) // 2:  # mostly new: build it whole
                owner = {point: node for node in nodes for point in _node_points(node)}
                points = sorted(owner)
            else:
                owner = dict(self._owner)
                dropped = {point for node in gone for point in _node_points(node)}
                for point in dropped:
                    del owner[point]
                points = [point for point in self._points if point not in dropped]
                for node in sorted(new):
                    for point in _node_points(node):
                        owner[point] = node
                        insort(points, point)
            self._nodes, self._points, self._owner = nodes, points, owner
            return points, owner


_RING = _Ring()


def forget() -> None:
    """Forget every cached placement, ring and hashed point (benchmarks time a first placement
    with it)."""
    global _RING
    placement.cache_clear()
    _node_points.cache_clear()
    _RING = _Ring()


@lru_cache(maxsize=64)
def placement(nodes: frozenset[str], shard_count: int) -> dict[str, tuple[int, ...]]:
    """Place ``shard_count`` shards on ``nodes``: ``{node: its shards, ascending}``.

    Every shard has exactly one owner, every node owns :func:`balance_bound` many, and the
    result depends only on the arguments. Cached: the heartbeat of an unchanged cluster costs
    a dictionary lookup; and the ring of the previous set is reused, so a join or a death costs
    a merge of one node's points and a walk of the shards.

    Args:
        nodes: the node ids (at least one).
        shard_count: how many shards (``1 ≤ shard_count ≤ MAX_SHARD_COUNT``).

    Raises:
        ValueError: ``nodes`` is empty.
    """
    if not nodes:
        raise ValueError("placement needs at least one node")
    points, owner = _RING.of(nodes)
    load = dict.fromkeys(nodes, 0)
    owned: dict[str, list[int]] = {node: [] for node in nodes}
    low, extra = divmod(shard_count, len(nodes))
    shard_points = _shard_points(shard_count)
    size = len(points)
    extras = 0  # nodes given low + 1 so far: at most `extra` of them
    for shard in range(shard_count):
        # A node takes the shard while under `low`, or at `low` while fewer than `extra` nodes
        # have taken one more. The rooms add up to exactly shard_count, so a node with room is
        # always ahead, and no node ends under `low` (every shard is placed).
        step = bisect_left(points, shard_points[shard])
        while True:
            node = owner[points[step % size]]
            if load[node] < low or (load[node] == low and extras < extra):
                break
            step += 1
        if load[node] == low:
            extras += 1
        load[node] += 1
        owned[node].append(shard)
    return {node: tuple(sorted(shards)) for node, shards in owned.items()}


def shards_for(
    node: str, live_nodes: Collection[str], shard_count: int = DEFAULT_SHARD_COUNT
) -> tuple[int, ...]:
    """Return the shards ``node`` owns among ``live_nodes``, ascending.

    Args:
        node: this node's id; counted as live even if missing from ``live_nodes`` (a node
            that just registered polls before it sees its own heartbeat).
        live_nodes: ids of the nodes alive by the database's clock.
        shard_count: the database's shard count.

    Returns:
        The owned shard ids. Every shard has exactly one owner for a given set of nodes, and
        every node computes the same placement from the same set (:func:`placement`).
    """
    nodes = frozenset(live_nodes) | {node}
    return placement(nodes, shard_count)[node]
