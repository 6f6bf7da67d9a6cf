"""Completion deadlines: a job's ``deadline`` and the ``deadline`` alert rule, evaluated by the
leader's alert loop at instants the test gives, delivered to a real webhook receiver and a
real SMTP server on 127.0.0.1. One event per occurrence not succeeded by its deadline — running,
retrying, waiting or not started, of the job row or an extra occurrence — and none for one that
succeeded in time; never a second, whatever evaluates again; the run goes on; and the
evaluation reads no history."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from helpers import add, pgpulse, spec
from notify_servers import HttpReceiver, SmtpReceiver, run_http_receiver, run_smtp_receiver
from pgpulse.alerts.delivery import AlertLoop
from pgpulse.alerts.store import ALERT_QUERIES, AlertStore
from pgpulse.core.egress import HttpAllowList
from pgpulse.core.errors import InvalidInput
from pgpulse.core.jobs import JobSpec
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store

LOCAL = HttpAllowList.parse(["127.0.0.1"])
#: The job's deadline in the tests, seconds.
DEADLINE = 60.0


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    yield from run_http_receiver()


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    yield from run_smtp_receiver()


class Clock:
    """The instant the alert loop takes as now, moved by the test (docs/design.md, invariant 1:
    the database decides; the test pins what it decides with)."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def _t0(db: Any) -> datetime:
    """The database's now, to the second: triggers and backfills are queued at it."""
    instant: datetime = db.execute("SELECT date_trunc('second', now()) AS t").fetchone()["t"]
    return instant


async def _setup(
    store: Store, db: Any, receiver: HttpReceiver, **job: Any
) -> tuple[AlertLoop, Clock, int, datetime]:
    """An hourly job ``report`` with a deadline, the default ``deadline`` rule to webhook
    ``hook``, and the leader's alert loop on a pinned clock."""
    alerts = AlertStore(store.pool)
    await alerts.add_notifier("hook", "webhook", {"url": receiver.url("/hook")}, allow=LOCAL)
    [job_id] = await add(store, spec("report", schedule="0 * * * *", deadline=DEADLINE, **job))
    await alerts.set_rule("deadline", ["hook"])
    t0 = _t0(db)
    clock = Clock(t0)
    loop = AlertLoop(alerts, "n1", leading=lambda: True, allow=LOCAL, now=clock)
    return loop, clock, job_id, t0


def _hold(db: Any, job_id: int, at: datetime, state: str) -> None:
    """Put the job row's current occurrence ``at`` in ``state``: ``running`` (leased by node
    n9, attempt 1), ``retrying`` (attempt 1 failed, the next one due in 5 minutes) or
    ``not_started`` (due, unclaimed)."""
    if state == "running":
        db.execute(
            "UPDATE pgpulse_jobs SET status = 'running', scheduled_for = %s, next_run_at = %s, "
            "attempt = 1, run_id = 4242, locked_by = 'n9', claimed_at = %s, "
            "lease_expires_at = %s WHERE id = %s",
            (at, at, at, at + timedelta(hours=1), job_id),
        )
        return
    retrying = state == "retrying"
    db.execute(
        "UPDATE pgpulse_jobs SET status = 'idle', scheduled_for = %s, next_run_at = %s, "
        "attempt = %s, run_id = %s, locked_by = NULL, lease_expires_at = NULL WHERE id = %s",
        (
            at,
            at + timedelta(minutes=5 if retrying else 0),
            1 if retrying else 0,
            4242 if retrying else None,
            job_id,
        ),
    )


async def _tick(loop: AlertLoop, clock: Clock, at: datetime) -> int:
    """One evaluation and delivery round of the loop at ``at``; the deliveries it started."""
    clock.at = at
    started = await loop.tick()
    await loop.wait_idle()
    return started


def _events(db: Any) -> list[dict[str, Any]]:
    return list(
        db.execute(
            "SELECT dedupe_key, rule, job_id, scheduled_for, run_id, details, fired_at "
            "FROM pgpulse_alert_events ORDER BY id"
        ).fetchall()
    )


def _epoch(at: datetime) -> str:
    return f"{int(at.timestamp())}.000000"


