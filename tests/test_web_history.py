"""Run history as people read it, against a real PostgreSQL: every attempt of
a run through each write that ends one (a retry, a lease the sweeper reaped, a hand-back, the
success), lag from the FIRST attempt, output in lists, and the search, filters and pages of the
jobs and runs, in the API, the dashboard (in process) and the terminal (a real subprocess)."""

from __future__ import annotations

import html
import itertools
import re
from datetime import datetime, timedelta
from typing import Any

import httpx

from helpers import ALL_SHARDS, add, apgpulse, spec, utc
from pgpulse.core.model import Outcome
from pgpulse.core.planner import Advance
from pgpulse.db.store import Store
from pgpulse.web.reads import QUERIES, Reads
from web_helpers import OWN_PAGE, api_client, make_token

T0 = utc(2026, 1, 1, 0, 0, 30)
LATER = T0 + timedelta(minutes=5)


def at(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


async def four_attempts(store: Store) -> tuple[int, int, datetime]:
    """A run whose attempts end in each way: 1 fails and is retried (node-a), 2 loses its lease
    (node-b, reaped by the sweeper), 3 is handed back by a stopping node (node-c), 4 succeeds
    (node-d). Returns the job id, the run id and the occurrence."""
    [job_id] = await add(store, spec("flaky", max_attempts=9), now=T0)
    [a] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=LATER)
    await store.finish_runs(
        [Outcome(a, "retrying", retry_in=0.0, error="boom", output="fetched 0 of 42")],
        now=LATER + timedelta(seconds=2),
        node="node-a",
    )
    [b] = await store.claim_due("node-b", ALL_SHARDS, 1, lease=30, now=LATER + timedelta(seconds=5))
    assert await store.reap_expired_leases(now=LATER + timedelta(seconds=40)) == 1
    [c] = await store.claim_due(
        "node-c", ALL_SHARDS, 1, lease=30, now=LATER + timedelta(seconds=41)
    )
    await store.hand_back(
        [c.key], started=[c.key], reason="node stopping", now=LATER + timedelta(seconds=42)
    )
    [d] = await store.claim_due(
        "node-d", ALL_SHARDS, 1, lease=30, now=LATER + timedelta(seconds=43)
    )
    assert a.run_id == b.run_id == c.run_id == d.run_id
    done = Outcome(d, "succeeded", advance=Advance(utc(2026, 1, 1, 0, 2)), output="rows: 42")
    await store.finish_runs([done], now=LATER + timedelta(seconds=45), node="node-d")
    return job_id, a.run_id, a.scheduled_for


async def test_a_run_keeps_every_attempt_and_its_lag_is_from_the_first(store: Store) -> None:
    job_id, run_id, occurrence = await four_attempts(store)
    first_lag = (LATER - occurrence).total_seconds()
    async with api_client(store, await make_token(store, "default")) as client:
        run = (await client.get(f"/api/v1/runs/{run_id}")).json()
        listed = (await client.get("/api/v1/runs", params={"job_id": job_id})).json()
        job = (await client.get(f"/api/v1/jobs/{job_id}")).json()
    log = [
        (
            a["attempt"],
            a["node_id"],
            a["fencing_token"],
            at(a["started_at"]),
            at(a["ended_at"]),
            a["outcome"],
            a["error"],
            a["output"],
        )
        for a in run["attempt_log"]
    ]
    seconds = [LATER + timedelta(seconds=s) for s in (0, 2, 5, 40, 41, 42, 43, 45)]
    assert log == [
        (1, "node-a", 1, seconds[0], seconds[1], "retrying", "boom", "fetched 0 of 42"),
        (2, "node-b", 2, seconds[2], seconds[3], "retrying", "lease of node node-b expired", None),
        (3, "node-c", 3, seconds[4], seconds[5], "retrying", "node stopping", None),
        (4, "node-d", 4, seconds[6], seconds[7], "succeeded", None, "rows: 42"),
    ]
    assert (run["attempts"], run["node_id"], run["outcome"]) == (4, "node-d", "succeeded")
    assert run["lag"] == first_lag  # not 43 s more: the run started on its first attempt
    assert at(run["first_started_at"]) == LATER and at(run["started_at"]) == seconds[6]
    assert run["duration"] == 2.0 and run["output"] == "rows: 42"
    [item] = listed["items"]
    assert (item["output"], item["lag"], len(item["attempt_log"])) == ("rows: 42", first_lag, 4)
    assert job["last_lag"] == first_lag


