"""``pgpulse why``: each fate made for real (a node run, a take-over after a lost node, a fenced
zombie's refused write, a pause, a calendar date, a superseded and a missed occurrence, a
handler no live node has, overlap, completion, deletion), and the trace's facts compared with
what happened; the daylight-saving notes; the command and the API route."""

from __future__ import annotations

import asyncio
import html
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helpers import ALL_SHARDS, add, apgpulse, run_claim, spec, utc
from pgpulse.core.audit import Actor
from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.errors import InvalidInput, JobNotFound
from pgpulse.core.schedule import parse_schedule
from pgpulse.core.why import Trace
from pgpulse.core.why_text import dst_note
from pgpulse.db.store import Store
from pgpulse.db.why import why
from pgpulse.node.handlers import NodeHandlers, RunContext
from run_control_helpers import drain, job_row
from test_engine import node, running, wait_until
from web_helpers import OWN_PAGE, api_client, make_token

T0 = utc(2026, 1, 1, 0, 0, 30)
ALICE = Actor("cli", "os:alice")


def _attempts(trace: Trace) -> list[tuple[Any, ...]]:
    """Each attempt of the trace as (attempt, node, token, outcome, fenced)."""
    return [
        (a["attempt"], a["node"], a["token"], a["outcome"], a["fenced"])
        for a in trace.facts["attempts"]
    ]


async def _noop(ctx: RunContext) -> None:
    return None


# -- ran ------------------------------------------------------------------------------------


async def test_a_node_run_names_its_node_token_and_lag(store: Store, dsn: str, db: Any) -> None:
    await add(store, spec("tick", schedule="* * * * * *"))
    async with running(node(store, dsn, {"noop": _noop}, node_id="node-a")):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
            ).fetchone()["n"]
        )
    run = db.execute(
        "SELECT * FROM pgpulse_runs WHERE outcome = 'succeeded' ORDER BY scheduled_for LIMIT 1"
    ).fetchone()
    trace = await why(store, tenant="default", name="tick", at=run["scheduled_for"])
    assert trace.occurrence == run["scheduled_for"]
    assert trace.fate == "succeeded"
    assert trace.facts["run_id"] == run["id"]
    assert _attempts(trace) == [(1, "node-a", run["fencing_token"], "succeeded", False)]
    claim = trace.facts["claim"]
    assert claim["node"] == "node-a" and claim["at"] == run["started_at"]
    assert claim["lag"] == pytest.approx((run["started_at"] - run["scheduled_for"]).total_seconds())
    assert trace.facts["scheduled"]["local"].endswith(" UTC")
    assert trace.facts["scheduled"]["daylight_saving"] is None


async def test_a_take_over_after_a_lost_node_shows_both_attempts_the_first_fenced(
    store: Store, dsn: str, db: Any
) -> None:
    await add(store, spec("billing", schedule="0 0 1 1 *"))
    occurrence = await store.trigger_job("default", "billing")
    [lost] = await store.claim_due("dead-node", ALL_SHARDS, 1, lease=30)
    # the dead node's lease runs out; a live node's leader sweep returns it and that node runs it
    db.execute("UPDATE pgpulse_jobs SET lease_expires_at = now() - interval '0.5 second'")
    async with running(node(store, dsn, {"noop": _noop}, node_id="node-b")):
        await wait_until(
            lambda: db.execute(
                "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
            ).fetchone()["n"]
        )
    run = db.execute("SELECT fencing_token FROM pgpulse_runs").fetchone()
    trace = await why(store, tenant="default", name="billing", at=occurrence)
    assert trace.fate == "succeeded"
    assert trace.facts["run_id"] == lost.run_id
    assert _attempts(trace) == [
        (1, "dead-node", lost.fencing_token, "lease lost", True),
        (2, "node-b", run["fencing_token"], "succeeded", False),
    ]
    assert run["fencing_token"] > lost.fencing_token
    assert trace.facts["claim"]["node"] == "dead-node"  # the first claim, whose lag counts
    assert any("fenced node" in u for u in trace.unknown)


