"""The API's security rules against a real PostgreSQL: tenant isolation on every endpoint,
shell jobs only for admin tokens on an opted-in server, http jobs only to allowed targets."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pgpulse.core.errors import InvalidInput
from pgpulse.core.policy import HttpAllowList, WebSettings
from pgpulse.db.store import Store
from web_helpers import LiveServer, api_client, make_token, sync_token

PUBLIC_URL = "https://93.184.215.14/hook"
SHELL = {
    "name": "backup",
    "schedule": "0 3 * * *",
    "handler": "shell",
    "payload": {"command": "echo backup"},
}


def http_job(name: str, url: str = PUBLIC_URL, **payload: Any) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": "0 3 * * *",
        "handler": "http",
        "payload": {"url": url, **payload},
    }


def snapshot(db: Any) -> Any:
    return db.execute(
        "SELECT j.*, (SELECT count(*) FROM pgpulse_runs) AS runs FROM pgpulse_jobs j ORDER BY id"
    ).fetchall()


def not_found(kind: str, ident: int) -> dict[str, Any]:
    return {
        "error": {
            "code": "not_found",
            "message": f"no {kind} with id {ident}",
            "field": f"{kind}_id",
            "value": ident,
        }
    }


async def test_another_tenants_job_is_exactly_a_missing_job_on_every_endpoint(
    store: Store, db: Any
) -> None:
    acme, globex = await make_token(store, "acme"), await make_token(store, "globex")
    async with api_client(store, acme) as client:
        job = (await client.post("/api/v1/jobs", json=http_job("payroll"))).json()
    run_id = db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, outcome) VALUES "
        "(%s, now(), 'succeeded') RETURNING id",
        (job["id"],),
    ).fetchone()["id"]
    before = snapshot(db)
    missing_job, missing_run = job["id"] + 1000, run_id + 1000
    calls = [
        ("GET", "/api/v1/jobs/{}", None),
        ("PATCH", "/api/v1/jobs/{}", {"max_attempts": 9}),
        ("DELETE", "/api/v1/jobs/{}", None),
        ("POST", "/api/v1/jobs/{}/pause", None),
        ("POST", "/api/v1/jobs/{}/resume", None),
        ("POST", "/api/v1/jobs/{}/trigger", None),
        ("GET", "/api/v1/jobs/{}/runs", None),
    ]
    async with api_client(store, globex) as intruder:
        for method, path, body in calls:
            theirs = await intruder.request(method, path.format(job["id"]), json=body)
            nobodys = await intruder.request(method, path.format(missing_job), json=body)
            assert (theirs.status_code, nobodys.status_code) == (404, 404), (method, path)
            assert theirs.json() == not_found("job", job["id"])
            assert nobodys.json() == not_found("job", missing_job)
            assert theirs.headers["content-length"] == str(
                len(nobodys.content) + len(str(job["id"])) * 2 - len(str(missing_job)) * 2
            )
        run = await intruder.get(f"/api/v1/runs/{run_id}")
        assert run.status_code == 404 and run.json() == not_found("run", run_id)
        assert (await intruder.get(f"/api/v1/runs/{missing_run}")).json() == not_found(
            "run", missing_run
        )
        assert (await intruder.get("/api/v1/runs")).json() == {"items": [], "next_cursor": None}
        assert (await intruder.get("/api/v1/runs", params={"job_id": job["id"]})).json()[
            "items"
        ] == []
        assert (await intruder.get("/api/v1/jobs")).json()["items"] == []
        assert (await intruder.get("/api/v1/jobs", params={"tenant": "acme"})).json()["items"] == []
        assert (await intruder.get("/api/v1/cluster")).json()["jobs"]["total"] == 0
        hijack = await intruder.post("/api/v1/jobs", json={**http_job("payroll"), "tenant": "acme"})
        assert hijack.status_code == 403
        assert hijack.json()["error"]["field"] == "tenant"
        assert hijack.json()["error"]["value"] == "acme"
    assert snapshot(db) == before  # nothing the intruder did changed anything

    admin = await make_token(store, admin=True)
    async with api_client(store, admin) as root:
        assert (await root.get(f"/api/v1/jobs/{job['id']}")).json()["tenant"] == "acme"
        assert (await root.get(f"/api/v1/runs/{run_id}")).status_code == 200
        assert (await root.get("/api/v1/cluster")).json()["jobs"]["total"] == 1


async def test_tenant_token_creates_in_its_own_tenant(store: Store) -> None:
    acme = await make_token(store, "acme")
    async with api_client(store, acme) as client:
        job = (await client.post("/api/v1/jobs", json=http_job("mine"))).json()
    assert job["tenant"] == "acme"


async def test_shell_jobs_need_an_admin_token_and_the_servers_opt_in(store: Store, db: Any) -> None:
    admin, tenant = await make_token(store, admin=True), await make_token(store, "acme")
    async with api_client(store, admin) as root:
        closed = await root.post("/api/v1/jobs", json=SHELL)
    assert closed.status_code == 403
    assert (closed.json()["error"]["field"], closed.json()["error"]["value"]) == (
        "handler",
        "shell",
    )
    assert "--allow-shell-jobs" in closed.json()["error"]["message"]
    opted_in = WebSettings(allow_shell_jobs=True)
    async with api_client(store, tenant, opted_in) as client:
        refused = await client.post("/api/v1/jobs", json=SHELL)
        assert refused.status_code == 403 and "admin" in refused.json()["error"]["message"]
        http = (await client.post("/api/v1/jobs", json=http_job("hook"))).json()
        to_shell = await client.patch(
            f"/api/v1/jobs/{http['id']}", json={"handler": "shell", "payload": {"command": "id"}}
        )
        assert to_shell.status_code == 403
    assert [j["handler"] for j in snapshot(db)] == ["http"]
    async with api_client(store, admin, opted_in) as root:
        created = await root.post("/api/v1/jobs", json={**SHELL, "tenant": "acme"})
        assert created.status_code == 201 and created.json()["handler"] == "shell"
    async with api_client(store, tenant, opted_in) as client:
        changed = await client.patch(
            f"/api/v1/jobs/{created.json()['id']}", json={"payload": {"command": "rm -rf /"}}
        )
        assert changed.status_code == 403
        # operating an admin-made shell job (no change to what it runs) stays allowed
        assert (await client.post(f"/api/v1/jobs/{created.json()['id']}/pause")).status_code == 200
    assert db.execute("SELECT payload FROM pgpulse_jobs WHERE handler = 'shell'").fetchone()[
        "payload"
    ] == {"command": "echo backup"}


@pytest.mark.parametrize("allow_shell_jobs", [False, True])
async def test_a_tenant_cannot_overwrite_a_shell_job_through_create(
    store: Store, allow_shell_jobs: bool
) -> None:
    """Create is an upsert: POSTing the name of an admin's shell job is a change of it, and
    refused like the PATCH (not answered 200 with the job made an http job)."""
    admin, tenant = await make_token(store, admin=True), await make_token(store, "acme")
    async with api_client(store, admin, WebSettings(allow_shell_jobs=True)) as root:
        made = await root.post("/api/v1/jobs", json={**SHELL, "tenant": "acme"})
        assert made.status_code == 201
    before = await store.get_job("acme", "backup")
    async with api_client(store, tenant, WebSettings(allow_shell_jobs=allow_shell_jobs)) as client:
        for attempt in (http_job("backup"), {**SHELL, "schedule": "* * * * *"}):
            refused = await client.post("/api/v1/jobs", json=attempt)
            assert refused.status_code == 403, refused.json()
            assert refused.json()["error"]["field"] == "handler"
            assert "shell job" in refused.json()["error"]["message"]
        patched = await client.patch(
            f"/api/v1/jobs/{made.json()['id']}",
            json={"handler": "http", "payload": {"url": PUBLIC_URL}},
        )
        assert patched.status_code == 403
        # nor delete it (it could not create it again; an adversarial tester's finding)
        deleted = await client.delete(f"/api/v1/jobs/{made.json()['id']}")
        assert (deleted.status_code, deleted.json()["error"]["field"]) == (403, "handler")
        assert "may not delete them" in deleted.json()["error"]["message"]
        assert await store.get_job("acme", "backup") == before
        # pausing and resuming it stay allowed: not writes of its definition
        assert (await client.post(f"/api/v1/jobs/{made.json()['id']}/pause")).status_code == 200
        assert (await client.post(f"/api/v1/jobs/{made.json()['id']}/resume")).status_code == 200
    async with api_client(store, admin, WebSettings(allow_shell_jobs=True)) as root:
        assert (await root.delete(f"/api/v1/jobs/{made.json()['id']}")).status_code == 204


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://localhost:8080/admin",
        "http://[::1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/",
        "http://10.1.2.3/",
        "http://192.168.0.1/",
        "http://0.0.0.0/",
        "http://2130706433/",
        "http://127.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://does-not-resolve.invalid/",
    ],
    ids=[
        "loopback",
        "localhost",
        "v6-loopback",
        "metadata",
        "v6-link-local",
        "private-10",
        "private-192",
        "unspecified",
        "decimal-loopback",
        "short-loopback",
        "v4-mapped",
        "unresolvable",
    ],
)
async def test_http_jobs_refuse_unlisted_non_public_targets(
    store: Store, db: Any, url: str
) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        response = await client.post("/api/v1/jobs", json=http_job("probe", url))
    assert response.status_code == 422, response.text
    assert (response.json()["error"]["field"], response.json()["error"]["value"]) == (
        "payload.url",
        url,
    )
    assert snapshot(db) == []


async def test_http_allow_list_and_redirects(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    settings = WebSettings(
        http_allow=HttpAllowList.parse(["hooks.internal", "*.corp.example", "10.0.0.0/8", "::1"])
    )
    async with api_client(store, token, settings) as client:
        for name, url in [
            ("a", "http://hooks.internal/run"),
            ("b", "https://ci.corp.example/"),
            ("c", "http://10.9.8.7:8080/"),
            ("d", "http://[::1]:9000/"),
            ("e", PUBLIC_URL),
        ]:
            response = await client.post("/api/v1/jobs", json=http_job(name, url))
            assert response.status_code == 201, (url, response.text)
        still = await client.post("/api/v1/jobs", json=http_job("f", "http://192.168.1.1/"))
        assert still.status_code == 422
        redirecting = await client.post(
            "/api/v1/jobs", json=http_job("g", PUBLIC_URL, follow_redirects=True)
        )
        assert redirecting.status_code == 422
        assert redirecting.json()["error"]["field"] == "payload.follow_redirects"
        listed = await client.post(
            "/api/v1/jobs", json=http_job("h", "http://hooks.internal/", follow_redirects=True)
        )
        assert listed.status_code == 201
    assert [j["name"] for j in snapshot(db)] == ["a", "b", "c", "d", "e", "h"]


def test_allow_list_entries_are_checked() -> None:
    parsed = HttpAllowList.parse(["Hooks.Internal", "*.corp.example", "10.0.0.0/8"])
    assert parsed.allows_name("hooks.internal") and parsed.allows_name("a.b.corp.example")
    assert not parsed.allows_name("corp.example.evil")
    with pytest.raises(InvalidInput, match="http allow-list entry"):
        HttpAllowList.parse(["http://x/"])


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Sec-Fetch-Site": "cross-site"}, 403),
        ({"Sec-Fetch-Site": "same-site"}, 403),  # another port or subdomain of the same site
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Sec-Fetch-Site": "same-origin", "Origin": "http://pulse.test"}, 303),
        ({"Sec-Fetch-Site": "none"}, 303),
        ({"Origin": "http://pulse.test"}, 303),
        ({}, 403),  # every current browser sends Origin on a form post: not from our page
    ],
)
async def test_sign_in_accepts_posts_from_the_dashboards_own_pages_only(
    store: Store, headers: dict[str, str], status: int
) -> None:
    token = await make_token(store, "acme")
    async with api_client(store) as client:
        response = await client.post("/ui/login", data={"token": token}, headers=headers)
        assert response.status_code == status
        assert ("pgpulse_token" in response.cookies) is (status == 303)
        out = await client.post("/ui/logout", headers=headers)
        assert out.status_code == status


def test_sign_in_over_http_needs_the_dashboards_origin(dsn: str) -> None:
    """Over a real socket: a sign-in or sign-out post with neither ``Origin`` nor
    ``Sec-Fetch-Site`` (curl, a script) is 403 and sets no cookie; with the server's own
    ``Origin`` it signs in (303 and the cookie), and signs out."""
    token = sync_token(dsn, "acme")
    with LiveServer(dsn, WebSettings()) as server, httpx.Client(base_url=server.base_url) as http:
        bare = http.post("/ui/login", data={"token": token})
        assert bare.status_code == 403
        assert "set-cookie" not in bare.headers
        assert "did not come from this dashboard" in bare.text
        assert http.post("/ui/logout").status_code == 403
        own = {"Origin": server.base_url}
        signed = http.post("/ui/login", data={"token": token}, headers=own)
        assert signed.status_code == 303 and signed.headers["location"] == "/ui/"
        assert signed.cookies["pgpulse_token"] == token
        out = http.post("/ui/logout", headers=own)
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