@pytest.mark.parametrize("state", ["running", "retrying", "not_started"])
async def test_an_occurrence_held_past_its_deadline_alerts_once(
    store: Store, db: Any, receiver: HttpReceiver, state: str
) -> None:
    loop, clock, job_id, t0 = await _setup(store, db, receiver)
    _hold(db, job_id, t0, state)
    assert await _tick(loop, clock, t0 + timedelta(seconds=DEADLINE - 1)) == 0
    assert await _tick(loop, clock, t0 + timedelta(seconds=DEADLINE + 5)) == 1
    [request] = receiver.requests
    document = request.json()
    assert (document["rule"], document["state"]) == ("deadline", "firing")
    assert document["job"] == {"tenant": "default", "name": "report", "id": job_id}
    assert document["occurrence"]["scheduled_for"] == t0.isoformat()
    assert document["details"] == {
        "deadline_seconds": DEADLINE,
        "state": state,
        "kind": "scheduled",
        "over_by_seconds": 5.0,
    }
    [event] = _events(db)
    assert event["dedupe_key"] == f"job/{job_id}/deadline/{_epoch(t0)}"
    assert event["run_id"] == (None if state == "not_started" else 4242)
    # Exactly once: the next evaluations, and another leader's (a restart's), fire nothing.
    assert await _tick(loop, clock, t0 + timedelta(seconds=DEADLINE + 30)) == 0
    other = AlertLoop(loop.store, "n2", leading=lambda: True, allow=LOCAL, now=clock)
    assert await other.tick() == 0
    await other.aclose()
    await loop.aclose()
    assert len(receiver.requests) == 1 and len(_events(db)) == 1
    # The run goes on: the alert changed nothing of the job.
    row = db.execute(
        "SELECT status, attempt, scheduled_for FROM pgpulse_jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert (row["status"] == "running") == (state == "running")
    assert (row["attempt"], row["scheduled_for"]) == (0 if state == "not_started" else 1, t0)


async def test_a_success_before_the_deadline_sends_nothing(
    store: Store, db: Any, receiver: HttpReceiver
) -> None:
    loop, clock, job_id, t0 = await _setup(store, db, receiver)
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
        "finished_at) VALUES (%s, %s, 1, 'succeeded', %s, %s)",
        (job_id, t0, t0, t0 + timedelta(seconds=DEADLINE - 1)),
    )
    _hold(db, job_id, t0 + timedelta(hours=1), "not_started")  # moved on to the next one
    for seconds in (DEADLINE - 30, DEADLINE + 1, DEADLINE + 50):
        assert await _tick(loop, clock, t0 + timedelta(seconds=seconds)) == 0
    await loop.aclose()
    assert receiver.requests == [] and _events(db) == []


async def test_a_run_that_ends_after_its_deadline_between_two_evaluations_alerts_once(
    store: Store, db: Any, receiver: HttpReceiver
) -> None:
    """The evaluation before the deadline saw it running, the next one sees it ended: it was
    still running at its deadline, so it alerts; a run seen running past it and then ending
    does not alert again."""
    loop, clock, job_id, t0 = await _setup(store, db, receiver)
    _hold(db, job_id, t0, "running")
    assert await _tick(loop, clock, t0 + timedelta(seconds=DEADLINE - 5)) == 0
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
        "finished_at) VALUES (%s, %s, 1, 'succeeded', %s, %s)",
        (job_id, t0, t0, t0 + timedelta(seconds=DEADLINE + 2)),
    )
    _hold(db, job_id, t0 + timedelta(hours=1), "not_started")
    assert await _tick(loop, clock, t0 + timedelta(seconds=DEADLINE + 5)) == 1
    [request] = receiver.requests
    assert request.json()["details"] == {
        "deadline_seconds": DEADLINE,
        "state": "ended_succeeded",
        "kind": "scheduled",
        "over_by_seconds": 2.0,
    }
    assert await _tick(loop, clock, t0 + timedelta(seconds=DEADLINE + 20)) == 0
    await loop.aclose()
    assert [e["dedupe_key"] for e in _events(db)] == [f"job/{job_id}/deadline/{_epoch(t0)}"]