async def test_a_fenced_zombies_late_write_changes_nothing_and_the_trace_says_so(
    store: Store, db: Any
) -> None:
    await add(store, spec("sync", schedule="* * * * *"), now=T0)
    at = utc(2026, 1, 1, 0, 1)
    handlers = NodeHandlers({"noop": _noop}, "zombie", {})
    [stale] = await store.claim_due("zombie", ALL_SHARDS, 1, lease=30, now=at)
    assert await store.reap_expired_leases(now=at + timedelta(seconds=31)) == 1
    [fresh] = await store.claim_due(
        "node-b", ALL_SHARDS, 1, lease=30, now=at + timedelta(seconds=32)
    )
    done = await run_claim(fresh, NodeHandlers({"noop": _noop}, "node-b", {}), at)
    assert await store.finish_runs([done], node="node-b", now=at + timedelta(seconds=33))
    # the zombie wakes and reports: refused by its stale token
    late = await run_claim(stale, handlers, at)
    assert await store.finish_runs([late], node="zombie", now=at + timedelta(seconds=34)) == set()
    trace = await why(store, tenant="default", name="sync", at=at, now=at + timedelta(seconds=40))
    assert trace.fate == "succeeded"
    assert _attempts(trace) == [
        (1, "zombie", stale.fencing_token, "lease lost", True),
        (2, "node-b", fresh.fencing_token, "succeeded", False),
    ]
    first, second = trace.facts["attempts"]
    assert first["ended_at"] == at + timedelta(seconds=31)  # when the sweep took it back
    assert first["error"] == "lease of node zombie expired"
    assert second["lag"] == 32.0
    assert "any write with token" in trace.lines()[3]


async def test_a_run_moved_by_daylight_saving_and_spread_says_both(store: Store) -> None:
    await add(
        store,
        spec("dawn", "30 2 * * *", timezone="America/New_York", spread=600, misfire_grace=900),
        now=utc(2026, 3, 7, 12),
    )
    await drain(store, utc(2026, 3, 8, 7, 10, 1))  # after 03:00 EDT plus any offset under 600 s
    trace = await why(store, tenant="default", name="dawn", at=utc(2026, 3, 8, 7, 1))
    assert trace.fate == "succeeded" and trace.occurrence == utc(2026, 3, 8, 7)
    scheduled = trace.facts["scheduled"]
    assert scheduled["local"] == "2026-03-08 03:00:00 EDT"
    assert scheduled["daylight_saving"].startswith("clocks went forward 3,600 s (1 h)")
    offset = trace.facts["spread_offset"]
    assert 0 <= offset < 600
    assert scheduled["due_at"] == utc(2026, 3, 8, 7) + timedelta(seconds=offset)
    assert trace.facts["claim"]["lag"] == pytest.approx(601 - offset)


# -- skipped ----------------------------------------------------------------------------------


async def test_a_superseded_occurrence_names_the_one_that_ran_instead(store: Store) -> None:
    await add(store, spec("feed", schedule="* * * * *", misfire_grace=3600), now=T0)
    await drain(store, T0 + timedelta(minutes=5))  # 00:01..00:04 give way to 00:05
    trace = await why(store, tenant="default", name="feed", at=utc(2026, 1, 1, 0, 2, 10))
    assert trace.occurrence == utc(2026, 1, 1, 0, 2)
    assert trace.fate == "superseded"
    skip = trace.facts["skip"]
    assert (skip["first"], skip["last"], skip["occurrences"]) == (
        utc(2026, 1, 1, 0, 1),
        utc(2026, 1, 1, 0, 4),
        4,
    )
    assert skip["superseded_by"]["scheduled_for"] == utc(2026, 1, 1, 0, 5)
    assert skip["superseded_by"]["outcome"] == "succeeded"


