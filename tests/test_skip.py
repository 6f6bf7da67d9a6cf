"""Skipping chosen occurrences without pausing the job (``pgpulse job skip`` / ``unskip``): on
the Python API played at fixed instants through the real claim and finish statements, on the
command line as a user types it, and on the HTTP API, with every refusal."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from helpers import add, pgpulse, spec, utc
from pgpulse.core.audit import Actor, cli_actor
from pgpulse.core.errors import InvalidInput
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from run_control_helpers import drain, history, job_row

CREATED = utc(2026, 3, 1, 9, 30)
HOURS = [utc(2026, 3, 1, 10 + k) for k in range(5)]
ALICE = Actor("cli", "os:alice")


async def hourly(store: Store) -> RunControl:
    await add(store, spec("hourly", schedule="0 * * * *"), now=CREATED)
    return RunControl(store.pool)


async def test_the_next_two_are_recorded_skipped_and_the_third_runs(store: Store, db: Any) -> None:
    control = await hourly(store)
    skips = await control.skip("default", "hourly", count=2, reason="migration", actor=ALICE)
    assert [(s.at, s.by, s.reason) for s in skips] == [
        (HOURS[0], "os:alice", "migration"),
        (HOURS[1], "os:alice", "migration"),
    ]
    for hour in HOURS[:3]:
        await drain(store, hour)
    reason = "skipped by os:alice (job skip): migration"
    assert await history(store) == [
        ("skipped", HOURS[0], HOURS[0], 1, reason),
        ("skipped", HOURS[1], HOURS[1], 1, reason),
        ("succeeded", HOURS[2], HOURS[2], 1, None),
    ]
    job = job_row(db, "hourly")
    assert (job["status"], job["scheduled_for"]) == ("idle", HOURS[3])  # never paused
    [entry, _create] = await store.job_history("default", "hourly")
    assert (entry["action"], entry["source"], entry["actor"]) == ("skip", "cli", "os:alice")
    assert entry["changes"]["reason"] == [None, "migration"]
    assert [s["at"] for s in entry["changes"]["skips"][1]] == [
        HOURS[0].isoformat(),
        HOURS[1].isoformat(),
    ]


async def test_one_occurrence_at_an_instant_and_its_undo(store: Store, db: Any) -> None:
    control = await hourly(store)
    # without an offset, in the job's zone (UTC here); listed twice: kept once, first reason
    await control.skip("default", "hourly", at="2026-03-01T12:00:00", reason="first")
    skips = await control.skip("default", "hourly", at=HOURS[2], reason="second", actor=ALICE)
    assert [(s.at, s.reason) for s in skips] == [(HOURS[2], "first")]
    await control.skip("default", "hourly", at=HOURS[3])
    left = await control.unskip("default", "hourly", at=HOURS[2], actor=ALICE)
    assert [s.at for s in left] == [HOURS[3]]
    for hour in HOURS[:4]:
        await drain(store, hour)
    outcomes = [(row[0], row[1]) for row in await history(store)]
    assert outcomes == [
        ("succeeded", HOURS[0]),
        ("succeeded", HOURS[1]),
        ("succeeded", HOURS[2]),
        ("skipped", HOURS[3]),
    ]
    # the occurrences behind the job are dropped at the next write
    assert await control.unskip("default", "hourly") == []
    assert job_row(db, "hourly")["skips"] is None
    actions = [e["action"] for e in await store.job_history("default", "hourly")]
    assert actions == ["unskip", "unskip", "skip", "skip", "create"]  # no write for a no-op


async def test_a_running_occurrence_is_not_reached_the_next_one_is(store: Store, db: Any) -> None:
    control = await hourly(store)
    [claimed] = await store.claim_due("node-a", list(range(64)), 1, lease=30, now=HOURS[0])
    assert claimed.scheduled_for == HOURS[0]
    [skip] = await control.skip("default", "hourly")
    assert skip.at == HOURS[1]
    with pytest.raises(InvalidInput) as refused:
        await control.skip("default", "hourly", at=HOURS[0])
    assert refused.value.field == "at"
    assert str(refused.value) == (
        f"at {HOURS[0].isoformat()} is behind the job's next occurrence that can be skipped "
        f"({HOURS[1].isoformat()})"
    )


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"count": 0}, "next", "next 0 is not a count from 1 to 100"),
        ({"count": 101}, "next", "next 101 is not a count from 1 to 100"),
        (
            {"count": 1, "at": HOURS[1]},
            "next",
            "give either next (how many occurrences from the next one) or at (one occurrence)",
        ),
        (
            {"at": HOURS[1] + timedelta(minutes=30)},
            "at",
            f"at {(HOURS[1] + timedelta(minutes=30)).isoformat()} is not an occurrence of the "
            f"schedule '0 * * * *' (the next one from there is {HOURS[2].isoformat()})",
        ),
        ({"at": "tomorrow"}, "at", None),
        ({"count": 1, "reason": "x" * 501}, "reason", "reason has 501 characters; at most 500"),
    ],
)
async def test_refusals_name_the_field_and_write_nothing(
    store: Store, db: Any, kwargs: dict[str, Any], field: str, message: str | None
) -> None:
    control = await hourly(store)
    with pytest.raises(InvalidInput) as refused:
        await control.skip("default", "hourly", **kwargs)
    assert refused.value.field == field
    if message is not None:
        assert str(refused.value) == message
    assert job_row(db, "hourly")["skips"] is None
    assert [e["action"] for e in await store.job_history("default", "hourly")] == ["create"]


async def test_more_than_a_hundred_listed_is_refused(store: Store, db: Any) -> None:
    control = await hourly(store)
    await control.skip("default", "hourly", count=100)
    with pytest.raises(InvalidInput) as refused:
        await control.skip("default", "hourly", at=HOURS[0] + timedelta(hours=100))
    assert refused.value.field == "skips"
    assert len(job_row(db, "hourly")["skips"]) == 100


async def test_a_skip_computed_before_an_edit_of_the_schedule_is_computed_again(
    store: Store, db: Any
) -> None:
    control = await hourly(store)
    job = job_row(db, "hourly")
    # a write prepared from the old schedule is refused by the statement (found = 0) ...
    await add(store, spec("hourly", schedule="30 * * * *"), now=CREATED)
    async with store.pool.connection() as conn:
        from pgpulse.sql import QUERIES

        cur = await conn.execute(
            QUERIES["set_skips"],
            {
                "job_id": job["id"],
                "old": None,
                "skips": None,
                "schedule": job["schedule"],
                "timezone": job["timezone"],
                "anchor_at": job["anchor_at"],
                "action": "skip",
                "source": "python",
                "actor": "python",
                "reason": None,
            },
        )
        assert await cur.fetchone() == {"found": 0, "written": 0}
    # ... and the method reads the job again: the occurrence is the new schedule's
    [skip] = await control.skip("default", "hourly")
    assert skip.at == utc(2026, 3, 1, 9, 30) + timedelta(hours=1)


def test_the_commands_as_a_user_types_them(dsn: str, db: Any) -> None:
    done = pgpulse(
        "job", "create", "nightly", "--schedule", "0 3 * * *", "--handler", "shell",
        "--payload", '{"command": "true"}', dsn=dsn,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first = job_row(db, "nightly")["scheduled_for"]
    done = pgpulse("job", "skip", "nightly", "--next", "2", "--reason", "freeze", dsn=dsn)
    assert done.returncode == 0, done.stderr
    user = cli_actor().name  # the command's own actor: os:<user>
    assert done.stdout.splitlines() == [
        "nightly: 2 occurrences listed to skip:",
        f"  {first.isoformat()} by {user} (freeze)",
        f"  {(first + timedelta(days=1)).isoformat()} by {user} (freeze)",
    ]
    shown = pgpulse("job", "show", "nightly", dsn=dsn)
    assert f"  skips           {first.isoformat()} (by {user}) and 1 more" in shown.stdout
    done = pgpulse("job", "unskip", "nightly", "--at", first.isoformat(), "--json", dsn=dsn)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert [s["at"] for s in shown["skips"]] == [(first + timedelta(days=1)).isoformat()]
    for args, needle in [
        (["--next", "0"], "--next"),
        (["--at", "2020-01-01T03:00:00"], "--at: 2020-01-01T03:00:00+00:00 is behind"),
        (["--at", "not-a-time"], "--at: 'not-a-time' is not an instant"),
    ]:
        refused = pgpulse("job", "skip", "nightly", *args, dsn=dsn)
        assert refused.returncode == 2, refused.stdout
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert needle in refused.stderr
    refused = pgpulse("job", "skip", "nope", dsn=dsn)
    assert refused.returncode != 0 and "nope" in refused.stderr
    assert len(job_row(db, "nightly")["skips"]) == 1


async def test_the_http_api_skips_within_the_tokens_tenant(store: Store, db: Any) -> None:
    from web_helpers import api_client, make_token

    acme = await make_token(store, "acme")
    other = await make_token(store, "other")
    job = {"name": "nightly", "schedule": "0 3 * * *", "handler": "http",
           "payload": {"url": "https://93.184.215.14/hook"}}  # fmt: skip
    async with api_client(store, acme) as api:
        made = await api.post("/api/v1/jobs", json=job)
        assert made.status_code == 201, made.text
        job_id, first = made.json()["id"], made.json()["scheduled_for"]
        done = await api.post(f"/api/v1/jobs/{job_id}/skip", json={"next": 2, "reason": "freeze"})
        assert done.status_code == 200, done.text
        listed = done.json()["skips"]
        assert [s["reason"] for s in listed] == ["freeze", "freeze"]
        assert listed[0]["by"].startswith("token:")
        assert listed[0]["at"] == first
        bad = await api.post(f"/api/v1/jobs/{job_id}/skip", json={"next": 0})
        assert bad.status_code == 422
        off = await api.post(f"/api/v1/jobs/{job_id}/skip", json={"at": "2099-01-01T03:30:00Z"})
        assert off.status_code == 422 and off.json()["error"]["field"] == "at"
        undone = await api.post(f"/api/v1/jobs/{job_id}/unskip", json={})
        assert undone.status_code == 200 and undone.json()["skips"] == []
        again = await api.post(f"/api/v1/jobs/{job_id}/skip")  # no body: the next one
        assert [s["at"] for s in again.json()["skips"]] == [first]
        trail = await api.get(f"/api/v1/jobs/{job_id}/history")
        assert trail.status_code == 200, trail.text
        assert [e["action"] for e in trail.json()["items"]][:3] == ["skip", "unskip", "skip"]
    async with api_client(store, other) as api:
        hidden = await api.post(f"/api/v1/jobs/{job_id}/skip", json={"next": 1})
        assert hidden.status_code == 404
        hidden = await api.post(f"/api/v1/jobs/{job_id}/unskip")
        assert hidden.status_code == 404
    assert len(job_row(db, "nightly")["skips"]) == 1
    actions = [e["action"] for e in await store.job_history("acme", "nightly")]
    assert actions == ["skip", "unskip", "skip", "create"]
