"""Concurrency keys and priority (pure: no I/O, no clock). docs/policies.md, "Concurrency keys
and priority", is the reference.

* **Concurrency key.** A job may name a key (``concurrency_key``); a limit on the key
  (``pgpulse limit set KEY N``, per tenant) bounds how many occurrences of all the tenant's jobs
  with that key run at once, across every node, exactly: the claim locks the limit's row and
  counts the key's leases (``sql/fragments.sql``: ``key_room``). Occurrences beyond it wait, due,
  and run as slots free, in claim order. A key without a limit is not limited; a limit of 1 is a
  mutex. Job rows and extra occurrences (triggers, backfills, forks) count alike.
* **Priority.** A whole number from 0 (the default) to :data:`MAX_PRIORITY`. When a node has
  fewer free slots than due occurrences, the claim takes the highest priority first, then the
  oldest due; an occurrence due for more than :data:`STARVATION_BOUND` seconds goes before every
  one that is not, oldest first. So no due occurrence is passed over by one due after it for
  longer than that bound (``claim_jobs``). Priority orders job rows; extra occurrences are
  claimed in due order.
"""

from __future__ import annotations

import re
from typing import Any

from pgpulse.core.errors import InvalidInput
from pgpulse.core.wording import given

__all__ = [
    "MAX_LIMIT",
    "MAX_PRIORITY",
    "STARVATION_BOUND",
    "check_concurrency_key",
    "check_limit",
    "key_holds_back",
    "waiting_for",
]

#: The highest priority; the claim ranks a starved occurrence just above it (``claim_jobs``).
MAX_PRIORITY = 1000
#: Seconds a due occurrence may be passed over for occurrences due after it (of a higher
#: priority) before due order wins for it (``claim_jobs``'s ``starve_after``).
STARVATION_BOUND = 60.0
#: The highest limit of a key (the ``pgpulse_limits`` CHECK).
MAX_LIMIT = 100_000

_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,199}$")


def check_concurrency_key(value: object, field: str = "concurrency_key") -> str:
    """``value`` if it is a concurrency key: 1-200 characters, letters, digits and ``_.:/-``,
    not starting with punctuation other than ``_``.

    Raises:
        InvalidInput: not such a key; ``field`` names it (``concurrency_key`` on a job,
            ``key`` on a limit).
    """
    if isinstance(value, str) and _KEY_RE.match(value):
        return value
    raise InvalidInput(
        f"{field} must be 1-200 letters, digits and _.:/- (starting with a letter, a digit or "
        f"_), got {given(value)}",
        field=field,
        value=value,
    )


def check_limit(value: object) -> int:
    """``value`` if it is a key's limit: a whole number from 1 to :data:`MAX_LIMIT` (how many
    occurrences of the key's jobs may run at once; 1 is a mutex).

    Raises:
        InvalidInput: ``field`` is ``max_running``.
    """
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LIMIT:
        return value
    raise InvalidInput(
        f"max_running must be a whole number from 1 to {MAX_LIMIT:,}, got {given(value)}",
        field="max_running",
        value=value,
    )


def waiting_for(key: str, running: int, limit: int) -> str:
    """What a due job held back by its key's limit waits for, as ``status`` and the dashboard
    say it: ``for warehouse (2 of 2 running)``."""
    return f"for {key} ({running} of {limit} running)"


def key_holds_back(job: dict[str, Any]) -> bool:
    """Whether job row ``job`` (web.sql's ``jobs``: ``status``, ``due_lag``, ``key_limit``,
    ``key_running``) waits for its concurrency key: idle and due, and the key's jobs hold as
    many leases as its limit allows (or more: a limit lowered below what runs)."""
    limit, running = job.get("key_limit"), job.get("key_running")
    return (
        job.get("status") == "idle"
        and job.get("due_lag") is not None
        and limit is not None
        and running is not None
        and running >= limit
    )
