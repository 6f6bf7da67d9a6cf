"""Pause with intent: each resume mode over a pause that covers N occurrences (across the night
London's clocks go forward), a pause that ends by itself, and auto-pause after failed runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from helpers import add, apgpulse, spec, utc
from pgpulse.core.errors import InvalidInput
from pgpulse.db.store import Store
from run_control_helpers import drain, history, job_row

# An hourly job in London, paused at 22:30 UTC on 28 March 2026 and resumed at 03:30 UTC: the
# clocks go forward at 01:00 UTC, so the pause covers the local hours 23:00, 00:00 (GMT), 02:00,
# 03:00 and 04:00 (BST): five occurrences, on the hour in UTC.
PAUSED = utc(2026, 3, 28, 22, 30)
RESUMED = utc(2026, 3, 29, 3, 30)
INSIDE = [utc(2026, 3, 28, 23)] + [utc(2026, 3, 29, h) for h in range(4)]
NEXT = utc(2026, 3, 29, 4)


async def paused_job(store: Store) -> None:
    await add(store, spec("hourly", schedule="0 * * * *", timezone="Europe/London"), now=PAUSED)
    assert (await store.pause_job("default", "hourly", reason="maintenance")).changed
    assert await drain(store, RESUMED) == []  # a paused job is not claimed


async def test_resume_skip_runs_none_of_them_and_records_nothing(store: Store, db: Any) -> None:
    await paused_job(store)
    assert await store.resume_job("default", "hourly", catch_up="skip", now=RESUMED)
    assert await drain(store, RESUMED) == []
    assert await history(store) == []
    job = job_row(db, "hourly")
    assert (job["status"], job["scheduled_for"], job["pause_reason"]) == ("idle", NEXT, None)


async def test_resume_once_runs_the_newest_of_them_once(store: Store, db: Any) -> None:
    await paused_job(store)
    assert await store.resume_job("default", "hourly", catch_up="once", now=RESUMED)
    assert await drain(store, RESUMED) == [INSIDE[-1]]
    reason = "paused: ran once, as a later occurrence"
    assert await history(store) == [
        ("skipped", INSIDE[0], INSIDE[-2], 4, reason),
        ("succeeded", INSIDE[-1], INSIDE[-1], 1, None),
    ]
    assert job_row(db, "hourly")["scheduled_for"] == NEXT


async def test_resume_backfill_runs_each_of_them_oldest_first(store: Store, db: Any) -> None:
    await paused_job(store)  # the job's own catch_up is skip: the resume's mode wins inside
    assert await store.resume_job("default", "hourly", catch_up="backfill", now=RESUMED)
    assert await drain(store, RESUMED) == INSIDE
    assert [row[:2] for row in await history(store)] == [("succeeded", t) for t in INSIDE]
    assert job_row(db, "hourly")["scheduled_for"] == NEXT


async def test_a_resume_with_nothing_inside_the_pause_keeps_the_next_occurrence(
    store: Store, db: Any
) -> None:
    """Found by a new-user trial: once and backfill ran the next, future occurrence at once."""
    for mode in ("once", "backfill"):
        name = f"later-{mode}"
        await add(store, spec(name, schedule="0 * * * *"), now=PAUSED)
        assert (await store.pause_job("default", name, now=PAUSED)).changed
        later = PAUSED + timedelta(minutes=5)  # 22:35: the 23:00 occurrence is still ahead
        assert await store.resume_job("default", name, catch_up=mode, now=later)
        job = job_row(db, name)
        assert (job["status"], job["scheduled_for"], job["next_run_at"]) == (
            "idle",
            INSIDE[0],
            INSIDE[0],
        )
        assert await drain(store, later) == []


async def test_pausing_a_paused_job_again_without_intent_keeps_its_until_and_reason(
    store: Store, db: Any
) -> None:
    until = PAUSED + timedelta(hours=2)
    await add(store, spec("hourly", schedule="0 * * * *"), now=PAUSED)
    assert (
        await store.pause_job("default", "hourly", until=until, reason="deploy", now=PAUSED)
    ).changed
    assert not (await store.pause_job("default", "hourly", now=PAUSED)).changed  # paused already
    job = job_row(db, "hourly")
    assert (job["paused_until"], job["pause_reason"]) == (until, "deploy")
    assert [
        row["action"]
        for row in db.execute("SELECT action FROM pgpulse_job_history ORDER BY id").fetchall()
    ] == ["create", "pause"]


async def test_a_re_pause_sets_what_it_is_given_and_keeps_the_rest(dsn: str, db: Any) -> None:
    """Pausing a paused job with only --until keeps its reason (and with only --reason its
    until); --json says a change was written; the same pause again writes nothing."""
    import json

    shell = ("--handler", "shell", "--payload", '{"command": "true"}')
    created = await apgpulse("job", "create", "hourly", "--schedule", "0 * * * *", *shell, dsn=dsn)
    assert created.returncode == 0, created.stderr
    first = await apgpulse("job", "pause", "hourly", "--until", "2h", "--reason", "maint", dsn=dsn)
    assert first.returncode == 0, first.stderr
    again = await apgpulse("job", "pause", "hourly", "--until", "3h", "--json", dsn=dsn)
    assert again.returncode == 0, again.stderr
    shown = json.loads(again.stdout)
    assert (shown["changed"], shown["pause_reason"]) == (True, "maint")
    job = job_row(db, "hourly")
    assert job["pause_reason"] == "maint" and job["paused_until"] is not None
    later = job["paused_until"]
    same = await apgpulse("job", "pause", "hourly", "--reason", "maint", "--json", dsn=dsn)
    assert json.loads(same.stdout)["changed"] is False
    assert job_row(db, "hourly")["paused_until"] == later  # the until not given is kept


async def test_a_pause_until_ends_by_itself_at_the_leaders_heartbeat(store: Store, db: Any) -> None:
    await add(store, spec("hourly", schedule="0 * * * *", timezone="Europe/London"), now=PAUSED)
    until = RESUMED
    assert (
        await store.pause_job("default", "hourly", until=until, reason="deploy", now=PAUSED)
    ).changed
    job = job_row(db, "hourly")
    assert (job["status"], job["paused_until"], job["pause_reason"]) == ("paused", until, "deploy")
    await store.reap_expired_leases(now=until - timedelta(seconds=1))  # a sweep: not yet
    assert job_row(db, "hourly")["status"] == "paused"
    await store.reap_expired_leases(now=until)
    assert job_row(db, "hourly")["status"] == "idle"
    [resumed, paused, _] = await store.job_history("default", "hourly")  # newest first
    assert (resumed["action"], resumed["source"], resumed["actor"]) == ("resume", "node", "node:?")
    assert resumed["at"] == until
    assert paused["changes"]["pause_reason"] == [None, "deploy"]
    assert (
        len(resumed["changes"]["paused_until"]) == 2
        and resumed["changes"]["paused_until"][1] is None
    )
    assert await drain(store, until) == []
    assert await history(store) == [("skipped", INSIDE[0], INSIDE[-1], 5, "paused")]
    job = job_row(db, "hourly")
    assert (job["scheduled_for"], job["paused_until"], job["pause_reason"]) == (NEXT, None, None)


async def test_pause_refuses_an_until_in_the_past(store: Store, db: Any) -> None:
    await add(store, spec("hourly", schedule="0 * * * *"), now=PAUSED)
    with pytest.raises(InvalidInput) as refused:
        await store.pause_job("default", "hourly", until=PAUSED, now=PAUSED)
    assert refused.value.field == "until"
    with pytest.raises(InvalidInput) as refused:  # a string from the Python API: no traceback
        await store.pause_job("default", "hourly", until="2030-01-01T00:00:00Z")  # type: ignore[arg-type]
    assert (refused.value.field, refused.value.value) == ("until", "2030-01-01T00:00:00Z")
    assert job_row(db, "hourly")["status"] == "idle"
    with pytest.raises(InvalidInput) as refused:
        await store.resume_job("default", "hourly", catch_up="twice")
    assert refused.value.field == "catch_up"


async def test_auto_pause_after_consecutive_failed_runs(store: Store, db: Any) -> None:
    await add(
        store,
        spec("flaky", schedule="*/5 * * * *", max_attempts=1, auto_pause_after=3),
        now=utc(2026, 1, 1),
    )
    for minute in (5, 10):
        await drain(store, utc(2026, 1, 1, 0, minute), fail=True)
    await drain(store, utc(2026, 1, 1, 0, 15))  # a success resets the count
    for minute in (20, 25):
        await drain(store, utc(2026, 1, 1, 0, minute), fail=True)
    assert job_row(db, "flaky")["status"] == "idle"
    await drain(store, utc(2026, 1, 1, 0, 30), fail=True)
    job = job_row(db, "flaky")
    assert (job["status"], job["failures"]) == ("paused", 3)
    assert job["pause_reason"] == "auto-paused after 3 consecutive failed runs"
    assert job["scheduled_for"] == utc(2026, 1, 1, 0, 35)
    [pause, _] = await store.job_history("default", "flaky")  # newest first: the audit trail
    assert (pause["action"], pause["source"], pause["actor"]) == ("pause", "node", "node:node-a")
    assert pause["changes"] == {
        "pause_reason": [None, "auto-paused after 3 consecutive failed runs"]
    }
    assert await drain(store, utc(2026, 1, 1, 0, 35)) == []
    assert await store.resume_job("default", "flaky", now=utc(2026, 1, 1, 0, 36))
    job = job_row(db, "flaky")
    assert (job["status"], job["failures"], job["pause_reason"]) == ("idle", 0, None)


async def test_resume_once_names_the_occurrence_that_runs(store: Store, db: Any, dsn: str) -> None:
    # A 30 s grid paused for an hour, resumed by the command: the line names the newest
    # occurrence inside the pause, and a node then runs that one.
    await add(store, spec("half", schedule="@every 30s"))
    assert (await store.pause_job("default", "half")).changed
    db.execute("UPDATE pgpulse_jobs SET scheduled_for = scheduled_for - interval '1 hour'")
    resumed = await apgpulse("job", "resume", "half", "--catch-up", "once", dsn=dsn)
    assert resumed.returncode == 0, resumed.stderr
    job = job_row(db, "half")
    ran = await drain(store, job["resumed_at"])
    assert len(ran) == 1 and ran[0] > job["scheduled_for"]
    assert (
        resumed.stdout == f"resumed half (once); missed occurrence {ran[0].isoformat()} runs now\n"
    )