async def test_an_attempt_running_now_shows_the_earlier_ones(store: Store) -> None:
    await add(store, spec("flaky", max_attempts=3), now=T0)
    [a] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=LATER)
    await store.finish_runs(
        [Outcome(a, "retrying", retry_in=0.0, error="boom")],
        now=LATER + timedelta(seconds=1),
        node="node-a",
    )
    await store.claim_due("node-b", ALL_SHARDS, 1, lease=30, now=LATER + timedelta(seconds=3))
    async with api_client(store, await make_token(store, "default")) as client:
        run = (await client.get(f"/api/v1/runs/{a.run_id}")).json()
    assert run["outcome"] == "running"
    assert [(x["node_id"], x["outcome"], at(x["ended_at"])) for x in run["attempt_log"]] == [
        ("node-a", "retrying", LATER + timedelta(seconds=1)),
        ("node-b", "running", None),
    ]
    assert run["lag"] == (LATER - a.scheduled_for).total_seconds()


async def seed_jobs(store: Store) -> dict[str, int]:
    """Jobs of three handlers and three sources; the mailer's last run failed."""
    specs = [
        spec("etl-daily", handler="etl", source="crontab"),
        spec("etl-hourly", handler="etl", source="api"),
        spec("mail-digest", handler="mailer", source="app"),
        spec("other-tenant-etl", handler="etl", tenant="globex"),
    ]
    ids = await add(store, *specs, now=T0)
    names = dict(zip((s.name for s in specs), ids, strict=True))
    for claimed in await store.claim_due("n", ALL_SHARDS, 10, lease=30, now=LATER):
        failed = claimed.name == "mail-digest"
        outcome = Outcome(
            claimed,
            "failed" if failed else "succeeded",
            advance=Advance(utc(2026, 1, 1, 0, 2)),
            error="smtp down" if failed else None,
            output=f"out of {claimed.name}",
        )
        await store.finish_runs([outcome], now=LATER + timedelta(seconds=1), node="n")
    return names


async def test_jobs_and_runs_search_filters_and_pages_in_the_api(store: Store) -> None:
    await seed_jobs(store)
    async with api_client(store, await make_token(store, "default")) as client:

        async def jobs(**params: Any) -> list[str]:
            body = (await client.get("/api/v1/jobs", params=params)).json()
            return [j["name"] for j in body["items"]]

        async def runs(**params: Any) -> list[str]:
            body = (await client.get("/api/v1/runs", params=params)).json()
            return [r["name"] for r in body["items"]]

        assert await jobs(q="ETL") == ["etl-daily", "etl-hourly"]  # name, any case
        assert await jobs(q="mail") == ["mail-digest"]  # ...or handler
        assert await jobs(source="crontab") == ["etl-daily"]
        assert await jobs(handler="mailer") == ["mail-digest"]
        assert await jobs(last_outcome="failed") == ["mail-digest"]
        assert await jobs(q="etl", source="api") == ["etl-hourly"]
        first = (await client.get("/api/v1/jobs", params={"q": "etl", "limit": 1})).json()
        second = (
            await client.get(
                "/api/v1/jobs", params={"q": "etl", "limit": 1, "cursor": first["next_cursor"]}
            )
        ).json()
        assert [j["name"] for j in first["items"] + second["items"]] == ["etl-daily", "etl-hourly"]
        assert second["next_cursor"] is None

        assert sorted(await runs(handler="etl")) == ["etl-daily", "etl-hourly"]
        assert await runs(source="app") == ["mail-digest"]
        assert await runs(q="DIGEST", outcome="failed") == ["mail-digest"]
        assert await runs(tenant="globex") == []  # a tenant token never sees another tenant
        refused = await client.get("/api/v1/jobs", params={"last_outcome": "bogus"})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "last_outcome"
        empty = await client.get("/api/v1/runs", params={"q": ""})
        assert empty.status_code == 422 and empty.json()["error"]["field"] == "q"
    async with api_client(store, await make_token(store, admin=True)) as admin:
        body = (await admin.get("/api/v1/runs", params={"tenant": "globex"})).json()
        assert [r["name"] for r in body["items"]] == ["other-tenant-etl"]


