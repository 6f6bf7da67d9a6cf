"""The command line against a real PostgreSQL: the job lifecycle, crontab import, status, and
bad input refused with a clear error that writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from psycopg import conninfo

from helpers import pgpulse
from pgpulse.cli.main import main

SHELL_PAYLOAD = '{"command": "echo hi"}'


def cli(dsn: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--database-url", dsn, "--log-level", "WARNING", *args])


def job_rows(db: Any) -> Any:
    return db.execute("SELECT * FROM pgpulse_jobs ORDER BY id").fetchall()


def test_schedule_next_prints_exact_instants_across_a_dst_gap() -> None:
    result = CliRunner().invoke(
        main,
        [
            "schedule",
            "next",
            "30 1 * * *",
            "--tz",
            "Europe/London",
            "--count",
            "2",
            "--after",
            "2026-03-28T12:00:00",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # 01:30 does not exist on 2026-03-29 (01:00 -> 02:00): it fires at the end of the gap.
    assert lines[1:] == [
        "UTC                        Europe/London",
        "2026-03-29T01:00:00+00:00  2026-03-29T02:00:00+01:00",
        "2026-03-30T00:30:00+00:00  2026-03-30T01:30:00+01:00",
    ]


@pytest.mark.parametrize(
    "after",
    ["2026-01-01T12:00:00.357", "2026-01-01 12:00:00.357Z", "2026-01-01T14:00:00.357000+02:00"],
)
def test_schedule_next_keeps_a_fractional_after_on_an_interval_grid(after: str) -> None:
    result = CliRunner().invoke(
        main,
        [
            "schedule",
            "next",
            "@every 60s",
            "--tz",
            "Europe/Paris",
            "--count",
            "2",
            "--after",
            after,
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[2:] == [
        "2026-01-01T12:01:00.357000+00:00  2026-01-01T13:01:00.357000+01:00",
        "2026-01-01T12:02:00.357000+00:00  2026-01-01T13:02:00.357000+01:00",
    ]


def test_schedule_next_anchors_at_the_whole_second_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class FrozenClock(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> FrozenClock:
            return cls(2026, 1, 1, 12, 0, 0, 357_123, tzinfo=tz)

    monkeypatch.setattr("pgpulse.cli.main.datetime", FrozenClock)
    every = CliRunner().invoke(main, ["schedule", "next", "@every 90s", "--count", "2"])
    assert every.exit_code == 0, every.output
    assert every.output.splitlines()[1:] == [
        "UTC",  # one column: in UTC the zone's wall times are UTC's
        "2026-01-01T12:01:30+00:00",
        "2026-01-01T12:03:00+00:00",
    ]
    cron = CliRunner().invoke(main, ["schedule", "next", "0 12 * * *", "--count", "1"])
    assert cron.output.splitlines()[2:] == ["2026-01-02T12:00:00+00:00"]
    zoned = CliRunner().invoke(
        main, ["schedule", "next", "0 12 * * *", "--count", "1", "--tz", "Asia/Tokyo"]
    )
    assert zoned.output.splitlines()[1:] == [
        "UTC                        Asia/Tokyo",  # the columns: UTC, then the schedule's zone
        "2026-01-02T03:00:00+00:00  2026-01-02T12:00:00+09:00",
    ]
    # London's winter offset is UTC's, but it is not UTC: its column stays (a trial's finding)
    london = CliRunner().invoke(
        main, ["schedule", "next", "0 12 * * *", "--count", "1", "--tz", "Europe/London"]
    )
    assert london.output.splitlines()[1:] == [
        "UTC                        Europe/London",
        "2026-01-02T12:00:00+00:00  2026-01-02T12:00:00+00:00",
    ]


def test_job_lifecycle(dsn: str, db: Any) -> None:
    created = cli(
        dsn,
        "job",
        "create",
        "backup",
        "--schedule",
        "0 3 * * *",
        "--handler",
        "shell",
        "--payload",
        SHELL_PAYLOAD,
        "--tz",
        "Europe/Paris",
    )
    assert created.exit_code == 0, created.output
    assert created.output.startswith("created job backup")
    again = cli(
        dsn,
        "job",
        "create",
        "backup",
        "--schedule",
        "0 3 * * *",
        "--handler",
        "shell",
        "--payload",
        SHELL_PAYLOAD,
        "--tz",
        "Europe/Paris",
    )
    # the same definition again writes nothing, and says so (it said "updated")
    assert again.output.startswith("job backup unchanged (id ")
    assert len(job_rows(db)) == 1
    # create is an upsert of the whole definition: an option left out takes its default
    # again, and the line names what changed
    moved = cli(dsn, "job", "create", "backup", "--schedule", "0 3 * * *", "--handler", "shell",
                "--payload", SHELL_PAYLOAD)  # fmt: skip
    assert moved.output.startswith("updated job backup (id "), moved.output
    assert "; changed: timezone); next occurrence " in moved.output.splitlines()[0]
    cli(dsn, "job", "create", "backup", "--schedule", "0 3 * * *", "--handler", "shell",
        "--payload", SHELL_PAYLOAD, "--tz", "Europe/Paris")  # fmt: skip

    listed = json.loads(cli(dsn, "job", "list", "--json").output)
    assert [(j["name"], j["status"], j["timezone"]) for j in listed] == [
        ("backup", "idle", "Europe/Paris")
    ]
    elsewhere = cli(dsn, "job", "list", "--tenant", "acme").output
    assert elsewhere == (
        "(none in tenant 'acme'; tenants with jobs: default: use --tenant NAME or --all-tenants)\n"
    )
    shown = json.loads(cli(dsn, "job", "show", "backup", "--json").output)
    assert len(shown["upcoming"]) == 5
    assert all(t.endswith(("+01:00", "+02:00")) and "T03:00:00" in t for t in shown["upcoming"])

    assert cli(dsn, "job", "pause", "backup").exit_code == 0
    assert job_rows(db)[0]["status"] == "paused"
    refused = cli(dsn, "job", "trigger", "backup")
    assert refused.exit_code == 2 and "paused" in refused.output
    assert cli(dsn, "job", "resume", "backup").exit_code == 0
    assert job_rows(db)[0]["status"] == "idle"
    triggered = cli(dsn, "job", "trigger", "backup")
    assert triggered.exit_code == 0 and "triggered backup" in triggered.output
    row = job_rows(db)[0]
    assert row["scheduled_for"] == row["next_run_at"]
    assert db.execute("SELECT %s::timestamptz <= now() AS due", (row["next_run_at"],)).fetchone()[
        "due"
    ]
    assert cli(dsn, "job", "delete", "backup").exit_code == 0
    assert job_rows(db) == []
    missing = cli(dsn, "job", "delete", "backup")
    assert missing.exit_code == 2 and "no job named 'backup'" in missing.output


def test_crontab_import_is_idempotent(dsn: str, db: Any, tmp_path: Path) -> None:
    tab = tmp_path / "nightly.crontab"
    tab.write_text(
        "MAILTO=ops@example.com\n# backups\n15 2 * * * /usr/local/bin/backup%now\n"
        "*/10 * * * 1-5 echo hello\n"
    )
    first = cli(dsn, "crontab", "import", str(tab))
    assert first.exit_code == 0, first.output
    before = job_rows(db)
    assert len(before) == 2
    backup = next(j for j in before if "backup" in j["name"])
    assert backup["payload"]["command"] == "/usr/local/bin/backup"
    assert backup["payload"]["stdin"] == "now\n"
    assert backup["meta"]["mailto"] == "ops@example.com"
    second = cli(dsn, "crontab", "import", str(tab))
    assert second.exit_code == 0 and "\ncreated " not in second.output
    assert second.output.endswith(": 0 created, 2 already imported\n")
    after = job_rows(db)
    assert [(j["id"], j["name"], j["scheduled_for"]) for j in after] == [
        (j["id"], j["name"], j["scheduled_for"]) for j in before
    ]


def test_crontab_with_a_bad_line_imports_nothing(dsn: str, db: Any, tmp_path: Path) -> None:
    tab = tmp_path / "mixed.crontab"
    tab.write_text("0 1 * * * echo fine\n@reboot echo boot\n61 * * * * echo bad\n")
    result = cli(dsn, "crontab", "import", str(tab))
    assert result.exit_code == 2
    assert f"{tab}:2:" in result.output and "reboot" in result.output
    assert f"{tab}:3:" in result.output and "61" in result.output
    assert job_rows(db) == []


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        pytest.param(["--schedule", "61 * * * *"], "schedule", ["minute", "61"], id="invalid_cron"),
        pytest.param(["--schedule", "0 0 30 2 *"], "schedule", ["never"], id="never_fires"),
        pytest.param(["--tz", "Mars/Olympus"], "timezone", ["Mars/Olympus"], id="unknown_zone"),
        pytest.param(
            ["--payload", "{not json"], "payload", ["not valid JSON"], id="payload_not_json"
        ),
        pytest.param(["--payload", "[1, 2]"], "payload", ["JSON object"], id="payload_not_object"),
        pytest.param(["--payload", "{}"], "payload", ["command"], id="shell_without_command"),
        pytest.param(["--handler", "nope"], "handler", ["'nope'"], id="unknown_handler"),
        pytest.param(
            ["--max-attempts", "0"], "max_attempts", ["--max-attempts"], id="zero_attempts"
        ),
        pytest.param(
            ["--payload", '{"comand": "x"}'], "payload.comand", ["comand"], id="payload_typo"
        ),
        pytest.param(
            ["--backfill-limit", "5"],
            "backfill_limit",
            ["--backfill-limit", "skip"],
            id="backfill_limit_without_backfill",
        ),
        pytest.param(["--tz", "europe/london"], "timezone", ["Europe/London"], id="zone_case_hint"),
        pytest.param(
            ["--misfire-grace", "0"],
            "misfire_grace",
            [
                "invalid value for --misfire-grace: must be at least 1 second, got 0",
                "skip every occurrence",
            ],
            id="misfire_grace_zero",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    dsn: str, db: Any, args: list[str], field: str, words: list[str]
) -> None:
    good = cli(
        dsn,
        "job",
        "create",
        "billing",
        "--schedule",
        "0 * * * *",
        "--handler",
        "shell",
        "--payload",
        SHELL_PAYLOAD,
    )
    assert good.exit_code == 0, good.output
    before = job_rows(db)
    base = {"--schedule": "*/5 * * * *", "--handler": "shell", "--payload": SHELL_PAYLOAD}
    overrides = dict(zip(args[::2], args[1::2], strict=True))
    flat = [x for k, v in {**base, **overrides}.items() for x in (k, v)]
    for name in ("billing", "new-job"):  # an update of a stored job, and a new job
        result = cli(dsn, "job", "create", name, *flat)
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: ")
        for word in words:
            assert word in result.output, result.output
    assert job_rows(db) == before


def test_runs_of_an_unknown_job_is_an_error(dsn: str) -> None:
    result = cli(dsn, "runs", "nosuch")
    assert result.exit_code == 2 and "no job named 'nosuch'" in result.output


def test_malformed_dsn_is_refused_input() -> None:
    result = CliRunner().invoke(main, ["--database-url", "not a dsn", "job", "list"])
    assert result.exit_code == 2
    assert result.output.startswith(  # the option the user typed, not the field's name
        "error: invalid value for --database-url: 'not a dsn' is not a valid DSN: "
    )


def test_unreachable_database_is_a_clear_error() -> None:
    result = CliRunner().invoke(
        main, ["--database-url", "postgresql://pulse:secret@127.0.0.1:1/nothing", "job", "list"]
    )
    assert result.exit_code == 3
    # named as the status headline names a database, then the DSN it came from
    assert result.output.startswith("error: database 'nothing' on 127.0.0.1:1 does not answer: ")
    assert result.output.endswith(" (DSN 'postgresql://pulse:***@127.0.0.1:1/nothing')\n")
    assert "secret" not in result.output


def test_a_server_that_refuses_the_login_is_not_one_that_does_not_answer(server_dsn: str) -> None:
    url = conninfo.make_conninfo(server_dsn, user="no_such_role_here", password="pw-secret")
    result = CliRunner().invoke(main, ["--database-url", url, "job", "list"])
    assert result.exit_code == 3
    assert "refused the connection" in result.output and "no_such_role_here" in result.output
    assert "pw-secret" not in result.output


def test_status_and_runs_as_json(dsn: str) -> None:
    assert (
        cli(
            dsn,
            "job",
            "create",
            "a",
            "--schedule",
            "@every 5m",
            "--handler",
            "shell",
            "--payload",
            SHELL_PAYLOAD,
        ).exit_code
        == 0
    )
    status = json.loads(cli(dsn, "status", "--json").output)
    assert status["leader"] is None and status["nodes"] == []
    assert status["jobs"]["total"] == 1 and status["jobs"]["due"] == 0
    assert json.loads(cli(dsn, "runs", "--json").output) == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        pytest.param({"schedule": "@every 99999999d"}, "schedule", id="interval_too_long"),
        pytest.param({"max_attempts": 3_000_000_000}, "max_attempts", id="attempts_overflow"),
        pytest.param({"timeout": 1e300}, "timeout", id="timeout_overflow"),
        pytest.param({"payload": {"json": {"k": "a\u0000b"}}}, "payload", id="nul_in_payload"),
        pytest.param({"payload": {"k": "\ud800"}}, "payload", id="lone_surrogate"),
        pytest.param({"misfire_grace": 0.999}, "misfire_grace", id="grace_under_1s"),
    ],
)
def test_values_the_database_cannot_hold_are_refused_up_front(
    fields: dict[str, Any], field: str
) -> None:
    from pgpulse import InvalidInput, JobSpec

    base: dict[str, Any] = {"name": "x", "schedule": "* * * * *", "handler": "h", **fields}
    with pytest.raises(InvalidInput) as caught:
        JobSpec.create(**base)
    assert caught.value.field == field


# -- as a user types them: real processes ------------------------------------------------------


@pytest.mark.parametrize(
    ("after", "first"),
    [
        pytest.param("2026-12-01 10:00", "2026-12-01T11:00:00+00:00", id="space_no_seconds"),
        pytest.param("2026-12-01T10:00", "2026-12-01T11:00:00+00:00", id="t_no_seconds"),
        pytest.param("2026-12-01T10:30Z", "2026-12-01T11:00:00+00:00", id="zulu"),
        pytest.param("2026-12-01T12:30+02:00", "2026-12-01T11:00:00+00:00", id="offset"),
        pytest.param("2026-12-01", "2026-12-01T01:00:00+00:00", id="bare_date"),
        pytest.param("20261201T1000", "2026-12-01T11:00:00+00:00", id="basic_format"),
    ],
)
def test_schedule_next_after_reads_iso_8601_as_fromisoformat(after: str, first: str) -> None:
    shown = pgpulse("schedule", "next", "0 * * * *", "--count", "1", "--after", after)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == ["at minute 0 (UTC)", "UTC", first]


@pytest.mark.parametrize("after", ["tomorrow", "2026-13-01T10:00", "2026-12-01T10:00+25:00"])
def test_schedule_next_refuses_a_bad_after_in_one_line(after: str) -> None:
    refused = pgpulse("schedule", "next", "0 * * * *", "--after", after)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "error: invalid value for --after: "
        f"{after!r} is not a date and time: ISO 8601, e.g. 2026-12-01T10:00"
    ]


def test_schedule_next_at_the_end_of_time_is_one_line() -> None:
    refused = pgpulse("schedule", "next", "0 0 1 1 *", "--after", "9999-06-01T00:00")
    assert refused.returncode == 2
    assert refused.stderr == (
        "error: schedule '0 0 1 1 *': no occurrence within 400 years after "
        "9999-06-01T00:00:00+00:00 (nor before the year 10000) in time zone UTC\n"
    )
    for after in ("9999-12-31T12:00", "0001-01-01T00:00+14:00"):  # past Pulse's instants
        beyond = pgpulse("schedule", "next", "@every 1d", "--after", after)
        assert (beyond.returncode, beyond.stdout) == (2, "")
        assert beyond.stderr.startswith("error: invalid value for --after: ")
        assert beyond.stderr.endswith(
            " is out of range: Pulse takes instants from 0001-01-02 to 9999-12-30 (UTC)\n"
        )


def test_pause_and_resume_are_idempotent_with_a_note(dsn: str, db: Any) -> None:
    create = ["job", "create", "backup", "--schedule", "0 3 * * *", "--handler", "shell"]
    assert pgpulse(*create, "--payload", SHELL_PAYLOAD, dsn=dsn).returncode == 0
    same = pgpulse(*create, "--payload", SHELL_PAYLOAD, dsn=dsn)  # as a user types it again
    assert same.stdout.startswith("job backup unchanged (id "), same.stdout
    first = pgpulse("job", "pause", "backup", dsn=dsn)
    assert (first.returncode, first.stdout) == (0, "paused backup\n")
    updated = job_rows(db)[0]["updated_at"]
    again = pgpulse("job", "pause", "backup", dsn=dsn)
    assert (again.returncode, again.stdout) == (0, "backup was paused already; no change\n")
    assert job_rows(db)[0]["updated_at"] == updated  # nothing written
    why = pgpulse("job", "pause", "backup", "--reason", "audit", dsn=dsn)
    assert why.stdout == "backup was paused already; now paused backup (audit)\n"
    cleared = pgpulse("job", "pause", "backup", "--reason", "", dsn=dsn)  # '' clears it
    assert cleared.stdout == "backup was paused already; now paused backup (no reason)\n"
    assert job_rows(db)[0]["pause_reason"] is None
    bell = pgpulse("job", "pause", "backup", "--reason", "a\x07b", dsn=dsn)  # never shown raw
    assert (bell.returncode, bell.stderr) == (2, "error: invalid value for --reason: 'a\\x07b' "
                                              "is shown wherever the status is: it holds U+0007 "
                                              "(a control character)\n")  # fmt: skip
    audit = db.execute("SELECT changes FROM pgpulse_job_history WHERE action = 'pause'")
    assert [r["changes"] for r in audit] == [
        {}, {"pause_reason": [None, "audit"]}, {"pause_reason": ["audit", None]}
    ]  # fmt: skip
    resumed = pgpulse("job", "resume", "backup", dsn=dsn)
    row = job_rows(db)[0]
    assert resumed.returncode == 0 and row["status"] == "idle"
    assert resumed.stdout == f"resumed backup; next occurrence {row['scheduled_for'].isoformat()}\n"
    idle = pgpulse("job", "resume", "backup", dsn=dsn)
    assert (idle.returncode, idle.stdout) == (0, "backup is idle, not paused; no change\n")
    assert job_rows(db)[0]["updated_at"] == row["updated_at"]

    db.execute(
        "UPDATE pgpulse_jobs SET status = 'running', locked_by = 'n', "
        "lease_expires_at = now() + interval '1 minute'"
    )
    running = pgpulse("job", "pause", "backup", dsn=dsn)  # when its run ends
    assert (running.returncode, running.stderr) == (0, "")
    assert running.stdout == "backup is running: pauses when this run ends (on node n)\n"
    assert (job_rows(db)[0]["status"], job_rows(db)[0]["pause_requested"]) == ("running", True)


def test_runs_of_an_unknown_job_names_the_tenants_it_looked_in(dsn: str) -> None:
    missing = pgpulse("runs", "nosuchjob", "--all-tenants", dsn=dsn)
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == "error: no job named 'nosuchjob' in any tenant\n"
    scoped = pgpulse("runs", "nosuchjob", "--tenant", "acme", dsn=dsn)
    assert scoped.stderr == "error: no job named 'nosuchjob' in tenant 'acme'\n"
    default = pgpulse("runs", "nosuchjob", dsn=dsn)  # no tenant given: 'default', as everywhere
    assert default.stderr == "error: no job named 'nosuchjob' in tenant 'default'\n"
    globally = pgpulse("--tenant", "globex", "runs", "nosuchjob", dsn=dsn)
    assert globally.stderr == "error: no job named 'nosuchjob' in tenant 'globex'\n"


def test_http_jobs_from_the_cli_follow_the_api_target_rule(dsn: str, db: Any) -> None:
    create = ("job", "create", "ping", "--schedule", "@every 1m", "--handler", "http")
    local = '{"url": "http://127.0.0.1:9/hook"}'
    refused = pgpulse(*create, "--payload", local, dsn=dsn)
    assert refused.returncode == 2 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith(
        "error: invalid value for --payload: payload.url 'http://127.0.0.1:9/hook' targets "
        "127.0.0.1"
    )
    assert line.endswith("such addresses are refused without this command's --allow-private-target")
    assert "server's" not in line
    redirects = '{"url": "http://93.184.216.34/", "follow_redirects": true}'
    assert pgpulse(*create, "--payload", redirects, dsn=dsn).returncode == 2
    assert job_rows(db) == []
    public = pgpulse(*create, "--payload", '{"url": "http://93.184.216.34/"}', dsn=dsn)
    assert public.returncode == 0, public.stderr
    allowed = pgpulse(*create, "--payload", local, "--allow-private-target", dsn=dsn)
    assert allowed.returncode == 0 and allowed.stdout.startswith("updated job ping")
    assert allowed.stdout.splitlines()[1] == (
        "note: its runs reach 127.0.0.1 only from nodes started with an --http-allow list "
        "that names it (pgpulse node run --http-allow HOST)"
    )
    assert job_rows(db)[0]["payload"] == {"url": "http://127.0.0.1:9/hook"}


SHELL_NOTE = (
    "note: no live node allows shell jobs: {} for a node started with --allow-shell-jobs "
    "(pgpulse node run --allow-shell-jobs; --shell-dry-run records the commands instead)"
)


def test_shell_jobs_written_while_no_live_node_allows_them_get_a_note(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    """As an http job's private target gets one (the sixth trial's shell jobs waited unsaid)."""
    create = ["job", "create", "backup", "--schedule", "0 3 * * *", "--handler", "shell"]
    made = pgpulse(*create, "--payload", SHELL_PAYLOAD, dsn=dsn)
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[1:] == [SHELL_NOTE.format("its runs wait")]
    tab = tmp_path / "two.crontab"
    tab.write_text("0 3 * * * backup\n0 4 * * * vacuum\n")
    imported = pgpulse("crontab", "import", str(tab), dsn=dsn)
    assert imported.stdout.splitlines()[-1] == SHELL_NOTE.format("their runs wait")
    again = pgpulse("crontab", "import", str(tab), dsn=dsn)  # nothing written: no note
    assert "note:" not in again.stdout
    db.execute(  # a live node that allows shell jobs (as a node's registration writes it)
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, slots, handlers, shell, state, "
        "started_at, last_heartbeat, ttl) VALUES ('n1', 'h', 1, 1, '{shell}', 'run', 'alive', "
        "now(), now(), 60)"
    )
    quiet = pgpulse(*create, "--payload", SHELL_PAYLOAD, "--tz", "Europe/Paris", dsn=dsn)
    assert quiet.returncode == 0 and "note:" not in quiet.stdout, quiet.stdout


def test_zone_rules_come_from_the_tzdata_package_not_the_host(tmp_path: Path) -> None:
    """A host whose tz files say Europe/Berlin is UTC (a stale or altered /usr/share/zoneinfo)
    does not change the arithmetic: every node reads the same rules, those of the tzdata
    package Pulse is installed with."""
    fake = tmp_path / "zoneinfo" / "Europe"
    fake.mkdir(parents=True)
    (fake / "Berlin").write_bytes(Path("/usr/share/zoneinfo/UTC").read_bytes())
    done = pgpulse(
        "schedule", "next", "0 3 * * *", "--tz", "Europe/Berlin", "--count", "1",
        "--after", "2026-01-10T00:00:00+00:00",
        env={"PYTHONTZPATH": str(tmp_path / "zoneinfo")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].split() == ["UTC", "Europe/Berlin"]
    assert done.stdout.splitlines()[2].split()[0] == "2026-01-10T02:00:00+00:00"  # 03:00 CET


def test_import_pgpulse_and_schedule_next_load_no_web_stack_and_no_http_client() -> None:
    """``import pgpulse`` and ``pgpulse schedule next`` import neither FastAPI, uvicorn nor httpx
    (nor the tools): a quick command pays for none of them."""
    heavy = ("fastapi", "uvicorn", "starlette", "httpx", "httpcore", "pgpulse_tools")
    script = (
        "import runpy, sys\n"
        "import pgpulse\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
        "sys.argv = ['pgpulse', 'schedule', 'next', '0 3 * * *', '--count', '1']\n"
        "try:\n"
        "    runpy.run_module('pgpulse', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, None), exit.code\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[]" and lines[-1] == "[]", done.stdout
    assert "at 03:00" in done.stdout


def test_a_spread_longer_than_the_period_is_refused_by_create_and_apply(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    refusal = (
        "120 s (2 min) is longer than the time between occurrences of schedule "
        "'* * * * *', as little as 60 s (1 min)"
    )
    created = pgpulse(
        "job", "create", "tick", "--schedule", "* * * * *", "--handler", "shell",
        "--payload", '{"command": "true"}', "--spread", "120", dsn=dsn,
    )  # fmt: skip
    assert (created.returncode, created.stdout) == (2, "")
    assert created.stderr == f"error: invalid value for --spread: {refusal}\n"
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        '[jobs.tick]\nschedule = "* * * * *"\nhandler = "shell"\n'
        'payload = { command = "true" }\nspread = 120\n'
    )
    applied = pgpulse("apply", str(jobs), dsn=dsn)
    assert (applied.returncode, applied.stdout) == (2, "")
    assert applied.stderr.startswith(f"error: {jobs}:5: job 'tick': ")
    assert applied.stderr.endswith(f"spread {refusal}\n")
    assert job_rows(db) == []
    whole_minute = pgpulse(
        "job", "create", "tick", "--schedule", "* * * * *", "--handler", "shell",
        "--payload", '{"command": "true"}', "--spread", "60", dsn=dsn,
    )  # fmt: skip
    assert whole_minute.returncode == 0, whole_minute.stderr
    assert job_rows(db)[0]["spread"] == 60


def test_job_list_shows_no_next_occurrence_for_a_completed_job(dsn: str, db: Any) -> None:
    for name in ("once", "tick"):
        made = pgpulse(
            "job", "create", name, "--schedule", "@hourly", "--handler", "shell",
            "--payload", '{"command": "true"}', dsn=dsn,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    db.execute("UPDATE pgpulse_jobs SET status = 'completed' WHERE name = 'once'")
    table = pgpulse("job", "list", dsn=dsn).stdout.splitlines()
    start = table[0].index("scheduled_for")  # empty cells (pause_reason): read by position
    cells = {line.split()[0]: line[start:].split()[0] for line in table[2:]}
    assert cells["once"] == "-"
    assert cells["tick"].endswith(":00:00+00:00")
    listed = json.loads(pgpulse("job", "list", "--json", dsn=dsn).stdout)
    assert all(j["scheduled_for"] for j in listed)  # --json keeps the row's value
    shown = pgpulse("job", "show", "once", dsn=dsn).stdout.splitlines()  # nor job show
    assert [line.split() for line in shown if "scheduled for" in line or "claimable" in line] == [
        ["scheduled", "for", "-"], ["claimable", "at", "-"]
    ]  # fmt: skip


def test_runs_of_several_tenants_name_their_tenant(dsn: str, db: Any) -> None:
    """With --all-tenants, `runs` and `job list` list every tenant's: with more than one among
    them, each row says its tenant (the same job name may be in both)."""
    for tenant in ("acme", "globex"):
        made = cli(dsn, "job", "create", "nightly", "--tenant", tenant, "--schedule", "@every 5m",
                   "--handler", "shell", "--payload", SHELL_PAYLOAD)  # fmt: skip
        assert made.exit_code == 0, made.output
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, outcome, finished_at) "
        "SELECT id, now(), 'succeeded', now() FROM pgpulse_jobs"
    )
    listed = cli(dsn, "runs", "--all-tenants").output.splitlines()
    assert listed[0].split()[:2] == ["tenant", "name"]
    assert sorted(line.split()[0] for line in listed[2:]) == ["acme", "globex"]
    one = cli(dsn, "runs", "--tenant", "acme").output.splitlines()
    assert one[0].split()[0] == "name" and len(one) == 3
    assert cli(dsn, "runs").output == "(none)\n"  # no tenant given: 'default', which has none
    jobs = cli(dsn, "job", "list", "--all-tenants").output.splitlines()
    assert jobs[0].split()[:2] == ["tenant", "name"]
    assert sorted(line.split()[0] for line in jobs[2:]) == ["acme", "globex"]


def test_a_crontab_marker_given_as_a_schedule_says_what_to_give() -> None:
    """`@pulse6` is a crontab line's marker: as a schedule it is refused saying to give the six
    fields alone (the seventh trial got 'unknown macro' for the whole expression)."""
    refused = pgpulse("schedule", "next", "@pulse6 */5 * * * * *")
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: schedule '@pulse6 */5 * * * * *': @pulse6 marks a crontab line whose schedule "
        "has 6 fields; a schedule is the fields alone: '*/5 * * * * *'\n",
    )


def test_updating_a_completed_job_says_no_occurrence_is_to_come(dsn: str, db: Any) -> None:
    """An update that leaves a job completed names no 'next occurrence' (the ninth trial was
    shown one in the past that would never run)."""
    create = ["job", "create", "once", "--schedule", "@hourly", "--handler", "shell"]
    assert pgpulse(*create, "--payload", SHELL_PAYLOAD, "--max-runs", "1", dsn=dsn).returncode == 0
    db.execute("UPDATE pgpulse_jobs SET status = 'completed', runs_done = 1")
    again = pgpulse(*create, "--payload", '{"command": "echo 2"}', "--max-runs", "1", dsn=dsn)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0].endswith("; completed: no occurrence to come")


def test_a_resume_that_runs_a_missed_occurrence_says_it_runs_now(dsn: str, db: Any) -> None:
    """``resume --catch-up once`` holds a missed occurrence, which is due: the line says it runs
    now (it said "next occurrence" with an instant in the past)."""
    create = ["job", "create", "m", "--schedule", "* * * * *", "--handler", "shell"]
    assert pgpulse(*create, "--payload", SHELL_PAYLOAD, dsn=dsn).returncode == 0
    assert pgpulse("job", "pause", "m", dsn=dsn).returncode == 0
    # the pause began two hours ago: its occurrences since then were missed
    db.execute("UPDATE pgpulse_jobs SET scheduled_for = scheduled_for - interval '2 hours'")
    resumed = pgpulse("job", "resume", "m", "--catch-up", "once", dsn=dsn)
    assert resumed.returncode == 0, resumed.stderr
    [row] = job_rows(db)
    # once runs the newest occurrence inside the pause, the minute of the resume, not the held
    # (oldest) one
    runs = row["resumed_at"].replace(second=0, microsecond=0)
    assert row["scheduled_for"] < runs
    assert resumed.stdout == f"resumed m (once); missed occurrence {runs.isoformat()} runs now\n"


def test_one_tenant_setting_serves_every_tenant_scoped_command(dsn: str, db: Any) -> None:
    """PGPULSE_TENANT (or `pgpulse --tenant`) is the tenant of every tenant-scoped command; a
    command's own --tenant wins; with neither, every command means tenant 'default'."""
    acme = {"PGPULSE_TENANT": "acme"}
    create = ("job", "create", "nightly", "--schedule", "@daily", "--handler", "shell",
              "--payload", SHELL_PAYLOAD)  # fmt: skip
    assert pgpulse(*create, dsn=dsn, env=acme).returncode == 0
    assert pgpulse("--tenant", "globex", *create, dsn=dsn).returncode == 0
    made = pgpulse(*create, "--tenant", "initech", dsn=dsn, env=acme)  # its own wins
    assert made.returncode == 0, made.stderr
    tenants = db.execute("SELECT tenant FROM pgpulse_jobs ORDER BY tenant").fetchall()
    assert [row["tenant"] for row in tenants] == ["acme", "globex", "initech"]
    paused = pgpulse("job", "pause", "nightly", dsn=dsn, env=acme)
    assert paused.returncode == 0, paused.stderr
    statuses = db.execute("SELECT tenant, status FROM pgpulse_jobs ORDER BY tenant").fetchall()
    assert [(r["tenant"], r["status"]) for r in statuses] == [
        ("acme", "paused"), ("globex", "idle"), ("initech", "idle")
    ]  # fmt: skip
    listed = json.loads(pgpulse("job", "list", "--json", dsn=dsn, env=acme).stdout)
    assert [(j["tenant"], j["name"]) for j in listed] == [("acme", "nightly")]
    calendar = pgpulse("calendar", "set", "closed", "--date", "2030-12-25", dsn=dsn, env=acme)
    assert calendar.returncode == 0, calendar.stderr
    assert db.execute("SELECT tenant FROM pgpulse_calendars").fetchone() == {"tenant": "acme"}
    nothing = pgpulse("job", "show", "nightly", dsn=dsn)  # no tenant anywhere: 'default'
    assert nothing.returncode == 2
    assert nothing.stderr.startswith("error: no job named 'nightly' in tenant 'default'")
    bad = pgpulse("job", "list", dsn=dsn, env={"PGPULSE_TENANT": "a\x01b"})
    assert (bad.returncode, bad.stdout) == (2, "")
    assert "PGPULSE_TENANT" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_a_spread_past_a_dst_gap_and_a_schedule_only_in_gaps_are_refused_by_create(
    dsn: str, db: Any
) -> None:
    spread = pgpulse(
        "job", "create", "hourly", "--schedule", "50 0-23 * * *", "--tz", "Europe/Berlin",
        "--handler", "shell", "--payload", '{"command": "true"}', "--spread", "3600", dsn=dsn,
    )  # fmt: skip
    assert (spread.returncode, spread.stdout) == (2, "")
    assert spread.stderr == (
        "error: invalid value for --spread: 3,600 s (1 h) is longer than the time between "
        "occurrences of schedule '50 0-23 * * *', as little as 600 s (10 min)\n"
    )
    # 01:xx on the last Sunday of March is always inside Dublin's spring-forward gap
    gaps = pgpulse(
        "job", "create", "never", "--schedule", "*/15 1 * mar 0L", "--tz", "Europe/Dublin",
        "--handler", "shell", "--payload", '{"command": "true"}', dsn=dsn,
    )  # fmt: skip
    assert (gaps.returncode, gaps.stdout) == (2, "")
    assert gaps.stderr == (
        "error: invalid value for --schedule: '*/15 1 * mar 0L' never fires in time zone "
        "Europe/Dublin: every time it matches falls in a daylight-saving gap (wall times the "
        "clocks skip); with a fixed minute and hour (no '*' in either) a time in a gap fires "
        "just after it\n"
    )
    assert job_rows(db) == []
