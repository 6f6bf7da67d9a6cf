"""A node's services: the side loops around its core (River's ``internal/maintenance``
services, Oban's plugins).

The node core (:class:`~pgpulse.node.engine.Node`) owns the claim loop, the heartbeat and the
listener, and one :class:`Membership` value the others read. Everything else is a
:class:`Service`: registered in the node's list (:meth:`Node.add_service
<pgpulse.node.engine.Node.add_service>`) before it runs, and started as a named task in the
node's task group (if one dies, the node stops loudly). The node registers its own (``prune``;
``split_brain`` for a DSN of several hosts); the edge that builds a node registers the others
(the alerts: :func:`pgpulse.alerts.services.register`).

A service is either a loop of its own (``run(stopping)``: the alert loop, the check-in sender)
or a :class:`Periodic` one: a one-step :meth:`Periodic.run_once` every ``interval`` seconds, on
the leader only if ``leader_only`` — tests drive the step, never the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from pgpulse.core.errors import DatabaseUnavailable, describe
from pgpulse.core.routing import Routes

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Membership:
    """This node's place in the cluster, as of its last heartbeat (what services read).

    Attributes:
        routes: what the claim loop claims: for each handler this node has, its shards among
            the live nodes that have it.
        shard_count: the database's shard count ``routes`` and ``shards`` are of (``None``
            before the first heartbeat).
        shards: the shards this node owns among every live node (what ``status`` shows).
        leader: whether this node's heartbeat session holds the leader lock now.
    """

    routes: Routes
    shard_count: int | None
    shards: tuple[int, ...]
    leader: bool


class Service(Protocol):
    """A side loop of a node, started as the task :attr:`name` in the node's task group.

    ``run`` returns once ``stopping`` is set (a step in progress may finish: the node gives the
    loops a few seconds, then cancels them); an exception out of it stops the node, so a
    service logs the database errors it outlives. ``drain`` runs after the node's last writes
    (the hand-back at stop), for at most ``within`` seconds, and must not raise.
    """

    @property
    def name(self) -> str:
        """The task's name (unique among a node's services)."""
        ...

    async def run(self, stopping: asyncio.Event) -> None:
        """Run until ``stopping`` is set."""
        ...

    async def drain(self, within: float) -> None:
        """Finish what the node's last writes queued, within ``within`` seconds."""
        ...


class Periodic:
    """A service that takes one step (:meth:`run_once`) every ``interval`` seconds until the node
    stops, on the leader only when ``leader_only``. Each step is bounded by ``limit`` seconds
    (default two intervals); its database errors and timeouts are logged (action
    ``<name>_failed``), and the next step comes at the next interval.

    Args:
        name: the task's name.
        step: the one step (its result is :meth:`run_once`'s).
        interval: seconds between two steps.
        membership: the node's membership now (:attr:`Node.membership
            <pgpulse.node.engine.Node.membership>`), read before each step when ``leader_only``.
        leader_only: step only while this node leads.
        limit: seconds a step may take, or ``None``: two intervals.
    """

    def __init__(
        self,
        name: str,
        step: Callable[[], Coroutine[Any, Any, object]],
        *,
        interval: float,
        membership: Callable[[], Membership] | None = None,
        leader_only: bool = False,
        limit: float | None = None,
    ) -> None:
        if leader_only and membership is None:
            raise ValueError(f"service {name}: leader_only needs the node's membership")
        self.name = name
        self.step = step
        self.interval = interval
        self.membership = membership
        self.leader_only = leader_only
        self.limit = limit

    async def run_once(self) -> object | None:
        """Take one step (``None`` without one: a leader-only service on a node that does not
        lead). Errors propagate."""
        if self.leader_only and self.membership is not None and not self.membership().leader:
            return None
        return await self.step()

    async def run(self, stopping: asyncio.Event) -> None:
        """A step every ``interval`` seconds until ``stopping`` is set."""
        await run_every(self.run_once, self.name, self.interval, stopping, limit=self.limit)

    async def drain(self, within: float) -> None:
        """Nothing to finish."""


async def run_every(
    step: Callable[[], Coroutine[Any, Any, object]],
    name: str,
    interval: float,
    stopping: asyncio.Event,
    *,
    limit: float | None = None,
    logger: logging.Logger = log,
) -> None:
    """Run ``step`` every ``interval`` seconds until ``stopping`` is set, each run bounded by
    ``limit`` seconds (default two intervals); database errors and timeouts are logged to
    ``logger`` (action ``<name>_failed``)."""
    while not stopping.is_set():
        with quiet_db_errors(name, logger):
            async with asyncio.timeout(limit or interval * 2):
                await step()
        await wait(stopping, interval)


async def wait(event: asyncio.Event, seconds: float) -> None:
    """Wait for ``event`` at most ``seconds``."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


@contextlib.contextmanager
def quiet_db_errors(what: str, logger: logging.Logger = log) -> Iterator[None]:
    """Log database errors and timeouts of a side loop to ``logger`` instead of letting them
    kill the node (warning, action ``<what>_failed``)."""
    try:
        yield
    except (psycopg.Error, OSError, TimeoutError, DatabaseUnavailable) as exc:
        logger.warning("%s failed: %s", what, describe(exc), extra={"action": f"{what}_failed"})
