"""``@after 10m``: the next occurrence is the previous run's end plus the delay (a fixed delay
after completion), with catch-up meaning what it means for ``@every`` — played at fixed instants
through the real claim and finish statements, and run by a real node — and its refusals."""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest

from helpers import ALL_SHARDS, add, pgpulse, spec, utc
from pgpulse.core.errors import InvalidInput, InvalidSchedule
from pgpulse.core.jobs import JobSpec
from pgpulse.core.model import AttemptResult
from pgpulse.core.schedule import parse_schedule
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from pgpulse.node.dispatch import decide, plan_finish
from pgpulse.node.handlers import RunContext
from run_control_helpers import history, job_row
from test_engine import node, running, wait_until

CREATED = utc(2026, 5, 1, 12)
DELAY = timedelta(minutes=10)


async def claim_and_end(store: Store, at: datetime, ended: datetime, *, ok: bool = True) -> bool:
    """Claim what is due at ``at``; end each claim at ``ended`` (its handler ran from ``at`` to
    ``ended`` when it runs). Whether anything was claimed."""
    batch = await store.claim_due("node-a", ALL_SHARDS, 10, lease=30, now=at)
    outcomes = []
    for job in batch:
        decision = decide(job, at, node="node-a", handlers={"noop"})
        if decision.outcome is not None:
            outcomes.append(decision.outcome)
        else:
            outcomes.append(
                plan_finish(job, AttemptResult(ok, error=None if ok else "boom"), ended)
            )
    await store.finish_runs(outcomes, now=ended, node="node-a")
    return bool(batch)


def test_the_schedule_and_its_wording() -> None:
    parsed = parse_schedule("@after 1h30m")
    assert (parsed.kind, parsed.delay, parsed.interval) == ("delay", timedelta(minutes=90), None)
    assert parsed.describe() == "1 hour 30 minutes after each run ends"
    assert parse_schedule("@after 1m").describe() == "1 minute after each run ends"
    # the first occurrence: the delay after the job's creation; nothing fixed in the past
    assert parsed.next_after(CREATED) == CREATED + timedelta(minutes=90)
    assert parsed.last_at_or_before(CREATED) is None
    assert parsed.occurrences_between(CREATED - DELAY * 10, CREATED, limit=10) == []
    for text, message in [
        ("@after 0s", "@after duration '0s' must be from 1s to 3650d"),
        ("@after 10x", "@after duration '10x' is not valid"),
    ]:
        with pytest.raises(InvalidSchedule) as refused:
            parse_schedule(text)
        assert message in str(refused.value) and refused.value.field == "schedule"


async def test_each_occurrence_is_the_previous_runs_end_plus_the_delay(
    store: Store, db: Any
) -> None:
    await add(store, spec("tidy", schedule="@after 10m"), now=CREATED)
    first = CREATED + DELAY
    assert job_row(db, "tidy")["scheduled_for"] == first
    assert not await claim_and_end(store, first - timedelta(seconds=1), first)  # not yet due
    # the run takes 3 minutes: the next one is 10 minutes after its end, not after its start
    assert await claim_and_end(store, first, first + timedelta(minutes=3))
    second = first + timedelta(minutes=13)
    assert job_row(db, "tidy")["scheduled_for"] == second
    # a failure with no attempt left moves on the same way (the default: 3 attempts)
    assert await claim_and_end(store, second, second + timedelta(minutes=1), ok=False)
    row = job_row(db, "tidy")
    assert (row["status"], row["scheduled_for"], row["attempt"]) == ("idle", second, 1)
    outcomes = [(r[0], r[1]) for r in await history(store)]
    assert outcomes == [("succeeded", first), ("retrying", second)]


async def test_catch_up_skip_misses_a_late_one_and_waits_the_delay_from_then(
    store: Store, db: Any
) -> None:
    await add(store, spec("tidy", schedule="@after 10m", misfire_grace=60), now=CREATED)
    back = CREATED + timedelta(hours=5)  # every node was down for hours
    assert await claim_and_end(store, back, back)
    [(outcome, at, _, count, error)] = await history(store)
    assert (outcome, at, count) == ("skipped", CREATED + DELAY, 1)
    assert error == "missed: later than its misfire_grace of 60 s (1 min)"
    assert job_row(db, "tidy")["scheduled_for"] == back + DELAY


@pytest.mark.parametrize("mode", ["backfill", "coalesce"])
async def test_catch_up_backfill_or_coalesce_runs_the_late_one_once(
    store: Store, db: Any, mode: str
) -> None:
    await add(store, spec("tidy", schedule="@after 10m", catch_up=mode), now=CREATED)
    back = CREATED + timedelta(hours=5)
    assert await claim_and_end(store, back, back + timedelta(seconds=30))
    assert [(r[0], r[1]) for r in await history(store)] == [("succeeded", CREATED + DELAY)]
    assert job_row(db, "tidy")["scheduled_for"] == back + timedelta(seconds=30) + DELAY


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"overlap": "allow", "max_concurrency": 2},
            "overlap",
            "an @after schedule applies to overlap forbid only (overlap is 'allow'): its next "
            "occurrence waits for the run's end",
        ),
        (
            {"spread": 30},
            "spread",
            "spread does not apply to an @after schedule: each occurrence follows a run's end, "
            "so its jobs do not fall due together",
        ),
    ],
)
def test_refused_combinations_name_the_field(
    fields: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        JobSpec.create(name="tidy", schedule="@after 10m", handler="noop", **fields)
    assert (refused.value.field, str(refused.value)) == (field, message)


async def test_a_backfill_is_refused(store: Store) -> None:
    await add(store, spec("tidy", schedule="@after 10m"), now=CREATED)
    with pytest.raises(InvalidInput) as refused:
        await RunControl(store.pool).backfill(
            "default", "tidy", start=CREATED, end=CREATED + timedelta(hours=1), now=CREATED
        )
    assert refused.value.field == "schedule"
    assert "has no fixed occurrences to backfill" in str(refused.value)


async def test_a_real_node_waits_the_delay_after_each_end(store: Store, dsn: str) -> None:
    spans: list[tuple[float, float]] = []
    loop = asyncio.get_running_loop()

    async def handler(ctx: RunContext) -> None:
        start = loop.time()
        await asyncio.sleep(0.4)
        spans.append((start, loop.time()))

    await add(store, spec("tidy", schedule="@after 1s", handler="tidy"))
    async with running(node(store, dsn, {"tidy": handler})):
        await wait_until(lambda: len(spans) >= 3, within=20)
    gaps = [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]
    # each start is at least the delay after the previous end (the database's clock and the
    # loop's differ by far less than the 0.4 s run), never a fixed 1 s grid from the starts
    assert all(gap >= 0.9 for gap in gaps), gaps
    assert all(b[0] - a[0] >= 1.3 for a, b in itertools.pairwise(spans)), spans


def test_schedule_next_as_a_user_types_it() -> None:
    done = pgpulse("schedule", "next", "@after 10m", "--after", "2026-12-06T10:00:00Z")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "10 minutes after each run ends",
        "UTC",
        "2026-12-06T10:10:00+00:00",
        "the first for a job created then; each later one follows the previous run's end",
    ]
    refused = pgpulse("schedule", "next", "@after 0s")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: schedule '@after 0s': @after duration '0s' must be from 1s to 3650d"
    ]
