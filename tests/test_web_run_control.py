"""Run control through the HTTP API: the new job fields, pause with intent, resume modes,
calendars, and their refusals (field and value named, nothing written)."""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import unquote

from pgpulse.db.store import Store
from web_helpers import OWN_PAGE, api_client, make_token

URL = "https://93.184.215.14/hook"


def body(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": "0 3 * * *",
        "handler": "http",
        "payload": {"url": URL},
        **fields,
    }


async def test_job_fields_pause_resume_and_calendars_over_http(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        put = await api.put("/api/v1/calendars/plant", json={"dates": ["2026-08-03"]})
        assert put.status_code == 200, put.text
        assert put.json() | {"jobs": []} == {
            "tenant": "acme", "name": "plant", "dates": ["2026-08-03"], "country": None,
            "subdivision": None, "jobs": [],
        }  # fmt: skip
        made = await api.post(
            "/api/v1/jobs",
            json=body("nightly", spread=120, not_after="2027-01-01T00:00:00Z", max_runs=10,
                      calendars=["plant"], auto_pause_after=3),
        )  # fmt: skip
        assert made.status_code == 201, made.text
        job = made.json()
        assert (job["spread"], job["max_runs"], job["calendars"], job["auto_pause_after"]) == (
            120.0, 10, ["plant"], 3,
        )  # fmt: skip
        assert job["not_after"] == "2027-01-01T00:00:00Z"
        paused = await api.post(
            f"/api/v1/jobs/{job['id']}/pause",
            json={"until": "2099-01-01T00:00:00+00:00", "reason": "audit"},
        )
        assert paused.status_code == 200, paused.text
        assert (paused.json()["status"], paused.json()["pause_reason"]) == ("paused", "audit")
        assert paused.json()["paused_until"] == "2099-01-01T00:00:00Z"
        resumed = await api.post(f"/api/v1/jobs/{job['id']}/resume", json={"catch_up": "backfill"})
        assert resumed.status_code == 200, resumed.text
        assert (resumed.json()["status"], resumed.json()["pause_reason"]) == ("idle", None)
        assert (
            db.execute("SELECT resume_mode FROM pgpulse_jobs").fetchone()["resume_mode"]
            == "backfill"
        )
        busy = await api.delete("/api/v1/calendars/plant")
        assert busy.status_code == 409 and busy.json()["error"]["field"] == "calendar"
        listed = await api.get("/api/v1/calendars")
        assert [(c["name"], c["jobs"]) for c in listed.json()] == [("plant", ["nightly"])]
        other = await api.put("/api/v1/calendars/x?tenant=other", json={"dates": ["2026-01-01"]})
        assert other.status_code == 403
        doc = (await api.get("/api/v1/openapi.json")).json()
        assert {"spread", "not_before", "not_after", "max_runs", "calendars"} <= set(
            doc["components"]["schemas"]["JobCreate"]["properties"]
        )
        assert "/api/v1/calendars/{name}" in doc["paths"]


async def test_invalid_combinations_over_http_name_the_field_and_write_nothing(
    store: Store, db: Any
) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        cases: list[tuple[dict[str, Any], str]] = [
            ({"schedule": "@at 2099-01-01T00:00:00", "spread": 5}, "spread"),
            (
                {"not_before": "2026-02-01T00:00:00Z", "not_after": "2026-01-01T00:00:00Z"},
                "not_after",
            ),
            ({"calendars": ["nope"]}, "calendars"),
            ({"schedule": "*/5 * * * *", "spread": 301}, "spread"),  # longer than the period
        ]
        for fields, field in cases:
            refused = await api.post("/api/v1/jobs", json=body("bad", **fields))
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["field"] == field
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0


async def test_the_dashboard_shows_a_pause_its_end_and_reason(store: Store) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        job = (await api.post("/api/v1/jobs", json=body("nightly", max_runs=4))).json()
        await api.post(
            f"/api/v1/jobs/{job['id']}/pause",
            json={"until": "2099-01-01T00:00:00+00:00", "reason": "audit"},
        )
    async with api_client(store) as ui:
        assert (
            await ui.post("/ui/login", data={"token": token}, headers=OWN_PAGE)
        ).status_code == 303
        listing = (await ui.get("/ui/")).text
        assert 'data-testid="pause-nightly"' in listing and "audit" in listing
        page = (await ui.get(f"/ui/jobs/{job['id']}")).text
        assert 'data-testid="job-pause"' in page and "until 2099-01-01" in page
        assert "0 of at most 4" in page


async def test_dashboard_buttons_note_no_change_as_the_cli_and_go_back_to_the_job(
    store: Store,
) -> None:
    """Resume on an idle job, or Pause on a paused one, says what the CLI says (the sixth trial
    saw "resumed" for an idle job); a button's post without ``next`` goes back to the job."""
    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        job = (await api.post("/api/v1/jobs", json=body("nightly"))).json()
    async with api_client(store) as ui:
        assert (
            await ui.post("/ui/login", data={"token": token}, headers=OWN_PAGE)
        ).status_code == 303
        page = (await ui.get(f"/ui/jobs/{job['id']}")).text
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found is not None
        csrf = {"csrf": found.group(1)}

        async def press(verb: str) -> str:
            done = await ui.post(f"/ui/jobs/{job['id']}/{verb}", data=csrf)
            assert done.status_code == 303, done.text
            where, _, query = done.headers["location"].partition("?notice=")
            assert where == f"/ui/jobs/{job['id']}"
            notice = query.partition("&sig=")[0]
            shown = (await ui.get(done.headers["location"])).text  # signed: shown
            assert f'role="status" >{html.escape(unquote(notice))}</p>' in shown
            return unquote(notice)

        assert await press("resume") == "nightly is idle, not paused; no change"
        assert await press("pause") == "paused nightly"  # the notice names the job
        assert await press("pause") == "nightly was paused already; no change"
        assert await press("resume") == "resumed nightly"
        listed = await ui.post(f"/ui/jobs/{job['id']}/trigger", data=csrf | {"next": "/ui/"})
        assert listed.headers["location"].startswith("/ui/?notice=triggered%20nightly&sig=")
        # a link from elsewhere cannot put words on the page (seventh trial): unsigned, or
        # signed for another text, a notice is not shown
        sig = listed.headers["location"].partition("&sig=")[2]  # triggered's, for this token
        for forged in ("?notice=Sign%20in%20at%20evil.example",
                       "?notice=Sign%20in%20at%20evil.example&sig=" + sig):  # fmt: skip
            assert "evil.example" not in (await ui.get(f"/ui/{forged}")).text


async def test_non_ascii_csrf_and_notice_signatures_are_refused_not_500(store: Store) -> None:
    """Issue 30: ``csrf=%C3%A9`` in a button's form, or ``sig=%C3%A9`` beside a notice,
    answered 500 (compare_digest on a non-ASCII str); they are a stale form and an unsigned
    notice."""
    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        job = (await api.post("/api/v1/jobs", json=body("nightly"))).json()
    async with api_client(store) as ui:
        assert (
            await ui.post("/ui/login", data={"token": token}, headers=OWN_PAGE)
        ).status_code == 303
        form = {"content-type": "application/x-www-form-urlencoded"}
        for path in (f"/ui/jobs/{job['id']}/pause", "/ui/alerts/1/acknowledge",
                     "/ui/silences/1/end"):  # fmt: skip
            refused = await ui.post(path, content=b"csrf=%C3%A9", headers=form)
            assert refused.status_code == 403, (path, refused.text)
        shown = await ui.get("/ui/?notice=Sign%20in%20at%20evil.example&sig=%C3%A9")
        assert shown.status_code == 200 and "evil.example" not in shown.text
    async with api_client(store, token) as api:  # the refused pause changed nothing
        assert (await api.get(f"/api/v1/jobs/{job['id']}")).json()["status"] == "idle"


async def test_upcoming_occurrences_leave_out_what_a_calendar_excludes(
    store: Store, db: Any
) -> None:
    """The API's and `job show --json`'s upcoming list skips the dates the job's calendars
    exclude, as the claims will (the trials saw an excluded date listed as to come)."""
    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        made = await api.post("/api/v1/jobs", json=body("daily", not_before="2030-01-01T00:00:00Z"))
        assert made.status_code == 201, made.text
        plain = made.json()["upcoming"]
        assert [t[:10] for t in plain[:3]] == ["2030-01-01", "2030-01-02", "2030-01-03"]
        put = await api.put("/api/v1/calendars/plant", json={"dates": ["2030-01-02", "2030-01-03"]})
        assert put.status_code == 200, put.text
        edited = await api.patch(f"/api/v1/jobs/{made.json()['id']}", json={"calendars": ["plant"]})
        assert edited.status_code == 200, edited.text
        got = (await api.get(f"/api/v1/jobs/{made.json()['id']}")).json()["upcoming"]
        assert [t[:10] for t in got] == [
            "2030-01-01", "2030-01-04", "2030-01-05", "2030-01-06", "2030-01-07"
        ]  # fmt: skip


async def test_a_patch_that_changes_nothing_writes_nothing(store: Store, db: Any) -> None:
    """PATCH {} (or of a field to the value it has) keeps the job's source and revision and
    records no history: a job of another source is taken over only by a real change (the
    seventh trial saw {} take a code-declared job over, and the next node start take it back)."""
    from helpers import add, spec

    [job_id] = await add(store, spec("declared", handler="http", payload={"url": URL},
                                     source="code:trial"))  # fmt: skip
    token = await make_token(store, "default")
    async with api_client(store, token) as api:
        for body_sent in ({}, {"max_attempts": 3}):
            same = await api.patch(f"/api/v1/jobs/{job_id}", json=body_sent)
            assert same.status_code == 200, same.text
            assert (same.json()["source"], same.json()["revision"]) == ("code:trial", 1)
        changed = await api.patch(f"/api/v1/jobs/{job_id}", json={"max_attempts": 4})
        assert (changed.json()["source"], changed.json()["revision"]) == ("api", 2)
    actions = [
        r["action"] for r in db.execute("SELECT action FROM pgpulse_job_history ORDER BY id")
    ]
    assert actions == ["create", "update"]


async def test_concurrent_patches_of_one_job_keep_every_change(store: Store, db: Any) -> None:
    """Each PATCH merges its fields into the revision it read and writes only if that revision
    is still stored; the others read again and merge anew: none of six changes is lost (an
    adversarial tester saw two concurrent PATCHes keep only one of them)."""
    import asyncio

    token = await make_token(store, "acme")
    changes: list[dict[str, Any]] = [
        {"max_attempts": 4},
        {"timeout": 120},
        {"retry_backoff": 7},
        {"misfire_grace": 90},
        {"not_after": "2099-01-01T00:00:00Z"},
        {"auto_pause_after": 5},
    ]
    async with api_client(store, token) as api:
        job_id = (await api.post("/api/v1/jobs", json=body("busy"))).json()["id"]
        answers = await asyncio.gather(
            *(api.patch(f"/api/v1/jobs/{job_id}", json=change) for change in changes)
        )
        assert [a.status_code for a in answers] == [200] * len(changes), [a.text for a in answers]
        job = (await api.get(f"/api/v1/jobs/{job_id}")).json()
    assert job["revision"] == 1 + len(changes)
    assert (job["max_attempts"], job["timeout"], job["retry_backoff"]) == (4, 120, 7)
    assert (job["misfire_grace"], job["not_after"], job["auto_pause_after"]) == (
        90,
        "2099-01-01T00:00:00Z",
        5,
    )


async def test_a_calendars_tenant_is_checked_as_a_jobs(store: Store, dsn: str, db: Any) -> None:
    """A calendar's tenant follows the rule of a job's (an adversarial tester stored calendars
    under 'acme ' and U+202E): refused on the API and the command line, nothing written."""
    from helpers import pgpulse

    admin = await make_token(store, admin=True)
    async with api_client(store, admin) as api:
        for tenant in ("acme ", "\u202eacme"):
            put = await api.put(
                "/api/v1/calendars/plant", params={"tenant": tenant}, json={"dates": ["2026-08-03"]}
            )
            assert (put.status_code, put.json()["error"]["field"]) == (422, "tenant"), put.text
    for args in (("calendar", "set", "plant", "--date", "2026-08-03", "--tenant", "acme "),
                 ("calendar", "list", "--tenant", "acme "),
                 ("calendar", "delete", "plant", "--tenant", "acme ")):  # fmt: skip
        done = pgpulse(*args, dsn=dsn)
        assert (done.returncode, done.stdout) == (2, ""), done
        assert done.stderr.startswith("error: invalid value for --tenant: 'acme ' is not a valid")
    assert db.execute("SELECT count(*) AS n FROM pgpulse_calendars").fetchone()["n"] == 0


async def test_a_paused_jobs_next_occurrences_come_after_its_pause(
    store: Store, db: Any, dsn: str
) -> None:
    """Paused until T: the occurrences listed (the API, the dashboard, `job show`) are the ones
    after T, none inside the pause nor in the past; paused with no end: none, and it says so."""
    from helpers import apgpulse

    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        made = await api.post("/api/v1/jobs", json=body("nightly", schedule="0 3 * * *"))
        assert made.status_code == 201, made.text
        job_id = made.json()["id"]
        # the pause began long ago (its held occurrence is in the past) and ends in 2040
        paused = await api.post(
            f"/api/v1/jobs/{job_id}/pause", json={"until": "2040-06-10T12:00:00Z"}
        )
        assert paused.status_code == 200, paused.text
        db.execute("UPDATE pgpulse_jobs SET scheduled_for = '2020-01-01T03:00:00Z'")
        got = (await api.get(f"/api/v1/jobs/{job_id}")).json()["upcoming"]
        assert got == [f"2040-06-{day}T03:00:00Z" for day in range(11, 16)]
    shown = await apgpulse("job", "show", "nightly", "--tenant", "acme", "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    upcoming = json.loads(shown.stdout)["upcoming"]
    assert upcoming[0].startswith("2040-06-11T03:00:00") and len(upcoming) == 5, upcoming
    async with api_client(store) as ui:
        login = await ui.post("/ui/login", data={"token": token}, headers=OWN_PAGE)
        assert login.status_code == 303
        page = (await ui.get(f"/ui/jobs/{job_id}")).text
        upcoming = page.split('<ol class="upcoming">', 1)[1].split("</ol>", 1)[0]
        assert "2040-06-11" in upcoming and "2020" not in upcoming
        # paused with no end: nothing to list, and the page and `job show` say why
        db.execute("UPDATE pgpulse_jobs SET paused_until = NULL")
        page = (await ui.get(f"/ui/jobs/{job_id}")).text
        assert "None while paused: the first comes after a resume." in page
    async with api_client(store, token) as api:
        assert (await api.get(f"/api/v1/jobs/{job_id}")).json()["upcoming"] == []
    shown = await apgpulse("job", "show", "nightly", "--tenant", "acme", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    after = shown.stdout.split("next occurrences (UTC)\n", 1)[1].splitlines()[0]
    assert after == "  none while paused: the first comes after a resume (job resume)"


async def test_a_running_triggered_occurrence_is_not_listed_as_to_come(
    store: Store, db: Any, dsn: str
) -> None:
    """Right after `job trigger`, a node runs the trigger's instant: `job show` and the API
    list the schedule's occurrences after it (03:00 each day), not the one under way."""
    from helpers import ALL_SHARDS, apgpulse

    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        made = await api.post("/api/v1/jobs", json=body("nightly", schedule="0 3 * * *"))
        assert made.status_code == 201, made.text
        before = made.json()["upcoming"]
    fired = await apgpulse("job", "trigger", "nightly", "--tenant", "acme", dsn=dsn)
    assert fired.returncode == 0, fired.stderr
    [claimed] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=300)
    assert claimed.name == "nightly"
    assert db.execute("SELECT status FROM pgpulse_jobs").fetchone()["status"] == "running"
    shown = await apgpulse("job", "show", "nightly", "--tenant", "acme", "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)["upcoming"]
    assert [datetime.fromisoformat(t) for t in listed] == [
        datetime.fromisoformat(t) for t in before
    ]
    assert len(before) == 5 and all("T03:00:00" in t for t in listed), listed
    async with api_client(store, token) as api:
        assert (await api.get(f"/api/v1/jobs/{made.json()['id']}")).json()["upcoming"] == before


async def test_api_pause_of_a_running_job_waits_for_its_run_or_cancels_it(
    store: Store, db: Any
) -> None:
    """The API pauses a running job when its run ends (pause_requested, no next occurrence
    listed before its until), a resume withdraws that, and ``cancel`` stops the run now."""
    from helpers import ALL_SHARDS

    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        made = await api.post("/api/v1/jobs", json=body("nightly", schedule="0 3 * * *"))
        job_id = made.json()["id"]
        assert (await api.post(f"/api/v1/jobs/{job_id}/trigger")).status_code == 200
        [claimed] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=300)
        paused = await api.post(f"/api/v1/jobs/{job_id}/pause", json={"reason": "audit"})
        assert paused.status_code == 200, paused.text
        got = paused.json()
        assert got["message"] == (
            f"nightly is running: pauses when this run ends (run {claimed.run_id} on node "
            "node-a) (audit)"
        )
        assert (got["status"], got["pause_requested"], got["pause_reason"]) == (
            "running",
            True,
            "audit",
        )
        assert (got["changed"], got["waits_for_run"], got["cancelled_runs"]) == (
            True,
            claimed.run_id,
            [],
        )
        assert got["upcoming"] == []  # no until: none before a resume
        until = await api.post(
            f"/api/v1/jobs/{job_id}/pause", json={"until": "2099-01-01T00:00:00Z"}
        )
        assert until.json()["upcoming"][:2] == ["2099-01-01T03:00:00Z", "2099-01-02T03:00:00Z"]
        resumed = await api.post(f"/api/v1/jobs/{job_id}/resume")
        assert resumed.status_code == 200, resumed.text
        assert (resumed.json()["status"], resumed.json()["pause_requested"]) == ("running", False)
        cancelled = await api.post(f"/api/v1/jobs/{job_id}/pause", json={"cancel": True})
        assert cancelled.status_code == 200, cancelled.text
        got = cancelled.json()
        assert got["message"] == (
            f"paused nightly; run {claimed.run_id} cancelled (node node-a stops it at its next "
            "lease renewal)"
        )
        assert (got["status"], got["pause_requested"], got["waits_for_run"]) == (
            "paused",
            False,
            None,
        )
        assert got["cancelled_runs"] == [
            {
                "run_id": claimed.run_id,
                "kind": "scheduled",
                "scheduled_for": claimed.scheduled_for.isoformat().replace("+00:00", "Z"),
                "node_id": "node-a",
            }
        ]
        moved = datetime.fromisoformat(got["scheduled_for"])  # past it: 03:00 next
        assert moved > claimed.scheduled_for and (moved.hour, moved.minute) == (3, 0)
    run = db.execute("SELECT outcome, error FROM pgpulse_runs").fetchone()
    assert run["outcome"] == "cancelled" and run["error"].startswith("cancelled by token:")


async def test_the_dashboard_pauses_a_running_job_after_its_run_or_cancelling_it(
    store: Store, db: Any
) -> None:
    from helpers import ALL_SHARDS

    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        job = (await api.post("/api/v1/jobs", json=body("nightly"))).json()
        await api.post(f"/api/v1/jobs/{job['id']}/trigger")
    [claimed] = await store.claim_due("node-a", ALL_SHARDS, 5, lease=300)
    async with api_client(store) as ui:
        assert (
            await ui.post("/ui/login", data={"token": token}, headers=OWN_PAGE)
        ).status_code == 303
        page = (await ui.get(f"/ui/jobs/{job['id']}")).text
        button = page.split('data-testid="pause-nightly"', 1)[1].split(">", 1)[0]
        assert "disabled" not in button  # the Pause button works while the job runs
        assert 'data-testid="pause-cancel"' in page and "cancel the current run" in page
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found is not None
        csrf = {"csrf": found.group(1)}

        async def press(verb: str, **fields: str) -> str:
            done = await ui.post(
                f"/ui/jobs/{job['id']}/{verb}",
                data=csrf | fields,
                headers={"Accept": "application/json"},
            )
            assert done.status_code == 200, done.text
            notice: str = done.json()["notice"]
            return notice

        assert await press("pause") == (
            f"nightly is running: pauses when this run ends (run {claimed.run_id} on node node-a)"
        )
        page = (await ui.get(f"/ui/jobs/{job['id']}")).text
        assert 'data-testid="job-pause-requested"' in page
        assert "pause requested: pauses when this run ends" in page
        assert 'data-testid="resume-nightly"' in page  # withdraws the request
        listing = (await ui.get("/ui/")).text
        assert 'data-testid="pause-requested-nightly"' in listing
        assert await press("resume") == (
            "nightly will not pause: the pause requested while it ran is withdrawn (its run and "
            "the occurrences after it go on)"
        )
        assert await press("pause", cancel="1") == (
            f"paused nightly; run {claimed.run_id} cancelled (node node-a stops it at its next "
            "lease renewal)"
        )
    row = db.execute("SELECT status, pause_requested FROM pgpulse_jobs").fetchone()
    assert (row["status"], row["pause_requested"]) == ("paused", False)
    assert db.execute("SELECT outcome FROM pgpulse_runs").fetchone()["outcome"] == "cancelled"


async def test_a_pause_whose_end_passed_lists_what_comes_after_now(store: Store, db: Any) -> None:
    """Paused until T, T passed, the leader has not resumed it yet: the occurrences listed
    come after the database's now, none in the past."""
    token = await make_token(store, "acme")
    async with api_client(store, token) as api:
        made = await api.post("/api/v1/jobs", json=body("hourly", schedule="0 * * * *"))
        job_id = made.json()["id"]
        await api.post(f"/api/v1/jobs/{job_id}/pause", json={"until": "2099-01-01T00:00:00Z"})
        db.execute(
            "UPDATE pgpulse_jobs SET paused_until = now() - interval '3 hours',"
            " scheduled_for = date_trunc('hour', now()) - interval '5 hours'"
        )
        got = (await api.get(f"/api/v1/jobs/{job_id}")).json()
    now = db.execute("SELECT now() AS t").fetchone()["t"]
    first = datetime.fromisoformat(got["upcoming"][0])
    assert got["status"] == "paused" and now < first <= now + timedelta(hours=1)
    assert first.minute == first.second == 0