async def test_a_missed_occurrence_says_by_how_much_it_was_past_its_grace(store: Store) -> None:
    await add(store, spec("hourly", schedule="0 * * * *"), now=T0)  # grace 60 s
    await drain(store, utc(2026, 1, 1, 3, 30))  # 01:00, 02:00 and 03:00 all past their grace
    trace = await why(store, tenant="default", name="hourly", at=utc(2026, 1, 1, 2))
    assert trace.fate == "missed"
    skip = trace.facts["skip"]
    assert skip["occurrences"] == 3 and skip["recorded_at"] == utc(2026, 1, 1, 3, 30)
    assert (skip["late_by"], skip["grace"], skip["past_grace_by"]) == (5400.0, 60.0, 5340.0)
    assert "5,340 s (1 h 29 min) past its misfire_grace of 60 s" in trace.summary


async def test_a_calendar_date_names_the_calendar_and_its_rule(store: Store) -> None:
    await store.put_calendar("default", ExclusionCalendar.create("xmas", dates=["2026-12-25"]))
    await add(
        store,
        spec("feed", schedule="0 */6 * * *", timezone="America/New_York", calendars=["xmas"]),
        now=utc(2026, 12, 24, 23, 30),
    )
    for hours in range(0, 30, 6):
        await drain(store, utc(2026, 12, 25, 5) + timedelta(hours=hours))
    trace = await why(store, tenant="default", name="feed", at=utc(2026, 12, 25, 11))
    assert trace.fate == "calendar"
    assert trace.facts["scheduled"]["local"] == "2026-12-25 06:00:00 EST"
    skip = trace.facts["skip"]
    assert skip["reason"] == "calendar xmas" and skip["occurrences"] == 4
    assert skip["calendar"]["rule"] == "2026-12-25 is one of its listed dates"
    ran = await why(store, tenant="default", name="feed", at=utc(2026, 12, 26, 5))
    assert ran.fate == "succeeded"


# -- not run: paused, waiting, completed, deleted -------------------------------------------


async def test_a_pause_names_who_and_why_now_and_after_the_resume(store: Store, db: Any) -> None:
    await add(store, spec("report", schedule="* * * * *"))
    await store.pause_job("default", "report", reason="db migration", actor=ALICE)
    paused_at = db.execute("SELECT at FROM pgpulse_job_history WHERE action = 'pause'").fetchone()[
        "at"
    ]
    trace = await why(store, tenant="default", name="report", at=paused_at + timedelta(minutes=2))
    assert trace.fate == "paused"
    assert trace.facts["pause"] == {
        "by": "os:alice",
        "at": paused_at,
        "reason": "db migration",
        "until": None,
    }
    resumed = paused_at + timedelta(minutes=5)
    await store.resume_job("default", "report", now=resumed, actor=Actor("api", "token:7"))
    inside = paused_at + timedelta(minutes=2)
    trace = await why(store, tenant="default", name="report", at=inside, now=resumed)
    assert trace.fate == "paused"
    pause = trace.facts["pause"]
    assert (pause["by"], pause["reason"], pause["resumed_by"], pause["resumed_at"]) == (
        "os:alice",
        "db migration",
        "token:7",
        resumed,
    )
    assert pause["resume_mode"] == "skip"


async def test_an_occurrence_waiting_for_a_handler_no_live_node_has(store: Store, dsn: str) -> None:
    await add(store, spec("export", schedule="* * * * * *", handler="exporter"))
    async with running(node(store, dsn, {"noop": _noop}, node_id="node-a")):
        await asyncio.sleep(1.2)  # due, and the live node lacks the handler
        trace = await why(store, tenant="default", name="export", at=None)
    assert trace.fate == "no_handler"
    assert trace.summary == "no live node can run handler exporter"
    assert trace.facts["waiting_for"]["handler"] == "exporter"


