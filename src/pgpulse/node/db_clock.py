"""The database's clock, watched against the leader's monotonic clock.

Every due and lease decision uses the database's ``now()`` (docs/design.md, invariant 1), so a step
of the database host's clock moves every schedule with it: stepped **back**, due jobs wait until
the clock passes their instant again (a 5-minute step stalls them 5 minutes); stepped
**forward**, the occurrences in the skipped span fire at once, early by up to the step. Pulse
cannot undo a step, but the leader notices it: each heartbeat returns the database's ``now()``,
and between two heartbeats that clock should move as the node's :func:`time.monotonic` did. A
difference beyond ``threshold`` seconds (default 5), after allowing for the round trips, is a
step: the leader logs it (action ``db_clock_step``) and tells its observers
(:meth:`NodeObserver.clock_stepped <pgpulse.node.observer.NodeObserver.clock_stepped>`: the
alerts fire the cluster alert ``db_clock``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pgpulse.core.wording import seconds_text
from pgpulse.node.observer import ClockStep

log = logging.getLogger(__name__)

#: Seconds of difference between the database's clock and a node's monotonic clock, over one
#: heartbeat, that count as a step (NodeConfig's default).
DEFAULT_STEP_THRESHOLD = 5.0


@dataclass(frozen=True, slots=True)
class ClockReading:
    """One heartbeat's reading of the database clock.

    Attributes:
        db_now: the database's ``now()`` in the heartbeat (aware, UTC).
        sent: the node's monotonic clock when the statement was sent (seconds).
        received: the node's monotonic clock when its reply came (seconds).
    """

    db_now: datetime
    sent: float
    received: float


def clock_step(before: ClockReading, after: ClockReading) -> float:
    """How far the database's clock moved between two readings beyond what really elapsed
    (pure): seconds, negative when it went back, positive when it jumped forward, 0 when it
    moved as the monotonic clock did.

    Each ``db_now`` was read somewhere between its statement's ``sent`` and ``received``, so
    the time that really elapsed lies between ``after.sent - before.received`` and
    ``after.received - before.sent``; only what falls outside that span is a step (a slow
    heartbeat, or one that waited on a lock, is not mistaken for one).
    """
    moved = (after.db_now - before.db_now).total_seconds()
    shortest = after.sent - before.received
    longest = after.received - before.sent
    if moved < shortest:
        return moved - shortest
    if moved > longest:
        return moved - longest
    return 0.0


class ClockWatch:
    """A node's watch on the database clock, fed by its heartbeats.

    Args:
        node_id: this node (named by the log and the alert).
        threshold: seconds of difference that count as a step.
        monotonic: the node's monotonic clock (:func:`time.monotonic`; tests give their own).
    """

    def __init__(
        self,
        node_id: str,
        *,
        threshold: float = DEFAULT_STEP_THRESHOLD,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self.threshold = threshold
        self.monotonic = monotonic
        self._last: ClockReading | None = None

    def observe(self, reading: ClockReading, *, leading: bool) -> float | None:
        """Take in one heartbeat's reading; return the step (seconds, as :func:`clock_step`)
        when this node leads and the clock stepped by more than ``threshold`` since the
        previous heartbeat, logging it (warning, action ``db_clock_step``); else ``None``."""
        previous, self._last = self._last, reading
        if previous is None or not leading:
            return None
        step = clock_step(previous, reading)
        if abs(step) <= self.threshold:
            return None
        way = "back" if step < 0 else "forward"
        effect = (
            "due jobs wait until it passes their instants again"
            if step < 0
            else "occurrences in the skipped span fire early"
        )
        log.warning(
            "the database's clock moved %s %s between two heartbeats (%s)",
            way,
            seconds_text(abs(step)),
            effect,
            extra={
                "action": "db_clock_step",
                "step_seconds": step,
                "db_now": reading.db_now.isoformat(),
            },
        )
        return step

    def step_of(self, seconds: float) -> ClockStep:
        """The step of ``seconds`` just observed (:meth:`observe`'s result), as observers are
        told of it (keyed by this node and the last reading's instant)."""
        assert self._last is not None
        return ClockStep(self.node_id, seconds, self._last.db_now, self.threshold)