async def test_extra_occurrences_are_held_to_the_deadline_a_backfill_from_when_queued(
    store: Store, db: Any, receiver: HttpReceiver
) -> None:
    """A trigger counts from its scheduled_for (when it was asked for), a backfilled occurrence
    from when it was queued (its scheduled_for is hours ago); each fires once, by its run id."""
    loop, clock, job_id, t0 = await _setup(store, db, receiver)
    _hold(db, job_id, t0 + timedelta(hours=1), "not_started")  # the job row is not due
    control = RunControl(store.pool)
    triggered = await control.trigger("default", "report", {})
    hour = t0.replace(minute=0, second=0)
    plan = await control.backfill(
        "default", "report", start=hour - timedelta(hours=3), end=hour - timedelta(hours=2),
        only=("all",),
    )  # fmt: skip
    assert len(plan.selected) == 2
    db.execute("UPDATE pgpulse_occurrences SET attempt = 1 WHERE kind = 'trigger'")
    queued = db.execute("SELECT max(created_at) AS t FROM pgpulse_occurrences").fetchone()["t"]
    start = max(queued, triggered.scheduled_for)
    assert await _tick(loop, clock, start + timedelta(seconds=DEADLINE - 1)) == 0
    # One job's events reach a notifier one after the other: a tick sends the next.
    sent = [await _tick(loop, clock, start + timedelta(seconds=DEADLINE + 1)) for _ in range(4)]
    assert sent == [1, 1, 1, 0]
    await loop.aclose()
    events = _events(db)
    ids = {r["id"]: r["kind"] for r in db.execute("SELECT id, kind FROM pgpulse_occurrences")}
    assert sorted(e["dedupe_key"] for e in events) == sorted(
        f"job/{job_id}/deadline/run/{i}" for i in ids
    )
    states = sorted((e["details"]["kind"], e["details"]["state"]) for e in events)
    assert states == [("backfill", "waiting"), ("backfill", "waiting"), ("trigger", "retrying")]
    assert len(receiver.requests) == 3


async def test_a_forked_occurrence_keeps_the_job_rows_alert(
    store: Store, db: Any, receiver: HttpReceiver
) -> None:
    """Overlap allow forks the job row's running occurrence into pgpulse_occurrences (same
    run id): it is the same occurrence, and alerts no second time."""
    loop, clock, job_id, t0 = await _setup(store, db, receiver)
    _hold(db, job_id, t0, "running")
    assert await _tick(loop, clock, t0 + timedelta(seconds=DEADLINE + 1)) == 1
    batch = db.execute(
        "INSERT INTO pgpulse_batches (job_id, kind) VALUES (%s, 'overlap') RETURNING id",
        (job_id,),
    ).fetchone()["id"]
    db.execute(
        "INSERT INTO pgpulse_occurrences (id, job_id, kind, scheduled_for, batch_id, "
        "next_run_at, attempt, locked_by, lease_expires_at) "
        "VALUES (4242, %s, 'scheduled', %s, %s, %s, 1, 'n9', %s)",
        (job_id, t0, batch, t0, t0 + timedelta(hours=1)),
    )
    _hold(db, job_id, t0 + timedelta(hours=1), "not_started")
    assert await _tick(loop, clock, t0 + timedelta(seconds=DEADLINE + 30)) == 0
    await loop.aclose()
    assert len(_events(db)) == 1 and len(receiver.requests) == 1


async def test_a_not_started_occurrence_is_mailed_through_the_jobs_own_rule(
    store: Store, db: Any, receiver: HttpReceiver, smtp: SmtpReceiver
) -> None:
    """A job's own rule replaces the default: its e-mail notifier gets the alert, the default's
    webhook none; a paused job, or one without a deadline, alerts nobody."""
    loop, clock, job_id, t0 = await _setup(store, db, receiver)
    mail = {
        "host": "127.0.0.1",
        "port": smtp.port,
        "security": "plain",
        "from": "pulse@example.com",
        "to": ["ops@example.com"],
    }
    await loop.store.add_notifier("mail", "email", mail)
    await loop.store.set_rule("deadline", ["mail"], job=("default", "report"))
    [paused, plain] = await add(
        store,
        spec("paused", schedule="0 * * * *", deadline=DEADLINE),
        spec("plain", schedule="0 * * * *"),
    )
    for held in (job_id, paused, plain):
        _hold(db, held, t0, "not_started")
    db.execute("UPDATE pgpulse_jobs SET status = 'paused' WHERE id = %s", (paused,))
    assert await _tick(loop, clock, t0 + timedelta(seconds=DEADLINE + 1)) == 1
    await loop.aclose()
    [message] = smtp.messages
    assert message.rcpt_tos == ["ops@example.com"]
    subject = " ".join(message.message["Subject"].split())
    assert subject == f"[Pulse] Deadline passed: default/report, occurrence {t0.isoformat()}"
    assert receiver.requests == []
    assert [e["job_id"] for e in _events(db)] == [job_id]


def test_a_deadline_is_a_job_field_with_bounds() -> None:
    job = JobSpec.create(name="r", schedule="@hourly", handler="noop", deadline=90)
    assert job.deadline == 90.0
    assert JobSpec.create(name="r", schedule="@hourly", handler="noop").deadline is None
    with pytest.raises(InvalidInput, match="deadline must be a number from 1 to") as refused:
        JobSpec.create(name="r", schedule="@hourly", handler="noop", deadline=0.5)
    assert refused.value.field == "deadline"