async def test_an_occurrence_waiting_behind_a_long_run_names_that_run(
    store: Store, dsn: str, db: Any
) -> None:
    started = asyncio.Event()

    async def slow(ctx: RunContext) -> None:
        started.set()
        await asyncio.sleep(30)

    await add(store, spec("long", schedule="* * * * * *", handler="slow"))
    async with running(node(store, dsn, {"slow": slow}, node_id="node-a")):
        async with asyncio.timeout(10):
            await started.wait()
        held = job_row(db, "long")
        await asyncio.sleep(1.5)
        trace = await why(
            store, tenant="default", name="long", at=held["scheduled_for"] + timedelta(seconds=1)
        )
        holder = await why(store, tenant="default", name="long", at=held["scheduled_for"])
    assert holder.fate == "running"
    assert _attempts(holder) == [(1, "node-a", held["fencing_token"], "running", False)]
    assert trace.fate == "overlap"
    assert trace.facts["waiting_for"] == {
        "scheduled_for": held["scheduled_for"],
        "run_id": held["run_id"],
        "node": "node-a",
        "since": held["claimed_at"],
    }


async def test_a_completed_job_says_why_nothing_comes_after(store: Store) -> None:
    await add(store, spec("once", schedule="* * * * *", max_runs=1), now=T0)
    await drain(store, utc(2026, 1, 1, 0, 1, 5))
    trace = await why(store, tenant="default", name="once", at=utc(2026, 1, 1, 0, 3))
    assert trace.fate == "completed"
    assert trace.facts["completed"] == {
        "at": utc(2026, 1, 1, 0, 1, 5),
        "why": "it ran max_runs (1) times",
    }


async def test_a_deleted_job_says_when_and_by_whom(store: Store) -> None:
    await add(store, spec("gone"))
    await store.delete_job("default", "gone", actor=ALICE)
    trace = await why(store, tenant="default", name="gone", at=None)
    assert trace.fate == "deleted"
    assert trace.facts["deleted"]["by"] == "os:alice"
    with pytest.raises(JobNotFound):
        await why(store, tenant="default", name="never", at=None)
    with pytest.raises(InvalidInput, match="at 0001-01-01T00:00:00"):
        await why(store, tenant="default", name="gone", at=datetime(1, 1, 1))


# -- daylight saving (pure) --------------------------------------------------------------------


def test_a_fixed_time_in_a_skipped_hour_fires_after_the_gap_and_says_so() -> None:
    schedule = parse_schedule("30 2 * * *", "America/New_York")
    fired = schedule.next_after(utc(2026, 3, 8, 5))  # 8 March 2026: 02:00 EST -> 03:00 EDT
    assert fired == utc(2026, 3, 8, 7)  # 03:00 EDT, the first instant after the gap
    note = dst_note(schedule, fired)
    assert note is not None and note.startswith("clocks went forward 3,600 s (1 h) at 03:00 EDT")
    assert dst_note(schedule, schedule.next_after(fired)) is None  # 9 March: 02:30 exists


def test_a_repeated_hour_says_which_pass() -> None:
    fixed = parse_schedule("30 1 * * *", "America/New_York")
    fired = fixed.next_after(utc(2026, 11, 1, 4))  # 1 November: 01:00-02:00 happens twice
    assert fired == utc(2026, 11, 1, 5, 30)  # 01:30 EDT, the first pass
    assert "a fixed-time job fires on the first pass only (EDT)" in (dst_note(fixed, fired) or "")
    elapsed = parse_schedule("30 * * * *", "America/New_York")
    second = utc(2026, 11, 1, 6, 30)  # 01:30 EST
    assert "this is the second (EST)" in (dst_note(elapsed, second) or "")


# -- the command and the API ---------------------------------------------------------------------


