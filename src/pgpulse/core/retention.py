"""A job's own history retention, ``keep_runs`` (pure): how its value is written and checked.

Beside the global retention (the node's ``keep_runs`` seconds, a week by default), a job may
keep less of its history: ``"30d"``, its runs finished in the last 30 days; ``"1000"``, its
newest 1,000 runs. It narrows the global retention, never extends it: the leader drops whole
days of history once they are older than the global one (:mod:`pgpulse.db.history`). The
database holds the same rule (migration 0023's ``pgpulse_keep_runs`` domain).
"""

from __future__ import annotations

import re
from typing import Final

from pgpulse.core.errors import InvalidInput
from pgpulse.core.wording import given

__all__ = ["MAX_KEEP_COUNT", "MAX_KEEP_DAYS", "check_keep_runs"]

#: The longest retention in days a job may give (ten years).
MAX_KEEP_DAYS: Final[int] = 3650
#: The most runs a job may keep by count.
MAX_KEEP_COUNT: Final[int] = 1_000_000

_KEEP_RE = re.compile(r"([0-9]+)(d?)")


def check_keep_runs(value: object) -> str | None:
    """``value`` as a job's ``keep_runs``: ``None`` (the global retention only), ``"Nd"`` (N
    days, 1 to :data:`MAX_KEEP_DAYS`) or ``"N"`` (N runs, 1 to :data:`MAX_KEEP_COUNT`);
    surrounding blanks are dropped and a whole number is taken as a count.

    Raises:
        InvalidInput: anything else, in one line naming the field and the value.
    """
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    match = _KEEP_RE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is not None:
        number, days = int(match[1]), match[2] == "d"
        if 1 <= number <= (MAX_KEEP_DAYS if days else MAX_KEEP_COUNT):
            return f"{number}d" if days else str(number)
    raise InvalidInput(
        f"keep_runs must be a number of days from 1d to {MAX_KEEP_DAYS}d or a number of runs "
        f"from 1 to {MAX_KEEP_COUNT:,}, got {given(value)}",
        field="keep_runs",
        value=value,
    )
