"""Which commands create the schema: reading commands (and those that change what exists) on a
database without Pulse's schema say so in one line, exit 2 and write nothing; ``status`` makes
it its headline; the commands that create definitions migrate first, as nodes do. One
command of each kind runs as a real subprocess; the other readers run in
process (click's runner: each ``pgpulse`` start costs over half a second)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from helpers import pgpulse
from pgpulse.cli.main import main
from pgpulse.sql import migration_files


def tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return [row[0] for row in rows]


def in_process(dsn: str, *args: str) -> tuple[int, str]:
    """``pgpulse ARGS`` in this process (a thread of its own: the command runs its own loop)."""
    with ThreadPoolExecutor(1) as thread:
        result = thread.submit(CliRunner().invoke, main, ["--database-url", dsn, *args]).result()
    return result.exit_code, result.stderr


def no_schema_line(dsn: str) -> str:
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    return f"database '{dbname}' on "


READERS = [
    ["runs"],
    ["job", "show", "nightly"],
    ["job", "history", "nightly"],
    ["job", "pause", "nightly"],
    ["job", "delete", "nightly"],
    ["job", "trigger", "nightly"],
    ["calendar", "list"],
    ["token", "list"],
    ["apply", "--dry-run", "FILE"],
    ["crontab", "import", "--dry-run", "FILE"],
]


def test_a_reading_command_on_an_empty_database_says_so_and_writes_nothing(
    empty_dsn: str, tmp_path: Any
) -> None:
    done = pgpulse("job", "list", dsn=empty_dsn)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: {no_schema_line(empty_dsn)}")
    assert line.endswith(
        " has no Pulse schema: run `pgpulse migrate`, or start a node (nodes migrate at start)"
    )
    apply_file = tmp_path / "jobs.toml"
    apply_file.write_text('[jobs.nightly]\nschedule = "0 3 * * *"\nhandler = "noop"\n')
    crontab = tmp_path / "jobs.crontab"
    crontab.write_text("0 3 * * * backup\n")
    files = {"apply": str(apply_file), "crontab": str(crontab)}
    for args in READERS:
        args = [files[args[0]] if a == "FILE" else a for a in args]
        code, stderr = in_process(empty_dsn, *args)
        assert (code, stderr) == (2, line + "\n"), args
    assert tables(empty_dsn) == []


def test_a_schema_older_than_this_pulse_is_named_with_its_version(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE pgpulse_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute("INSERT INTO pgpulse_migrations VALUES (1, 'baseline')")
    latest = migration_files()[-1][0]
    code, stderr = in_process(empty_dsn, "job", "list")
    assert code == 2
    assert f" has Pulse schema 1, not {latest}: run `pgpulse migrate`" in stderr
    assert tables(empty_dsn) == ["pgpulse_migrations"]


@pytest.mark.parametrize("as_json", [False, True])
def test_status_on_an_empty_database_says_so_in_its_headline(empty_dsn: str, as_json: bool) -> None:
    done = pgpulse("status", *(["--json"] if as_json else []), dsn=empty_dsn)
    assert done.returncode == 0, done.stderr
    headline = (
        "NO PULSE SCHEMA: run `pgpulse migrate`, or start a node (nodes migrate at start) — "
        f"{no_schema_line(empty_dsn)}"
    )
    if as_json:
        document = json.loads(done.stdout)
        assert document["headline"].startswith(headline)
        assert (document["nodes"], document["jobs"]) == ([], None)
    else:
        assert done.stdout.startswith(headline)
        assert len(done.stdout.splitlines()) == 1
    checked = in_process(empty_dsn, "status", "--check")
    assert checked == (1, "check failed: no Pulse schema\n")
    assert tables(empty_dsn) == []


def test_a_command_that_creates_definitions_migrates_first(empty_dsn: str) -> None:
    done = pgpulse(
        "job",
        "create",
        "nightly",
        "--schedule",
        "0 3 * * *",
        "--handler",
        "shell",
        "--payload",
        '{"command": "true"}',
        dsn=empty_dsn,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("created job nightly (id ")
    assert "pgpulse_jobs" in tables(empty_dsn)
    assert in_process(empty_dsn, "job", "show", "nightly")[0] == 0
