"""``pgpulse apply``: TOML files as sources — plan, dry run, update, prune, refusals that write
nothing, and concurrent applies of one source serialised by its advisory lock."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers import pgpulse
from pgpulse.cli.applyfile import parse_apply_file
from pgpulse.core.plan import plan_source
from pgpulse.db.store import Store
from pgpulse.sql import QUERIES

FILE = """\
[defaults]
timezone = "Europe/Berlin"

[jobs.backup]
schedule = "0 3 * * *"
handler = "shell"
payload = { command = "backup --full" }
catch_up = "backfill"

[jobs."report.send"]
schedule = "30 8 * * mon"
handler = "shell"
payload = '{"command": "report"}'
max_attempts = 5
"""


def jobs(db: Any) -> list[dict[str, Any]]:
    return db.execute(  # type: ignore[no-any-return]
        "SELECT name, schedule, timezone, source, revision, max_attempts FROM pgpulse_jobs "
        "ORDER BY name"
    ).fetchall()


def test_apply_plans_creates_updates_and_prunes_one_source(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    path = tmp_path / "nightly.toml"
    path.write_text(FILE)
    assert (
        pgpulse(
            "job",
            "create",
            "manual",
            "--schedule",
            "@hourly",
            "--handler",
            "shell",
            "--payload",
            '{"command": "x"}',
            dsn=dsn,
        ).returncode
        == 0
    )

    plan = pgpulse("apply", "--dry-run", "--exit-code", str(path), dsn=dsn)
    assert plan.returncode == 1, plan.stderr
    assert "+ backup: create" in plan.stdout
    assert "+ report.send: create" in plan.stdout
    assert "apply:nightly: 2 to create, 0 to update, 0 to delete, 0 unchanged" in plan.stdout
    assert "dry run: nothing written" in plan.stdout
    assert [j["name"] for j in jobs(db)] == ["manual"]  # the dry run wrote nothing

    applied = pgpulse("apply", str(path), dsn=dsn)
    assert applied.returncode == 0, applied.stderr
    assert jobs(db) == [
        {
            "name": "backup",
            "schedule": "0 3 * * *",
            "timezone": "Europe/Berlin",
            "source": "apply:nightly",
            "revision": 1,
            "max_attempts": 3,
        },
        {
            "name": "manual",
            "schedule": "@hourly",
            "timezone": "UTC",
            "source": "cli",
            "revision": 1,
            "max_attempts": 3,
        },
        {
            "name": "report.send",
            "schedule": "30 8 * * mon",
            "timezone": "Europe/Berlin",
            "source": "apply:nightly",
            "revision": 1,
            "max_attempts": 5,
        },
    ]
    again = pgpulse("apply", "--dry-run", "--exit-code", str(path), dsn=dsn)
    assert again.returncode == 0, again.stderr
    assert "= backup: unchanged" in again.stdout
    assert "dry run: nothing to change" in again.stdout

    path.write_text(FILE.split('[jobs."report.send"]')[0].replace("0 3 * * *", "15 3 * * *"))
    kept = pgpulse("apply", str(path), dsn=dsn)
    assert kept.returncode == 0, kept.stderr
    assert '~ backup: update\n    schedule: "0 3 * * *" -> "15 3 * * *"' in kept.stdout
    assert "? report.send: no longer defined; kept (--prune deletes it)" in kept.stdout
    assert [j["name"] for j in jobs(db)] == ["backup", "manual", "report.send"]

    pruned = pgpulse("apply", "--prune", str(path), dsn=dsn)
    assert pruned.returncode == 0, pruned.stderr
    assert "- report.send: delete (no longer defined)" in pruned.stdout
    assert [(j["name"], j["schedule"], j["revision"]) for j in jobs(db)] == [
        ("backup", "15 3 * * *", 2),
        ("manual", "@hourly", 1),  # another source: never pruned
    ]
    history = db.execute(
        "SELECT name, action, source, actor, revision, changes FROM pgpulse_job_history "
        "WHERE source LIKE 'apply:%' ORDER BY id"
    ).fetchall()
    assert [(h["name"], h["action"], h["revision"]) for h in history] == [
        ("backup", "create", 1),
        ("report.send", "create", 1),
        ("backup", "update", 2),
        ("report.send", "delete", 1),
    ]
    assert history[2]["changes"] == {"schedule": ["0 3 * * *", "15 3 * * *"]}
    assert all(h["actor"].startswith("os:") for h in history)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[jobs.a\nschedule = 1", "jobs.toml:1: not valid TOML:", id="malformed"),
        pytest.param(
            '[jobs.a]\nschedule = "@hourly"\nhandler = "shell"\ncomand = "x"\n',
            "jobs.toml:4: job 'a': unknown field 'comand'",
            id="unknown_field",
        ),
        pytest.param(
            FILE.replace('"30 8 * * mon"', '"61 * * * *"'),
            "jobs.toml:11: job 'report.send': schedule '61 * * * *': minute field",
            id="bad_schedule_in_the_second_job",
        ),
        pytest.param(
            FILE.replace('"Europe/Berlin"', '"Mars/Olympus"'),
            "jobs.toml:2: defaults: ",
            id="bad_zone_in_the_defaults",
        ),
        pytest.param(
            FILE.replace("max_attempts = 5", "max_attempts = 0"),
            "jobs.toml:14: job 'report.send': max_attempts must be a number from 1",
            id="bad_policy",
        ),
        pytest.param(
            '[jobs.a]\nschedule = 2026-12-01\nhandler = "shell"\n',
            "jobs.toml:2: job 'a': schedule must be text, got 2026-12-01",  # no Python repr
            id="a_date_for_text",
        ),
        pytest.param(
            '[jobs.a]\nschedule = "@hourly"\nhandler = "shell"\nnot_before = 10:00:00\n',
            "jobs.toml:4: job 'a': not_before 10:00:00 is a time of day: give a date and time",
            id="a_time_of_day_for_an_instant",
        ),
        # Found in the database, after parsing: still the file, the line and the field.
        pytest.param(
            '[jobs.a]\nschedule = "@hourly"\nhandler = "shell"\npayload = { command = "x" }\n'
            'calendars = ["holidays"]\n',
            "jobs.toml:5: job 'a': calendar 'holidays' of job 'a' does not exist in tenant",
            id="unknown_calendar",
        ),
        pytest.param(
            '[jobs.a]\nschedule = "@hourly"\nhandler = "reports.nope"\n',
            "jobs.toml:3: job 'a': handler 'reports.nope' of job 'a' is not built in",
            id="unknown_handler",
        ),
        pytest.param(
            '[jobs.a]\nschedule = "@hourly"\nhandler = "http"\n'
            'payload = { url = "http://127.0.0.1/hook" }\n',
            "jobs.toml:4: job 'a': payload.url 'http://127.0.0.1/hook' targets 127.0.0.1 "
            "(loopback); such addresses are refused without the job's "
            "allow_private_target = true",
            id="private_http_target",
        ),
        pytest.param(
            '[jobs.g]\nschedule = "@daily"\nhandler = "shell"\npayload = { command = "x" }\n',
            "jobs.toml:1: job 'g': name: job 'g' of tenant 'default' is defined by apply:good "
            "and apply:jobs",
            id="defined_in_two_files",
        ),
    ],
)
def test_a_refused_file_writes_nothing(
    dsn: str, db: Any, tmp_path: Path, text: str, expected: str
) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        '[jobs.g]\nschedule = "@hourly"\nhandler = "shell"\npayload = { command = "true" }\n'
    )
    bad = tmp_path / "jobs.toml"
    bad.write_text(text)
    result = pgpulse("apply", str(good), str(bad), dsn=dsn)
    assert result.returncode == 2, result.stdout
    line = result.stderr.strip()
    assert line.startswith(f"error: {tmp_path}/{expected}"), line
    assert "\n" not in line
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM pgpulse_job_history").fetchone()["n"] == 0


async def test_concurrent_applies_of_one_source_run_one_after_the_other(
    store: Store, dsn: str
) -> None:
    parsed = parse_apply_file(FILE, path="nightly.toml")
    batch = [(parsed.source, parsed.specs)]
    async with await psycopg.AsyncConnection.connect(dsn) as holder:
        await holder.execute(QUERIES["lock_source"], {"source": parsed.source})  # a first apply
        first = asyncio.create_task(store.reconcile(batch, partial(plan_source, prune=False)))
        second = asyncio.create_task(store.reconcile(batch, partial(plan_source, prune=False)))
        async with asyncio.timeout(10):
            while True:  # both wait for the source's lock: neither has planned yet
                cur = await holder.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    " AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                )
                waiting = (await cur.fetchone() or [0])[0]
                if waiting == 2:
                    break
                await asyncio.sleep(0.05)
        assert not first.done() and not second.done()
        await holder.rollback()  # the first apply ends
    plans = await asyncio.gather(first, second)
    actions = sorted(tuple(step.action for step in plan.steps) for [plan] in plans)
    assert actions == [("create", "create"), ("unchanged", "unchanged")]
    history = await store.job_history("default", "backup")
    assert [h["action"] for h in history] == ["create"]


RUN_CONTROL = """\
[jobs.rollup]
schedule = "0 * * * *"
handler = "shell"
payload = { command = "rollup" }
timezone = "Europe/Berlin"
spread = 300
not_before = 2027-01-01T00:00:00
not_after = 2027-06-01T00:00:00Z
max_runs = 100
calendars = ["holidays"]
auto_pause_after = 3
"""


def run_control(db: Any) -> dict[str, Any]:
    return db.execute(  # type: ignore[no-any-return]
        "SELECT spread, not_before, not_after, max_runs, calendars, auto_pause_after, revision "
        "FROM pgpulse_jobs WHERE name = 'rollup'"
    ).fetchone()


def test_apply_takes_the_run_control_fields_and_diffs_them(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    db.execute(
        "INSERT INTO pgpulse_calendars (tenant, name, dates) "
        "VALUES ('default', 'holidays', '{2027-01-06}')"
    )
    path = tmp_path / "rollup.toml"
    path.write_text(RUN_CONTROL)
    applied = pgpulse("apply", str(path), dsn=dsn)
    assert applied.returncode == 0, applied.stderr
    assert run_control(db) == {
        "spread": 300.0,
        "not_before": datetime(2026, 12, 31, 23, tzinfo=UTC),  # midnight in Berlin
        "not_after": datetime(2027, 6, 1, tzinfo=UTC),
        "max_runs": 100,
        "calendars": ["holidays"],
        "auto_pause_after": 3,
        "revision": 1,
    }
    assert pgpulse("apply", "--exit-code", str(path), dsn=dsn).returncode == 0  # unchanged

    path.write_text(
        RUN_CONTROL.replace("spread = 300", "spread = 600").replace("max_runs = 100\n", "")
    )
    plan = pgpulse("apply", "--dry-run", "--exit-code", str(path), dsn=dsn)
    assert plan.returncode == 1, plan.stderr
    assert (
        "~ rollup: update\n    spread: 300.0 -> 600.0\n    max_runs: 100 -> null\n" in plan.stdout
    )
    assert pgpulse("apply", str(path), dsn=dsn).returncode == 0
    assert (run_control(db)["spread"], run_control(db)["max_runs"]) == (600.0, None)
    shown = pgpulse("job", "history", "rollup", "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    update = json.loads(shown.stdout)[0]
    assert (update["action"], update["revision"]) == ("update", 2)
    assert update["changes"] == {"spread": [300.0, 600.0], "max_runs": [100, None]}

    path.write_text(RUN_CONTROL.replace('["holidays"]', '["holidays", "strikes"]'))
    refused = pgpulse("apply", "--dry-run", str(path), dsn=dsn)
    assert refused.returncode == 2
    assert "calendar 'strikes' of job 'rollup' does not exist" in refused.stderr
    assert run_control(db)["revision"] == 2  # nothing written


def test_a_toml_date_is_its_midnight_in_the_jobs_zone_as_on_the_command_line() -> None:
    parsed = parse_apply_file(
        '[jobs.a]\nschedule = "@hourly"\nhandler = "shell"\npayload = { command = "x" }\n'
        'timezone = "Europe/Paris"\nnot_before = 2027-01-01\nnot_after = 2027-01-02T12:00:00\n',
        path="jobs.toml",
    )
    [spec] = parsed.specs
    assert spec.not_before == datetime(2026, 12, 31, 23, 0, tzinfo=UTC)
    assert spec.not_after == datetime(2027, 1, 2, 11, 0, tzinfo=UTC)


def test_every_refused_job_of_a_file_is_said(dsn: str, db: Any, tmp_path: Path) -> None:
    """A file with several bad jobs gets a line for each (file:line, job, field), not only the
    first; a default's refusal once, however many jobs take it; nothing is written."""
    bad = tmp_path / "jobs.toml"
    bad.write_text(
        '[jobs.a]\nschedule = "@hourly"\nhandler = "shell"\npayload = { command = "true" }\n'
        "max_attempts = 0\n"
        '[jobs.b]\nschedule = "nope"\nhandler = "shell"\npayload = { command = "true" }\n'
        '[jobs.c]\nschedule = "@hourly"\nhandler = "shell"\npayload = { command = "true" }\n'
        '[jobs.d]\nschedule = "@hourly"\nhandler = "shell"\npayload = { command = "true" }\n'
        'timezone = "Mars/Olympus"\n'
    )
    result = pgpulse("apply", str(bad), dsn=dsn)
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.splitlines()
    assert [line.split(": ", 3)[1:3] for line in lines] == [
        [f"{bad}:5", "job 'a'"], [f"{bad}:7", "job 'b'"], [f"{bad}:18", "job 'd'"],
    ]  # fmt: skip
    assert "max_attempts" in lines[0] and "'nope'" in lines[1] and "Mars/Olympus" in lines[2]
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
    shared = tmp_path / "shared.toml"
    shared.write_text(
        "[defaults]\nmax_attempts = 0\n"
        '[jobs.a]\nschedule = "@hourly"\nhandler = "shell"\npayload = { command = "true" }\n'
        '[jobs.b]\nschedule = "@hourly"\nhandler = "shell"\npayload = { command = "true" }\n'
    )
    once = pgpulse("apply", str(shared), dsn=dsn)
    assert once.returncode == 2 and once.stderr.count("\n") == 1, once.stderr
    assert once.stderr.startswith(f"error: {shared}:2: defaults: ")


