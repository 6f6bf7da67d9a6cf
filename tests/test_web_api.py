"""The JSON API against a real PostgreSQL: tokens, every endpoint, pagination and filters, and
refusals that name the field and value and write nothing."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from pgpulse.core.policy import WebSettings
from pgpulse.db.store import Store
from pgpulse.db.tokens import TokenStore
from web_helpers import LiveServer, api_client, make_token, sync_token

PUBLIC_URL = "https://93.184.215.14/hook"  # a public address literal: no DNS needed


def job_body(name: str, **fields: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "schedule": "0 3 * * *",
        "handler": "http",
        "payload": {"url": PUBLIC_URL},
        "timezone": "Europe/Paris",
    }
    body.update(fields)
    return body


def jobs_in_db(db: Any) -> Any:
    return db.execute(
        "SELECT tenant, name, status, schedule FROM pgpulse_jobs ORDER BY id"
    ).fetchall()


async def test_tokens_are_stored_as_hashes_and_shown_once(store: Store, db: Any) -> None:
    tokens = TokenStore(store.pool)
    secret, row = await tokens.create(tenant="acme", admin=False, label="ci")
    assert secret.startswith("pgp_") and len(secret) == 47
    stored = db.execute("SELECT * FROM pgpulse_api_tokens").fetchone()
    assert bytes(stored["token_sha256"]) == hashlib.sha256(secret.encode()).digest()
    assert stored["prefix"] == secret[:12] == row["prefix"]
    assert secret not in str(stored)  # no column holds the secret
    listed = await tokens.list()
    assert [(t["id"], t["tenant"], t["admin"], t["label"]) for t in listed] == [
        (row["id"], "acme", False, "ci")
    ]
    assert secret not in str(listed)


async def test_every_request_needs_a_live_token_and_revocation_is_immediate(store: Store) -> None:
    token = await make_token(store, "acme")
    async with api_client(store) as anonymous:
        refused = await anonymous.get("/api/v1/jobs")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert refused.json()["error"]["field"] == "authorization"
        forged = await anonymous.get(
            "/api/v1/jobs", headers={"Authorization": "Bearer pgp_" + "x" * 43}
        )
        assert forged.status_code == 401
    async with api_client(store, token) as client:
        assert (await client.get("/api/v1/me")).json() == {
            "token_id": 1,
            "tenant": "acme",
            "admin": False,
        }
        await TokenStore(store.pool).revoke(1)
        after = await client.get("/api/v1/me")
        assert after.status_code == 401
        assert after.json()["error"]["code"] == "unauthorized"


async def test_job_lifecycle(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        created = await client.post("/api/v1/jobs", json=job_body("report"))
        assert created.status_code == 201, created.text
        job = created.json()
        assert (job["tenant"], job["name"], job["status"], job["source"]) == (
            "acme",
            "report",
            "idle",
            "api",
        )
        assert job["schedule_description"] == "at 03:00 (Europe/Paris)"
        # upcoming: five occurrences at 03:00 local, with the zone's offset
        assert len(job["upcoming"]) == 5
        assert all("T03:00:00+0" in t for t in job["upcoming"])
        assert job["scheduled_for"].endswith("Z")
        assert datetime.fromisoformat(job["upcoming"][0]) == datetime.fromisoformat(
            job["scheduled_for"]
        )

        again = await client.post("/api/v1/jobs", json=job_body("report"))
        assert again.status_code == 200 and again.json()["id"] == job["id"]

        shown = await client.get(f"/api/v1/jobs/{job['id']}")
        assert shown.json()["payload"] == {"url": PUBLIC_URL}

        patched = await client.patch(
            f"/api/v1/jobs/{job['id']}", json={"schedule": "@every 90m", "max_attempts": 5}
        )
        assert patched.status_code == 200, patched.text
        assert (
            patched.json()["schedule"],
            patched.json()["max_attempts"],
            patched.json()["schedule_description"],
        ) == ("@every 90m", 5, "every 1 hour 30 minutes")
        assert patched.json()["timezone"] == "Europe/Paris"  # untouched field kept
        unlimited = await client.patch(f"/api/v1/jobs/{job['id']}", json={"timeout": None})
        assert unlimited.status_code == 200 and unlimited.json()["timeout"] is None
        nulled = await client.patch(f"/api/v1/jobs/{job['id']}", json={"schedule": None})
        assert nulled.status_code == 422
        assert (nulled.json()["error"]["field"], nulled.json()["error"]["value"]) == (
            "schedule",
            None,
        )

        paused = await client.post(f"/api/v1/jobs/{job['id']}/pause")
        assert paused.json()["status"] == "paused"
        assert jobs_in_db(db)[0]["status"] == "paused"
        refused = await client.post(f"/api/v1/jobs/{job['id']}/trigger")
        assert refused.status_code == 409
        assert refused.json()["error"] == {
            "code": "conflict",
            "field": "status",
            "value": "paused",
            "message": "job 'report' is paused; only an idle job can be triggered",
        }
        assert (await client.post(f"/api/v1/jobs/{job['id']}/resume")).json()["status"] == "idle"

        triggered = await client.post(f"/api/v1/jobs/{job['id']}/trigger")
        assert triggered.status_code == 200
        occurrence = datetime.fromisoformat(triggered.json()["occurrence"])
        db_now = db.execute("SELECT now() AS now").fetchone()["now"]
        assert timedelta(0) <= db_now - occurrence < timedelta(seconds=5)

        deleted = await client.delete(f"/api/v1/jobs/{job['id']}")
        assert deleted.status_code == 204
        assert jobs_in_db(db) == []
        gone = await client.get(f"/api/v1/jobs/{job['id']}")
        assert gone.status_code == 404


async def test_list_filters_and_keyset_pages(store: Store) -> None:
    admin = await make_token(store, admin=True)
    async with api_client(store, admin) as client:
        for tenant, name in [
            ("acme", "a1"),
            ("acme", "a2"),
            ("acme", "b1"),
            ("globex", "a1"),
            ("globex", "z9"),
        ]:
            response = await client.post("/api/v1/jobs", json=job_body(name, tenant=tenant))
            assert response.status_code == 201
        seen, cursor = [], None
        while True:
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/api/v1/jobs", params=params)).json()
            seen.append([(j["tenant"], j["name"]) for j in page["items"]])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [
            [("acme", "a1"), ("acme", "a2")],
            [("acme", "b1"), ("globex", "a1")],
            [("globex", "z9")],
        ]
        prefixed = (
            await client.get("/api/v1/jobs", params={"name_prefix": "a", "tenant": "acme"})
        ).json()
        assert [j["name"] for j in prefixed["items"]] == ["a1", "a2"]
        await client.post(f"/api/v1/jobs/{prefixed['items'][0]['id']}/pause")
        paused = (await client.get("/api/v1/jobs", params={"status": "paused"})).json()
        assert [(j["tenant"], j["name"]) for j in paused["items"]] == [("acme", "a1")]
        bad = await client.get("/api/v1/jobs", params={"cursor": "not-a-cursor"})
        assert bad.status_code == 422
        assert bad.json()["error"]["field"] == "cursor"


async def _seed_runs(db: Any, job_id: int) -> list[int]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        (base + timedelta(minutes=i), outcome)
        for i, outcome in enumerate(["succeeded", "failed", "succeeded", "skipped"])
    ]
    ids = []
    for at, outcome in rows:
        started = None if outcome == "skipped" else at + timedelta(seconds=2)
        finished = at + timedelta(seconds=5)
        ids.append(
            db.execute(
                "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, node_id, "
                "started_at, finished_at, error, output) VALUES (%s, %s, 1, %s, 'n1', %s, %s, %s, "
                "%s) RETURNING id",
                (
                    job_id,
                    at,
                    outcome,
                    started,
                    finished,
                    "boom" if outcome == "failed" else None,
                    f"out {outcome}",
                ),
            ).fetchone()["id"]
        )
    return ids


async def test_runs_by_job_outcome_time_range_and_one_run(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        job = (await client.post("/api/v1/jobs", json=job_body("etl"))).json()
        ids = await _seed_runs(db, job["id"])
        listed = (await client.get(f"/api/v1/jobs/{job['id']}/runs")).json()
        assert [r["id"] for r in listed["items"]] == ids[::-1]
        assert listed["items"][-1]["lag"] == 2.0 and listed["items"][-1]["duration"] == 3.0
        # the list carries each run's output too (it used to say null)
        assert [r["output"] for r in listed["items"]] == [
            "out skipped",
            "out succeeded",
            "out failed",
            "out succeeded",
        ]
        failed = (await client.get("/api/v1/runs", params={"outcome": "failed"})).json()
        assert [(r["id"], r["error"]) for r in failed["items"]] == [(ids[1], "boom")]
        ranged = (
            await client.get(
                "/api/v1/runs",
                params={
                    "job_id": job["id"],
                    "since": "2026-01-01T00:01:00+00:00",
                    "until": "2026-01-01T01:03:00+01:00",
                },
            )
        ).json()
        assert [r["id"] for r in ranged["items"]] == [ids[2], ids[1]]
        page1 = (await client.get("/api/v1/runs", params={"limit": 3})).json()
        page2 = (
            await client.get("/api/v1/runs", params={"limit": 3, "cursor": page1["next_cursor"]})
        ).json()
        assert [r["id"] for r in page1["items"] + page2["items"]] == ids[::-1]
        assert page2["next_cursor"] is None
        one = (await client.get(f"/api/v1/runs/{ids[1]}")).json()
        assert (one["outcome"], one["output"], one["error"], one["attempts"]) == (
            "failed",
            "out failed",
            "boom",
            1,
        )
        # without an offset: UTC, as the dashboard's filter and a backfill's range
        naive = await client.get(
            "/api/v1/runs",
            params={
                "job_id": job["id"],
                "since": "2026-01-01T00:01:00",
                "until": "2026-01-01T00:03:00",
            },
        )
        assert [r["id"] for r in naive.json()["items"]] == [ids[2], ids[1]]
        stamp = await client.get("/api/v1/runs", params={"since": "1767225600"})
        assert stamp.status_code == 422 and stamp.json()["error"]["field"] == "since"


async def test_a_run_in_progress_is_listed_and_shown_as_running(store: Store, db: Any) -> None:
    """The claim writes no history row (it is written when the attempt ends), yet the API lists
    the attempt running now, under the run id its handler was given."""
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        job = (await client.post("/api/v1/jobs", json=job_body("etl"))).json()
        older = await _seed_runs(db, job["id"])
        assert (await client.post(f"/api/v1/jobs/{job['id']}/trigger")).status_code == 200
        [claimed] = await store.claim_due("n9", list(range(64)), 1, lease=30)
        listed = (await client.get(f"/api/v1/jobs/{job['id']}/runs")).json()
        assert [(r["id"], r["outcome"]) for r in listed["items"]] == [
            (claimed.run_id, "running"),
            *(
                (i, o)
                for i, o in zip(
                    older[::-1], ["skipped", "succeeded", "failed", "succeeded"], strict=True
                )
            ),
        ]
        one = (await client.get(f"/api/v1/runs/{claimed.run_id}")).json()
        assert (one["outcome"], one["node_id"], one["attempts"], one["finished_at"]) == (
            "running",
            "n9",
            1,
            None,
        )
        running = (await client.get("/api/v1/runs", params={"outcome": "running"})).json()
        assert [r["id"] for r in running["items"]] == [claimed.run_id]


async def test_cluster_nodes_shards_and_counts(store: Store) -> None:
    await store.register_node("n1", hostname="h", pid=1, slots=4, handlers=["x"])
    await store.heartbeat("n1", running=1, shards=[0, 1, 2], ttl=10)
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        await client.post("/api/v1/jobs", json=job_body("etl"))
        cluster = (await client.get("/api/v1/cluster")).json()
    [node] = cluster["nodes"]
    assert (node["node_id"], node["alive"], node["shards"], node["running"], node["slots"]) == (
        "n1",
        True,
        [0, 1, 2],
        1,
        4,
    )
    assert node["handlers"] == ["x"]
    assert cluster["shards"]["owners"] == {"0": ["n1"], "1": ["n1"], "2": ["n1"]}
    assert cluster["shards"]["unowned"] == list(range(3, 64))
    assert cluster["leader"] is None
    assert (cluster["jobs"]["total"], cluster["jobs"]["due"]) == (1, 0)


async def test_openapi_document_and_metrics_need_no_token(store: Store) -> None:
    async with api_client(store) as client:
        spec = (await client.get("/api/v1/openapi.json")).json()
        metrics = await client.get("/metrics")
    assert set(spec["paths"]) == {
        "/api/v1/me",
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/plan",
        "/api/v1/jobs/{job_id}/plan",
        "/api/v1/schedule/next",
        "/api/v1/jobs/{job_id}/pause",
        "/api/v1/jobs/{job_id}/resume",
        "/api/v1/jobs/{job_id}/trigger",
        "/api/v1/jobs/{job_id}/skip",
        "/api/v1/jobs/{job_id}/unskip",
        "/api/v1/jobs/{job_id}/backfill",
        "/api/v1/jobs/{job_id}/runs",
        "/api/v1/jobs/{job_id}/history",
        "/api/v1/jobs/{job_id}/why",
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/cluster",
        "/api/v1/notifiers",
        "/api/v1/notifiers/{name}",
        "/api/v1/alert-rules",
        "/api/v1/alert-rules/{rule}",
        "/api/v1/jobs/{job_id}/alert-rules/{rule}",
        "/api/v1/alerts",
        "/api/v1/alerts/{alert_id}/acknowledge",
        "/api/v1/silences",
        "/api/v1/silences/{silence_id}",
        "/api/v1/calendars",
        "/api/v1/calendars/{name}",
        "/api/v1/limits",
        "/api/v1/limits/{key}",
    }
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert metrics.status_code == 200
    assert 'pgpulse_jobs{state="total"} 0.0' in metrics.text


@pytest.mark.parametrize(
    ("body", "field", "value"),
    [
        (job_body("x", timezone="Mars/Olympus"), "timezone", "Mars/Olympus"),
        (job_body("x", schedule="0 0 30 2 *"), "schedule", "0 0 30 2 *"),
        (job_body("x", schedule="@every 99999999d"), "schedule", "@every 99999999d"),
        (job_body("x", catch_up="sometimes"), "catch_up", "sometimes"),
        (job_body("x", handler="nobody.knows"), "handler", "nobody.knows"),
        (job_body("x", payload={"url": "ftp://example.com/"}), "payload.url", "ftp://example.com/"),
        (job_body("x", payload={"url": PUBLIC_URL, "k": ["a\x00b"]}), "payload.k[0]", "a\\u0000b"),
        (job_body("x", payload={"url": PUBLIC_URL, "\ud800": 1}), "payload", "\\ud800"),
        (job_body("x", max_attempts=0), "max_attempts", 0),
        (job_body("x", misfire_grace=0), "misfire_grace", 0),
        (job_body(" padded"), "name", " padded"),
        ({"schedule": "* * * * *", "handler": "http"}, "name", None),
    ],
    ids=[
        "zone",
        "never-fires",
        "interval-past-9999",
        "catch-up",
        "handler",
        "url-scheme",
        "nul",
        "surrogate-key",
        "attempts",
        "misfire-grace-0",
        "name",
        "missing-name",
    ],
)
async def test_refusals_name_the_field_and_value_and_write_nothing(
    store: Store, db: Any, body: dict[str, Any], field: str, value: Any
) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:  # ASCII JSON: escapes lone surrogates
        response = await client.post(
            "/api/v1/jobs", content=json.dumps(body), headers={"content-type": "application/json"}
        )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"], error["value"]) == ("invalid_input", field, value)
    assert jobs_in_db(db) == []


LONE = "bad\udc80text"  # a lone surrogate: JSON can carry it escaped, UTF-8 cannot


@pytest.mark.parametrize(
    "where",
    ["name", "tenant", "schedule", "handler", "timezone", "catch_up", "unknown key", "patch"],
)
async def test_lone_surrogates_in_any_field_are_refused_with_422(
    store: Store, db: Any, where: str
) -> None:
    """Issue 15, item 6: these answered 500 (UnicodeEncodeError rendering the refusal)."""
    admin = await make_token(store, admin=True)
    async with api_client(store, admin) as client:
        if where == "patch":
            made = (await client.post("/api/v1/jobs", json=job_body("x"))).json()
            before = jobs_in_db(db)
            response = await client.patch(
                f"/api/v1/jobs/{made['id']}",
                content=json.dumps({"schedule": "@daily", LONE: 1}),  # ASCII JSON: "\udc80"
                headers={"content-type": "application/json"},
            )
        else:
            before = []
            body = job_body("x")
            if where == "unknown key":
                body[LONE] = 1
            else:
                body[where] = LONE
            response = await client.post(
                "/api/v1/jobs",
                content=json.dumps(body),
                headers={"content-type": "application/json"},
            )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and "\\udc80" in json.dumps(error)
    assert jobs_in_db(db) == before


async def test_malformed_json_and_unknown_fields(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        broken = await client.post(
            "/api/v1/jobs", content=b'{"name": ', headers={"content-type": "application/json"}
        )
        extra = await client.post("/api/v1/jobs", json=job_body("x", owner="me"))
        deep = await client.post(
            "/api/v1/jobs",
            content=b"[" * 5000 + b"]" * 5000,
            headers={"content-type": "application/json"},
        )
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"
    assert extra.status_code == 422 and extra.json()["error"]["field"] == "owner"
    assert 400 <= deep.status_code < 500
    assert jobs_in_db(db) == []


async def test_body_size_limit_is_413_declared_or_streamed(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    settings = WebSettings(max_body_bytes=2048)
    big = job_body("big", payload={"url": PUBLIC_URL, "pad": "x" * 4096})
    async with api_client(store, token, settings) as client:
        declared = await client.post("/api/v1/jobs", json=big)

        async def chunks() -> Any:
            for _ in range(5):
                yield b" " * 1000

        streamed = await client.post(
            "/api/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
        )
        small = await client.post("/api/v1/jobs", json=job_body("small"))
    assert declared.status_code == 413
    assert declared.json()["error"]["code"] == "payload_too_large"
    assert declared.json()["error"]["field"] == "body"
    assert streamed.status_code == 413 and streamed.json()["error"]["value"] == ">2048"
    assert small.status_code == 201
    assert [j["name"] for j in jobs_in_db(db)] == ["small"]


async def test_api_errors_are_json_for_unknown_routes(store: Store) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        missing = await client.get("/api/v1/nothing")
        method = await client.put("/api/v1/jobs")
        huge_id = await client.get(f"/api/v1/jobs/{2**63}")
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "path"
    assert method.status_code == 405
    assert huge_id.status_code == 422 and huge_id.json()["error"]["field"] == "job_id"


async def test_health_answers_with_the_database_clock(store: Store, db: Any) -> None:
    async with api_client(store) as client:
        health = await client.get("/healthz")
    assert health.status_code == 200 and health.json()["ok"] is True
    reported = datetime.fromisoformat(health.json()["db_now"])
    assert abs(db.execute("SELECT now() AS now").fetchone()["now"] - reported) < timedelta(
        seconds=5
    )


#: Every number field of the API's request bodies: (method, path, field, the rest of the body).
#: ``{job}`` is the job's id. An integer field refuses 2.5 too.
NUMBER_FIELDS = [
    *[
        (method, path, field, rest)
        for method, path, rest in [
            ("POST", "/api/v1/jobs", job_body("strict.new")),
            ("PATCH", "/api/v1/jobs/{job}", {}),
        ]
        for field in (
            "backfill_limit",
            "misfire_grace",
            "max_attempts",
            "retry_backoff",
            "timeout",
            "max_concurrency",
            "spread",
            "max_runs",
            "auto_pause_after",
            "deadline",
        )
    ],
    (
        "POST",
        "/api/v1/jobs/{job}/backfill",
        "max_concurrency",
        {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "dry_run": True},
    ),
    ("PUT", "/api/v1/alert-rules/failures", "threshold", {"notifiers": ["ops"]}),
    ("PUT", "/api/v1/jobs/{job}/alert-rules/failures", "threshold", {"notifiers": ["ops"]}),
    ("POST", "/api/v1/silences", "seconds", {}),
    ("POST", "/api/v1/silences", "job_id", {"seconds": 60}),
]
INTEGER_FIELDS = {"backfill_limit", "max_attempts", "max_concurrency", "max_runs"}
INTEGER_FIELDS |= {"auto_pause_after", "job_id"}


def test_number_fields_refuse_booleans_and_numeric_strings_over_http(dsn: str, db: Any) -> None:
    """Over a real socket, every number field of every request body refuses JSON true and
    a numeric string (an integer field 2.5 too) with 422 naming the field, as `pgpulse apply`
    refuses them, and nothing is written; a JSON number is still accepted."""
    token = sync_token(dsn, admin=True)
    with (
        LiveServer(dsn, WebSettings()) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}
        ) as http,
    ):
        job = http.post("/api/v1/jobs", json=job_body("strict.job")).json()["id"]
        hook = {"kind": "webhook", "config": {"url": PUBLIC_URL}}
        assert http.put("/api/v1/notifiers/ops", json=hook).status_code == 201
        before = db.execute(
            "SELECT (SELECT json_agg(j ORDER BY id) FROM pgpulse_jobs j) AS jobs, "
            "(SELECT count(*) FROM pgpulse_alert_rules) AS rules, "
            "(SELECT count(*) FROM pgpulse_alert_silences) AS silences"
        ).fetchone()
        for method, path, field, rest in NUMBER_FIELDS:
            bad: list[Any] = [True, "2"] + ([2.5] if field in INTEGER_FIELDS else [])
            for value in bad:
                sent = {**rest, field: value}
                answer = http.request(method, path.format(job=job), json=sent)
                assert answer.status_code == 422, (method, path, sent, answer.text)
                error = answer.json()["error"]
                assert (error["field"], error["value"]) == (field, value), (path, error)
                kind = "whole number" if field in INTEGER_FIELDS else "number"
                assert error["message"] == f"{field} must be a {kind}, got {json.dumps(value)}"
        after = db.execute(
            "SELECT (SELECT json_agg(j ORDER BY id) FROM pgpulse_jobs j) AS jobs, "
            "(SELECT count(*) FROM pgpulse_alert_rules) AS rules, "
            "(SELECT count(*) FROM pgpulse_alert_silences) AS silences"
        ).fetchone()
        assert after == before
        for instant in ({"not_before": 1_700_000_000}, {"not_after": 1.5e9}):  # not epochs
            refused = http.patch(f"/api/v1/jobs/{job}", json=instant)
            assert refused.status_code == 422, refused.text
            [(field, value)] = instant.items()
            assert refused.json()["error"] == {
                "code": "invalid_input",
                "message": f"{field} must be an ISO 8601 instant such as 2026-12-01T10:00:00Z, "
                f"not a number, got {json.dumps(value)}",
                "field": field,
                "value": value,
            }
        whole = http.patch(f"/api/v1/jobs/{job}", json={"max_attempts": 4.0})  # as apply takes
        assert (whole.status_code, whole.json()["max_attempts"]) == (200, 4), whole.text
        patched = http.patch(f"/api/v1/jobs/{job}", json={"timeout": 90, "max_attempts": 2})
        assert patched.status_code == 200, patched.text
        assert (patched.json()["timeout"], patched.json()["max_attempts"]) == (90.0, 2)
        rule = http.put(
            f"/api/v1/jobs/{job}/alert-rules/failures", json={"threshold": 2, "notifiers": ["ops"]}
        )
        assert (rule.status_code, rule.json()["threshold"]) == (200, 2.0)
