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

from pgpulse.errors import InvalidInput
from pgpulse.wording import seconds_text

__all__ = ["MAX_SPREAD", "check_spread", "spread_offset"]

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


def check_spread(spread: object, kind: str, interval: timedelta | None = None) -> float:
    """Validate a job's ``spread`` at the boundary, for a schedule of ``kind``.

    Args:
        spread: the value given (seconds, a number).
        kind: the schedule's kind (:attr:`pgpulse.schedule.Schedule.kind`): ``cron``,
            ``interval`` or ``once``.
        interval: an ``@every`` schedule's period (:attr:`pgpulse.schedule.Schedule.interval`).

    Returns:
        ``spread`` as a float of seconds.

    Raises:
        InvalidInput: ``field="spread"``: not a number, negative, not finite, above a day, given
            with a one-off ``@at`` schedule (its instant is the one asked for), or not shorter
            than an ``@every`` period (each occurrence must fire before the next one is due).
    """
    if isinstance(spread, bool) or not isinstance(spread, int | float):
        raise InvalidInput(
            f"spread must be a number of seconds, got {spread!r}", field="spread", value=spread
        )
    if not (math.isfinite(spread) and 0 <= spread <= MAX_SPREAD):
        raise InvalidInput(
            f"spread must be 0 to {MAX_SPREAD:g} seconds, got {spread!r}",
            field="spread",
            value=spread,
        )
    if kind == "once" and spread:
        raise InvalidInput(
            "spread does not apply to a one-off @at schedule: it fires at the instant given",
            field="spread",
            value=spread,
        )
    if interval is not None and timedelta(seconds=spread) >= interval:
        raise InvalidInput(
            f"spread ({seconds_text(spread)}) must be shorter than the @every period "
            f"({seconds_text(interval.total_seconds())})",
            field="spread",
            value=spread,
        )
    return float(spread)
