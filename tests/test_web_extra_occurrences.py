"""The API's run control: trigger with a payload, backfill on request, the overlap fields — each
authorised, refused naming the field, and writing nothing when refused."""

from __future__ import annotations

from typing import Any

from pgpulse.core.policy import WebSettings
from pgpulse.db.store import Store
from web_helpers import api_client, make_token

PUBLIC_URL = "https://93.184.215.14/hook"  # a public address literal: no DNS needed


def body(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": "0 * * * *",
        "handler": "http",
        "payload": {"url": PUBLIC_URL},
        **fields,
    }


def extra(db: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = db.execute(
        "SELECT kind, payload FROM pgpulse_occurrences ORDER BY id"
    ).fetchall()
    return rows


async def test_trigger_with_a_payload_is_an_extra_occurrence(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        job = (await client.post("/api/v1/jobs", json=body("hook"))).json()
        payload = {"url": PUBLIC_URL, "method": "POST"}
        done = await client.post(f"/api/v1/jobs/{job['id']}/trigger", json={"payload": payload})
        assert done.status_code == 200, done.text
        assert (
            done.json()["run_id"]
            == db.execute("SELECT id FROM pgpulse_occurrences").fetchone()["id"]
        )
        assert done.json()["job"]["scheduled_for"] == job["scheduled_for"]  # schedule untouched
        bad = await client.post(f"/api/v1/jobs/{job['id']}/trigger", json={"payload": {"x": 1}})
        assert bad.status_code == 422
        assert bad.json()["error"]["field"] == "payload.x"  # the http validator names it
        # the URL a trigger gives is checked as a definition's (a loopback target is refused)
        private = await client.post(
            f"/api/v1/jobs/{job['id']}/trigger",
            json={"payload": {"url": "http://127.0.0.1:5432/x"}},
        )
        assert (private.status_code, private.json()["error"]["field"]) == (422, "payload.url")
        assert "loopback" in private.json()["error"]["message"]
    assert extra(db) == [{"kind": "trigger", "payload": payload}]


async def test_a_shell_jobs_payload_needs_shell_rights(store: Store, db: Any) -> None:
    admin = await make_token(store, admin=True)
    tenant = await make_token(store, "default")
    shell = WebSettings(allow_shell_jobs=True)
    async with api_client(store, admin, shell) as client:
        created = await client.post(
            "/api/v1/jobs",
            json={"name": "sh", "schedule": "@hourly", "handler": "shell",
                  "payload": {"command": "true"}},
        )  # fmt: skip
        assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    async with api_client(store, tenant, shell) as client:
        refused = await client.post(
            f"/api/v1/jobs/{job_id}/trigger", json={"payload": {"command": "rm -rf /"}}
        )
    assert refused.status_code == 403
    assert (refused.json()["error"]["field"], refused.json()["error"]["value"]) == (
        "handler",
        "shell",
    )
    assert extra(db) == []


async def test_backfill_through_the_api(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        job = (await client.post("/api/v1/jobs", json=body("hook"))).json()
        h = db.execute("SELECT date_trunc('hour', now()) AS h").fetchone()["h"]
        span = {"from": (h.replace(hour=0)).isoformat(), "to": h.isoformat()}
        dry = await client.post(
            f"/api/v1/jobs/{job['id']}/backfill", json={**span, "dry_run": True}
        )
        assert dry.status_code == 200, dry.text
        plan = dry.json()
        assert plan["batch_id"] is None and plan["dry_run"] is True
        assert len(plan["occurrences"]) == h.hour + 1
        assert all(o["status"] == "missing" and o["selected"] for o in plan["occurrences"])
        assert extra(db) == []
        done = await client.post(
            f"/api/v1/jobs/{job['id']}/backfill", json={**span, "max_concurrency": 3}
        )
        assert done.status_code == 200, done.text
        assert done.json()["batch_id"] is not None
        assert len(extra(db)) == h.hour + 1
        refused = await client.post(
            f"/api/v1/jobs/{job['id']}/backfill", json={"from": span["to"], "to": span["from"]}
        )
    if h.hour:  # at midnight the range is one instant, not reversed
        assert refused.status_code == 422
        assert refused.json()["error"]["field"] == "to"


async def test_overlap_fields_are_stored_shown_and_refused_together(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        created = await client.post(
            "/api/v1/jobs", json=body("hook", overlap="allow", max_concurrency=3)
        )
        assert created.status_code == 201, created.text
        assert (created.json()["overlap"], created.json()["max_concurrency"]) == ("allow", 3)
        refused = await client.post("/api/v1/jobs", json=body("other", max_concurrency=3))
        assert refused.status_code == 422
        assert refused.json()["error"]["field"] == "max_concurrency"
    rows = db.execute("SELECT name, overlap, max_concurrency FROM pgpulse_jobs").fetchall()
    assert rows == [{"name": "hook", "overlap": "allow", "max_concurrency": 3}]
