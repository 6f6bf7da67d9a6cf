"""What a node tells the layers above it: one observer interface (River's ``ProducerCallbacks``).

The node and its attempts call a :class:`NodeObserver` at the moments an edge may act on: an
attempt's handler starts, an attempt's outcome is committed, the node is about to register, the
leader saw the database's clock step, a split brain began or ended. The node knows nothing of
what an observer does with them (the alerts' observer,
:class:`pgpulse.alerts.services.AlertObserver`, pings check-ins, evaluates the rules at once
after a failed or skipped run, and fires the cluster alerts); an edge registers one with
:meth:`Node.add_observer <pgpulse.node.engine.Node.add_observer>`.

Subclass it for the defaults (each method does nothing) and override what you need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from pgpulse.core.model import ClaimedJob, Outcome

if TYPE_CHECKING:
    from pgpulse.node.split_brain import SplitBrain


@dataclass(frozen=True, slots=True)
class ClockStep:
    """A step of the database's clock the leader saw between two heartbeats
    (:mod:`pgpulse.node.db_clock`).

    Attributes:
        node_id: the leader that saw it.
        seconds: how far the clock moved beyond what really elapsed (negative: back).
        db_now: the database's ``now()`` in the heartbeat that saw it (aware, UTC).
        threshold: the seconds of difference that count as a step on this node.
    """

    node_id: str
    seconds: float
    db_now: datetime
    threshold: float


class NodeObserver(Protocol):
    """Told by a node of what it did. The sync methods are called on the event loop, on an
    attempt's path: each must return at once and never raise. The async ones are awaited by
    the node's own loops; their database errors are logged by the node, never fatal."""

    def attempt_started(self, job: ClaimedJob) -> None:
        """The handler of an attempt of ``job`` is about to be called."""
        return None  # by default: nothing

    def attempt_ended(self, outcome: Outcome) -> None:
        """``outcome`` was written and took effect (not refused by fencing): a run ended, a
        retry was scheduled, an occurrence was skipped or forked."""
        return None  # by default: nothing

    async def node_registering(self) -> None:
        """The node is about to register (its first registration, not a rejoin)."""
        return None  # by default: nothing

    async def clock_stepped(self, step: ClockStep) -> None:
        """This node leads, and the database's clock stepped (logged by the node already)."""
        return None  # by default: nothing

    async def split_brain(self, found: SplitBrain | None) -> None:
        """A check found the split brain ``found`` (each check while it lasts), or ``None``:
        the one found before is over."""
        return None  # by default: nothing


class Observers(NodeObserver):
    """Several observers as one, called in the order they were added."""

    def __init__(self, observers: Sequence[NodeObserver] = ()) -> None:
        self.observers: list[NodeObserver] = list(observers)

    def attempt_started(self, job: ClaimedJob) -> None:
        for observer in self.observers:
            observer.attempt_started(job)

    def attempt_ended(self, outcome: Outcome) -> None:
        for observer in self.observers:
            observer.attempt_ended(outcome)

    async def node_registering(self) -> None:
        for observer in self.observers:
            await observer.node_registering()

    async def clock_stepped(self, step: ClockStep) -> None:
        for observer in self.observers:
            await observer.clock_stepped(step)

    async def split_brain(self, found: SplitBrain | None) -> None:
        for observer in self.observers:
            await observer.split_brain(found)
