"""One-off @at jobs, active windows, max_runs and spread, through the store and a played node:
exact instants, DST weeks included."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from helpers import ALL_SHARDS, add, spec, utc
from pgpulse.core.errors import InvalidInput
from pgpulse.core.spread import spread_offset
from pgpulse.core.zones import load_zone
from pgpulse.db.store import Store
from pgpulse.web.service import upcoming
from run_control_helpers import drain, history, job_row


async def test_an_at_job_runs_once_then_is_completed(store: Store, db: Any) -> None:
    # 02:30 BST on the morning the clocks go forward in London (29 March 2026) is 01:30 UTC
    await add(
        store,
        spec("launch", schedule="@at 2026-03-29T02:30:00", timezone="Europe/London"),
        now=utc(2026, 3, 28, 12),
    )
    at = utc(2026, 3, 29, 1, 30)
    assert job_row(db, "launch")["scheduled_for"] == at
    assert await drain(store, at - timedelta(seconds=1)) == []
    assert await drain(store, at + timedelta(seconds=2)) == [at]
    job = job_row(db, "launch")
    assert (job["status"], job["scheduled_for"], job["schedule_kind"]) == ("completed", at, "once")
    assert await drain(store, at + timedelta(days=3)) == []
    assert await history(store) == [("succeeded", at, at, 1, None)]
    assert upcoming(job) == []  # job show, the API and the dashboard list nothing ahead
    assert upcoming({**job, "status": "idle", "max_runs": 3, "runs_done": 2}) == [
        at.astimezone(load_zone("Europe/London"))
    ]


async def test_an_at_job_in_the_past_is_refused_unless_catch_up_runs_it(
    store: Store, db: Any
) -> None:
    now = utc(2026, 12, 24, 18, 0, 5)
    with pytest.raises(InvalidInput, match="in the past") as refused:
        await add(store, spec("late", schedule="@at 2026-12-24T18:00:00"), now=now)
    assert refused.value.field == "schedule"
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
    await add(store, spec("late", schedule="@at 2026-12-24T18:00:00", catch_up="backfill"), now=now)
    assert await drain(store, now) == [utc(2026, 12, 24, 18)]
    assert job_row(db, "late")["status"] == "completed"
    # declaring the same job again (a node's start) is a no-op, not a refusal
    await add(store, spec("late", schedule="@at 2026-12-24T18:00:00", catch_up="backfill"), now=now)
    assert job_row(db, "late")["status"] == "completed"


async def test_a_missed_at_job_under_skip_is_skipped_and_completed(store: Store, db: Any) -> None:
    await add(store, spec("once", schedule="@at 2026-06-01T00:00:00"), now=utc(2026, 5, 1))
    assert await drain(store, utc(2026, 6, 1, 0, 5)) == []  # five minutes late, grace 60 s
    assert job_row(db, "once")["status"] == "completed"
    at = utc(2026, 6, 1)
    assert await history(store) == [
        ("skipped", at, at, 1, "missed: later than its misfire_grace of 60 s (1 min)")
    ]


async def test_a_window_across_the_dst_week_fires_inside_it_only(store: Store, db: Any) -> None:
    # 09:00 in Berlin: CET (+1) until 29 March 2026 02:00, CEST (+2) from then
    await add(
        store,
        spec(
            "standup",
            schedule="0 9 * * *",
            timezone="Europe/Berlin",
            not_before="2026-03-27T00:00:00",
            not_after="2026-03-30T12:00:00",
        ),
        now=utc(2026, 3, 20),
    )
    expected = [utc(2026, 3, 27, 8), utc(2026, 3, 28, 8), utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)]
    assert job_row(db, "standup")["scheduled_for"] == expected[0]
    ran: list[Any] = []
    for day in range(20, 32):  # a node up at 07:00:01 and 08:00:01 UTC each day
        await drain(store, utc(2026, 3, day, 7, 0, 1), seen=ran)
        await drain(store, utc(2026, 3, day, 8, 0, 1), seen=ran)
    assert ran == expected
    job = job_row(db, "standup")
    assert (job["status"], job["runs_done"]) == ("completed", 4)
    assert [row[0] for row in await history(store)] == ["succeeded"] * 4  # nothing "missed"


async def test_a_window_that_holds_no_occurrence_is_completed_at_creation(
    store: Store, db: Any
) -> None:
    await add(
        store,
        spec(
            "never",
            schedule="0 9 * * *",
            not_before="2026-01-01T10:00:00",
            not_after="2026-01-01T11:00:00",
        ),
        now=utc(2025, 12, 1),
    )
    assert job_row(db, "never")["status"] == "completed"


async def test_max_runs_counts_runs_not_skips(store: Store, db: Any) -> None:
    await add(store, spec("thrice", schedule="*/15 * * * *", max_runs=3), now=utc(2026, 1, 1))
    ran = await drain(store, utc(2026, 1, 1, 0, 15))
    # an hour late: 00:30, 00:45 and 01:00 (beyond the grace) are skipped, 01:15 runs
    ran += await drain(store, utc(2026, 1, 1, 1, 15, 30))
    assert job_row(db, "thrice")["status"] == "idle"
    ran += await drain(store, utc(2026, 1, 1, 1, 30))
    assert ran == [utc(2026, 1, 1, 0, 15), utc(2026, 1, 1, 1, 15), utc(2026, 1, 1, 1, 30)]
    job = job_row(db, "thrice")
    assert (job["status"], job["runs_done"]) == ("completed", 3)
    assert await drain(store, utc(2026, 1, 1, 3)) == []
    # raising max_runs brings it back from its next occurrence after now: the time it was
    # completed is neither caught up nor recorded as skipped (seventh trial: a "next
    # occurrence" in the past, then one skipped row over the whole completed time)
    skipped_before = len(await history(store))
    await add(store, spec("thrice", schedule="*/15 * * * *", max_runs=4), now=utc(2026, 1, 1, 3))
    job = job_row(db, "thrice")
    assert (job["status"], job["scheduled_for"]) == ("idle", utc(2026, 1, 1, 3, 15))
    assert await drain(store, utc(2026, 1, 1, 3, 15, 1)) == [utc(2026, 1, 1, 3, 15)]
    assert len(await history(store)) == skipped_before + 1  # the run, no skipped row
    assert job_row(db, "thrice")["status"] == "completed"


async def test_the_database_computes_the_same_spread_offset_as_python(db: Any) -> None:
    ids = [1, 2, 3, 63, 64, 1000, 123_456_789, 2**62]
    for spread in (0.0, 0.5, 60.0, 3599.999999, 86400.0):
        rows = db.execute(
            "SELECT id, pgpulse_spread_offset(id, %s) AS o FROM unnest(%s::bigint[]) AS id",
            (spread, ids),
        ).fetchall()
        assert {r["id"]: r["o"] for r in rows} == {i: spread_offset(i, spread) for i in ids}


async def test_spread_delays_the_claim_not_the_occurrence(store: Store, db: Any) -> None:
    [job_id] = await add(
        store, spec("herd", schedule="0 * * * *", spread=3600), now=utc(2026, 1, 1)
    )
    offset = spread_offset(job_id, 3600)
    hour = utc(2026, 1, 1, 1)
    job = job_row(db, "herd")
    assert (job["scheduled_for"], job["next_run_at"]) == (hour, hour + offset)
    assert (
        await store.claim_due(
            "n", ALL_SHARDS, 5, lease=30, now=hour + offset - timedelta(microseconds=1)
        )
        == []
    )
    # claimed at its spread instant, far more than misfire_grace after the hour: it runs
    assert await drain(store, hour + offset + timedelta(seconds=1)) == [hour]
    job = job_row(db, "herd")
    assert (job["scheduled_for"], job["next_run_at"]) == (
        hour + timedelta(hours=1),
        hour + timedelta(hours=1) + offset,
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        pytest.param(
            {"schedule": "@at 2027-01-01T00:00:00", "spread": 5}, "spread", id="at_with_spread"
        ),
        pytest.param(
            {"not_before": "2026-02-01T00:00:00", "not_after": "2026-01-01T00:00:00"},
            "not_after",
            id="window_ends_before_it_starts",
        ),
        pytest.param({"not_before": "soon"}, "not_before", id="not_an_instant"),
        pytest.param({"max_runs": 0}, "max_runs", id="max_runs_0"),
        pytest.param({"auto_pause_after": 1.5}, "auto_pause_after", id="auto_pause_fraction"),
        pytest.param({"calendars": ["bad name"]}, "calendars", id="calendar_name"),
        pytest.param(
            {"schedule": "* * * * *", "spread": 61}, "spread", id="spread_over_cron_period"
        ),
        pytest.param({"schedule": "@every 30s", "spread": 31}, "spread", id="spread_over_period"),
    ],
)
def test_invalid_combinations_are_refused_naming_the_field(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        spec("x", **fields)
    assert refused.value.field == field


async def test_an_interval_job_with_not_before_starts_its_grid_there(store: Store, db: Any) -> None:
    start = utc(2026, 10, 25, 0, 30)  # the night Europe leaves summer time
    await add(
        store,
        spec("tick", schedule="@every 45m", not_before=start, max_runs=3),
        now=utc(2026, 10, 24),
    )
    ran: list[Any] = []
    for minutes in (0, 45, 90, 135):
        await drain(store, start + timedelta(minutes=minutes, seconds=1), seen=ran)
    assert ran == [start, start + timedelta(minutes=45), start + timedelta(minutes=90)]
    assert job_row(db, "tick")["status"] == "completed"


async def test_a_skip_says_whether_occurrences_were_superseded_or_missed(
    store: Store, db: Any
) -> None:
    """catch_up skip runs the newest due occurrence: the older ones, a few seconds late, were
    superseded, not missed; when even the newest is past its grace they were missed (the
    seventh trial read 'missed: later than misfire_grace' on occurrences 10 s late)."""
    await add(store, spec("tick", schedule="*/10 * * * * *"), now=utc(2026, 6, 1))
    assert await drain(store, utc(2026, 6, 1, 0, 0, 25)) == [utc(2026, 6, 1, 0, 0, 20)]
    assert await history(store) == [
        ("skipped", utc(2026, 6, 1, 0, 0, 10), utc(2026, 6, 1, 0, 0, 10), 1,
         "superseded: a later occurrence was due (catch_up skip runs the newest)"),
        ("succeeded", utc(2026, 6, 1, 0, 0, 20), utc(2026, 6, 1, 0, 0, 20), 1, None),
    ]  # fmt: skip
    await add(store, spec("hourly", schedule="0 * * * *"), now=utc(2026, 6, 1, 0, 30))
    # tick runs its newest; even the newest of hourly is past its grace
    assert await drain(store, utc(2026, 6, 1, 2, 30)) == [utc(2026, 6, 1, 2, 30)]
    skipped = [row for row in await history(store) if row[1] == utc(2026, 6, 1, 1)]
    assert skipped == [
        ("skipped", utc(2026, 6, 1, 1), utc(2026, 6, 1, 2), 2,
         "missed: later than its misfire_grace of 60 s (1 min)"),
    ]  # fmt: skip


async def test_an_outage_past_the_windows_end_records_only_what_was_inside_it(
    store: Store, db: Any
) -> None:
    """Nodes down across not_after: the skip summary stops at the window's last occurrence
    (the seventh trial saw 25 counted, most after the window), and the job completes."""
    await add(
        store,
        spec("window", schedule="*/5 * * * * *", not_after="2026-06-01T00:00:13"),
        now=utc(2026, 6, 1),
    )
    assert await drain(store, utc(2026, 6, 1, 0, 3)) == []  # no node until 00:03
    assert await history(store) == [
        ("skipped", utc(2026, 6, 1, 0, 0, 5), utc(2026, 6, 1, 0, 0, 10), 2,
         "missed: later than its misfire_grace of 60 s (1 min)"),
    ]  # fmt: skip
    assert job_row(db, "window")["status"] == "completed"


async def test_an_every_job_set_going_again_stays_on_its_grid(store: Store, db: Any) -> None:
    """Raising max_runs (or extending not_after) of a completed @every job keeps its grid: the
    next occurrence is the first of the stored anchor's after now, not now itself (the ninth
    trial saw runs at .02 s and then .61 s past the second of a 2 s grid)."""
    created = utc(2026, 6, 1) + timedelta(milliseconds=250)
    await add(store, spec("tick", schedule="@every 10s", max_runs=1), now=created)
    assert await drain(store, utc(2026, 6, 1, 0, 0, 10, 300000)) == [
        created + timedelta(seconds=10)
    ]
    assert job_row(db, "tick")["status"] == "completed"
    later = utc(2026, 6, 1, 0, 1, 3)  # 63 s: on no 10 s step of the grid
    await add(store, spec("tick", schedule="@every 10s", max_runs=2), now=later)
    job = job_row(db, "tick")
    assert (job["status"], job["scheduled_for"]) == ("idle", created + timedelta(seconds=70))
    extended = spec("tick", schedule="@every 10s", max_runs=2, not_after="2027-01-01T00:00:00")
    await add(store, extended, now=later)  # the window changed: still the same grid
    assert job_row(db, "tick")["scheduled_for"] == created + timedelta(seconds=70)
