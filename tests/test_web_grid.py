"""The occurrence grid (pure): each occurrence of the window becomes one cell whose state says
what became of it, whatever rows the history holds."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from helpers import utc
from pgpulse.web.grid import Cell, legend, occurrence_grid, window

CREATED = utc(2026, 3, 2, 0, 10)


def job(**fields: Any) -> dict[str, Any]:
    row = {
        "schedule": "0 * * * *",
        "timezone": "UTC",
        "anchor_at": CREATED,
        "created_at": CREATED,
        "scheduled_for": utc(2026, 3, 2, 11),
        "status": "idle",
    }
    row.update(fields)
    return row


def run(
    run_id: int, at: datetime, outcome: str, *, lag: float | None = 1.0, **fields: Any
) -> dict[str, Any]:
    row = {
        "id": run_id,
        "scheduled_for": at,
        "outcome": outcome,
        "attempts": 1,
        "node_id": "node-a",
        "occurrences": 1,
        "last_scheduled_for": at,
        "started_at": at,
        "finished_at": at,
        "error": None,
        "duration": 0.5,
        "lag": lag,
    }
    row.update(fields)
    return row


def states(cells: list[Cell]) -> list[tuple[int, int, str, int | None, bool]]:
    return [(c.at.hour, c.at.minute, c.state, c.run_id, c.late) for c in cells]


def test_each_occurrence_of_an_hourly_job_is_one_cell_with_what_became_of_it() -> None:
    hour = [utc(2026, 3, 2, h) for h in range(13)]
    runs = [
        run(1, hour[1], "succeeded"),
        run(2, hour[2], "failed", error="exit 3\nmore", attempts=3),
        # one summary row stands for 03:00, 04:00 and 05:00
        run(3, hour[3], "skipped", lag=None, attempts=0, occurrences=3, last_scheduled_for=hour[5]),
        run(4, hour[6], "succeeded", lag=300.0),  # started five minutes late
        run(5, hour[9] + timedelta(minutes=30), "succeeded"),  # an extra, triggered occurrence
        run(6, hour[10], "fenced"),
    ]
    now = utc(2026, 3, 2, 12, 30)
    after = window(job(), now)
    assert after == CREATED  # created less than 7 days ago
    cells = occurrence_grid(job(), runs, after=after, now=now)
    assert states(cells) == [
        (1, 0, "succeeded", 1, False),
        (2, 0, "failed", 2, False),
        (3, 0, "skipped", 3, False),
        (4, 0, "skipped", 3, False),
        (5, 0, "skipped", 3, False),
        (6, 0, "succeeded", 4, True),
        (7, 0, "missed", None, False),  # before the current occurrence, never run
        (8, 0, "missed", None, False),
        (9, 0, "missed", None, False),
        (9, 30, "succeeded", 5, False),
        (10, 0, "fenced", 6, False),
        (11, 0, "late", None, False),  # the current occurrence, 90 min overdue
        (12, 0, "late", None, False),
    ]
    assert cells[1].detail == (
        "2026-03-02 02:00:00 UTC · failed · attempt 3 on node-a · lag 1 s · took 0.5 s · exit 3"
    )
    assert "3 occurrences through 2026-03-02 05:00:00" in cells[2].detail
    assert cells[5].detail.endswith("started late")
    assert legend(cells) == {
        "succeeded": 3,
        "failed": 1,
        "fenced": 1,
        "skipped": 3,
        "late": 2,
        "missed": 3,
    }


def test_the_current_occurrence_is_due_running_retrying_or_paused() -> None:
    noon = utc(2026, 3, 2, 12)
    current = {"scheduled_for": noon}
    due = occurrence_grid(job(**current), [], after=noon - timedelta(seconds=1), now=noon)
    assert states(due) == [(12, 0, "due", None, False)]
    running = occurrence_grid(
        job(**current, status="running"),
        [run(7, noon, "running", finished_at=None, duration=None)],
        after=noon - timedelta(seconds=1),
        now=noon + timedelta(seconds=5),
    )
    assert states(running) == [(12, 0, "running", 7, False)]
    retrying = occurrence_grid(
        job(**current), [run(8, noon, "retrying")], after=noon - timedelta(hours=1), now=noon
    )
    assert states(retrying) == [(12, 0, "retrying", 8, False)]
    paused = occurrence_grid(
        job(scheduled_for=utc(2026, 3, 2, 11), status="paused"),
        [],
        after=utc(2026, 3, 2, 10, 30),
        now=utc(2026, 3, 2, 12, 30),
    )
    assert states(paused) == [(11, 0, "paused", None, False), (12, 0, "paused", None, False)]


def test_a_job_firing_every_second_shows_its_newest_cells_only() -> None:
    now = utc(2026, 3, 2, 12)
    every = job(schedule="@every 1s", created_at=utc(2026, 1, 1), anchor_at=utc(2026, 1, 1))
    after = window(every, now, cells=120)
    assert after == now - timedelta(seconds=119, microseconds=1)
    cells = occurrence_grid(every, [], after=after, now=now, cells=120)
    assert (
        len(cells) == 120
        and cells[-1].at == now
        and cells[0].at == after + timedelta(microseconds=1)
    )
    # a week back at most, however rarely the job fires
    yearly = job(schedule="@yearly", created_at=utc(2020, 1, 1))
    assert window(yearly, now) == now - timedelta(days=7)


def test_an_unreadable_schedule_still_shows_the_recorded_runs() -> None:
    noon = utc(2026, 3, 2, 12)
    broken = job(schedule="not a schedule", scheduled_for=noon)
    cells = occurrence_grid(
        broken, [run(9, noon, "succeeded")], after=window(broken, noon), now=noon
    )
    assert states(cells) == [(12, 0, "succeeded", 9, False)]
