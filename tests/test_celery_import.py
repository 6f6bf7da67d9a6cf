"""``pgpulse celery import``: a beat schedule as jobs (real subprocesses on a real database), the
jobs' occurrences against Celery's own ``is_due`` over a month with a DST change, and the
refusals of bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedule

from helpers import pgpulse
from pgpulse.core.celery_beat import crontab_expression
from pgpulse.core.errors import InvalidPayload
from pgpulse.core.jobs import JobSpec
from pgpulse.core.schedule import parse_schedule

BEAT_APP = """\
from datetime import timedelta
from celery import Celery
from celery.schedules import crontab, solar

app = Celery("beatapp", set_as_current=False)
app.conf.timezone = "Europe/Berlin"
app.conf.beat_cron_starting_deadline = {deadline}
app.conf.beat_schedule = {{
    "office-quarter": {{
        "task": "proj.tasks.tick",
        "schedule": crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"),
        "args": (1, 2),
        "options": {{"queue": "fast", "expires": 60}},
    }},
    "first-monday": {{
        "task": "proj.tasks.report",
        "schedule": crontab(minute=30, hour={hour}, day_of_week=1, day_of_month="1-7"),
    }},
    "poll": {{"task": "proj.tasks.poll", "schedule": 30.0, "kwargs": {{"x": 1}}}},
    {extra}
    "sunrise": {{"task": "proj.tasks.sun", "schedule": solar("sunrise", 52.5, 13.4)}},
}}
"""


def _write_app(folder: Path, *, hour: int = 2, extra: str = "", deadline: str = "None") -> None:
    (folder / "beatapp.py").write_text(BEAT_APP.format(hour=hour, extra=extra, deadline=deadline))
    for cached in folder.glob("__pycache__/beatapp*"):
        cached.unlink()


def _import(dsn: str, folder: Path, *options: str) -> Any:
    return pgpulse("celery", "import", "--app", "beatapp:app", *options, dsn=dsn, cwd=folder)


def _jobs(db: Any) -> dict[str, dict[str, Any]]:
    rows = db.execute(
        "SELECT id, name, schedule, timezone, handler, payload, catch_up, misfire_grace, source "
        "FROM pgpulse_jobs ORDER BY name"
    ).fetchall()
    return {row["name"]: row for row in rows}


def test_beat_schedule_imports_as_jobs_and_syncs_by_name(dsn: str, db: Any, tmp_path: Path) -> None:
    _write_app(tmp_path)
    first = _import(dsn, tmp_path, "--json")
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines() == [
        "refused entry 'sunrise': solar schedule <solar: sunrise at latitude 52.5, longitude: "
        "13.4> follows the sun; Pulse's schedules cannot express it",
        "note: 1 entry refused and not imported: they stay with celery beat until rewritten",
    ]
    jobs = _jobs(db)
    assert {name: (j["schedule"], j["timezone"], j["catch_up"]) for name, j in jobs.items()} == {
        "office-quarter": ("0-45/15 9-17 * * 1-5", "Europe/Berlin", "coalesce"),
        "first-monday": ("30 2 * * 1#1", "Europe/Berlin", "coalesce"),
        "poll": ("@every 30s", "Europe/Berlin", "coalesce"),
    }
    assert jobs["office-quarter"]["payload"] == {
        "task": "proj.tasks.tick",
        "args": [1, 2],
        "queue": "fast",
        "expires": 60,
    }
    assert jobs["poll"]["payload"] == {"task": "proj.tasks.poll", "kwargs": {"x": 1}}
    assert {j["handler"] for j in jobs.values()} == {"celery"}
    assert {j["source"] for j in jobs.values()} == {"celery:beatapp:app"}
    # applied, the report names each created job's id (it said null)
    [report] = json.loads(first.stdout)
    assert report["applied"] is True
    assert {s["name"]: (s["action"], s["job_id"]) for s in report["steps"]} == {
        name: ("create", j["id"]) for name, j in jobs.items()
    }

    again = _import(dsn, tmp_path)
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == "nothing to change"
    assert _jobs(db) == jobs

    # An edit (first-monday's hour; a new entry; with a deadline, cron entries skip late runs):
    # without --sync nothing existing changes, with it the same jobs are updated in place.
    _write_app(
        tmp_path,
        hour=4,
        extra='"nightly": {"task": "proj.tasks.n", "schedule": crontab(minute=0, hour=1)},',
        deadline="120",
    )
    plain = _import(dsn, tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert (
        "note: first-monday differs from its entry (schedule, catch_up, misfire_grace, meta): "
        "--sync updates it"
    ) in plain.stderr.splitlines()
    assert _jobs(db)["first-monday"]["schedule"] == "30 2 * * 1#1"
    synced = _import(dsn, tmp_path, "--sync")
    assert synced.returncode == 0, synced.stderr
    after = _jobs(db)
    assert after["first-monday"]["id"] == jobs["first-monday"]["id"]
    assert (after["first-monday"]["schedule"], after["first-monday"]["catch_up"]) == (
        "30 4 * * 1#1",
        "skip",
    )
    assert after["first-monday"]["misfire_grace"] == timedelta(seconds=120)
    assert after["poll"] == jobs["poll"]  # an interval entry: the deadline is about crons
    assert {name: j["id"] for name, j in after.items() if name != "nightly"} == {
        name: j["id"] for name, j in jobs.items()
    }
    assert set(after) == {"office-quarter", "first-monday", "poll", "nightly"}
    twice = _import(dsn, tmp_path, "--sync")
    assert twice.stdout.splitlines()[-1] == "nothing to change"
    assert _jobs(db) == after

    # An entry removed: kept (listed) by --sync, deleted by --sync --prune.
    _write_app(tmp_path, hour=4, deadline="120")
    kept = _import(dsn, tmp_path, "--sync", "--json")
    document = json.loads(kept.stdout)
    assert [(s["action"], s["name"]) for s in document[0]["steps"]][-1] == ("orphan", "nightly")
    assert "nightly" in _jobs(db)
    pruned = _import(dsn, tmp_path, "--sync", "--prune")
    assert "- nightly: delete (no longer defined)" in pruned.stdout
    assert set(_jobs(db)) == {"office-quarter", "first-monday", "poll"}


def test_refused_input_is_one_line_and_writes_nothing(dsn: str, db: Any, tmp_path: Path) -> None:
    assert pgpulse("migrate", dsn=dsn).returncode == 0
    cases = [
        (
            ("job", "create", "j", "--schedule", "@hourly", "--handler", "celery",
             "--payload", '{"task": "proj.add", "brokr": "redis://x"}'),
            "error: invalid value for --payload: payload.brokr is not a field of this handler "
            '(fields: args, expires, headers, kwargs, queue, task; e.g. {"task": '
            '"proj.tasks.add", "args": [2, 3]})',
        ),
        (
            ("node", "run", "--celery-broker", "redis//127.0.0.1:6379"),
            "error: invalid value for --celery-broker: celery broker URL 'redis//127.0.0.1:6379' "
            "does not parse: expected <scheme>://[user:password@]host[:port][/...] with a scheme "
            "among ",
        ),
        (
            ("node", "run", "--celery-broker", "amqp://guest:s3cret@127.0.0.1:56x2//"),
            "error: invalid value for --celery-broker: celery broker URL "
            "'amqp://guest:***@127.0.0.1:56x2//' does not parse",
        ),
        (
            ("celery", "import", "--app", "no_such_module:app"),
            "error: invalid value for --app: celery app 'no_such_module:app' does not import: "
            "ModuleNotFoundError: No module named 'no_such_module'",
        ),
    ]  # fmt: skip
    for args, line in cases:
        refused = pgpulse(*args, dsn=dsn, cwd=tmp_path)
        assert refused.returncode == 2, (args, refused.stderr)
        assert len(refused.stderr.splitlines()) == 1, refused.stderr
        assert refused.stderr.startswith(line), refused.stderr
    written = db.execute("SELECT (SELECT count(*) FROM pgpulse_jobs) AS jobs, "
                         "(SELECT count(*) FROM pgpulse_nodes) AS nodes").fetchone()  # fmt: skip
    assert written == {"jobs": 0, "nodes": 0}


@pytest.mark.parametrize(
    ("handler", "payload", "line"),
    [
        ("celery", {"task": 42}, "payload.task must be a string, got 42"),
        ("celery", {"task": "t", "expires": -1}, "payload.expires must be a positive number"),
        ("celery", {"args": [1]}, 'payload.task is required (e.g. {"task": ...})'),
        ("rq", {"func": "m.f", "args": {"a": 1}}, "payload.args must be a JSON array"),
        ("rq", {"func": "m.f", "broker": "x"}, "payload.broker is not a field of this handler"),
    ],
)
def test_payloads_are_checked_when_the_job_is_defined(
    handler: str, payload: dict[str, Any], line: str
) -> None:
    with pytest.raises(InvalidPayload) as refused:
        JobSpec.create(name="j", schedule="@hourly", handler=handler, payload=payload)
    assert str(refused.value).startswith(line)


# --- occurrences against Celery's own arithmetic ---------------------------------------------

ZONE = "Europe/Berlin"


def _beat_fires(entry: Any, start: datetime, end: datetime) -> list[datetime]:
    """The instants ``celery beat`` fires ``entry`` at, by Celery's own ``is_due`` with a clock
    moved to each next check it asks for (as beat's loop sleeps), from ``start`` to ``end``."""
    zone = ZoneInfo(ZONE)
    now = start
    entry.nowfun = lambda: now.astimezone(zone)
    last = start.astimezone(zone)
    fired = []
    while now < end:
        due, wait = entry.is_due(last)
        if due:
            fired.append(now.replace(microsecond=0))
            last = now.astimezone(zone)
        now += timedelta(seconds=max(wait, 1.0))
    return fired


def _pulse_fires(expression: str, start: datetime, end: datetime) -> list[datetime]:
    parsed = parse_schedule(expression, ZONE)
    fired, cursor = [], start
    while (cursor := parsed.next_after(cursor, anchor=start)) < end:
        fired.append(cursor)
    return fired


APP = Celery("zone", set_as_current=False)
APP.conf.timezone = ZONE
ENTRIES = {
    "every_hour": crontab(app=APP, minute=0),
    "quarter_hours": crontab(app=APP, minute="*/15"),
    "two_thirty_daily": crontab(app=APP, minute=30, hour=2),
    "one_to_three": crontab(app=APP, minute=30, hour="1-3"),
    "first_monday": crontab(app=APP, minute=0, hour=9, day_of_week=1, day_of_month="1-7"),
    "sunday_0245": crontab(app=APP, minute=45, hour=2, day_of_week="sun"),
}
FALL_BACK = (datetime(2026, 10, 10, tzinfo=UTC), datetime(2026, 11, 10, tzinfo=UTC))
SPRING_FORWARD = (datetime(2026, 3, 10, tzinfo=UTC), datetime(2026, 4, 10, tzinfo=UTC))


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_fall_back_month_fires_as_celery_beat(name: str) -> None:
    """October 2026 in Berlin (clocks go back on the 25th, 03:00 -> 02:00): the same instants
    as beat, the repeated hour's times once (first pass)."""
    entry = ENTRIES[name]
    assert _pulse_fires(crontab_expression(entry), *FALL_BACK) == _beat_fires(entry, *FALL_BACK)


#: On 2026-03-29 in Berlin 02:00-03:00 does not exist. Beat fires a local time inside it shifted
#: by the gap (02:30 at 03:30 CEST, 01:30 UTC); Pulse at the first instant after the gap (03:00
#: CEST, 01:00 UTC), Vixie cron's rule. The only differences over the month:
_GAP_END = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST
SPRING_DIFFERENCES = {
    "two_thirty_daily": ([datetime(2026, 3, 29, 1, 30, tzinfo=UTC)], [_GAP_END]),
    "one_to_three": ([], [_GAP_END]),  # its 02:30 shifted by beat is 03:30, its own too
    "sunday_0245": ([datetime(2026, 3, 29, 1, 45, tzinfo=UTC)], [_GAP_END]),
}


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_spring_forward_month_differs_only_inside_the_gap(name: str) -> None:
    entry = ENTRIES[name]
    beat = _beat_fires(entry, *SPRING_FORWARD)
    pulse = _pulse_fires(crontab_expression(entry), *SPRING_FORWARD)
    only_beat = sorted(set(beat) - set(pulse))
    only_pulse = sorted(set(pulse) - set(beat))
    assert (only_beat, only_pulse) == SPRING_DIFFERENCES.get(name, ([], []))


def test_interval_fires_as_beat_from_the_same_start() -> None:
    start, end = FALL_BACK[0], FALL_BACK[0] + timedelta(days=2)
    every = schedule(timedelta(minutes=90), app=APP)
    assert _pulse_fires("@every 1h30m", start, end) == _beat_fires(every, start, end)


@pytest.mark.parametrize(
    ("fields", "expression"),
    [
        ({}, "0-59 0-23 * * *"),
        ({"minute": "*/10", "hour": "*/6"}, "0-50/10 0-18/6 * * *"),
        ({"minute": "5,7,9-11"}, "5,7,9-11 0-23 * * *"),
        ({"day_of_week": "sat,sun", "day_of_month": "*"}, "0-59 0-23 * * 0,6"),
        ({"day_of_month": "8-14,29-31", "day_of_week": "fri"}, "0-59 0-23 * * 5#2,5#5"),
        ({"month_of_year": "1,7"}, "0-59 0-23 * 1,7 *"),
    ],
)
def test_crontab_fields_map_to_cron(fields: dict[str, str], expression: str) -> None:
    assert crontab_expression(crontab(app=APP, **fields)) == expression


def test_both_day_fields_without_whole_weeks_are_refused() -> None:
    with pytest.raises(Exception, match=r"day_of_month=13, day_of_week=5\) fires on days"):
        crontab_expression(crontab(app=APP, minute=0, hour=0, day_of_month=13, day_of_week=5))