async def signed_in(client: httpx.AsyncClient, token: str) -> None:
    response = await client.post("/ui/login", data={"token": token}, headers=OWN_PAGE)
    assert response.status_code == 303, response.text


async def test_dashboard_lists_filter_page_and_refuse_bad_filters(store: Store) -> None:
    names = await seed_jobs(store)
    await add(store, *(spec(f"bulk-{i:02}") for i in range(50)), now=T0)
    async with api_client(store) as client:
        await signed_in(client, await make_token(store, "default"))
        filtered = await client.get("/ui/", params={"q": "etl", "source": "crontab"})
        assert filtered.status_code == 200
        assert 'data-job="etl-daily"' in filtered.text
        assert 'data-job="etl-hourly"' not in filtered.text
        assert 'value="etl"' in filtered.text  # the form shows the filter applied
        listed = await client.get("/ui/", params={"q": "mail"})
        strip = listed.text.split('data-testid="recent-mail-digest">')[1].split("</td>")[0]
        assert strip.count("<a ") == 1 and 'data-state="failed"' in strip and "smtp down" in strip
        page1 = await client.get("/ui/")
        assert page1.text.count('<tr data-job="') == 50 and 'data-testid="next-page"' in page1.text
        link = page1.text.split('data-testid="next-page"')[0].rsplit('href="', 1)[1].split('"')[0]
        page2 = await client.get(link.replace("&amp;", "&"))
        assert page2.text.count('<tr data-job="') == 3  # 53 jobs of tenant default
        assert 'data-testid="next-page"' not in page2.text

        failed = await client.get("/ui/runs", params={"outcome": "failed"})
        assert 'data-job="mail-digest"' in failed.text and 'data-job="etl-daily"' not in failed.text
        ranged = await client.get("/ui/runs", params={"since": "2026-01-01T00:01:00"})
        assert 'data-job="mail-digest"' in ranged.text  # occurrences at 00:01 UTC
        assert 'value="2026-01-01T00:01:00"' in ranged.text
        later = await client.get("/ui/runs", params={"since": "2026-01-01T00:01:01+00:00"})
        assert "No run matches these filters." in later.text
        bad_since = await client.get("/ui/runs", params={"since": "yesterday"})
        assert bad_since.status_code == 422
        assert "since 'yesterday' is not an ISO 8601 date and time" in html.unescape(bad_since.text)
        bad = await client.get("/ui/", params={"status": "sleeping"})
        assert bad.status_code == 422
        message = "status 'sleeping' is not one of idle, running, paused, failed, completed"
        assert message in html.unescape(bad.text)
        bad_cursor = await client.get("/ui/runs", params={"cursor": "x"})
        assert bad_cursor.status_code == 422 and "cursor 'x'" in html.unescape(bad_cursor.text)
        # An address the router refuses is the error page too (the fifth trial: raw JSON).
        bad_id = await client.get("/ui/jobs/abc")
        assert bad_id.status_code == 422 and bad_id.headers["content-type"].startswith("text/html")
        assert "job_id" in bad_id.text and "<html" in bad_id.text

        job = await client.get(f"/ui/jobs/{names['mail-digest']}")
        assert job.status_code == 200 and "Occurrences since" in job.text  # grid: test_web_grid
        alerts = await client.get("/ui/alerts")
        assert alerts.status_code == 200 and 'data-testid="no-alerts"' in alerts.text


