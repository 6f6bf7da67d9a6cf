"""The user's client: ``pgpulse.connect()`` and its operations, end to end on
a real PostgreSQL (the database's own clock), and its refusals: one error naming the field,
nothing written."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

import pgpulse
from pgpulse.client import Client, Job
from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.errors import InvalidInput, InvalidSchedule, JobNotFound, UnknownHandler
from pgpulse.db.calendar_store import CalendarNotFound
from pgpulse.db.run_control import Triggered
from pgpulse.db.store import Store
from run_control_helpers import drain


def db_now(db: Any) -> datetime:
    now: datetime = db.execute("SELECT now() AS now").fetchone()["now"]
    return now


def count(db: Any, table: str) -> int:
    n: int = db.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]
    return n


async def test_a_client_creates_lists_pauses_resumes_triggers_and_deletes(
    dsn: str, db: Any, store: Store
) -> None:
    async with pgpulse.connect(dsn) as client:
        assert isinstance(client, pgpulse.Client)
        assert await client.jobs() == []
        job = await client.add_job(
            "tick", schedule="* * * * *", handler="noop", extra_handlers=["noop"], timeout=30
        )
        assert (job.name, job.tenant, job.status, job.handler) == (
            "tick",
            "default",
            "idle",
            "noop",
        )
        assert job.scheduled_for > db_now(db) - timedelta(seconds=1)
        assert await client.jobs() == [job] == [await client.job("tick")]

        # read-modify-write of the whole definition
        spec = await client.definition("tick")
        assert spec == pgpulse.JobSpec.create(
            name="tick", schedule="* * * * *", handler="noop", timeout=30
        )
        await client.put_job(dataclasses.replace(spec, timeout=60.0), extra_handlers=["noop"])
        assert (await client.definition("tick")).timeout == 60.0
        [update, create] = await client.history("tick")
        assert (update["action"], update["changes"], update["source"]) == (
            "update",
            {"timeout": [30.0, 60.0]},
            "python",
        )
        assert create["action"] == "create"

        # a trigger moves the job's own occurrence to now; a node runs it
        due = await client.trigger("tick")
        assert isinstance(due, datetime) and due <= db_now(db)
        assert await drain(store, db_now(db) + timedelta(seconds=1)) == [due]
        [run] = await client.runs("tick")
        assert (run.name, run.kind, run.outcome, run.scheduled_for) == (
            "tick",
            "scheduled",
            "succeeded",
            due,
        )
        assert [a["outcome"] for a in run.attempt_log] == ["succeeded"]

        # a trigger with a payload is an extra occurrence of its own, queued for the nodes
        extra = await client.trigger("tick", payload={"n": 1})
        assert isinstance(extra, Triggered) and extra.job_id == job.id
        queued = db.execute("SELECT id, kind, payload FROM pgpulse_occurrences").fetchall()
        assert queued == [{"id": extra.occurrence, "kind": "trigger", "payload": {"n": 1}}]
        db.execute("DELETE FROM pgpulse_occurrences")  # the history below is the job row's

        # pause for two hours with a reason, as `job pause --until 2h --reason` does
        paused = await client.pause("tick", until="2h", reason="deploy")
        assert (paused.changed, paused.status) == (True, "paused")
        job = await client.job("tick")
        assert (job.status, job.pause_reason) == ("paused", "deploy")
        assert job.paused_until is not None
        assert abs(job.paused_until - db_now(db) - timedelta(hours=2)) < timedelta(minutes=1)
        later = db_now(db) + timedelta(hours=3)
        again = await client.pause("tick", until=later)  # an aware instant; the reason stays
        assert (again.changed, again.written) == (False, True)
        job = await client.job("tick")
        assert (job.paused_until, job.pause_reason) == (later, "deploy")
        ahead = await client.next_occurrences("tick", 2)
        assert len(ahead) == 2 and all(t > later for t in ahead)  # none inside the pause

        assert await client.resume("tick") is True
        assert (await client.job("tick")).status == "idle"
        assert await client.resume("tick") is False
        upcoming = await client.next_occurrences("tick", 3)
        assert len(upcoming) == 3 and upcoming == sorted(upcoming)
        assert all(t.second == 0 and t > db_now(db) - timedelta(minutes=1) for t in upcoming)

        await client.delete_job("tick")
        with pytest.raises(JobNotFound):
            await client.job("tick")
        assert await client.jobs() == []


async def test_a_backfill_dry_run_writes_nothing_and_the_backfill_queues_it(
    dsn: str, db: Any
) -> None:
    async with pgpulse.connect(dsn) as client:
        await client.add_job("tick", schedule="* * * * *", handler="noop", extra_handlers=["noop"])
        end = db_now(db) - timedelta(seconds=1)
        start = end - timedelta(minutes=10)
        dry = await client.backfill("tick", start, end, dry_run=True)
        assert dry.batch_id is None and len(dry.selected) == 10
        assert {p.status for p in dry.plan} == {"missing"}
        assert count(db, "pgpulse_occurrences") == 0
        done = await client.backfill("tick", start, end, only="missing", max_concurrency=2)
        assert done.batch_id is not None and done.selected == dry.selected
        assert count(db, "pgpulse_occurrences") == 10
        assert [h["action"] for h in await client.history("tick", limit=1)] == ["backfill"]


async def test_calendars(dsn: str) -> None:
    async with pgpulse.connect(dsn, tenant="acme") as client:
        assert await client.put_calendar("xmas", dates=["2026-12-25"]) is True
        assert await client.put_calendar("xmas", dates=[date(2026, 12, 24), "2026-12-25"]) is False
        assert await client.calendars() == [
            ExclusionCalendar("xmas", frozenset({date(2026, 12, 24), date(2026, 12, 25)}))
        ]
        job = await client.add_job(
            "close", schedule="0 18 * * *", handler="shell", payload={"command": "true"},
            calendars=["xmas"],
        )  # fmt: skip
        assert (job.tenant, job.calendars) == ("acme", ("xmas",))
        with pytest.raises(InvalidInput, match="in use by job close") as refused:
            await client.delete_calendar("xmas")
        assert (refused.value.field, refused.value.value) == ("calendar", "xmas")
        await client.delete_job("close")
        await client.delete_calendar("xmas")
        assert await client.calendars() == []
        with pytest.raises(CalendarNotFound):
            await client.delete_calendar("xmas")
    async with pgpulse.connect(dsn) as other:  # tenant default sees none of acme's
        assert await other.jobs() == [] and await other.calendars() == []


async def test_bad_input_names_the_field_and_changes_nothing(dsn: str, db: Any) -> None:
    with pytest.raises(InvalidInput) as spaced:
        pgpulse.connect(dsn, tenant=" spaced")
    assert spaced.value.field == "tenant"
    client = pgpulse.connect(dsn)
    with pytest.raises(RuntimeError, match="not open"):
        await client.jobs()
    async with client:
        await client.add_job("tick", schedule="* * * * *", handler="noop", extra_handlers=["noop"])
        before = dict(db.execute("SELECT * FROM pgpulse_jobs").fetchone())
        trail = count(db, "pgpulse_job_history")

        async def refused(call: Any) -> tuple[str | None, Any]:
            """The field and value of the one-line refusal ``call`` raises."""
            with pytest.raises(InvalidInput) as caught:
                await call
            assert "\n" not in str(caught.value)
            return caught.value.field, caught.value.value

        bad = client.add_job("tock", schedule="61 * * * *", handler="noop")
        assert await refused(bad) == ("schedule", "61 * * * *")
        with pytest.raises(InvalidSchedule):
            await client.add_job("tock", schedule="0 0 30 2 *", handler="noop")
        with pytest.raises(UnknownHandler):
            await client.add_job("tock", schedule="* * * * *", handler="nobody")
        elsewhere = client.add_job("tick", schedule="@daily", handler="noop", tenant="b")
        assert await refused(elsewhere) == ("tenant", "b")
        other = pgpulse.JobSpec.create(name="t", schedule="@daily", handler="noop", tenant="b")
        assert await refused(client.put_job(other)) == ("tenant", "b")
        assert (await refused(client.pause("tick", reason="x" * 501)))[0] == "reason"
        past = db_now(db) - timedelta(minutes=1)
        assert (await refused(client.pause("tick", until=past)))[0] == "until"
        assert await refused(client.pause("tick", until="soon")) == ("until", "soon")
        assert await refused(client.resume("tick", catch_up="all")) == ("catch_up", "all")
        end = db_now(db) - timedelta(seconds=1)
        start = end - timedelta(minutes=5)
        assert await refused(client.backfill("tick", start, end, only="bogus")) == ("only", "bogus")
        too_many = client.backfill("tick", start, end, max_concurrency=0)
        assert await refused(too_many) == ("max_concurrency", 0)
        future = db_now(db) + timedelta(hours=1)
        assert (await refused(client.backfill("tick", start, future)))[0] == "to"
        assert await refused(client.runs("tick", limit=0)) == ("limit", 0)
        assert await refused(client.next_occurrences("tick", 1001)) == ("count", 1001)
        misnamed = client.put_calendar("bad name", dates=["2026-12-25"])
        assert await refused(misnamed) == ("calendar.name", "bad name")
        undated = client.put_calendar("c", dates=["25.12.2026"])
        assert await refused(undated) == ("calendar.dates", "25.12.2026")
        assert (await refused(client.job("\x00")))[0] == "name"
        with pytest.raises(JobNotFound) as missing:
            await client.pause("nope")
        assert (missing.value.field, missing.value.value) == ("name", "nope")
        with pytest.raises(JobNotFound):
            await client.runs("nope")

        # an http job to a private address is refused as by `job create`, unless allowed
        local = {"url": "http://127.0.0.1:9/hook"}
        private = client.add_job("hook", schedule="@daily", handler="http", payload=local)
        assert (await refused(private))[0] == "payload.url"
        hook = await client.add_job(
            "hook", schedule="@daily", handler="http", payload=local, allow_private_target=True
        )
        assert hook.handler == "http"
        await client.delete_job("hook")

        assert dict(db.execute("SELECT * FROM pgpulse_jobs").fetchone()) == before
        assert count(db, "pgpulse_job_history") == trail + 2  # the hook's create and delete
        assert count(db, "pgpulse_occurrences") == 0
        assert count(db, "pgpulse_calendars") == 0
        assert await client.jobs() == [Job.of_row(before)]


async def test_the_client_opens_and_closes_its_pool(dsn: str, db: Any) -> None:
    client = await pgpulse.connect(dsn, application_name="client-test", migrate=False).open()
    try:
        assert await client.open() is client  # idempotent
        await client.jobs()
        names = db.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'client-test'"
        ).fetchone()["n"]
        assert names >= 1
    finally:
        await client.close()
        await client.close()
    assert isinstance(client, Client)
    assert datetime.now(UTC)  # the pool closed without error


def test_every_name_exported_before_still_imports() -> None:
    for name in (
        "App", "DatabaseUnavailable", "HandlerFailed", "InvalidInput", "InvalidPayload",
        "InvalidSchedule", "JobNotFound", "JobSpec", "Node", "NodeConfig", "PulseError",
        "RunContext", "Schedule", "Store", "UnknownHandler", "UnknownTimeZone", "connect",
        "parse_schedule", "Client",
    ):  # fmt: skip
        assert name in pgpulse.__all__
        assert getattr(pgpulse, name) is not None
    assert pgpulse.connect is __import__("pgpulse.client").client.connect
    assert pgpulse.db.pausing.Paused.__name__ == "Paused"  # a submodule, as an attribute
    with pytest.raises(AttributeError):
        pgpulse.no_such_name  # noqa: B018
