"""Runs that follow runs against a real PostgreSQL (docs/chains.md): a downstream occurrence per
succeeded upstream run, exactly once however often the outcome is sent; the join of several
upstreams and its timeout; a failed upstream's skipped row; a backfill flowing down; cycles and
unknown upstreams refused at write time, naming the field."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from helpers import ALL_SHARDS, add, spec, utc
from pgpulse.core.errors import InvalidInput
from pgpulse.core.model import ClaimedJob, Outcome
from pgpulse.core.planner import Advance
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from pgpulse.db.tokens import TokenStore
from test_cli import cli
from web_helpers import api_client, make_token

T0 = utc(2026, 1, 1, 3)
LATER = utc(2026, 1, 1, 3, 0, 5)


def runs(db: Any, name: str) -> list[tuple[str, str, Any, str | None]]:
    """(kind, outcome, scheduled_for, error) of job ``name``'s runs, in id order."""
    rows = db.execute(
        "SELECT r.kind, r.outcome, r.scheduled_for, r.error FROM pgpulse_runs r "
        "JOIN pgpulse_jobs j ON j.id = r.job_id WHERE j.name = %s ORDER BY r.id",
        [name],
    )
    return [(r["kind"], r["outcome"], r["scheduled_for"], r["error"]) for r in rows]


def pending(db: Any, name: str) -> list[tuple[str, Any, list[int] | None]]:
    """(kind, scheduled_for, upstream_runs) of job ``name``'s pending extra occurrences."""
    rows = db.execute(
        "SELECT o.kind, o.scheduled_for, o.upstream_runs FROM pgpulse_occurrences o "
        "JOIN pgpulse_jobs j ON j.id = o.job_id WHERE j.name = %s ORDER BY o.id",
        [name],
    )
    return [(r["kind"], r["scheduled_for"], r["upstream_runs"]) for r in rows]


async def claim(store: Store, now: Any = T0) -> list[ClaimedJob]:
    """Every due job row, claimed by node-a at ``now``."""
    return await store.claim_due("node-a", ALL_SHARDS, 10, lease=60.0, now=now)


async def claim_extra(store: Store, now: Any = LATER) -> list[ClaimedJob]:
    """Every due extra occurrence, claimed by node-a at ``now``."""
    routes = {"work": tuple(ALL_SHARDS)}
    step = await store.finish_and_claim_occurrences((), "node-a", routes, 10, lease=60.0, now=now)
    return step.jobs


def ended(job: ClaimedJob, outcome: str = "succeeded") -> Outcome:
    """The final outcome of ``job``'s attempt (a job row moves on a day)."""
    advance = Advance(job.scheduled_for + timedelta(days=1)) if job.occurrence is None else None
    return Outcome(job, outcome, advance=advance, error=None if outcome == "succeeded" else "boom")  # type: ignore[arg-type]


async def chain(store: Store, *specs: Any) -> None:
    await add(store, *specs, now=T0 - timedelta(seconds=1))


async def extract_then_load(store: Store, **upstream: Any) -> None:
    """The chain extract (03:00 daily, with ``upstream``'s fields) → load (after it only)."""
    await chain(
        store,
        spec("extract", schedule="0 3 * * *", handler="work", **upstream),
        spec("load", schedule="@after", handler="work", after=["extract"]),
    )


async def test_each_succeeded_upstream_run_gives_one_downstream_occurrence_even_sent_twice(
    store: Store, db: Any
) -> None:
    await extract_then_load(store)
    [up] = await claim(store)
    assert up.downstreams
    done = ended(up)
    assert await store.finish_runs([done], node="node-a", now=LATER)
    # the same outcome sent again (a lost commit acknowledgement): fenced, and flows no more
    assert not await store.finish_runs([done], node="node-a", now=LATER)
    assert pending(db, "load") == [("after", T0, [up.run_id])]
    [down] = await claim_extra(store)
    assert (down.name, down.kind, down.scheduled_for) == ("load", "after", T0)
    assert down.upstream_runs == [up.run_id]
    assert down.data_interval_start == utc(2025, 12, 31, 3)
    assert await store.finish_runs([ended(down)], node="node-a", now=LATER)
    assert runs(db, "load") == [("after", "succeeded", T0, None)]
    flows = db.execute("SELECT upstream_run_id FROM pgpulse_flows").fetchall()
    assert [f["upstream_run_id"] for f in flows] == [up.run_id]


