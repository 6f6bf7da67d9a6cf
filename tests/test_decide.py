"""The claim-time decision as one pure function (:func:`pgpulse.node.dispatch.decide`): a claimed
row's values and the claim's instant in, one :class:`~pgpulse.node.dispatch.Decision` out. No
database, no clock, no node: each case is a row and an instant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from helpers import utc
from pgpulse.core.model import ClaimedJob
from pgpulse.core.planner import MAX_INTERRUPTIONS, Advance
from pgpulse.node.dispatch import RUN, Decision, Verdict, decide

NOON = utc(2026, 1, 1, 12)
HOUR = timedelta(hours=1)


def claimed(**fields: Any) -> ClaimedJob:
    """An hourly job's claim of its 12:00 occurrence, 0.2 s after it, first attempt; ``fields``
    override any column of the claim row."""
    row: dict[str, Any] = {
        "id": 1, "tenant": "default", "name": "hourly", "schedule": "0 * * * *",
        "timezone": "UTC", "handler": "noop", "payload": {}, "catch_up": "skip",
        "backfill_limit": None, "misfire_grace": 60.0, "max_attempts": 3, "retry_backoff": 1.0,
        "timeout": None, "anchor_at": NOON - 24 * HOUR, "scheduled_for": NOON, "attempt": 1,
        "fencing_token": 7, "run_id": 70, "db_now": NOON + timedelta(seconds=0.2),
    }  # fmt: skip
    row.update(fields)
    return ClaimedJob(**row)


@dataclass(frozen=True)
class Case:
    """One row and instant, and what the decision must say.

    Attributes:
        job: the claimed row.
        now: the claim's instant (default: the row's ``db_now``).
        verdict: the decision's verdict.
        outcome: the recorded outcome's ``outcome`` (``None``: the handler runs).
        advance: where the job moves, if it does.
        status: the job's new status.
        error: the start of the recorded error.
    """

    job: ClaimedJob
    verdict: Verdict
    now: datetime | None = None
    outcome: str | None = None
    advance: Advance | None = None
    status: str = "idle"
    error: str | None = None


def skipped(held: datetime, first: datetime, last: datetime | None = None) -> Advance:
    """An advance holding ``held`` that skips the hourly occurrences ``first`` to ``last``."""
    last = last or first
    return Advance(held, round((last - first) / HOUR) + 1, first, last)


CASES = [
    pytest.param(Case(claimed(), "run"), id="on_time_runs"),
    pytest.param(
        Case(claimed(), "run", now=NOON + timedelta(seconds=59)), id="late_within_grace_runs"
    ),
    pytest.param(
        Case(
            claimed(),
            "catch_up",
            now=NOON + timedelta(minutes=2),
            outcome="skipped",
            advance=skipped(NOON + HOUR, NOON),
            error="missed: later than its misfire_grace of 60 s",
        ),
        id="misfire_past_grace_skipped",
    ),
    pytest.param(
        Case(
            claimed(scheduled_for=NOON - 2 * HOUR),
            "catch_up",
            now=NOON + timedelta(seconds=10),
            outcome="skipped",
            advance=skipped(NOON, NOON - 2 * HOUR, NOON - HOUR),
            error="superseded: a later occurrence was due",
        ),
        id="skip_policy_superseded_by_newest_due",
    ),
    pytest.param(
        Case(
            claimed(scheduled_for=NOON - 2 * HOUR, catch_up="coalesce"),
            "catch_up",
            now=NOON + timedelta(minutes=30),
            outcome="skipped",
            advance=skipped(NOON, NOON - 2 * HOUR, NOON - HOUR),
            error="coalesced into a later occurrence",
        ),
        id="coalesce_runs_the_newest_once",
    ),
    pytest.param(
        Case(claimed(scheduled_for=NOON - 2 * HOUR, catch_up="backfill"), "run", now=NOON),
        id="backfill_runs_the_oldest_first",
    ),
    pytest.param(
        Case(
            claimed(scheduled_for=NOON - 2 * HOUR, catch_up="backfill", backfill_limit=1),
            "catch_up",
            now=NOON + timedelta(minutes=30),
            outcome="skipped",
            advance=skipped(NOON, NOON - 2 * HOUR, NOON - HOUR),
            error="skipped: older than the newest 1 (backfill_limit)",
        ),
        id="backfill_limit_skips_the_older",
    ),
    pytest.param(
        Case(claimed(attempt=2), "run", now=NOON + 3 * HOUR), id="retry_is_never_a_misfire"
    ),
    pytest.param(
        Case(
            claimed(scheduled_for=NOON - 3 * HOUR, resume_mode="skip", resumed_at=NOON - HOUR / 2),
            "catch_up",
            now=NOON + timedelta(seconds=1),
            outcome="skipped",
            advance=skipped(NOON, NOON - 3 * HOUR, NOON - HOUR),
            error="paused",
        ),
        id="resume_skip_skips_the_paused_occurrences",
    ),
    pytest.param(
        Case(
            claimed(not_after=NOON - HOUR),
            "window",
            outcome="skipped",
            advance=Advance(NOON, 1, NOON, NOON, complete=True),
            status="completed",
            error="outside the job's window (after not_after)",
        ),
        id="after_not_after_completes",
    ),
    pytest.param(
        Case(
            claimed(calendars=[{"name": "off", "dates": ["2026-01-01"]}]),
            "calendar",
            outcome="skipped",
            advance=skipped(utc(2026, 1, 2), NOON, utc(2026, 1, 1, 23)),
            error="calendar off",
        ),
        id="excluded_date_skips_the_rest_of_the_day",
    ),
    pytest.param(
        Case(
            claimed(calendars=[{"name": "off", "dates": ["2026-01-01"]}], runs_left=1),
            "calendar",
            outcome="skipped",
            advance=skipped(utc(2026, 1, 2), NOON, utc(2026, 1, 1, 23)),
            error="calendar off",
        ),
        id="excluded_date_is_not_a_run_of_max_runs",
    ),
    pytest.param(
        Case(claimed(attempt=2, calendars=[{"name": "off", "dates": ["2026-01-01"]}]), "run"),
        id="excluded_date_on_a_retry_runs",
    ),
    pytest.param(
        Case(
            claimed(attempt=MAX_INTERRUPTIONS + 1, interruptions=MAX_INTERRUPTIONS),
            "interrupted",
            outcome="fenced",
            advance=Advance(NOON + HOUR),
            error=f"interrupted {MAX_INTERRUPTIONS} times",
        ),
        id="interrupted_ten_times_fenced",
    ),
    pytest.param(
        Case(
            claimed(attempt=4, max_attempts=3),
            "exhausted",
            outcome="fenced",
            advance=Advance(NOON + HOUR),
            error="attempts exhausted: 3 attempts failed",
        ),
        id="attempts_exhausted_fenced",
    ),
    pytest.param(
        Case(
            claimed(attempt=4, max_attempts=3, runs_left=1),
            "exhausted",
            outcome="fenced",
            advance=Advance(NOON + HOUR),
            status="completed",
            error="attempts exhausted",
        ),
        id="fenced_run_counts_towards_max_runs",
    ),
    pytest.param(
        Case(claimed(overlap="allow"), "fork", outcome="forked", advance=Advance(NOON + HOUR)),
        id="overlap_allow_forks",
    ),
    pytest.param(
        Case(
            claimed(overlap="replace", catch_up="coalesce", scheduled_for=NOON - HOUR),
            "catch_up",
            now=NOON + timedelta(seconds=1),
            outcome="skipped",
            advance=skipped(NOON, NOON - HOUR),
            error="coalesced",
        ),
        id="overlap_replace_catch_up_first",
    ),
    pytest.param(
        Case(
            claimed(handler="missing"),
            "no_handler",
            outcome="failed",
            status="failed",
            error="handler 'missing' is not registered on node node-a",
        ),
        id="unknown_handler_fails_the_job",
    ),
    pytest.param(
        Case(
            claimed(handler="shell"),
            "no_handler",
            outcome="failed",
            status="failed",
            error="shell jobs are not allowed on node node-a",
        ),
        id="shell_not_allowed_fails_the_job",
    ),
    pytest.param(
        Case(claimed(occurrence=9, kind="backfill", scheduled_for=NOON - 900 * HOUR), "run"),
        id="extra_occurrence_is_never_a_misfire",
    ),
    pytest.param(
        Case(
            claimed(occurrence=9, kind="trigger", attempt=11, interruptions=MAX_INTERRUPTIONS),
            "interrupted",
            outcome="fenced",
            error="interrupted",
        ),
        id="extra_occurrence_interrupted_fenced",
    ),
    pytest.param(
        Case(
            claimed(occurrence=9, kind="trigger", handler="missing"),
            "no_handler",
            outcome="failed",
            error="handler 'missing' is not registered",
        ),
        id="extra_occurrence_without_handler_fails_alone",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_decide(case: Case) -> None:
    job = case.job
    decision = decide(job, case.now or job.db_now, node="node-a", handlers={"noop"})
    assert decision.verdict == case.verdict
    if case.verdict == "run":
        assert decision == RUN and decision.outcome is None
        return
    outcome = decision.outcome
    assert outcome is not None and outcome.job is job
    assert (outcome.outcome, outcome.advance, outcome.status) == (
        case.outcome,
        case.advance,
        case.status,
    )
    if case.error is None:
        assert outcome.error is None
    else:
        assert outcome.error is not None and outcome.error.startswith(case.error)
    assert outcome.retry_in is None and outcome.ended_at is None  # no handler ran


def test_the_spread_offset_shifts_the_instant_lateness_counts_from() -> None:
    """A spread job is due at its occurrence plus its offset: 59 s after that instant it runs
    within a 60 s grace, however long after the occurrence itself."""
    job = claimed(spread=3000.0)
    late = NOON + job.spread_offset + timedelta(seconds=59)
    assert decide(job, late, node="node-a", handlers={"noop"}) == RUN
    missed = decide(job, late + timedelta(seconds=2), node="node-a", handlers={"noop"})
    assert missed.verdict == "catch_up"


def test_a_decision_reads_only_its_arguments() -> None:
    """The same row and instant give the same decision, whatever the row's ``db_now`` says: the
    instant is an argument, not a clock reading."""
    job = claimed()
    late = NOON + timedelta(minutes=5)
    first = decide(job, late, node="node-a", handlers={"noop"})
    again = decide(job._replace(db_now=NOON), late, node="node-a", handlers=("noop",))
    assert first.verdict == again.verdict == "catch_up"
    assert first.outcome is not None and again.outcome is not None
    assert first.outcome == again.outcome._replace(job=job)
    assert isinstance(first, Decision)