async def test_dashboard_run_page_shows_every_attempt_and_the_output(store: Store) -> None:
    _, run_id, _ = await four_attempts(store)
    async with api_client(store) as client:
        await signed_in(client, await make_token(store, "default"))
        page = await client.get(f"/ui/runs/{run_id}")
        other = await client.get(f"/ui/runs/{run_id + 1000}")
    assert page.status_code == 200
    for n, node in enumerate(("node-a", "node-b", "node-c", "node-d"), start=1):
        assert f'data-testid="attempt-node-{n}">{node}' in page.text
    assert "lease of node node-b expired" in page.text and "node stopping" in page.text
    assert 'data-testid="run-output">rows: 42</pre>' in page.text
    assert 'Output of attempt 1</summary><pre class="output">fetched 0 of 42</pre>' in page.text
    assert other.status_code == 404 and f"no run with id {run_id + 1000}" in other.text


async def test_terminal_runs_and_job_show_print_output_and_every_attempt(
    store: Store, db: Any
) -> None:
    await four_attempts(store)
    info = db.info
    dsn = f"host={info.host} port={info.port} dbname={info.dbname} user={info.user}"
    table = await apgpulse("runs", "flaky", dsn=dsn)
    assert table.returncode == 0, table.stderr
    header, _, row = table.stdout.splitlines()[:3]
    assert header.split()[-3:] == ["duration", "error", "output"]
    assert row.split()[-2:] == ["rows:", "42"]
    # (name, scheduled_for: 2 words, outcome, kind, occurrences, attempts), then node, lag
    assert row.split()[6:8] == ["node-d", "270"]  # lag from the first attempt, then duration
    detailed = await apgpulse("runs", "flaky", "--attempts", dsn=dsn)
    assert detailed.returncode == 0, detailed.stderr
    lines = detailed.stdout.splitlines()
    assert lines[0].startswith("run ") and "attempts 4  lag 270.000 s" in lines[0]
    assert [line.split()[:2] for line in lines[3:7]] == [
        ["1", "node-a"],
        ["2", "node-b"],
        ["3", "node-c"],
        ["4", "node-d"],
    ]
    assert lines[7:] == [
        "  output of attempt 1:",
        "    fetched 0 of 42",
        "  output:",
        "    rows: 42",
    ]
    shown = await apgpulse("job", "show", "flaky", "--attempts", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    runs = shown.stdout.split("last runs (1)\n", 1)[1].splitlines()
    assert runs[0].split() == ["2026-01-01T00:01:00+00:00", "succeeded", "run", "1"]
    assert [line.split()[:3] for line in runs[3:7]] == [
        ["1", "node-a", "2026-01-01T00:05:30+00:00"],
        ["2", "node-b", "2026-01-01T00:05:35+00:00"],
        ["3", "node-c", "2026-01-01T00:06:11+00:00"],
        ["4", "node-d", "2026-01-01T00:06:13+00:00"],
    ]
    assert runs[4].endswith("retrying   lease of node node-b expired")
    assert runs[7:] == [
        "    output of attempt 1:",
        "      fetched 0 of 42",
        "    output:",
        "      rows: 42",
    ]
    bad = await apgpulse("runs", "flaky", "--attempts", "--limit", "0", dsn=dsn)
    assert bad.returncode == 2 and bad.stdout == ""


async def test_dashboard_cluster_page_shows_handlers_and_the_shard_map(store: Store) -> None:
    await store.register_node("n1", hostname="h1", pid=1, slots=4, handlers=["etl", "mailer"])
    await store.register_node("n2", hostname="h2", pid=2, slots=4, handlers=["etl"])
    await store.heartbeat("n1", running=0, shards=list(range(0, 32)), ttl=10)
    await store.heartbeat("n2", running=0, shards=[*range(31, 60)], ttl=10)  # 31 contested
    async with api_client(store) as client:
        await signed_in(client, await make_token(store, admin=True))
        page = html.unescape((await client.get("/ui/cluster")).text)
    assert (
        '<td class="handlers" data-testid="handlers-n1"><code>etl</code> <code>mailer</code>'
        in (page)
    )
    shards = {
        int(part.split('data-shard="')[1].split('"')[0]): part
        for part in page.split('class="shard ')[1:]
    }
    assert len(shards) == 64
    assert shards[0].startswith('owner-0"') and 'data-owner="n1"' in shards[0]
    assert shards[40].startswith('owner-1"') and 'data-owner="n2"' in shards[40]
    assert shards[31].startswith("owner-0 contested") and 'data-owner="n1 n2"' in shards[31]
    assert shards[63].startswith('unowned"') and "shard 63: no live owner" in shards[63]


async def test_dashboard_tells_a_stopped_node_from_a_lost_one(store: Store, db: Any) -> None:
    """A node stopped by SIGTERM said so and is 'stopped' (nothing to do); one killed is 'lost'
    and needs attention on the jobs page; neither is shown 'dead'."""
    for node in ("live", "stopped", "killed"):
        await store.register_node(node, hostname="h", pid=1, slots=4, handlers=["etl"], ttl=10)
        await store.heartbeat(node, running=0, shards=[], ttl=10)
    await store.stop_node("stopped", hostname="h", pid=1)
    db.execute(
        "UPDATE pgpulse_nodes SET last_heartbeat = now() - interval '5 minutes' "
        "WHERE node_id IN ('stopped', 'killed')"
    )
    async with api_client(store) as client:
        await signed_in(client, await make_token(store, admin=True))
        cluster = html.unescape((await client.get("/ui/cluster")).text)
        jobs = html.unescape((await client.get("/ui/")).text)
    states = {
        part.split('"')[0]: part.split(">", 1)[1].split("<", 1)[0]
        for part in cluster.split('data-testid="state-')[1:]
    }
    assert states == {"live": "alive", "stopped": "stopped", "killed": "lost"}
    assert "dead" not in cluster
    assert 'data-testid="lost-killed"' in jobs and "node killed" in jobs
    assert 'data-testid="lost-stopped"' not in jobs and 'data-testid="lost-live"' not in jobs
    assert "silent for 5" in jobs


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _plan_nodes(child))]