async def test_a_chain_of_three_shares_the_upstreams_scheduled_for(store: Store, db: Any) -> None:
    await chain(
        store,
        spec("a", schedule="0 3 * * *", handler="work"),
        spec("b", schedule="@after", handler="work", after=["a"]),
        spec("c", schedule="@after", handler="work", after=["b"]),
    )
    [a] = await claim(store)
    await store.finish_runs([ended(a)], node="node-a", now=LATER)
    [b] = await claim_extra(store)
    assert b.downstreams  # c follows b
    await store.finish_runs([ended(b)], node="node-a", now=LATER)
    [c] = await claim_extra(store)
    assert (c.name, c.scheduled_for, c.upstream_runs) == ("c", T0, [b.run_id])
    assert c.data_interval_start == utc(2025, 12, 31, 3)  # a's interval, carried down


async def test_a_failed_upstream_gives_a_skipped_row_naming_it(store: Store, db: Any) -> None:
    await extract_then_load(store, max_attempts=1)
    [up] = await claim(store)
    await store.finish_runs([ended(up, "failed")], node="node-a", now=LATER)
    assert pending(db, "load") == []
    [(kind, outcome, at, error)] = runs(db, "load")
    assert (kind, outcome, at) == ("after", "skipped", T0)
    assert error == f"upstream 'extract' (run {up.run_id}) did not succeed"


async def test_two_upstreams_join_on_the_same_scheduled_for(store: Store, db: Any) -> None:
    await chain(
        store,
        spec("orders", schedule="0 3 * * *", handler="work"),
        spec("users", schedule="0 3 * * *", handler="work"),
        spec("report", schedule="@after", handler="work", after=["orders", "users"]),
    )
    orders, users = sorted(await claim(store), key=lambda j: j.name)
    await store.finish_runs([ended(orders)], node="node-a", now=LATER)
    assert pending(db, "report") == []  # waiting for users
    await store.finish_runs([ended(users)], node="node-a", now=LATER)
    [(kind, at, upstreams)] = pending(db, "report")
    assert (kind, at, sorted(upstreams or [])) == (
        "after",
        T0,
        sorted([orders.run_id, users.run_id]),
    )


async def test_a_join_past_its_after_timeout_is_recorded_skipped(store: Store, db: Any) -> None:
    await chain(
        store,
        spec("orders", schedule="0 3 * * *", handler="work"),
        spec("users", schedule="0 4 * * *", handler="work"),
        spec(
            "report",
            schedule="@after",
            handler="work",
            after=["orders", "users"],
            after_timeout=600,
        ),
    )
    [orders] = await claim(store)
    await store.finish_runs([ended(orders)], node="node-a", now=LATER)
    assert await store.reap_expired_leases(now=LATER + timedelta(seconds=599)) == 0
    assert runs(db, "report") == []
    await store.reap_expired_leases(now=LATER + timedelta(seconds=601))
    [(kind, outcome, at, error)] = runs(db, "report")
    assert (kind, outcome, at) == ("after", "skipped", T0)
    assert error == "after_timeout (600 s) passed waiting for upstream 'users'"
    assert pending(db, "report") == []


async def test_a_backfill_of_the_upstream_flows_down(store: Store, db: Any) -> None:
    await extract_then_load(store)
    earlier = [utc(2025, 12, 30, 3), utc(2025, 12, 31, 3)]
    await RunControl(store.pool).backfill(
        "default",
        "extract",
        start=earlier[0],
        end=earlier[1],
        only=("all",),
        max_concurrency=2,
        now=T0,
    )
    ups = await claim_extra(store, now=LATER)
    await store.finish_runs([ended(u) for u in ups], node="node-a", now=LATER)
    assert [at for _, at, _ in pending(db, "load")] == earlier


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (
            [("a", ["c"]), ("b", ["a"]), ("c", ["b"])],
            "after would make a cycle: ",
        ),
        ([("a", ["nowhere"])], "after names job 'nowhere', which tenant 'default' does not have"),
    ],
)
async def test_cycles_and_unknown_upstreams_are_refused_writing_nothing(
    store: Store, db: Any, specs: list[tuple[str, list[str]]], message: str
) -> None:
    made = [spec(n, schedule="@after", handler="work", after=after) for n, after in specs]
    with pytest.raises(InvalidInput, match=message) as refused:
        await add(store, *made)
    assert refused.value.field == "after"
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0


