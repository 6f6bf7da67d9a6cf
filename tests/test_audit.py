"""The audit trail: every create, update, pause, resume, trigger and delete of a job is recorded
with the database's instant, source, actor and changed fields, on every path (Python API, CLI,
HTTP API); a run names the revision it ran under; history is pruned with the runs."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from helpers import add, pgpulse, spec
from pgpulse.core.audit import Actor
from pgpulse.db.store import Store
from pgpulse.db.tokens import TokenStore
from web_helpers import api_client

ME = Actor("python", "tester")


async def test_every_change_is_recorded_once_with_old_and_new_values(store: Store) -> None:
    job = spec("nightly", "0 3 * * *", payload={"to": "ops"}, source="api")
    [job_id] = [i for i, _ in await store.upsert_jobs([job], extra_handlers={"noop"}, actor=ME)]
    await store.upsert_jobs([job], extra_handlers={"noop"}, actor=ME)  # the same: no change
    changed = spec("nightly", "5 3 * * *", payload={"to": "dev"}, source="api")
    await store.upsert_jobs([changed], extra_handlers={"noop"}, actor=ME)
    assert (await store.pause_job("default", "nightly", actor=ME)).changed
    assert not (
        await store.pause_job("default", "nightly", actor=ME)
    ).changed  # already paused: no row
    assert await store.resume_job("default", "nightly", actor=ME)
    await store.trigger_job("default", "nightly", actor=Actor("cli", "os:alice"))
    await store.delete_job("default", "nightly", actor=Actor("cli", "os:alice"))

    history = list(reversed(await store.job_history("default", "nightly")))
    assert [(h["action"], h["source"], h["actor"], h["revision"]) for h in history] == [
        ("create", "api", "tester", 1),
        ("update", "api", "tester", 2),
        ("pause", "python", "tester", 2),
        ("resume", "python", "tester", 2),
        ("trigger", "cli", "os:alice", 2),
        ("delete", "cli", "os:alice", 2),
    ]
    assert {h["job_id"] for h in history} == {job_id}
    assert history[0]["changes"]["schedule"] == [None, "0 3 * * *"]
    assert history[1]["changes"] == {
        "schedule": ["0 3 * * *", "5 3 * * *"],
        "payload": [{"to": "ops"}, {"to": "dev"}],
    }
    db_now = await store.db_now()
    assert all(db_now - timedelta(seconds=30) < h["at"] <= db_now for h in history)


async def test_a_run_names_the_revision_it_ran_under(store: Store) -> None:
    [job_id] = await add(store, spec("rev", "@every 1h"))
    async with store.pool.connection() as conn:
        await conn.execute(  # a run that started before the change
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
            "finished_at) VALUES (%s, now() - interval '2 h', 1, 'succeeded', "
            "now() + interval '0 s', now())",
            (job_id,),
        )
    await store.upsert_jobs([spec("rev", "@every 2h")], extra_handlers={"noop"})
    async with store.pool.connection() as conn:
        await conn.execute(  # a run that started after it
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
            "finished_at) VALUES (%s, now() - interval '1 h', 1, 'succeeded', now(), now())",
            (job_id,),
        )
    runs = await store.list_runs(name="rev")
    assert [r["revision"] for r in runs] == [2, 1]


async def test_history_is_pruned_with_the_runs_retention(store: Store) -> None:
    await add(store, spec("old"))
    later = await store.db_now() + timedelta(days=10)
    await store.prune(keep_runs=86400 * 30, now=later)
    assert len(await store.job_history("default", "old")) == 1  # younger than the retention
    await store.prune(keep_runs=86400, now=later)
    assert await store.job_history("default", "old") == []


def test_job_history_on_the_command_line(dsn: str) -> None:
    created = pgpulse(
        "job",
        "create",
        "nightly",
        "--schedule",
        "@daily",
        "--handler",
        "shell",
        "--payload",
        '{"command": "backup"}',
        dsn=dsn,
    )
    assert created.returncode == 0, created.stderr
    assert pgpulse("job", "pause", "nightly", dsn=dsn).returncode == 0
    shown = pgpulse("job", "history", "nightly", "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    import json

    rows: list[dict[str, Any]] = json.loads(shown.stdout)
    assert [(r["action"], r["source"], r["revision"]) for r in rows] == [
        ("pause", "cli", 1),
        ("create", "cli", 1),
    ]
    assert all(r["actor"].startswith("os:") for r in rows)
    assert rows[1]["changes"]["payload"] == [None, {"command": "backup"}]
    missing = pgpulse("job", "history", "nope", dsn=dsn)
    assert missing.returncode == 2
    assert missing.stderr.strip() == "error: no job named 'nope' in tenant 'default'"


async def test_the_api_records_the_token_and_shows_the_history(store: Store) -> None:
    secret, token = await TokenStore(store.pool).create(tenant="acme", admin=False, label="ci")
    async with api_client(store, secret) as client:
        made = await client.post(
            "/api/v1/jobs",
            json={
                "name": "sync",
                "schedule": "@hourly",
                "handler": "http",
                "payload": {"url": "https://93.184.215.14/hook"},
            },
        )
        assert made.status_code == 201, made.text
        job_id = made.json()["id"]
        assert (await client.post(f"/api/v1/jobs/{job_id}/pause")).status_code == 200
        history = await client.get(f"/api/v1/jobs/{job_id}/history")
        other = await client.get("/api/v1/jobs/999999/history")
    assert history.status_code == 200, history.text
    items = history.json()["items"]
    assert [(i["action"], i["source"], i["actor"]) for i in items] == [
        ("pause", "api", f"token:{token['id']} (ci)"),
        ("create", "api", f"token:{token['id']} (ci)"),
    ]
    assert other.status_code == 404


async def test_the_dashboards_job_page_shows_the_changes(store: Store) -> None:
    secret, token = await TokenStore(store.pool).create(tenant=None, admin=True, label="ops")
    await store.upsert_jobs([spec("etl", "@hourly")], extra_handlers={"noop"}, actor=ME)
    await store.upsert_jobs([spec("etl", "@daily")], extra_handlers={"noop"}, actor=ME)
    job_id = (await store.get_job("default", "etl"))["id"]
    async with api_client(store) as client:
        client.cookies.set("pgpulse_token", secret, path="/ui")
        page = await client.get(f"/ui/jobs/{job_id}")
    assert page.status_code == 200, page.text
    assert "<code>python</code>, revision 2" in page.text
    assert 'data-action="update"' in page.text and 'data-action="create"' in page.text
    assert '<code>schedule</code>: "@hourly" → "@daily"' in page.text
    assert token["id"] > 0


def test_a_pause_with_intent_and_a_resume_mode_are_recorded(dsn: str) -> None:
    created = pgpulse(
        "job",
        "create",
        "deploy-check",
        "--schedule",
        "@hourly",
        "--handler",
        "shell",
        "--payload",
        '{"command": "check"}',
        dsn=dsn,
    )
    assert created.returncode == 0, created.stderr
    until = "2030-01-01T00:00:00+00:00"
    for args in (("--until", until, "--reason", "deploy"), ("--reason", "deploy, day 2")):
        paused = pgpulse("job", "pause", "deploy-check", *args, dsn=dsn)
        assert paused.returncode == 0, paused.stderr
    resumed = pgpulse("job", "resume", "deploy-check", "--catch-up", "once", dsn=dsn)
    assert resumed.returncode == 0, resumed.stderr
    shown = pgpulse("job", "history", "deploy-check", "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    import json

    rows: list[dict[str, Any]] = json.loads(shown.stdout)
    assert [(r["action"], r["source"]) for r in rows] == [
        ("resume", "cli"),
        ("pause", "cli"),
        ("pause", "cli"),
        ("create", "cli"),
    ]
    resume, again, first = (r["changes"] for r in rows[:3])
    assert resume == {"resume_mode": [None, "once"]}
    assert again["pause_reason"] == ["deploy", "deploy, day 2"]
    assert first["pause_reason"] == [None, "deploy"]
    assert [None if v is None else datetime.fromisoformat(v) for v in first["paused_until"]] == [
        None,
        datetime.fromisoformat(until),
    ]
    assert "paused_until" not in again  # a re-pause without --until keeps the pause's end
