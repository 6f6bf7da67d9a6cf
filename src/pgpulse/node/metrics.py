"""Prometheus metrics of a Pulse process, and the small functions the engine calls to feed them.

Every metric lives in the default ``prometheus_client`` registry, so ``pgpulse node run
--metrics ADDR`` and ``pgpulse serve`` expose them on ``GET /metrics`` together with the
client's standard ``process_*`` and ``python_*`` series. Counters and histograms are per
process (sum them over nodes in PromQL); the ``pgpulse_jobs`` gauges are read from the database
at each scrape, so every process reports the same cluster-wide values (use ``max``).

Metrics (units are seconds unless stated):

``pgpulse_runs_total{outcome}`` (counter)
    Attempts whose end was written, by outcome: ``succeeded``, ``failed`` (attempts exhausted,
    or the handler is unknown), ``retrying`` (failed with attempts left), ``skipped`` (by the
    catch-up policy at claim time), ``fenced`` (interrupted ``MAX_INTERRUPTIONS`` times:
    handed back, or leases lost with their nodes).
``pgpulse_run_lag_seconds`` (histogram)
    Firing lag: when the first attempt started (its claim, by the database's clock) minus the
    occurrence's ``scheduled_for``. Retries are not observed (their delay is the backoff).
``pgpulse_run_duration_seconds{outcome}`` (histogram)
    From the claim to the recorded end, for attempts that ran a handler (the handler's run time
    plus the outcome's group-committed write, a few milliseconds).
``pgpulse_claim_duration_seconds`` (histogram)
    Latency of one claim statement (``claim_due``), whether or not it claimed anything.
``pgpulse_claimed_jobs_total`` (counter)
    Jobs claimed by this node.
``pgpulse_node_running_attempts`` (gauge)
    Attempts running on this node now (at most its slots).
``pgpulse_node_shards_owned`` (gauge)
    Shards this node polls (of 64).
``pgpulse_lease_renewals_failed_total`` (counter)
    Attempts this node cancelled because their lease could not be renewed: the database refused
    the renewal (stale token) or no renewal succeeded before the lease's safety margin.
``pgpulse_fenced_writes_rejected_total`` (counter)
    Outcome writes the database ignored because the fencing token was stale (the lease was
    lost, and another node took the job over).
``pgpulse_skipped_occurrences_total`` (counter)
    Occurrences recorded as skipped (misfire grace, backfill limit, coalescing).
``pgpulse_jobs{state}`` (gauge, cluster-wide)
    Jobs by state: ``due`` (idle and due, not yet claimed), ``running``, ``paused``, ``failed``,
    ``completed``, ``total``. Read from the database at each scrape.
``pgpulse_jobs_max_lag_seconds`` (gauge, cluster-wide)
    How late the most overdue idle job is (0 when none is due). Read at each scrape.
``pgpulse_jobs_unroutable`` (gauge, cluster-wide)
    Idle jobs that no live node can run (no live node advertises their handler, or none allows
    shell jobs): they wait, due or not yet, for a node that can. ``pgpulse status`` names the
    handlers. Read at each scrape.
``pgpulse_metrics_refresh_errors_total`` (counter)
    Scrapes whose cluster-wide read failed (the gauges then keep their previous values).
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    from pgpulse.core.model import ClaimedJob
    from pgpulse.core.planner import Advance
    from pgpulse.db.store import Store

log = logging.getLogger(__name__)


# The *_created series (one timestamp per counter) only add noise to a scrape.
disable_created_metrics()  # type: ignore[no-untyped-call]

#: Outcomes of :data:`RUNS`, initialised to 0 so dashboards see every series from the start.
OUTCOMES = ("succeeded", "failed", "retrying", "skipped", "fenced")
#: Job states of :data:`JOBS`.
JOB_STATES = ("due", "running", "paused", "failed", "completed", "total")
#: Seconds to wait for the cluster-wide read of a scrape before serving the previous values.
REFRESH_TIMEOUT = 2.0

_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
_CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class _Histogram:
    """One histogram series kept as plain numbers, observed on the engine's event-loop thread:
    no lock per observation (prometheus_client's histogram takes two), which mattered at
    thousands of runs per second. :class:`_RunMetrics` renders it at scrape.

    Args:
        bounds: the buckets' upper bounds (``le``), ascending, without +Inf.
    """

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last counts what exceeds every bound
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound it does not exceed."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, observations ≤ le)`` pairs as the exposition format wants them."""
        out, running = [], 0
        for bound, count in zip(
            (*map(floatToGoString, self.bounds), "+Inf"), self.counts, strict=True
        ):
            running += count
            out.append((bound, float(running)))
        return out


class _RunMetrics(Collector):
    """``pgpulse_runs_total``, ``pgpulse_run_lag_seconds`` and ``pgpulse_run_duration_seconds``:
    fed once per run by :func:`observe_run` (plain additions), rendered at each scrape."""

    def __init__(self) -> None:
        self.runs = dict.fromkeys(OUTCOMES, 0)
        self.lag = _Histogram(_LAG_BUCKETS)
        self.duration = {outcome: _Histogram(_DURATION_BUCKETS) for outcome in OUTCOMES}

    def collect(self) -> Iterator[Metric]:
        """Render the three families from the current numbers."""
        runs = CounterMetricFamily(
            "pgpulse_runs_total", "Attempts whose end was written, by outcome.", labels=["outcome"]
        )
        for outcome, count in self.runs.items():
            runs.add_metric([outcome], count)
        lag = HistogramMetricFamily(
            "pgpulse_run_lag_seconds",
            "First attempt's start (claim) minus the occurrence's scheduled_for.",
        )
        lag.add_metric([], self.lag.cumulative(), self.lag.total)
        duration = HistogramMetricFamily(
            "pgpulse_run_duration_seconds",
            "Claim to recorded end, for attempts that ran a handler.",
            labels=["outcome"],
        )
        for outcome, series in self.duration.items():
            duration.add_metric([outcome], series.cumulative(), series.total)
        return iter((runs, lag, duration))


_RUN_METRICS = _RunMetrics()
REGISTRY.register(_RUN_METRICS)
CLAIM_DURATION = Histogram(
    "pgpulse_claim_duration_seconds", "Latency of one claim statement.", buckets=_CLAIM_BUCKETS
)
CLAIMED = Counter("pgpulse_claimed_jobs_total", "Jobs claimed by this node.")
RUNNING = Gauge("pgpulse_node_running_attempts", "Attempts running on this node now.")
SHARDS = Gauge("pgpulse_node_shards_owned", "Shards this node polls.")
LEASE_RENEWALS_FAILED = Counter(
    "pgpulse_lease_renewals_failed_total",
    "Attempts cancelled because their lease could not be renewed.",
)
FENCED_WRITES = Counter(
    "pgpulse_fenced_writes_rejected_total",
    "Outcome writes ignored because the fencing token was stale.",
)
SKIPPED = Counter("pgpulse_skipped_occurrences_total", "Occurrences recorded as skipped.")
JOBS = Gauge("pgpulse_jobs", "Jobs by state, cluster-wide (read at scrape).", ["state"])
MAX_LAG = Gauge(
    "pgpulse_jobs_max_lag_seconds",
    "How late the most overdue idle job is, cluster-wide (read at scrape).",
)
UNROUTABLE = Gauge(
    "pgpulse_jobs_unroutable",
    "Idle jobs no live node can run, cluster-wide (read at scrape).",
)
CHECKIN_PINGS = Counter(
    "pgpulse_checkin_pings_total",
    "Check-in pings by result: sent, failed (after its retries), dropped (queue full).",
    ["result"],
)
REFRESH_ERRORS = Counter(
    "pgpulse_metrics_refresh_errors_total", "Scrapes whose cluster-wide read failed."
)

for _state in JOB_STATES:
    JOBS.labels(_state)


# -- what the engine calls -------------------------------------------------------------------


def observe_claim(seconds: float, count: int) -> None:
    """Record one claim statement: its latency in ``seconds`` and the ``count`` jobs claimed."""
    CLAIM_DURATION.observe(max(seconds, 0.0))
    if count:
        CLAIMED.inc(count)


def observe_run(outcome: str, lag_seconds: float | None, duration_seconds: float | None) -> None:
    """Record one attempt whose end was written.

    Args:
        outcome: one of :data:`OUTCOMES`.
        lag_seconds: start minus ``scheduled_for``, or ``None`` not to observe it (retries,
            attempts that never started a handler).
        duration_seconds: claim to end of the handler, or ``None`` if no handler ran.
    """
    tally = _RUN_METRICS
    tally.runs[outcome] += 1
    if lag_seconds is not None:
        tally.lag.observe(max(lag_seconds, 0.0))
    if duration_seconds is not None:
        tally.duration[outcome].observe(max(duration_seconds, 0.0))


def observe_finish(
    outcome: str,
    job: ClaimedJob,
    written: bool,
    advance: Advance | None = None,
    ended_at: datetime | None = None,
) -> None:
    """Record the fenced write that ended an attempt of ``job`` (one call per ``finish_run``).

    Args:
        outcome: the outcome written (:data:`OUTCOMES`).
        job: the claimed job; its ``db_now`` (claim instant) and ``scheduled_for`` give the lag.
        written: whether the write took effect (``Store.finish_runs``); ``False`` counts a
            rejected fenced write and nothing else.
        advance: the move to the next occurrence, if any; its skipped occurrences are counted
            (plus the current one when ``outcome`` is ``skipped``).
        ended_at: the database's instant (as the node estimates it) when the attempt ended, or
            ``None`` when no handler ran; gives the duration, and the lag is observed only then.
    """
    if not written:
        fenced_write_rejected()
        return
    ran = ended_at is not None
    due = job.scheduled_for + job.spread_offset  # lag counts from the spread instant
    # a backfill runs the past on purpose: its lateness is no lag
    late = ran and job.attempt == 1 and job.kind != "backfill"
    lag = (job.db_now - due).total_seconds() if late else None
    duration = (ended_at - job.db_now).total_seconds() if ended_at is not None else None
    observe_run(outcome, lag, duration)
    # skipped_count counts every skipped occurrence (the claimed one too, when it was skipped)
    skipped(advance.skipped_count if advance is not None else 0)


def checkin_ping(result: str) -> None:
    """Count one check-in ping: ``sent``, ``failed`` (after its retries) or ``dropped``."""
    CHECKIN_PINGS.labels(result).inc()


def lease_renewal_failed(count: int = 1) -> None:
    """Count ``count`` attempts cancelled because their lease could not be renewed."""
    LEASE_RENEWALS_FAILED.inc(count)


def fenced_write_rejected(count: int = 1) -> None:
    """Count ``count`` outcome writes that the fencing token made the database ignore."""
    FENCED_WRITES.inc(count)


def skipped(count: int) -> None:
    """Count ``count`` occurrences recorded as skipped (0 is allowed and does nothing)."""
    if count > 0:
        SKIPPED.inc(count)


def set_shards(count: int) -> None:
    """Set how many shards this node owns."""
    SHARDS.set(count)


def set_running(count: int) -> None:
    """Set how many attempts run on this node now."""
    RUNNING.set(count)


# -- serving -----------------------------------------------------------------------------------


async def refresh_cluster(store: Store) -> bool:
    """Read the cluster-wide job counts into :data:`JOBS`, :data:`MAX_LAG` and
    :data:`UNROUTABLE`.

    One statement, bounded by :data:`REFRESH_TIMEOUT` seconds. On failure the gauges keep their
    previous values and :data:`REFRESH_ERRORS` is incremented.

    Returns:
        Whether the gauges were refreshed.
    """
    try:
        async with asyncio.timeout(REFRESH_TIMEOUT):
            row = await store.cluster_counts()
    except Exception as exc:  # any failure only makes the gauges stale; the scrape still answers
        REFRESH_ERRORS.inc()
        log.warning("metrics refresh failed: %s", exc, extra={"action": "metrics_refresh_failed"})
        return False
    assert row is not None
    for state in JOB_STATES:
        JOBS.labels(state).set(row[state])
    MAX_LAG.set(row["max_lag"] or 0.0)
    UNROUTABLE.set(sum(entry["jobs"] for entry in row["unroutable"]))
    return True


async def exposition(store: Store | None) -> tuple[bytes, str]:
    """Refresh the cluster gauges (when a store is given) and render every metric.

    Returns:
        ``(body, content type)`` in the Prometheus text format.
    """
    if store is not None:
        await refresh_cluster(store)
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