async def test_a_cycle_closed_by_a_later_write_names_it(store: Store, db: Any) -> None:
    await add(
        store,
        spec("a", schedule="0 3 * * *", handler="work"),
        spec("b", schedule="@after", handler="work", after=["a"]),
        spec("c", schedule="@after", handler="work", after=["b"]),
    )
    with pytest.raises(InvalidInput) as refused:
        await add(store, spec("a", schedule="0 3 * * *", handler="work", after=["c"]))
    assert str(refused.value) == "after would make a cycle: a → b → c → a"
    row = db.execute("SELECT after, revision FROM pgpulse_jobs WHERE name = 'a'").fetchone()
    assert (row["after"], row["revision"]) == ([], 1)


def test_the_cli_writes_a_chain_shows_it_and_refuses_a_cycle_in_one_line(dsn: str, db: Any) -> None:
    base = ["--handler", "shell", "--payload", '{"command": "true"}']
    assert cli(dsn, "job", "create", "extract", "--schedule", "0 3 * * *", *base).exit_code == 0
    made = cli(dsn, "job", "create", "load", "--schedule", "@after", "--after", "extract", *base)
    assert made.exit_code == 0, made.output
    shown = cli(dsn, "job", "show", "extract")
    assert "downstreams" in shown.output and "load" in shown.output, shown.output
    shown = cli(dsn, "job", "show", "load")
    assert "upstreams" in shown.output and "extract" in shown.output, shown.output
    assert "only after its upstreams" in shown.output
    as_json = json.loads(cli(dsn, "job", "show", "extract", "--json").output)
    assert (as_json["downstreams"], as_json["after"]) == (["load"], [])
    before = db.execute("SELECT name, after, revision FROM pgpulse_jobs ORDER BY name").fetchall()
    refused = cli(
        dsn, "job", "create", "extract", "--schedule", "0 3 * * *", "--after", "load", *base
    )
    assert refused.exit_code == 2, refused.output
    assert refused.output == (
        "error: invalid value for --after: would make a cycle: extract → load → extract\n"
    )
    unknown = cli(dsn, "job", "create", "x", "--schedule", "@after", "--after", "nope", *base)
    assert unknown.exit_code == 2
    assert unknown.output.startswith("error: invalid value for --after: names job 'nope'")
    after = db.execute("SELECT name, after, revision FROM pgpulse_jobs ORDER BY name").fetchall()
    assert after == before


def test_an_apply_file_with_a_cycle_writes_nothing(dsn: str, db: Any, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        '[jobs.a]\nschedule = "@after"\nafter = ["b"]\nhandler = "shell"\n'
        'payload = { command = "true" }\n'
        '[jobs.b]\nschedule = "@after"\nafter = ["a"]\nhandler = "shell"\n'
        'payload = { command = "true" }\n'
    )
    for dry_run in (["--dry-run"], []):  # a dry run refuses what the real one refuses
        result = cli(dsn, "apply", *dry_run, str(jobs))
        assert result.exit_code == 2, result.output
        assert "after would make a cycle: " in result.output
        assert result.output.count("\n") == 1
        assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM pgpulse_job_history").fetchone()["n"] == 0
    good = tmp_path / "good.toml"
    good.write_text(
        '[jobs.a]\nschedule = "0 3 * * *"\nhandler = "shell"\npayload = { command = "true" }\n'
        '[jobs.b]\nschedule = "@after"\nafter = ["a"]\nafter_timeout = 60\nhandler = "shell"\n'
        'payload = { command = "true" }\n'
    )
    assert cli(dsn, "apply", str(good)).exit_code == 0
    row = db.execute("SELECT after, after_timeout FROM pgpulse_jobs WHERE name = 'b'").fetchone()
    assert (row["after"], row["after_timeout"]) == (["a"], timedelta(seconds=60))