async def test_taking_over_a_code_declared_job_says_the_code_takes_it_back(
    store: Store, dsn: str, tmp_path: Path
) -> None:
    """apply over a job that code declares: the plan's update is followed by a note that the
    next node start of that code takes the job back (the seventh trial saw them ping-pong)."""
    from helpers import add, spec

    await add(store, spec("ok", schedule="@hourly", handler="shell",
                          payload={"command": "true"}, source="code:trial"))  # fmt: skip
    jobs = tmp_path / "take.toml"
    jobs.write_text(
        '[jobs.ok]\nschedule = "@hourly"\nhandler = "shell"\npayload = { command = "true" }\n'
    )
    done = pgpulse("apply", str(jobs), dsn=dsn)
    assert done.returncode == 0, done.stderr
    assert (
        "note: ok is declared by code:trial: the next start of a node running that code takes "
        "it back (remove it from the code to keep it here)"
    ) in done.stdout.splitlines()


def test_two_files_of_one_source_are_named(dsn: str, db: Any, tmp_path: Path) -> None:
    """Two files that say the same ``source`` are refused naming both (the message named the
    source only: with ten files, which two?)."""
    job = '[jobs.{}]\nschedule = "@hourly"\nhandler = "shell"\npayload = {{ command = "true" }}\n'
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    one.write_text('source = "ops"\n' + job.format("a"))
    two.write_text('source = "ops"\n' + job.format("b"))
    result = pgpulse("apply", str(one), str(two), dsn=dsn)
    assert (result.returncode, result.stdout) == (2, ""), result
    assert result.stderr == (
        f"error: {one} and {two} are both source 'apply:ops': "
        "give one a `source = ...` of its own\n"
    )
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
