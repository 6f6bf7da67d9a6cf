"""Backfill on request: which occurrences of a range run once more (pure: no I/O, no clock).

``pgpulse job backfill NAME --from T1 --to T2`` (and ``POST /api/v1/jobs/{id}/backfill``) reruns
occurrences of a job's schedule in ``[T1, T2]`` beside the live schedule, each as an extra
occurrence of its own (docs/states.md, "Extra occurrences"): its history row is marked
``backfill``, and the schedule's own row of that instant, if any, is left as it is. This module
decides what each occurrence of the range is, from the history the store read, and which of them
run. :func:`classify` gives each occurrence one status:

Each occurrence's runs are the schedule's own (kind ``scheduled``) and every earlier backfill's
of that instant (kind ``backfill``); its newest run decides:

* ``succeeded``, ``failed`` (also ``fenced``: its attempts ended without an outcome, and
  ``cancelled``: replaced) — its newest run ended so (a failed run backfilled with success is
  ``succeeded``; a backfill that failed makes it ``failed`` again);
* ``skipped`` — a catch-up decision skipped it (inside a skipped summary row's range) and no
  backfill has run it since;
* ``missing`` — the history has no run of it (never run: the job was paused, created later
  than the range's start, or its history was pruned);
* ``pending`` — the live schedule has not reached it yet, or its run is still open (running or
  retrying): never backfilled, it runs anyway;
* ``queued`` — an earlier backfill's occurrence of that instant (or a fork of the schedule's)
  has not ended yet: never twice.

So a request repeated after the first one ran finds nothing more to run, unless ``only``
asks for ``all``.

:func:`select` keeps those the request asks for: ``missing`` (missing and skipped: what did not
run), ``failed``, both by default, or ``all`` (succeeded too).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pgpulse.core.errors import InvalidInput
from pgpulse.core.zones import check_instant_range

Status = Literal["succeeded", "failed", "skipped", "missing", "pending", "queued"]
Only = Literal["missing", "failed", "all"]
ONLY_CHOICES: tuple[Only, ...] = ("missing", "failed", "all")

#: Most occurrences one backfill request may cover: beyond, split the range (each occurrence is
#: a row to write and a claim to make).
MAX_BACKFILL = 10_000

#: What each ``--only`` value selects.
_SELECTS: dict[Only, frozenset[Status]] = {
    "missing": frozenset({"missing", "skipped"}),
    "failed": frozenset({"failed"}),
    "all": frozenset({"missing", "skipped", "failed", "succeeded"}),
}


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One run row of an occurrence of the schedule (kind ``scheduled``, or ``backfill``: an
    earlier request's) that meets the range.

    Attributes:
        scheduled_for: its occurrence (the first, for a skipped summary).
        last_scheduled_for: the last occurrence it stands for (itself, for one).
        outcome: its outcome (``succeeded``, ``failed``, ``skipped``, ``retrying``...).
    """

    scheduled_for: datetime
    last_scheduled_for: datetime
    outcome: str


@dataclass(frozen=True, slots=True)
class Planned:
    """One occurrence of the range, what it is, and whether the request runs it."""

    scheduled_for: datetime
    status: Status
    selected: bool


def check_only(only: Iterable[str]) -> frozenset[Status]:
    """The statuses the ``only`` values select (none given: missing and failed).

    Raises:
        InvalidInput: an unknown value (``field="only"``).
    """
    chosen: set[Status] = set()
    values = list(only) or ["missing", "failed"]
    for value in values:
        if value not in _SELECTS:
            raise InvalidInput(
                f"only must be one of {', '.join(ONLY_CHOICES)}, got {value!r}",
                field="only",
                value=value,
            )
        chosen |= _SELECTS[value]
    return frozenset(chosen)


def classify(
    instants: Sequence[datetime],
    history: Sequence[HistoryRow],
    *,
    current: datetime,
    queued: Collection[datetime] = (),
) -> list[tuple[datetime, Status]]:
    """Each occurrence of ``instants`` (ascending) with its status (module docstring).

    Args:
        instants: the schedule's occurrences in the range, ascending (aware UTC).
        history: the run rows that meet the range, by ``scheduled_for`` ascending and, within
            an instant, oldest run first: the last one of an instant is its newest run.
        current: the job row's occurrence now (``scheduled_for``): it and later ones are
            ``pending``, unless the history has them (a trigger's earlier instant).
        queued: instants an earlier backfill still has to run.
    """
    # the newest run of each instant (the last of it in ``history``); a skipped summary stands
    # for occurrences that did not run, so it is kept apart
    runs = {row.scheduled_for: row.outcome for row in history if row.outcome != "skipped"}
    skipped = [row for row in history if row.outcome == "skipped"]
    out: list[tuple[datetime, Status]] = []
    k = 0  # skipped summaries are ascending and do not overlap: one pass
    for at in instants:
        while k < len(skipped) and skipped[k].last_scheduled_for < at:
            k += 1
        status: Status
        outcome = runs.get(at)
        if at in queued:
            status = "queued"
        elif outcome == "succeeded":
            status = "succeeded"
        elif outcome in ("failed", "fenced", "cancelled"):
            status = "failed"
        elif outcome is not None:  # retrying (or shown running): still open
            status = "pending"
        elif k < len(skipped) and skipped[k].scheduled_for <= at:
            status = "skipped"
        elif at >= current:
            status = "pending"
        else:
            status = "missing"
        out.append((at, status))
    return out


def select(
    classified: Sequence[tuple[datetime, Status]],
    chosen: Collection[Status],
    *,
    newest_first: bool = False,
) -> list[Planned]:
    """The plan of a request: every occurrence, ``selected`` when its status is ``chosen``, in
    the order they would run (oldest first, or newest first)."""
    plan = [Planned(at, status, status in chosen) for at, status in classified]
    return plan[::-1] if newest_first else plan


def check_range(start: datetime, end: datetime, now: datetime) -> None:
    """Refuse a range that ends before it starts or reaches past ``now`` (the database's
    instant: the future belongs to the live schedule).

    Raises:
        InvalidInput: naming ``from`` or ``to``: outside Pulse's range of instants
            (:data:`~pgpulse.core.zones.EARLIEST_INSTANT` -
            :data:`~pgpulse.core.zones.LATEST_INSTANT`), or as above.
    """
    check_instant_range("from", start)
    check_instant_range("to", end)
    if end < start:
        raise InvalidInput(
            f"to {end.isoformat()} is before from {start.isoformat()}", field="to", value=end
        )
    if end > now:
        raise InvalidInput(
            f"to {end.isoformat()} is in the future (the database's now is {now.isoformat()}): "
            "a backfill reruns the past; the live schedule runs the rest",
            field="to",
            value=end,
        )
