"""The dashboard's writing pages (pgpulse.web.forms) and their write path: the API's own routes
under /ui/api/v1, signed in by the browser's cookie plus a CSRF value. The same authorisation and
bad-input rules as the API (tenant isolation, shell rights, http targets, one line naming the
field), CSRF on every write, the plan before a save and the schedule preview; against a real
PostgreSQL, in process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from pgpulse.core.audit import SETTABLE_FIELDS
from pgpulse.core.policy import WebSettings
from pgpulse.db.store import Store
from pgpulse.db.tokens import csrf_token
from pgpulse.web.app import create_app
from web_helpers import api_client, make_token

PUBLIC_URL = "https://93.184.215.14/hook"
SHELL = {
    "name": "backup",
    "schedule": "0 3 * * *",
    "handler": "shell",
    "payload": {"command": "echo backup"},
}


def http_job(name: str, url: str = PUBLIC_URL) -> dict[str, Any]:
    return {"name": name, "schedule": "0 3 * * *", "handler": "http", "payload": {"url": url}}


@asynccontextmanager
async def signed_in(
    store: Store, token: str, settings: WebSettings | None = None, *, csrf: str | None = "ok"
) -> AsyncIterator[httpx.AsyncClient]:
    """A browser signed in to the dashboard: the token cookie (scoped to /ui, as sign-in sets
    it) and, unless ``csrf`` is None, the page's CSRF header (``"ok"``: the right value)."""
    app = create_app(store, settings or WebSettings())
    headers = {} if csrf is None else {"X-CSRF-Token": csrf_token(token) if csrf == "ok" else csrf}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://pulse.test", headers=headers
    ) as client:
        client.cookies.set("pgpulse_token", token, domain="pulse.test", path="/ui")
        yield client


def snapshot(db: Any) -> Any:
    return db.execute(
        "SELECT j.*, (SELECT count(*) FROM pgpulse_runs) AS runs, "
        "(SELECT count(*) FROM pgpulse_job_history) AS changes FROM pgpulse_jobs j ORDER BY id"
    ).fetchall()


def refusal(answer: httpx.Response) -> tuple[int, str | None]:
    """The status and the field an error names; the message is one line."""
    error = answer.json()["error"]
    assert "\n" not in error["message"] and error["message"], error
    return answer.status_code, error["field"]


async def test_the_job_form_has_every_settable_field_of_the_model(store: Store) -> None:
    acme = await make_token(store, "acme")
    async with signed_in(store, acme) as browser:
        page = await browser.get("/ui/jobs/new")
        assert page.status_code == 200
        for name in SETTABLE_FIELDS:
            assert f'data-field="{name}"' in page.text, name
        # the model's unit, bounds and help reach the form
        assert 'data-field="max_attempts"' in page.text and 'min="1"' in page.text
        assert "Unit: seconds." in page.text
        assert 'id="schedule-preview"' in page.text
        # a tenant token's tenant is fixed, and not sent
        assert 'data-field="tenant"' not in page.text and 'value="acme" readonly' in page.text
        job = (await browser.post("/ui/api/v1/jobs", json=http_job("payroll"))).json()
        edit = await browser.get(f"/ui/jobs/{job['id']}/edit")
        assert edit.status_code == 200 and 'data-initial="0 3 * * *"' in edit.text
        assert (await browser.get(f"/ui/jobs/{job['id']}/backfill")).status_code == 200
    globex = await make_token(store, "globex")
    async with signed_in(store, globex) as intruder:
        for path in (f"/ui/jobs/{job['id']}/edit", f"/ui/jobs/{job['id']}/backfill"):
            assert (await intruder.get(path)).status_code == 404
    admin = await make_token(store, admin=True)
    async with signed_in(store, admin) as root:
        assert 'data-field="tenant"' in (await root.get("/ui/jobs/new")).text
    async with api_client(store) as anonymous:  # no cookie: the sign-in page
        gone = await anonymous.get("/ui/jobs/new")
        assert (gone.status_code, gone.headers["location"]) == (303, "/ui/login")