async def test_the_command_prints_the_trace_and_json_and_refuses_bad_input(
    store: Store, dsn: str
) -> None:
    await add(store, spec("hourly", schedule="0 * * * *"), now=T0)
    await drain(store, utc(2026, 1, 1, 3, 30))
    text = await apgpulse("why", "hourly", "--at", "2026-01-01T02:00", dsn=dsn)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("hourly (default) 2026-01-01T02:00:00Z: missed — missed:")
    out = await apgpulse("why", "hourly", "--at", "2026-01-01T02:00:00+00:00", "--json", dsn=dsn)
    found = json.loads(out.stdout)
    assert (found["fate"], found["occurrence"], found["skip"]["past_grace_by"]) == (
        "missed",
        "2026-01-01T02:00:00Z",
        5340.0,
    )
    bad = await apgpulse("why", "hourly", "--at", "yesterday", dsn=dsn)
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "'yesterday'" in bad.stderr
    elsewhere = await apgpulse("why", "hourly", "--tenant", "acme", dsn=dsn)
    assert elsewhere.returncode == 2
    assert "no job named 'hourly' in tenant 'acme' (tenant 'default' has one" in elsewhere.stderr
    missing = await apgpulse("why", "nosuch", dsn=dsn)
    assert missing.returncode == 2 and "no job named 'nosuch'" in missing.stderr


async def test_the_api_answers_the_trace_to_the_jobs_tenant_only(store: Store) -> None:
    await add(store, spec("hourly", schedule="0 * * * *"), now=T0)
    await drain(store, utc(2026, 1, 1, 3, 30))
    [job] = await store.list_jobs("default")
    path, at = f"/api/v1/jobs/{job['id']}/why", {"at": "2026-01-01T02:00:00Z"}
    async with api_client(store, await make_token(store, "default")) as client:
        ok = await client.get(path, params=at)
        assert ok.status_code == 200, ok.text
        assert (ok.json()["fate"], ok.json()["skip"]["late_by"]) == ("missed", 5400.0)
        assert ok.json()["lines"][0].startswith("hourly (default) 2026-01-01T02:00:00Z: missed")
        bad = await client.get(path, params={"at": "soon"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "at"
    async with api_client(store, await make_token(store, "other")) as client:
        assert (await client.get(path, params=at)).status_code == 404


async def test_the_dashboard_links_occurrences_and_runs_to_their_trace(store: Store) -> None:
    await add(store, spec("hourly", schedule="0 * * * *"), now=T0)
    await drain(store, utc(2026, 1, 1, 3, 30))
    [skipped] = [r for r in await store.list_runs(name="hourly") if r["outcome"] == "skipped"]
    [waiting] = await add(store, spec("export", schedule="* * * * * *", handler="exporter"))
    await asyncio.sleep(2.2)  # due occurrences without a run: no node is up
    async with api_client(store) as client:
        login = await client.post(
            "/ui/login", data={"token": await make_token(store, "default")}, headers=OWN_PAGE
        )
        assert login.status_code == 303
        run_page = (await client.get(f"/ui/runs/{skipped['id']}")).text
        link = re.search(r'href="(/ui/jobs/\d+/why\?at=[^"]+)" data-testid="run-why"', run_page)
        assert link is not None
        trace = await client.get(html.unescape(link.group(1)))
        assert trace.status_code == 200
        assert 'data-testid="why-fate">missed<' in trace.text
        job_page = (await client.get(f"/ui/jobs/{waiting}")).text
        cell = re.search(rf'href="(/ui/jobs/{waiting}/why\?at=[^"]+)"', job_page)
        assert cell is not None
        trace = await client.get(html.unescape(cell.group(1)))
        assert 'data-testid="why-fate">no_handler<' in trace.text
        bad = await client.get(f"/ui/jobs/{waiting}/why", params={"at": "soon"})
        assert bad.status_code == 422
    async with api_client(store) as other:
        await other.post(
            "/ui/login", data={"token": await make_token(store, "other")}, headers=OWN_PAGE
        )
        assert (await other.get(f"/ui/jobs/{waiting}/why")).status_code == 404


def test_trace_json_has_instants_as_text() -> None:
    trace = Trace("default", "x", 1, datetime(2026, 1, 1, tzinfo=UTC), None)
    assert trace.as_json()["at"] == "2026-01-01T00:00:00Z"