async def test_a_page_of_runs_reads_one_page_not_the_whole_history(store: Store, db: Any) -> None:
    """The runs and job pages refresh every two seconds: a page must walk an index to the
    page's end, not scan and sort every run kept (as ORDER BY over the UNION ALL view did)."""
    [job_id] = await add(store, spec("every-second", schedule="@every 1s"), now=T0)
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
        "finished_at) SELECT %s, %s + make_interval(secs => g), 1, 'succeeded', "
        "%s + make_interval(secs => g), %s + make_interval(secs => g) "
        "FROM generate_series(1, 20000) g",
        (job_id, T0, T0, T0),
    )
    db.execute("ANALYZE pgpulse_runs")
    db.execute("ANALYZE pgpulse_jobs")
    params: dict[str, Any] = dict.fromkeys(
        ("tenant", "run_id", "outcome", "handler", "source", "q", "since", "until", "before_id")
    )
    for job, statement in itertools.product((None, job_id), ("runs_recorded", "runs_running")):
        [[plan]] = (
            db.execute(
                "EXPLAIN (FORMAT JSON) " + QUERIES[statement],
                {**params, "job_id": job, "limit": 51},
            )
            .fetchone()
            .values()
        )
        scans = [  # the history's partitions (one a day, and the default one: migration 0023)
            n["Node Type"]
            for n in _plan_nodes(plan["Plan"])
            if str(n.get("Relation Name", "")).startswith("pgpulse_runs")
        ]
        assert scans and "Seq Scan" not in scans, (statement, scans)
    rows = await Reads(store.pool).runs(tenant=None, limit=3)
    assert [r["scheduled_for"] for r in rows] == [
        T0 + timedelta(seconds=s) for s in (20000, 19999, 19998)
    ]