async def test_plan_then_save_then_edit_then_backfill(store: Store, db: Any) -> None:
    acme = await make_token(store, "acme")
    body = {**http_job("payroll"), "timezone": "Europe/Paris", "max_attempts": 2}
    async with signed_in(store, acme) as browser:
        plan = await browser.post("/ui/api/v1/plan", json=body)
        assert plan.status_code == 200
        assert plan.json()["action"] == "create" and plan.json()["job_id"] is None
        assert plan.json()["lines"][0] == "+ acme/payroll: create"
        assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
        created = await browser.post("/ui/api/v1/jobs", json=body)
        assert created.status_code == 201 and created.json()["tenant"] == "acme"
        job_id = created.json()["id"]
        again = (await browser.post("/ui/api/v1/plan", json=body)).json()
        assert (again["action"], again["job_id"]) == ("unchanged", job_id)
        change = {"schedule": "30 6 * * 1-5", "max_attempts": 4, "timeout": None}
        planned = (await browser.post(f"/ui/api/v1/jobs/{job_id}/plan", json=change)).json()
        assert planned["action"] == "update"
        assert planned["changes"] == {
            "schedule": ["0 3 * * *", "30 6 * * 1-5"],
            "max_attempts": [2, 4],
            "timeout": [3600.0, None],
        }
        assert "    max_attempts: 2 -> 4" in planned["lines"]
        assert (await store.get_job("acme", "payroll"))["max_attempts"] == 2  # nothing written
        saved = await browser.patch(f"/ui/api/v1/jobs/{job_id}", json=change)
        assert saved.status_code == 200 and saved.json()["schedule"] == "30 6 * * 1-5"
        history = db.execute(
            "SELECT action, source, actor FROM pgpulse_job_history ORDER BY id"
        ).fetchall()
        assert [h["action"] for h in history] == ["create", "update"]
        assert all(h["source"] == "api" and h["actor"].startswith("token:") for h in history)
        dry = await browser.post(
            f"/ui/api/v1/jobs/{job_id}/backfill",
            json={"from": "2026-01-05T00:00:00Z", "to": "2026-01-06T23:59:59Z", "dry_run": True},
        )
        assert dry.status_code == 200, dry.json()
        assert [o["scheduled_for"] for o in dry.json()["occurrences"]] == [
            "2026-01-05T05:30:00Z",
            "2026-01-06T05:30:00Z",
        ]
        assert dry.json()["batch_id"] is None
        assert db.execute("SELECT count(*) AS n FROM pgpulse_runs").fetchone()["n"] == 0
        done = await browser.post(
            f"/ui/api/v1/jobs/{job_id}/backfill",
            json={"from": "2026-01-05T00:00:00Z", "to": "2026-01-06T23:59:59Z"},
        )
        assert done.status_code == 200 and done.json()["batch_id"] is not None
        queued = db.execute(
            "SELECT scheduled_for FROM pgpulse_occurrences WHERE kind = 'backfill' ORDER BY 1"
        ).fetchall()
        assert [r["scheduled_for"].isoformat() for r in queued] == [
            "2026-01-05T05:30:00+00:00",
            "2026-01-06T05:30:00+00:00",
        ]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/ui/api/v1/jobs", http_job("other")),
        ("PATCH", "/ui/api/v1/jobs/{}", {"max_attempts": 9}),
        ("DELETE", "/ui/api/v1/jobs/{}", None),
        ("POST", "/ui/api/v1/jobs/{}/pause", {"reason": "x"}),
        ("POST", "/ui/api/v1/jobs/{}/trigger", None),
        ("POST", "/ui/api/v1/jobs/{}/backfill", {"from": "2026-01-01", "to": "2026-01-02"}),
    ],
    ids=["create", "edit", "delete", "pause", "trigger", "backfill"],
)
@pytest.mark.parametrize("csrf", [None, "0" * 32, "wrong"], ids=["missing", "zeros", "wrong"])
async def test_every_write_needs_the_pages_csrf_value(
    store: Store, db: Any, method: str, path: str, body: Any, csrf: str | None
) -> None:
    acme = await make_token(store, "acme")
    async with signed_in(store, acme) as browser:
        job = (await browser.post("/ui/api/v1/jobs", json=http_job("payroll"))).json()
    before = snapshot(db)
    async with signed_in(store, acme, csrf=csrf) as forged:
        answer = await forged.request(method, path.format(job["id"]), json=body)
        assert refusal(answer) == (403, "csrf")
        assert "X-CSRF-Token" in answer.json()["error"]["message"]
        # a cross-site form post (form-typed body, no header can be set) is refused alike
        form = await forged.post(
            "/ui/api/v1/jobs", content=b"name=x", headers={"Content-Type": "text/plain"}
        )
        assert refusal(form) == (403, "csrf")
        # reads need none
        assert (await forged.get(f"/ui/api/v1/jobs/{job['id']}")).status_code == 200
    assert snapshot(db) == before