async def test_a_deadline_is_stored_and_read_back(store: Store, db: Any) -> None:
    await add(store, spec("report", deadline=5400))
    row = db.execute("SELECT deadline FROM pgpulse_jobs WHERE name = 'report'").fetchone()
    assert row["deadline"] == timedelta(minutes=90)
    assert (await store.get_job("default", "report"))["deadline_s"] == 5400.0


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(_plan_nodes(child))
    return nodes


async def test_the_evaluation_reads_no_history(store: Store, dsn: str, db: Any) -> None:
    """3,000 jobs with a deadline, none due, one waiting trigger, 20,000 runs of one of them
    ended long ago and 5,000 old alert events: the deadline statements scan none of those
    tables; each reads through an index, and no run at all."""
    t0 = _t0(db)
    ids = await add(
        store, *(spec(f"job-{i}", schedule="0 * * * *", deadline=DEADLINE) for i in range(3000))
    )
    await RunControl(store.pool).trigger("default", "job-0", {})
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
        "finished_at) SELECT %s, t, 1, 'succeeded', t, t + interval '1 hour' "
        "FROM generate_series(%s::timestamptz - interval '20000 hours', "
        "%s::timestamptz - interval '2 hours', interval '1 hour') AS t",
        (ids[0], t0, t0),
    )
    db.execute(
        "INSERT INTO pgpulse_alert_events (dedupe_key, job_id, rule, fired_at, details, "
        "notifiers) SELECT 'old/' || i, %s, 'late', %s, '{}', '{}' "
        "FROM generate_series(1, 5000) AS i",
        (ids[1], t0 - timedelta(days=30)),
    )
    alerts = AlertStore(store.pool)
    await alerts.add_notifier("hook", "webhook", {"url": "https://93.184.215.14/h"})
    await alerts.set_rule("deadline", ["hook"])
    params = {"now": t0 + timedelta(seconds=5), "limit": 1000, "recent": 60.0}
    tables = ("pgpulse_jobs", "pgpulse_runs", "pgpulse_alert_events")
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for table in tables:
            await conn.execute(f"ANALYZE {table}")
        for name in ("alert_deadline", "alert_deadline_ended"):
            cur = await conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + ALERT_QUERIES[name], params
            )
            row = await cur.fetchone()
            assert row is not None
            nodes = _plan_nodes(row[0][0]["Plan"])
            scans = [n for n in nodes if n.get("Relation Name") in tables]
            assert scans, nodes
            shown = [(n["Node Type"], n["Relation Name"], n["Actual Rows"]) for n in scans]
            assert all(n["Node Type"] != "Seq Scan" for n in scans), (name, shown)
            runs = [n for n in scans if n["Relation Name"] == "pgpulse_runs"]
            assert all(n["Actual Rows"] == 0 for n in runs), (name, shown)
            assert all(n["Actual Rows"] <= 1 for n in scans), (name, shown)
        await conn.rollback()


def test_the_documented_commands_set_a_deadline_and_its_rule(dsn: str, db: Any) -> None:
    """docs/alerts.md, "Deadlines", as a user types it; and their refusals: one line, exit 2,
    nothing written."""
    created = pgpulse(
        "job", "create", "report", "--schedule", "0 6 * * *", "--handler", "shell",
        "--payload", '{"command": "make-report"}', "--deadline", "2700", "--json", dsn=dsn,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["action"] == "created"
    stored = db.execute("SELECT deadline FROM pgpulse_jobs WHERE name = 'report'").fetchone()
    assert stored["deadline"] == timedelta(minutes=45)
    hook = json.dumps({"url": "https://93.184.215.14/ops"})
    added = pgpulse("notifier", "add", "ops", "--kind", "webhook", "--config", hook, dsn=dsn)
    assert added.returncode == 0, added.stderr
    rule = pgpulse("alert", "rule", "set", "deadline", "--notify", "ops", dsn=dsn)
    assert rule.returncode == 0, rule.stderr
    assert rule.stdout.startswith("set rule deadline of the cluster")
    bad = pgpulse(
        "job", "create", "other", "--schedule", "@hourly", "--handler", "shell",
        "--payload", '{"command": "x"}', "--deadline", "0.5", dsn=dsn,
    )  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "deadline" in bad.stderr and "0.5" in bad.stderr
    threshold = pgpulse(
        "alert", "rule", "set", "deadline", "--threshold", "60", "--notify", "ops", dsn=dsn
    )
    assert threshold.returncode == 2
    assert "rule 'deadline' takes no threshold" in threshold.stderr
    names = [r["name"] for r in db.execute("SELECT name FROM pgpulse_jobs").fetchall()]
    assert names == ["report"]