async def test_dashboard_filters_take_every_status_and_outcome_the_api_takes(
    store: Store, db: Any
) -> None:
    """One list of statuses and outcomes for both edges: a completed job and a cancelled run
    (overlap replace) are found by the dashboard's filters as by the API's (t16, WRONG 2)."""
    [done_id, _] = await add(store, spec("once-done"), spec("still-on"), now=T0)
    db.execute("UPDATE pgpulse_jobs SET status = 'completed' WHERE id = %s", (done_id,))
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, finished_at, error)"
        " VALUES (%s, %s, 1, 'cancelled', %s, 'replaced by the occurrence at ...')",
        (done_id, T0, LATER),
    )
    token = await make_token(store, "default")
    async with api_client(store, token) as client:
        await signed_in(client, token)
        jobs = await client.get("/ui/", params={"status": "completed"})
        runs = await client.get("/ui/runs", params={"outcome": "cancelled"})
        api_jobs = await client.get("/api/v1/jobs", params={"status": "completed"})
        api_runs = await client.get("/api/v1/runs", params={"outcome": "cancelled"})
        bad = await client.get("/ui/runs", params={"outcome": "lost"})
    assert jobs.status_code == 200, jobs.text
    assert 'data-job="once-done"' in jobs.text and 'data-job="still-on"' not in jobs.text
    assert "<option selected>completed</option>" in jobs.text  # the dropdown offers it
    assert runs.status_code == 200, runs.text
    assert (
        'data-job="once-done"' in runs.text and "<option selected>cancelled</option>" in runs.text
    )
    assert [j["name"] for j in api_jobs.json()["items"]] == ["once-done"]
    assert [r["outcome"] for r in api_runs.json()["items"]] == ["cancelled"]
    assert bad.status_code == 422
    assert (
        "outcome 'lost' is not one of running, retrying, succeeded, failed, skipped, fenced, "
        "cancelled" in html.unescape(bad.text)
    )
    assert 'href="/ui/runs" data-testid="clear-filters"' in bad.text  # not "Back to jobs"


async def test_the_dashboards_pause_takes_a_reason_and_an_until_and_names_the_job(
    store: Store, db: Any
) -> None:
    """The job page's Pause button takes a reason and an until (a duration, as `job pause
    --until 2h`), and its notice names the job, the end and the reason; a bad until is refused
    in one line and pauses nothing."""
    [job_id] = await add(store, spec("nightly", schedule="0 3 * * *"), now=T0)
    async with api_client(store) as client:
        await signed_in(client, await make_token(store, admin=True))
        page = await client.get(f"/ui/jobs/{job_id}")
        assert 'data-testid="pause-reason"' in page.text
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found is not None
        csrf = found.group(1)
        refused = await client.post(
            f"/ui/jobs/{job_id}/pause",
            data={"csrf": csrf, "until": "soonish"},
            headers={"Accept": "application/json"},
        )
        assert refused.status_code == 422 and "soonish" in refused.json()["notice"]
        assert db.execute("SELECT status FROM pgpulse_jobs").fetchone() == {"status": "idle"}
        done = await client.post(
            f"/ui/jobs/{job_id}/pause",
            data={"csrf": csrf, "until": "2h", "reason": "disk swap"},
            headers={"Accept": "application/json"},
        )
    row = db.execute(
        "SELECT status, pause_reason, paused_until - now() AS left FROM pgpulse_jobs"
    ).fetchone()
    assert (row["status"], row["pause_reason"]) == ("paused", "disk swap")
    assert timedelta(minutes=119) < row["left"] <= timedelta(hours=2)
    notice = done.json()["notice"]
    assert notice.startswith("paused nightly until ") and notice.endswith(": disk swap")
