"""Exclusion calendars attached to jobs: stored, judged by the job's local date, recorded as
skipped with the reason ``calendar NAME``; refused when unknown; and the CLI."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from helpers import add, pgpulse, spec, utc
from pgpulse.core.access import token_writer
from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.errors import Forbidden, InvalidInput
from pgpulse.db.store import Store
from run_control_helpers import drain, history, job_row


async def test_an_excluded_local_date_is_skipped_with_the_calendars_name(
    store: Store, db: Any
) -> None:
    await store.put_calendar("default", ExclusionCalendar.create("xmas", dates=["2026-12-25"]))
    # every 6 hours in New York (UTC-5): local 00:00, 06:00, 12:00, 18:00
    await add(
        store,
        spec("feed", schedule="0 */6 * * *", timezone="America/New_York", calendars=["xmas"]),
        now=utc(2026, 12, 24, 23, 30),
    )
    ran: list[Any] = []
    for hours in range(0, 30, 6):  # the node is up at each occurrence (05:00 UTC = 00:00 local)
        await drain(store, utc(2026, 12, 25, 5) + timedelta(hours=hours), seen=ran)
    # 25 December local: 05:00, 11:00, 17:00, 23:00 UTC, one summary row; 26 Dec 00:00 runs
    assert ran == [utc(2026, 12, 26, 5)]
    assert await history(store) == [
        ("skipped", utc(2026, 12, 25, 5), utc(2026, 12, 25, 23), 4, "calendar xmas"),
        ("succeeded", utc(2026, 12, 26, 5), utc(2026, 12, 26, 5), 1, None),
    ]


async def test_public_holidays_are_judged_by_the_jobs_local_date(store: Store, db: Any) -> None:
    # 4 July 2026 is a Saturday: the observed US holiday is Friday 3 July. 23:30 in New York on
    # 3 July is already 4 July in UTC (03:30), and still excluded; 2 July's is not.
    await store.put_calendar("default", ExclusionCalendar.create("us", country="US"))
    await add(
        store,
        spec("close", schedule="30 23 * * *", timezone="America/New_York", calendars=["us"]),
        now=utc(2026, 7, 1),
    )
    ran = await drain(store, utc(2026, 7, 3, 3, 30, 1))
    ran += await drain(store, utc(2026, 7, 4, 3, 30, 1))
    assert ran == [utc(2026, 7, 3, 3, 30)]
    assert (await history(store))[-1] == (
        "skipped",
        utc(2026, 7, 4, 3, 30),
        utc(2026, 7, 4, 3, 30),
        1,
        "calendar us",
    )
    assert job_row(db, "close")["scheduled_for"] == utc(2026, 7, 5, 3, 30)


async def test_an_unknown_calendar_is_refused_and_nothing_is_written(store: Store, db: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        await add(store, spec("a"), spec("b", calendars=["nope"]))
    assert (refused.value.field, refused.value.value) == ("calendars", "nope")
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0


async def test_a_calendar_in_use_is_not_deleted(store: Store, db: Any) -> None:
    await store.put_calendar("default", ExclusionCalendar.create("off", dates=["2026-01-01"]))
    await add(store, spec("a", calendars=["off"]))
    with pytest.raises(InvalidInput, match="in use by job a: remove it from it first"):
        await store.delete_calendar("default", "off")
    await add(store, spec("b", calendars=["off"]))
    with pytest.raises(InvalidInput, match="in use by jobs a, b: remove it from them first"):
        await store.delete_calendar("default", "off")
    await store.delete_job("default", "b")
    await store.delete_job("default", "a")
    await store.delete_calendar("default", "off")
    assert await store.list_calendars() == []


async def test_a_tenant_token_may_not_write_another_tenants_calendar(store: Store) -> None:
    writer = token_writer(7, "acme", admin=False, shell_allowed=False)
    cal = ExclusionCalendar.create("off", dates=["2026-01-01"])
    with pytest.raises(Forbidden):
        await store.put_calendar("other", cal, writer=writer)
    assert await store.put_calendar("acme", cal, writer=writer)


def test_calendar_commands_and_job_options_from_the_command_line(dsn: str) -> None:
    made = pgpulse(
        "calendar",
        "set",
        "plant",
        "--date",
        "2026-08-03",
        "--country",
        "DE",
        "--subdivision",
        "BY",
        dsn=dsn,
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "created calendar plant: public holidays of DE-BY and 1 more date"
    listed = pgpulse("calendar", "list", "--json", dsn=dsn)
    assert '"plant"' in listed.stdout and '"2026-08-03"' in listed.stdout
    table = pgpulse("calendar", "list", dsn=dsn).stdout.splitlines()
    assert table[2].split() == ["plant", "2026-08-03", "DE", "BY"]  # no Python reprs
    refused = pgpulse(
        "job",
        "create",
        "x",
        "--schedule",
        "0 6 * * *",
        "--handler",
        "shell",
        "--payload",
        '{"command": "true"}',
        "--calendar",
        "nope",
        dsn=dsn,
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "calendar 'nope'" in refused.stderr
    created = pgpulse(
        "job",
        "create",
        "x",
        "--schedule",
        "0 6 * * *",
        "--handler",
        "shell",
        "--payload",
        '{"command": "true"}',
        "--calendar",
        "plant",
        "--spread",
        "30",
        "--max-runs",
        "5",
        "--not-after",
        "2027-01-01T00:00:00",
        dsn=dsn,
    )
    assert created.returncode == 0, created.stderr
    busy = pgpulse("calendar", "delete", "plant", dsn=dsn)
    assert busy.returncode == 2 and "in use by job x:" in busy.stderr
    paused = pgpulse(
        "job",
        "pause",
        "x",
        "--until",
        "2099-01-01T00:00:00+00:00",
        "--reason",
        "plant closed",
        dsn=dsn,
    )
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == "paused x until 2099-01-01T00:00:00+00:00 (plant closed)"
    shown = pgpulse("job", "list", "--json", dsn=dsn)
    assert '"plant closed"' in shown.stdout
    listing = pgpulse("job", "list", dsn=dsn).stdout  # the pause's end, as job show says it
    assert "paused until 2099-01-01T00:00:00+00:00" in listing and "plant closed" in listing
    show = pgpulse("job", "show", "x", dsn=dsn).stdout
    assert "paused until 2099-01-01T00:00:00+00:00: plant closed" in show
    assert "max runs" in show and "5 (0 done)" in show and "plant" in show
    resumed = pgpulse("job", "resume", "x", "--catch-up", "once", dsn=dsn)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("resumed x (once); next occurrence ")
    bad = pgpulse("job", "pause", "x", "--until", "yesterday", dsn=dsn)
    assert bad.returncode == 2 and bad.stderr.startswith(
        "error: invalid value for --until: 'yesterday' is neither a duration (2h, 90m, 1d) nor "
        "an instant"
    )


def test_job_create_says_the_next_occurrence_that_will_run_after_its_calendars(dsn: str) -> None:
    made = pgpulse(
        "calendar", "set", "newyear", "--date", "2030-01-01", "--date", "2030-01-02", dsn=dsn
    )
    assert made.returncode == 0, made.stderr
    create = (
        "job", "create", "daily", "--schedule", "0 6 * * *", "--handler", "shell",
        "--payload", '{"command": "true"}', "--not-before", "2030-01-01T00:00:00+00:00",
    )  # fmt: skip
    plain = pgpulse(*create, dsn=dsn)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[0].endswith("; next occurrence 2030-01-01T06:00:00+00:00")
    skipped = pgpulse(*create, "--calendar", "newyear", dsn=dsn)
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.splitlines()[0].endswith(
        "; next occurrence 2030-01-03T06:00:00+00:00 (calendar newyear skips the ones from "
        "2030-01-01T06:00:00+00:00 until then)"
    )
    ended = pgpulse(*create, "--calendar", "newyear", "--not-after", "2030-01-02T12:00", dsn=dsn)
    assert ended.returncode == 0, ended.stderr
    assert ended.stdout.splitlines()[0].endswith(
        "; no occurrence will run: calendar newyear skips every one from "
        "2030-01-01T06:00:00+00:00 to its not_after 2030-01-02T12:00:00+00:00"
    )
