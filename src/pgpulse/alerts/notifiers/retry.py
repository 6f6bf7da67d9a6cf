"""When a delivery is tried again: pure classification and backoff, no I/O, no clock reads.

Which failures are retryable (docs/alerts.md, "Retries"):

* HTTP: 2xx is delivered; 5xx, 408 (Request Timeout) and 429 (Too Many Requests) are retried;
  every other status (other 4xx, a 3xx: redirects are not followed) is final. A ``Retry-After``
  (delta-seconds or an HTTP date, RFC 9110 §10.2.3) on a 429 or 503 sets the least wait.
* SMTP: a 4xx reply is transient and retried, a 5xx reply is final (RFC 5321 §4.2.1).
* Network errors (refused or reset connections, DNS failures, TLS handshakes) and timeouts are
  retried.

The backoff is the jobs' own (:func:`pgpulse.core.planner.retry_delay`: exponential with jitter,
uniform in [b·2ⁿ⁻¹/2, b·2ⁿ⁻¹], capped at one hour), so deliveries to a receiver that was down
spread out when it comes back instead of arriving together.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Literal

from pgpulse.alerts.notifiers.events import DeliveryResult
from pgpulse.core.planner import retry_delay

Verdict = Literal["ok", "retry", "final"]

#: 4xx statuses that say "try again later" rather than "this request is wrong".
RETRYABLE_4XX = frozenset({408, 429})
#: Statuses whose ``Retry-After`` header is honoured.
RETRY_AFTER_STATUSES = frozenset({429, 503})


def classify_http_status(status: int) -> Verdict:
    """``ok`` for 2xx; ``retry`` for 5xx, 408 and 429; ``final`` for anything else."""
    if 200 <= status < 300:
        return "ok"
    if status >= 500 or status in RETRYABLE_4XX:
        return "retry"
    return "final"


def classify_smtp_code(code: int) -> Verdict:
    """``ok`` for 2xx/3xx replies; ``retry`` for 4xx (transient); ``final`` for 5xx and
    anything else (RFC 5321 §4.2.1)."""
    if 200 <= code < 400:
        return "ok"
    return "retry" if 400 <= code < 500 else "final"


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait, from a ``Retry-After`` header value.

    Args:
        value: delta-seconds (``"120"``) or an HTTP date (``"Wed, 21 Oct 2015 07:28:00 GMT"``).
        now: the current instant, seconds since the epoch (the caller's clock).

    Returns:
        The wait in seconds (0 for a date in the past), or ``None`` when the value is absent
        or neither form.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when.timestamp() - now, 0.0)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how far apart a delivery is tried.

    Attributes:
        max_attempts: attempts in all, the first included (>= 1).
        backoff: base of the exponential backoff, seconds (the notifier's ``retry_backoff``).
        max_retry_after: the longest ``Retry-After`` honoured, seconds; a longer one is cut to
            it (a receiver cannot park a delivery for a week).
    """

    max_attempts: int = 12
    backoff: float = 5.0
    max_retry_after: float = 3600.0

    def next_delay(
        self, attempt: int, result: DeliveryResult, rng: random.Random | None = None
    ) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or ``None`` if there is none.

        Args:
            attempt: the attempt that just ended (1-based).
            result: its outcome.
            rng: a random source for the jitter (tests pass a seeded one).

        Returns:
            ``None`` when the delivery succeeded, failed for good (not retryable) or used its
            last attempt; else the backoff delay, or the receiver's ``Retry-After`` (capped at
            :attr:`max_retry_after`) when that is longer.
        """
        if result.ok or not result.retryable or attempt >= self.max_attempts:
            return None
        delay = retry_delay(attempt, self.backoff, rng)
        asked = result.retry_after
        if asked is not None and math.isfinite(asked):
            delay = max(delay, min(asked, self.max_retry_after))
        return delay
