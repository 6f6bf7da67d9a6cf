"""What a change does to the next 30 days (pure, :mod:`pgpulse.core.month_diff`): occurrences
added and removed, and what a catch-up or window change does to those already due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.jobs import JobSpec
from pgpulse.core.month_diff import (
    LIMIT,
    Pending,
    format_month_diff,
    month_diff,
    month_document,
)

NOW = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)


def job(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {"schedule": "0 3 * * *", "handler": "shell"} | fields
    return JobSpec.create(name="nightly", payload={"command": "x"}, **values)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_a_moved_daily_time_adds_and_removes_thirty() -> None:
    diff = month_diff("update", job(), job(schedule="0 4 * * *"), now=NOW)
    assert (diff.added, diff.removed) == (30, 30)
    assert diff.first_added == (utc(2026, 12, 7, 4), utc(2026, 12, 8, 4), utc(2026, 12, 9, 4))
    assert diff.first_removed == (utc(2026, 12, 7, 3), utc(2026, 12, 8, 3), utc(2026, 12, 9, 3))
    assert diff.pending is None
    assert format_month_diff(diff) == [
        "~ nightly: +30 -30",
        "    added: 2026-12-07 04:00:00Z, 2026-12-08 04:00:00Z, 2026-12-09 04:00:00Z, ...",
        "    removed: 2026-12-07 03:00:00Z, 2026-12-08 03:00:00Z, 2026-12-09 03:00:00Z, ...",
    ]


def test_weekdays_only_removes_the_weekends() -> None:
    diff = month_diff("update", job(), job(schedule="0 3 * * 1-5"), now=NOW)
    # 2026-12-06 is a Sunday: the 30 days from it hold 4 Saturdays and 4 Sundays after today
    assert (diff.added, diff.removed) == (0, 8)
    assert diff.first_removed == (utc(2026, 12, 12, 3), utc(2026, 12, 13, 3), utc(2026, 12, 19, 3))


def test_a_zone_change_moves_every_occurrence() -> None:
    diff = month_diff("update", job(), job(timezone="Europe/Berlin"), now=NOW)
    assert (diff.added, diff.removed) == (30, 30)
    assert diff.first_added[0] == utc(2026, 12, 7, 2)  # 03:00 CET


def test_created_and_deleted_jobs() -> None:
    created = month_diff("create", None, job(schedule="@hourly"), now=NOW)
    assert (created.added, created.removed) == (720, 0)
    deleted = month_diff("delete", job(), None, now=NOW)
    assert (deleted.added, deleted.removed) == (0, 30)
    assert format_month_diff(deleted)[0] == "- nightly: +0 -30"


def test_a_window_and_a_calendar_remove_occurrences() -> None:
    ended = month_diff("update", job(), job(not_after="2026-12-16T00:00:00+00:00"), now=NOW)
    assert (ended.added, ended.removed) == (0, 21)  # 16 December to 5 January
    assert ended.first_removed[0] == utc(2026, 12, 16, 3)
    xmas = ExclusionCalendar.create("xmas", dates=["2026-12-25", "2026-12-26"])
    off = month_diff(
        "update",
        job(),
        job(calendars=["xmas"]),
        now=NOW,
        calendars={("default", "xmas"): xmas},
    )
    assert (off.added, off.removed) == (0, 2)
    assert off.first_removed == (utc(2026, 12, 25, 3), utc(2026, 12, 26, 3))


def test_a_dense_schedule_is_compared_up_to_the_limit() -> None:
    diff = month_diff("update", job(schedule="* * * * * *"), job(schedule="*/2 * * * * *"), now=NOW)
    assert diff.end == NOW + timedelta(seconds=LIMIT)
    assert (diff.added, diff.removed) == (0, LIMIT // 2)
    assert "more than 20,000 occurrences" in format_month_diff(diff)[0]


def test_a_catch_up_change_says_what_runs_of_the_occurrences_due() -> None:
    # held since 3 days ago at 03:00: 4 occurrences due (3, 4, 5, 6 December at 03:00)
    pending = Pending(utc(2026, 12, 3, 3), status="paused")
    diff = month_diff("update", job(), job(catch_up="backfill"), now=NOW, pending=pending)
    effect = diff.pending
    assert effect is not None
    assert (effect.due, effect.first, effect.last) == (4, utc(2026, 12, 3, 3), utc(2026, 12, 6, 3))
    assert (effect.runs_before, effect.skipped_before) == (0, 4)  # all past their grace
    assert (effect.runs_after, effect.skipped_after) == (4, 0)
    assert not effect.restart
    assert (diff.added, diff.removed) == (0, 0)
    assert format_month_diff(diff)[-1] == (
        "    pending: 4 occurrences due (2026-12-03 03:00:00Z to 2026-12-06 03:00:00Z): now 0 "
        "run, 4 skipped; after the change 4 run, 0 skipped"
    )
    coalesce = month_diff("update", job(), job(catch_up="coalesce"), now=NOW, pending=pending)
    assert coalesce.pending is not None
    assert (coalesce.pending.runs_after, coalesce.pending.skipped_after) == (1, 3)


def test_a_window_change_restarts_and_drops_the_occurrences_due() -> None:
    pending = Pending(utc(2026, 12, 5, 3))
    new = job(not_before="2026-12-10T00:00:00+00:00")
    diff = month_diff("update", job(), new, now=NOW, pending=pending)
    effect = diff.pending
    assert effect is not None and effect.restart
    assert (effect.due, effect.runs_before, effect.runs_after) == (2, 0, 0)
    assert effect.held_after == utc(2026, 12, 10, 3)
    assert (diff.added, diff.removed) == (0, 3)  # 7, 8 and 9 December
    assert (
        "after the change none runs: the job restarts at 2026-12-10 03:00:00Z"
        in (format_month_diff(diff)[-1])
    )
    document = month_document(diff)
    assert document["pending"] == {
        "due": 2,
        "first": "2026-12-05T03:00:00+00:00",
        "last": "2026-12-06T03:00:00+00:00",
        "before": {"runs": 0, "skipped": 2},
        "after": {"runs": 0, "skipped": 0},
        "restart": True,
        "held_after": "2026-12-10T03:00:00+00:00",
    }
    assert document["removed"] == 3 and document["added"] == 0


def test_nothing_due_no_pending_effect() -> None:
    pending = Pending(utc(2026, 12, 7, 3))
    diff = month_diff("update", job(), job(catch_up="backfill"), now=NOW, pending=pending)
    assert diff.pending is None


def test_an_interval_keeps_its_grid_when_its_schedule_stays() -> None:
    anchor = utc(2026, 12, 6, 9, 59, 30)
    pending = Pending(utc(2026, 12, 6, 10, 4, 30), anchor=anchor)
    old = job(schedule="@every 5m")
    diff = month_diff("update", old, job(schedule="@every 5m", spread=60), now=NOW, pending=pending)
    assert (diff.added, diff.removed) == (0, 0)
    moved = month_diff("update", old, job(schedule="@every 10m"), now=NOW, pending=pending)
    assert moved.first_added[0] == utc(2026, 12, 6, 10, 10)  # a new grid from now
    # the old grid (:04:30, :09:30...) and the new one (:10:00, :20:00...) never meet
    assert (moved.added, moved.removed) == (30 * 144, 30 * 288)