async def test_the_api_refuses_a_cycle_with_422_naming_after(store: Store, db: Any) -> None:
    token = await make_token(store, "acme")
    body = {"handler": "http", "payload": {"url": "https://93.184.215.14/hook"}}
    async with api_client(store, token) as client:
        made = await client.post("/api/v1/jobs", json={"name": "a", "schedule": "@daily", **body})
        assert made.status_code in (200, 201), made.text
        made = await client.post(
            "/api/v1/jobs", json={"name": "b", "schedule": "@after", "after": ["a"], **body}
        )
        assert made.status_code in (200, 201), made.text
        refused = await client.post(
            "/api/v1/jobs", json={"name": "a", "schedule": "@daily", "after": ["b"], **body}
        )
        shown = await client.get(f"/api/v1/jobs/{made.json()['id']}")
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["field"], error["message"]) == ("after", "after would make a cycle: a → b → a")
    assert shown.json()["after"] == ["a"]
    assert db.execute("SELECT after FROM pgpulse_jobs WHERE name = 'a'").fetchone()["after"] == []


async def test_the_dashboards_job_page_shows_upstreams_and_downstreams(store: Store) -> None:
    secret, _ = await TokenStore(store.pool).create(tenant=None, admin=True, label="ops")
    await add(
        store,
        spec("orders", schedule="0 3 * * *", handler="work"),
        spec("users", schedule="0 3 * * *", handler="work"),
        spec("report", schedule="@after", handler="work", after=["orders", "users"]),
    )
    ids = {name: (await store.get_job("default", name))["id"] for name in ("orders", "report")}
    async with api_client(store) as client:
        client.cookies.set("pgpulse_token", secret, path="/ui")
        upstream = await client.get(f"/ui/jobs/{ids['orders']}")
        downstream = await client.get(f"/ui/jobs/{ids['report']}")
    assert (
        '<dd data-testid="job-downstreams">report run after each of its succeeded runs</dd>'
        in upstream.text
    )
    assert (
        '<dd data-testid="job-upstreams">runs after each succeeded run of orders, users '
        "(all of them, within 1 h of the first)</dd>" in downstream.text
    ), downstream.text


async def test_two_upstreams_ending_at_once_make_one_occurrence(store: Store, db: Any) -> None:
    """Two nodes write the two upstreams' outcomes at the same time (two sessions): the join's
    upsert makes the second wait for the first and see its name, so exactly one of them
    releases the occurrence, whichever commits first. A downstream with a clock of its own
    keeps it."""
    await chain(
        store,
        spec("orders", schedule="0 3 * * *", handler="work"),
        spec("users", schedule="0 3 * * *", handler="work"),
        spec("report", schedule="0 5 * * *", handler="work", after=["orders", "users"]),
    )
    for _ in range(5):
        jobs = sorted(await claim(store, now=db_now(db)), key=lambda j: j.name)
        orders, users = [j for j in jobs if j.name in ("orders", "users")]
        await asyncio.gather(
            store.finish_runs([ended(orders)], node="node-a", now=LATER),
            store.finish_runs([ended(users)], node="node-b", now=LATER),
        )
    made = pending(db, "report")
    assert [kind for kind, _, _ in made] == ["after"] * 5
    assert len({at for _, at, _ in made}) == 5
    row = db.execute("SELECT scheduled_for FROM pgpulse_jobs WHERE name = 'report'").fetchone()
    assert row["scheduled_for"] == utc(2026, 1, 1, 5)  # its own clock, as before


def db_now(db: Any) -> Any:
    """The instant at which both upstreams' next occurrence is due."""
    row = db.execute("SELECT max(next_run_at) AS at FROM pgpulse_jobs WHERE name <> 'report'")
    return row.fetchone()["at"]


async def test_an_upstream_deleted_and_created_again_still_flows_down(
    store: Store, db: Any
) -> None:
    await extract_then_load(store)
    await store.delete_job("default", "extract")
    await chain(store, spec("extract", schedule="0 3 * * *", handler="work"))
    [up] = await claim(store)
    assert up.downstreams
    await store.finish_runs([ended(up)], node="node-a", now=LATER)
    assert pending(db, "load") == [("after", T0, [up.run_id])]
