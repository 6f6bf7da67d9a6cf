"""Skipping chosen occurrences of a job without pausing it (``pgpulse job skip``; pure).

A job row holds the occurrences to skip as a small list (``pgpulse_jobs.skips``), each with its
instant (aware UTC, an occurrence of the job's schedule), who asked and why. When a node claims
a listed occurrence for its first attempt, it records a ``skipped`` run whose reason names the
actor and the reason, and the job moves on as after any skipped occurrence
(:func:`pgpulse.node.dispatch.decide`). Only the schedule's own occurrences are skipped: a
trigger or a backfill is an extra occurrence, cancelled by other means (``job pause --cancel``).

The list is bounded (:data:`MAX_SKIPS`) and pruned of the occurrences already behind the job
at each write, so it never grows with history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pgpulse.core.errors import InvalidInput
from pgpulse.core.schedule import Schedule
from pgpulse.core.wording import given, plural

__all__ = [
    "MAX_SKIPS",
    "Skip",
    "add_skips",
    "describe",
    "pending_occurrence",
    "remove_skips",
    "skip_of",
    "skip_reason",
    "skipped_note",
    "stored",
]

#: At most this many occurrences of one job are listed to skip at once (a pause is the tool for
#: more): the list travels with every claim of the job.
MAX_SKIPS = 100

#: The smallest step of an instant: an occurrence at ``at`` is the next one after ``at - _TICK``.
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Skip:
    """One occurrence to skip.

    Attributes:
        at: the occurrence (aware UTC).
        by: who asked (an actor's name: ``os:alice``, ``token:3 (deploy)``).
        reason: why, or ``None``.
    """

    at: datetime
    by: str
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The stored form (``pgpulse_jobs.skips``'s element)."""
        return {"at": self.at.isoformat(), "by": self.by, "reason": self.reason}


def stored(value: object) -> list[Skip]:
    """The skips of a job row's ``skips`` column (``None`` or a JSON array), or of a job as
    the API shows it (instants as datetimes), oldest first.

    Raises:
        ValueError: an element is not as :meth:`Skip.as_json` writes it.
    """
    if not value:
        return []
    assert isinstance(value, list)
    return sorted((Skip(_instant(e["at"]), e["by"], e.get("reason")) for e in value), key=_at)


def _instant(value: str | datetime) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def _at(skip: Skip) -> datetime:
    return skip.at


def pending_occurrence(
    schedule: Schedule,
    *,
    status: str,
    scheduled_for: datetime,
    attempt: int,
    anchor: datetime | None,
) -> datetime | None:
    """The first occurrence of a job a skip can still reach: its held ``scheduled_for`` while
    no attempt of it has started (idle, paused or failed with ``attempt`` 0), else the one
    after it (the held one runs or retries: ``job pause --cancel`` stops a run). ``None``: the
    job has none left (completed, or a one-off past its instant)."""
    if status == "completed":
        return None
    if status != "running" and attempt == 0:
        return scheduled_for
    return schedule.next_after_or_none(scheduled_for, anchor=anchor)


def add_skips(
    existing: Sequence[Skip],
    schedule: Schedule,
    *,
    pending: datetime | None,
    anchor: datetime | None,
    count: int | None,
    at: datetime | None,
    by: str,
    reason: str | None,
) -> list[Skip]:
    """The job's skips after skipping the next ``count`` occurrences from ``pending``, or the
    occurrence ``at`` (exactly one of them), the ones behind ``pending`` dropped. An occurrence
    listed already keeps its first actor and reason.

    Args:
        existing: the job's skips now (:func:`stored`).
        schedule: the job's schedule.
        pending: the first occurrence a skip can reach (:func:`pending_occurrence`).
        anchor: the job's ``anchor_at`` (interval schedules' grid).
        count: how many occurrences from ``pending`` on (1 to :data:`MAX_SKIPS`).
        at: one occurrence (aware).
        by: the actor's name.
        reason: why (shown in the skipped run's reason), or ``None``.

    Raises:
        InvalidInput: ``field`` ``next`` (not 1 to :data:`MAX_SKIPS`, or given with ``at``),
            ``at`` (not an occurrence of the schedule, or behind ``pending``), ``status`` (no
            occurrence left), ``skips`` (the list would exceed :data:`MAX_SKIPS`).
    """
    if (count is None) == (at is None):
        raise InvalidInput(
            "give either next (how many occurrences from the next one) or at (one occurrence)",
            field="next",
            value=count,
        )
    if count is not None and (isinstance(count, bool) or not 1 <= count <= MAX_SKIPS):
        raise InvalidInput(
            f"next {given(count)} is not a count from 1 to {MAX_SKIPS}", field="next", value=count
        )
    if pending is None:
        raise InvalidInput(
            "the job has no occurrence left to skip (it is completed)", field="status", value=None
        )
    if at is not None:
        wanted = [_occurrence_at(schedule, at, pending=pending, anchor=anchor)]
    else:
        assert count is not None
        wanted = list(_following(schedule, pending, anchor, count))
    kept = {s.at: s for s in existing if s.at >= pending}
    for instant in wanted:
        kept.setdefault(instant, Skip(instant, by, reason))
    if len(kept) > MAX_SKIPS:
        raise InvalidInput(
            f"skips: {len(kept)} occurrences would be listed; at most {MAX_SKIPS} (pause the job "
            "for longer spans: job pause --until)",
            field="skips",
            value=len(kept),
        )
    return sorted(kept.values(), key=lambda s: s.at)


def remove_skips(
    existing: Sequence[Skip], *, pending: datetime | None, at: datetime | None
) -> list[Skip]:
    """The job's skips without the one ``at`` (``None``: without any), the ones behind
    ``pending`` dropped.

    Raises:
        InvalidInput: ``at`` is not listed (``field="at"``: the message lists the ones that are).
    """
    ahead = [s for s in existing if pending is not None and s.at >= pending]
    if at is None:
        return []
    if all(s.at != at for s in ahead):
        listed = ", ".join(s.at.isoformat() for s in ahead[:5]) or "none"
        raise InvalidInput(
            f"at {at.isoformat()} is not an occurrence listed to skip (listed: {listed})",
            field="at",
            value=at.isoformat(),
        )
    return [s for s in ahead if s.at != at]


def skip_of(skips: Iterable[Mapping[str, Any]] | None, scheduled_for: datetime) -> Skip | None:
    """The skip of occurrence ``scheduled_for`` in a claimed job's ``skips`` (its JSON), or
    ``None``. Cheap: the list is short and usually absent."""
    if not skips:
        return None
    for entry in skips:
        at = datetime.fromisoformat(entry["at"])
        if at == scheduled_for:
            return Skip(at, entry["by"], entry.get("reason"))
    return None


def skip_reason(skip: Skip) -> str:
    """The recorded reason of a skipped occurrence: who skipped it, and why."""
    why = f": {skip.reason}" if skip.reason else ""
    return f"skipped by {skip.by} (job skip){why}"


def _following(
    schedule: Schedule, first: datetime, anchor: datetime | None, count: int
) -> Iterable[datetime]:
    """``first`` and the ``count - 1`` occurrences after it (fewer where a finite schedule
    ends)."""
    instant: datetime | None = first
    for _ in range(count):
        if instant is None:
            return
        yield instant
        instant = schedule.next_after_or_none(instant, anchor=anchor)


def _occurrence_at(
    schedule: Schedule, at: datetime, *, pending: datetime, anchor: datetime | None
) -> datetime:
    """``at`` as an occurrence of ``schedule`` at or after ``pending``, or the refusal naming
    the nearest occurrence."""
    if at < pending:
        raise InvalidInput(
            f"at {at.isoformat()} is behind the job's next occurrence that can be skipped "
            f"({pending.isoformat()})",
            field="at",
            value=at.isoformat(),
        )
    found = schedule.next_after_or_none(at - _TICK, anchor=anchor)
    if found is None or found != at:
        nearest = "none" if found is None else found.isoformat()
        raise InvalidInput(
            f"at {at.isoformat()} is not an occurrence of the schedule {schedule.expr!r} "
            f"(the next one from there is {nearest})",
            field="at",
            value=at.isoformat(),
        )
    return found


def skipped_note(skips: Sequence[Skip]) -> str:
    """What a skip left listed, in a line: ``2 occurrences listed to skip, the first at ...``."""
    if not skips:
        return "no occurrence is listed to skip"
    return (
        f"{plural(len(skips), 'occurrence')} listed to skip, the first at {skips[0].at.isoformat()}"
    )


def describe(skips: Sequence[Skip]) -> str:
    """A line for ``job show``: how many occurrences are listed to skip, and the first."""
    if not skips:
        return "none"
    first = skips[0]
    more = f" and {plural(len(skips) - 1, 'more')}" if len(skips) > 1 else ""
    return f"{first.at.isoformat()} (by {first.by}){more}"
