"""Outcomes once their write has settled: counted (:mod:`pgpulse.node.metrics`) and logged, one
line each, under this module's logger (``pgpulse.node.outcomes``), with a stable ``action``
(``run_succeeded``, ``run_retrying``, ``run_failed``, ``run_skipped``, ``run_fenced``,
``write_fenced``, ``replaced``). The recorder calls :func:`report` for each outcome it wrote or
saw refused by fencing (:mod:`pgpulse.node.recorder`)."""

from __future__ import annotations

import logging
from datetime import timedelta

from pgpulse.core.model import Outcome
from pgpulse.node import metrics
from pgpulse.node.dispatch import replaced_on_loss

log = logging.getLogger(__name__)


def report(outcome: Outcome, written: bool) -> None:
    """Count and log an outcome whose write has landed (``written``) or was refused by fencing
    (the lease was lost before it landed: nothing recorded).

    A retry logs its error and the next attempt's instant (INFO, ``run_retrying``); a run that
    fails for good is a WARNING with its error (``run_failed``, ``run_fenced``); the others are
    INFO (a job failed for want of a handler was logged as an ERROR when it was claimed).
    """
    job = outcome.job
    if outcome.outcome == "forked":
        log.debug(
            "%s/%s at %s forked into an extra occurrence (overlap %s)%s",
            job.tenant,
            job.name,
            job.scheduled_for,
            job.overlap,
            "" if written else ": lease lost first, nothing recorded",
            extra={"action": "run_forked", "job": job.name},
        )
        return
    metrics.observe_finish(outcome.outcome, job, written, outcome.advance, outcome.ended_at)
    if not written:
        if replaced_on_loss(job):
            log.info(
                "%s/%s at %s lost its lease before its outcome was written (overlap replace: "
                "usually a newer occurrence replaced it, and its run is recorded as cancelled)",
                job.tenant,
                job.name,
                job.scheduled_for.isoformat(),
                extra={"action": "replaced", "job": job.name},
            )
            return
        log.warning(
            "lease of %s/%s lost before its outcome was written; this node records nothing of "
            "it (the run's end is written by whoever ended the lease)",
            job.tenant,
            job.name,
            extra={"action": "write_fenced", "job": job.name},
        )
        return
    action = f"run_{outcome.outcome}"
    if outcome.outcome == "retrying":
        retry_at = (outcome.ended_at or job.db_now) + timedelta(0, outcome.retry_in or 0.0)
        log.info(
            "retrying %s/%s at %s: attempt %d failed (%s); attempt %d at %s (in %.3gs)",
            job.tenant,
            job.name,
            job.scheduled_for,
            job.attempt,
            outcome.error,
            job.attempt + 1,
            retry_at,
            outcome.retry_in or 0.0,
            extra={
                "action": action,
                "job": job.name,
                "error": outcome.error,
                "retry_at": retry_at.isoformat(),
            },
        )
    elif outcome.outcome in ("failed", "fenced") and outcome.status == "idle":
        log.warning(
            "%s %s/%s at %s (attempt %d): %s",
            outcome.outcome,
            job.tenant,
            job.name,
            job.scheduled_for,
            job.attempt,
            outcome.error,
            extra={"action": action, "job": job.name, "error": outcome.error},
        )
    elif log.isEnabledFor(logging.INFO):
        attempt = f" (attempt {job.attempt})" if outcome.ended_at is not None else ""
        log.info(
            "%s %s/%s at %s%s",
            outcome.outcome,
            job.tenant,
            job.name,
            job.scheduled_for,
            attempt,
            extra={"action": action, "job": job.name},
        )
