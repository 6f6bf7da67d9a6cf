"""The data interval of an occurrence (pure): what a handler's context and a downstream's
occurrence carry (docs/chains.md).

An occurrence's data interval is ``[previous, scheduled_for)``, where ``previous`` is the
occurrence before it by its job's schedule. A downstream occurrence (kind ``after``) has no
schedule of its own to ask: it carries its upstream's interval start, so a chain shares one data
interval.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pgpulse.core.model import ClaimedJob

__all__ = ["previous_scheduled_for"]

_TICK = timedelta(microseconds=1)


def previous_scheduled_for(job: ClaimedJob) -> datetime | None:
    """The occurrence before ``job.scheduled_for`` by the job's schedule (aware UTC), the start
    of its data interval: for a downstream occurrence (kind ``after``), the one its upstream
    carried; ``None`` when there is none (a one-off ``@at``, a trigger's instant before the
    schedule's first occurrence within 400 years).

    Bounded (docs/design.md, invariant 8): the schedule's own arithmetic search
    (:meth:`~pgpulse.core.schedule.Schedule.last_at_or_before`), never a walk.
    """
    if job.kind == "after":
        return job.data_interval_start
    schedule = job.parsed_schedule
    if schedule.at is not None:
        return None
    anchor = job.anchor_at if schedule.interval is not None else None
    return schedule.last_at_or_before(job.scheduled_for - _TICK, anchor=anchor)
