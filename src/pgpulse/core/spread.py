"""Spread: a job's stable offset inside its ``spread`` window (pure, no I/O, no clock).

Jobs that share a schedule (fifty thousand ``0 * * * *`` jobs) all fall due at one instant. A
job with ``spread`` S seconds fires each occurrence at ``scheduled_for + offset``, where the
offset is in [0, S), to the microsecond, and the same for every occurrence of that job, on every
node, in every version of Pulse: the model of Jenkins' ``H`` ("a hash of the job name, stable
for any given project"), not of Temporal's per-occurrence jitter, so "was this run late?" keeps
one answer (lag is measured from the spread instant). ``scheduled_for`` stays the logical
occurrence: history, idempotency keys and catch-up do not change.

The hash (stable by construction, so never change it: moving every job's offset at an upgrade
would make a herd of its own):

    h      = the first 8 bytes, big-endian, of SHA-256(b"pgpulse-spread:" + decimal job id)
    offset = (h * S_us) >> 64 microseconds, with S_us = S in whole microseconds

SHA-256 rather than Python's ``hash()`` (salted per process) or a hand-written mixer: it is in
every standard library and in PostgreSQL (``sha256(bytea)``, 11+), so the database can compute
the same offset. ``(h * S_us) >> 64`` maps the 64-bit hash onto [0, S_us) in proportion
(Lemire's multiply-shift), without the bias of a modulo.
"""

from __future__ import annotations

import hashlib
import math
from datetime import timedelta
from typing import TYPE_CHECKING

from pgpulse.core.errors import InvalidInput
from pgpulse.core.wording import given, seconds_text

if TYPE_CHECKING:
    from pgpulse.core.schedule import Schedule

__all__ = ["MAX_SPREAD", "check_spread", "shortest_gap", "spread_offset"]

#: The longest spread, seconds (one day): a spread is for a herd at one instant, not a delay.
MAX_SPREAD = 86400.0
_PREFIX = b"pgpulse-spread:"


def spread_offset(job_id: int, spread: float) -> timedelta:
    """The stable offset of job ``job_id`` inside a ``spread``-second window.

    Args:
        job_id: the job's id (``pgpulse_jobs.id``).
        spread: the job's spread in seconds, 0 to :data:`MAX_SPREAD` (rounded to whole
            microseconds); 0 means no spread.

    Returns:
        An offset in [0, spread), whole microseconds: the same for the same (``job_id``,
        ``spread``) in every process and version (module docstring). Jobs' offsets are spread
        evenly over the window.

    Raises:
        ValueError: ``spread`` is negative, not finite, or above :data:`MAX_SPREAD` (the
            boundary refuses those first, with :func:`check_spread`).
    """
    if not (math.isfinite(spread) and 0 <= spread <= MAX_SPREAD):
        raise ValueError(f"spread must be 0 to {MAX_SPREAD:g} seconds, got {spread!r}")
    span = round(spread * 1_000_000)
    digest = hashlib.sha256(_PREFIX + str(job_id).encode("ascii")).digest()
    return timedelta(microseconds=(int.from_bytes(digest[:8], "big") * span) >> 64)


def check_spread(
    spread: object,
    kind: str,
    interval: timedelta | None = None,
    *,
    schedule: Schedule | None = None,
) -> float:
    """Validate a job's ``spread`` at the boundary, for a schedule of ``kind``.

    A spread is at most the time between two occurrences: the offset is the same for every
    occurrence and below the spread (module docstring), so with a spread of at most the period
    each occurrence fires before the next one is due (a spread of exactly the period spreads
    a herd over the whole period); with more, an occurrence could fire after the next one is
    due, and the runs of one job would overtake each other. A longer spread is refused, not
    cut, because which offset a job gets is not the user's to see in advance.

    Args:
        spread: the value given (seconds, a number).
        kind: the schedule's kind (:attr:`pgpulse.core.schedule.Schedule.kind`): ``cron``,
            ``interval`` or ``once``.
        interval: an ``@every`` schedule's period (:attr:`pgpulse.core.schedule.Schedule.interval`).
        schedule: a cron schedule, whose shortest time between consecutive occurrences the
            spread must not exceed (over all time, daylight-saving changes of its zone
            included; :func:`shortest_gap`).

    Returns:
        ``spread`` as a float of seconds.

    Raises:
        InvalidInput: ``field="spread"``: not a number, negative, not finite, above a day, given
            with a one-off ``@at`` schedule (its instant is the one asked for), or longer than
            an ``@every`` period or a cron schedule's shortest gap between occurrences (each
            occurrence must fire before the next one is due).
    """
    if isinstance(spread, bool) or not isinstance(spread, int | float):
        raise InvalidInput(
            f"spread must be a number of seconds, got {given(spread)}", field="spread", value=spread
        )
    if not (math.isfinite(spread) and 0 <= spread <= MAX_SPREAD):
        raise InvalidInput(
            f"spread must be 0 to {MAX_SPREAD:g} seconds, got {given(spread)}",
            field="spread",
            value=spread,
        )
    if kind == "once" and spread:
        raise InvalidInput(
            "spread does not apply to a one-off @at schedule: it fires at the instant given",
            field="spread",
            value=spread,
        )
    if interval is not None and timedelta(seconds=spread) > interval:
        raise InvalidInput(
            f"spread {seconds_text(spread)} is longer than the @every period, "
            f"{seconds_text(interval.total_seconds())}",
            field="spread",
            value=spread,
        )
    if kind == "delay" and spread:
        raise InvalidInput(
            "spread does not apply to an @after schedule: each occurrence follows a run's end, "
            "so its jobs do not fall due together",
            field="spread",
            value=spread,
        )
    if kind == "cron" and schedule is not None and spread:
        gap = shortest_gap(schedule, below=float(spread))
        if gap is not None:
            raise InvalidInput(
                f"spread {seconds_text(spread)} is longer than the time between "
                f"occurrences of schedule {schedule.expr!r}, as little as {seconds_text(gap)}",
                field="spread",
                value=spread,
            )
    return float(spread)


def shortest_gap(schedule: Schedule, *, below: float) -> float | None:
    """The shortest time between two consecutive occurrences of cron ``schedule``, in seconds,
    if it is shorter than ``below`` seconds, else ``None``.

    Pure, and over all time: every UTC offset of the schedule's zone counts, so a
    daylight-saving change that brings two occurrences closer (``50 0-23 * * *`` in
    Europe/Berlin, 01:50 CET then 03:00 CEST, ten minutes apart) is found
    (:meth:`pgpulse.core.schedule.Schedule.shortest_gap`).

    Args:
        schedule: a cron schedule.
        below: seconds; only a gap shorter than this is looked for (at most a day).
    """
    gap = schedule.shortest_gap()
    if gap is None or gap.total_seconds() >= below:
        return None
    return gap.total_seconds()
