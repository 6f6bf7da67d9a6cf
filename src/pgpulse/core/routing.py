"""Capability routing: which jobs a node claims, given what each live node can run. Pure, no I/O.

Every node advertises the handlers it can run in the node registry (``shell`` only when it is
allowed shell jobs, in dry-run or not). A node claims only jobs whose handler it has, so it never
fails a job for lacking one; a job whose handler no live node has waits, due, until a node that
has it joins (its catch-up policy then decides what runs). Shard ownership is computed per
handler, over the live nodes that have that handler: with one set of handlers everywhere this
is the plain placement of :func:`pgpulse.core.sharding.shards_for`, and a handler only some nodes
have is spread over those, so a job is never stranded in a shard whose owner cannot run it.
Each node computes the same placement from the same heartbeat, so every (handler, shard) pair
has one claimer among the live nodes in steady state; two claimers for a moment (a heartbeat
apart) are kept apart by SKIP LOCKED and fencing, as for shards.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pgpulse.core.sharding import DEFAULT_SHARD_COUNT, shards_for

#: The built-ins a node runs only with a setting of its own: handler -> the key of its
#: ``handler_options`` that must be set (``node run --celery-broker``/``--celery-app``,
#: ``--rq-redis``), and what the setting is called when a job waits for it.
NEEDS_OPTION: dict[str, tuple[str, str]] = {
    "celery": ("celery", "a Celery broker (node run --celery-broker or --celery-app)"),
    "rq": ("rq", "a Redis for RQ (node run --rq-redis)"),
}

#: The claim routes of one node: for each handler it has, the shards it claims that handler's
#: jobs from (ascending). A handler with no shards is left out.
Routes = Mapping[str, tuple[int, ...]]


def routes_for(
    node: str,
    handlers: Collection[str],
    live: Mapping[str, Collection[str]],
    shard_count: int = DEFAULT_SHARD_COUNT,
) -> dict[str, tuple[int, ...]]:
    """Return ``node``'s claim routes: for each of its ``handlers``, the shards it owns among
    the live nodes that have that handler (itself included).

    Args:
        node: this node's id; counted as live with ``handlers`` whatever ``live`` says (a node
            that just registered claims before it sees its own heartbeat).
        handlers: the handler names this node can run.
        live: the live nodes by id, each with the handler names it advertises (the
            heartbeat's reading of the registry, by the database's clock).
        shard_count: number of shards.

    Returns:
        ``{handler: shards}``; every (handler, shard) pair has exactly one owner among the
        nodes that have the handler, and every node computes the same placement from the same
        ``live``.
    """
    routes: dict[str, tuple[int, ...]] = {}
    for handler in sorted(handlers):
        capable = {other for other, theirs in live.items() if handler in theirs}
        shards = shards_for(node, capable, shard_count)
        if shards:
            routes[handler] = shards
    return routes


def watched_shards(routes: Routes) -> frozenset[int]:
    """The shards any route of ``routes`` claims from: a wake-up for one of them is this
    node's business."""
    return frozenset(shard for shards in routes.values() for shard in shards)


def waiting_reason(handler: str) -> str:
    """Why a job of ``handler`` waits when no live node advertises it (shown by ``status``,
    ``job show``, the API and the dashboard)."""
    if handler == "shell":
        return "no live node allows shell jobs"
    needs = NEEDS_OPTION.get(handler)
    if needs is not None:
        return f"no live node has {needs[1]}"
    return f"no live node can run handler {handler}"