async def test_no_cookie_or_a_revoked_token_is_401(store: Store, db: Any) -> None:
    async with api_client(store) as anonymous:
        answer = await anonymous.post("/ui/api/v1/jobs", json=http_job("x"))
        assert refusal(answer) == (401, "authorization")
    async with signed_in(store, "pgp_not_a_token") as stranger:
        assert refusal(await stranger.post("/ui/api/v1/jobs", json=http_job("x"))) == (
            401,
            "authorization",
        )
    acme = await make_token(store, "acme")
    async with signed_in(store, acme, csrf=None) as browser:
        # any Authorization header is the API's way in, never the cookie's (no CSRF check)
        other = await browser.post(
            "/ui/api/v1/jobs", json=http_job("x"), headers={"Authorization": "Basic eDp5"}
        )
        assert refusal(other) == (401, "authorization")
    assert snapshot(db) == []


async def test_tenant_isolation_on_the_dashboards_write_path(store: Store, db: Any) -> None:
    acme, globex = await make_token(store, "acme"), await make_token(store, "globex")
    async with signed_in(store, acme) as browser:
        job = (await browser.post("/ui/api/v1/jobs", json=http_job("payroll"))).json()
    before = snapshot(db)
    async with signed_in(store, globex) as intruder:
        for method, path, body in [
            ("PATCH", "/ui/api/v1/jobs/{}", {"max_attempts": 9}),
            ("POST", "/ui/api/v1/jobs/{}/plan", {"max_attempts": 9}),
            ("POST", "/ui/api/v1/jobs/{}/pause", {"reason": "mine now"}),
            ("POST", "/ui/api/v1/jobs/{}/backfill", {"from": "2026-01-01", "to": "2026-01-02"}),
            ("DELETE", "/ui/api/v1/jobs/{}", None),
        ]:
            theirs = await intruder.request(method, path.format(job["id"]), json=body)
            assert refusal(theirs) == (404, "job_id"), (method, path)
            assert theirs.json()["error"]["message"] == f"no job with id {job['id']}"
        for path in ("/ui/api/v1/jobs", "/ui/api/v1/plan"):
            hijack = await intruder.post(path, json={**http_job("payroll"), "tenant": "acme"})
            assert refusal(hijack) == (403, "tenant"), path
            assert hijack.json()["error"]["value"] == "acme"
    assert snapshot(db) == before


async def test_shell_rights_on_the_dashboards_write_path(store: Store, db: Any) -> None:
    admin, acme = await make_token(store, admin=True), await make_token(store, "acme")
    async with signed_in(store, admin) as root:  # the server did not opt in
        for path in ("/ui/api/v1/plan", "/ui/api/v1/jobs"):
            closed = await root.post(path, json=SHELL)
            assert refusal(closed) == (403, "handler")
            assert "--allow-shell-jobs" in closed.json()["error"]["message"]
    opted_in = WebSettings(allow_shell_jobs=True)
    async with signed_in(store, acme, opted_in) as browser:
        for path in ("/ui/api/v1/plan", "/ui/api/v1/jobs"):
            refused = await browser.post(path, json=SHELL)
            assert (
                refusal(refused) == (403, "handler")
                and "admin" in refused.json()["error"]["message"]
            )
    async with signed_in(store, admin, opted_in) as root:
        made = await root.post("/ui/api/v1/jobs", json={**SHELL, "tenant": "acme"})
        assert made.status_code == 201
    before = snapshot(db)
    async with signed_in(store, acme, opted_in) as browser:
        for path in ("/ui/api/v1/jobs/{}/plan", "/ui/api/v1/jobs/{}"):
            method = "PATCH" if path.endswith("}") else "POST"
            changed = await browser.request(
                method, path.format(made.json()["id"]), json={"payload": {"command": "id"}}
            )
            assert refusal(changed) == (403, "handler"), path
    assert snapshot(db) == before


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1/", "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/"]
)
async def test_http_targets_are_checked_on_the_dashboards_write_path(
    store: Store, db: Any, url: str
) -> None:
    acme = await make_token(store, "acme")
    async with signed_in(store, acme) as browser:
        for path in ("/ui/api/v1/plan", "/ui/api/v1/jobs"):
            answer = await browser.post(path, json=http_job("hook", url))
            assert refusal(answer) == (422, "payload.url"), path
        job = (await browser.post("/ui/api/v1/jobs", json=http_job("hook"))).json()
        for method, path in (("POST", "/ui/api/v1/jobs/{}/plan"), ("PATCH", "/ui/api/v1/jobs/{}")):
            answer = await browser.request(
                method, path.format(job["id"]), json={"payload": {"url": url}}
            )
            assert refusal(answer) == (422, "payload.url"), path
    assert [r["payload"]["url"] for r in snapshot(db)] == [PUBLIC_URL]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schedule": "every tuesday"}, "schedule"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": -1}, "timeout"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"payload": "not an object"}, "payload"),
        ({"not_after": 1700000000}, "not_after"),
        ({"calendars": ["no-such-calendar"]}, "calendars"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_bad_input_is_422_naming_the_field(
    store: Store, db: Any, change: dict[str, Any], field: str
) -> None:
    acme = await make_token(store, "acme")
    async with signed_in(store, acme) as browser:
        job = (await browser.post("/ui/api/v1/jobs", json=http_job("payroll"))).json()
        before = snapshot(db)
        for method, path, body in [
            ("POST", "/ui/api/v1/plan", {**http_job("other"), **change}),
            ("POST", "/ui/api/v1/jobs", {**http_job("other"), **change}),
            ("POST", f"/ui/api/v1/jobs/{job['id']}/plan", change),
            ("PATCH", f"/ui/api/v1/jobs/{job['id']}", change),
        ]:
            answer = await browser.request(method, path, json=body)
            assert refusal(answer) == (422, field), (method, path, answer.json())
        assert snapshot(db) == before
        backfill = await browser.post(
            f"/ui/api/v1/jobs/{job['id']}/backfill", json={"from": "yesterday", "to": "now"}
        )
        assert refusal(backfill) == (422, "from")


async def test_schedule_preview_in_utc_and_the_zone_with_words(store: Store) -> None:
    acme = await make_token(store, "acme")
    async with signed_in(store, acme) as browser:
        answer = await browser.get(
            "/ui/api/v1/schedule/next",
            params={
                "schedule": "0 9 * * 1-5",
                "timezone": "Europe/Paris",
                "count": 3,
                "after": "2026-03-27T00:00:00Z",
            },
        )
    assert answer.status_code == 200
    assert answer.json() == {
        "schedule": "0 9 * * 1-5",
        "timezone": "Europe/Paris",
        "description": answer.json()["description"],
        "occurrences": [
            # Friday in winter time, then Monday and Tuesday after the change to summer time
            {"utc": "2026-03-27T08:00:00Z", "local": "2026-03-27T09:00:00+01:00"},
            {"utc": "2026-03-30T07:00:00Z", "local": "2026-03-30T09:00:00+02:00"},
            {"utc": "2026-03-31T07:00:00Z", "local": "2026-03-31T09:00:00+02:00"},
        ],
        "ended": False,
    }
    assert "09:00" in answer.json()["description"]
    async with api_client(store, acme) as client:  # the API's own route, by bearer token
        once = await client.get(
            "/api/v1/schedule/next",
            params={
                "schedule": "@at 2026-12-24T08:00:00Z",
                "count": 5,
                "after": "2026-12-01 00:00",
            },
        )
        assert once.json()["occurrences"] == [
            {"utc": "2026-12-24T08:00:00Z", "local": "2026-12-24T08:00:00Z"}
        ]
        assert once.json()["ended"] is True
        refused: list[tuple[dict[str, str | int], str]] = [
            ({"schedule": "61 * * * *"}, "schedule"),
            ({"schedule": "@hourly", "timezone": "Nowhere/City"}, "timezone"),
            ({"schedule": "@hourly", "count": 0}, "count"),
            ({"schedule": "@hourly", "after": "1700000000"}, "after"),
        ]
        for params, field in refused:
            assert refusal(await client.get("/api/v1/schedule/next", params=params)) == (
                422,
                field,
            ), params
        anonymous = await client.get(
            "/api/v1/schedule/next?schedule=x", headers={"Authorization": "Bearer nope"}
        )
        assert anonymous.status_code == 401


async def test_pause_with_a_reason_and_an_end_from_the_dashboard(store: Store, db: Any) -> None:
    """The job page's pause form (reason, until) and the API route the forms use refuse as the
    API does: a reason too long or an end in the past is 422 naming the field, another
    tenant's job 404, and nothing changes."""
    acme, globex = await make_token(store, "acme"), await make_token(store, "globex")
    async with signed_in(store, acme) as browser:
        job = (await browser.post("/ui/api/v1/jobs", json=http_job("payroll"))).json()
        form = {"csrf": csrf_token(acme), "reason": "x" * 501, "until": "2h"}
        long = await browser.post(
            f"/ui/jobs/{job['id']}/pause", data=form, headers={"Accept": "application/json"}
        )
        assert long.status_code == 422 and "at most 500" in long.json()["notice"]
        past = await browser.post(
            f"/ui/api/v1/jobs/{job['id']}/pause",
            json={"reason": "ledger migration", "until": "2020-01-01T00:00:00Z"},
        )
        assert refusal(past) == (422, "until")
        before = snapshot(db)
    async with signed_in(store, globex) as intruder:
        theirs = await intruder.post(
            f"/ui/jobs/{job['id']}/pause",
            data={"csrf": csrf_token(globex), "reason": "mine"},
            headers={"Accept": "application/json"},
        )
        assert theirs.status_code == 404
    assert snapshot(db) == before
    async with signed_in(store, acme) as browser:
        done = await browser.post(
            f"/ui/jobs/{job['id']}/pause",
            data={"csrf": csrf_token(acme), "reason": "ledger migration", "until": "2h"},
            headers={"Accept": "application/json"},
        )
        assert done.status_code == 200
        assert done.json()["notice"].startswith("paused payroll until ")
        assert done.json()["notice"].endswith(": ledger migration")
    row = db.execute("SELECT status, pause_reason, paused_until - now() AS left FROM pgpulse_jobs")
    paused = row.fetchone()
    assert (paused["status"], paused["pause_reason"]) == ("paused", "ledger migration")
    assert 7100 < paused["left"].total_seconds() <= 7200


async def test_skip_from_the_dashboard(store: Store, db: Any) -> None:
    """The job page's skip button (how many, why) and the API route the forms use: CSRF
    checked, a bad count refused naming ``next``, another tenant's job 404, and the listed
    occurrences shown on the job's page and in the API's job."""
    acme, globex = await make_token(store, "acme"), await make_token(store, "globex")
    async with signed_in(store, acme) as browser:
        job = (await browser.post("/ui/api/v1/jobs", json=http_job("payroll"))).json()
        forged = await browser.post(
            f"/ui/jobs/{job['id']}/skip",
            data={"csrf": "0" * 64, "count": "1"},
            headers={"Accept": "application/json"},
        )
        assert forged.status_code == 403
        for count in ("x", "0", "101"):
            bad = await browser.post(
                f"/ui/jobs/{job['id']}/skip",
                data={"csrf": csrf_token(acme), "count": count},
                headers={"Accept": "application/json"},
            )
            assert bad.status_code == 422 and "next" in bad.json()["notice"], count
        wrong = await browser.post(
            f"/ui/api/v1/jobs/{job['id']}/skip",
            json={"next": 1},
            headers={"X-CSRF-Token": "0" * 64},
        )
        assert wrong.status_code == 403  # the forms' API route checks the CSRF header too
        before = snapshot(db)
    async with signed_in(store, globex) as intruder:
        theirs = await intruder.post(
            f"/ui/jobs/{job['id']}/skip",
            data={"csrf": csrf_token(globex), "count": "1"},
            headers={"Accept": "application/json"},
        )
        assert theirs.status_code == 404
    assert snapshot(db) == before
    async with signed_in(store, acme) as browser:
        done = await browser.post(
            f"/ui/jobs/{job['id']}/skip",
            data={"csrf": csrf_token(acme), "count": "2", "reason": "quarter close"},
            headers={"Accept": "application/json"},
        )
        assert done.status_code == 200, done.text
        first = job["scheduled_for"]
        assert done.json()["notice"].startswith("payroll: 2 occurrences listed to skip, the first")
        shown = (await browser.get(f"/ui/api/v1/jobs/{job['id']}")).json()
        assert [s["reason"] for s in shown["skips"]] == ["quarter close", "quarter close"]
        assert shown["skips"][0]["at"] == first
        page = await browser.get(f"/ui/jobs/{job['id']}")
        assert 'data-testid="job-skips"' in page.text and "quarter close" in page.text
    row = db.execute("SELECT status, jsonb_array_length(skips) AS n FROM pgpulse_jobs").fetchone()
    assert (row["status"], row["n"]) == ("idle", 2)
