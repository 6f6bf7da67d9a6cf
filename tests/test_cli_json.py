"""Every command that writes says what it did as JSON with --json (one object on stdout, the
facts its line words), run as a user types it: a real ``pgpulse`` process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from helpers import PGPULSE, pgpulse

SHELL = ("--handler", "shell", "--payload", '{"command": "echo hi"}')


def _json(*args: str, dsn: str | None = None) -> Any:
    done = pgpulse(*args, "--json", dsn=dsn)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_job_commands_that_write_print_json(dsn: str, db: Any) -> None:
    made = _json("job", "create", "backup", "--schedule", "0 3 * * *", *SHELL, dsn=dsn)
    job_id = db.execute("SELECT id FROM pgpulse_jobs WHERE name = 'backup'").fetchone()["id"]
    assert made["id"] == job_id and made["action"] == "created" and made["changed"] == []
    assert (made["tenant"], made["name"], made["status"]) == ("default", "backup", "idle")
    assert made["scheduled_for"].endswith("T03:00:00Z")
    moved = _json("job", "create", "backup", "--schedule", "0 4 * * *", *SHELL, dsn=dsn)
    assert (moved["action"], moved["changed"]) == ("updated", ["schedule"])
    assert moved["revision"] == made["revision"] + 1
    again = _json("job", "create", "backup", "--schedule", "0 4 * * *", *SHELL, dsn=dsn)
    assert (again["action"], again["changed"]) == ("unchanged", [])

    paused = _json("job", "pause", "backup", "--reason", "disk swap", dsn=dsn)
    assert paused.pop("scheduled_for").endswith("T04:00:00Z")
    assert paused == {
        "id": job_id, "tenant": "default", "name": "backup", "changed": True,
        "status": "paused", "pause_requested": False, "paused_until": None,
        "pause_reason": "disk swap", "run_id": None, "node_id": None, "cancelled_runs": [],
        "message": "paused backup (disk swap)",
    }  # fmt: skip
    resumed = _json("job", "resume", "backup", dsn=dsn)
    assert (resumed["changed"], resumed["status"], resumed["due_now"]) == (True, "idle", False)
    assert resumed["scheduled_for"].endswith("T04:00:00Z")
    assert _json("job", "resume", "backup", dsn=dsn)["changed"] is False

    triggered = _json("job", "trigger", "backup", dsn=dsn)
    stored = db.execute("SELECT scheduled_for FROM pgpulse_jobs WHERE id = %s", [job_id])
    assert triggered["kind"] == "scheduled" and triggered["already_due"] is False
    assert triggered["scheduled_for"].replace("Z", "+00:00") == (
        stored.fetchone()["scheduled_for"].isoformat()
    )
    extra = _json("job", "trigger", "backup", "--payload", '{"command": "echo once"}', dsn=dsn)
    occurrence = db.execute("SELECT id FROM pgpulse_occurrences").fetchone()["id"]
    assert (extra["kind"], extra["run_id"]) == ("trigger", occurrence)

    deleted = _json("job", "delete", "backup", dsn=dsn)
    assert deleted == {
        "id": job_id, "tenant": "default", "name": "backup", "action": "deleted",
        "cancelled_on_node": None, "followers": [],
    }  # fmt: skip
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0


def test_other_writing_commands_print_json(dsn: str, db: Any, tmp_path: Path) -> None:
    calendar = _json("calendar", "set", "closed", "--date", "2030-12-25", dsn=dsn)
    assert calendar["action"] == "created" and calendar["dates"] == ["2030-12-25"]
    assert (calendar["tenant"], calendar["name"], calendar["country"]) == (
        "default", "closed", None
    )  # fmt: skip

    crontab = tmp_path / "crontab"
    crontab.write_text("*/5 * * * * echo five\n0 1 * * * echo one\n")
    imported = _json("crontab", "import", str(crontab), dsn=dsn)
    ids = {r["name"]: r["id"] for r in db.execute("SELECT id, name FROM pgpulse_jobs")}
    assert [(j["name"], j["id"], j["action"]) for j in imported["jobs"]] == [
        (name, ids[name], "created") for name in sorted(ids, key=ids.__getitem__)
    ]
    assert imported["file"] == str(crontab) and imported["source"].startswith("crontab:")
    kept = _json("crontab", "import", str(crontab), dsn=dsn)
    assert {j["action"] for j in kept["jobs"]} == {"kept"}
    planned = _json("crontab", "import", str(crontab), "--sync", "--dry-run", dsn=dsn)
    assert planned[0]["applied"] is False and planned[0]["file"] == str(crontab)

    token = _json("token", "create", "--tenant", "acme", "--label", "ci", dsn=dsn)
    stored = db.execute("SELECT id, tenant, label FROM pgpulse_api_tokens").fetchone()
    assert (token["id"], token["tenant"], token["label"]) == (
        stored["id"], "acme", "ci"
    )  # fmt: skip
    assert token["admin"] is False and len(token["token"]) > 20


def test_schedule_next_prints_json() -> None:
    shown = _json("schedule", "next", "30 2 * * *", "--tz", "Europe/Berlin", "--count", "2",
                  "--after", "2027-03-27T12:00:00Z")  # fmt: skip
    assert shown["occurrences"] == [
        {"utc": "2027-03-28T01:00:00Z", "local": "2027-03-28T03:00:00+02:00"},
        {"utc": "2027-03-29T00:30:00Z", "local": "2027-03-29T02:30:00+02:00"},
    ]
    assert (shown["timezone"], shown["ended"]) == ("Europe/Berlin", False)
    once = _json("schedule", "next", "@at 2027-01-01T00:00:00", "--after", "2026-06-01")
    assert len(once["occurrences"]) == 1 and once["ended"] is True


def test_shell_completion_completes_commands() -> None:
    """README's completion line: click's completion for the `pgpulse` command."""
    env = {**os.environ, "_PGPULSE_COMPLETE": "bash_complete", "COMP_WORDS": "pgpulse job cr",
           "COMP_CWORD": "2"}  # fmt: skip
    done = subprocess.run([PGPULSE], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["plain,create"]
    source = {**os.environ, "_PGPULSE_COMPLETE": "bash_source"}
    script = subprocess.run([PGPULSE], env=source, capture_output=True, text=True, timeout=60)
    assert "complete -o nosort -F _pgpulse_completion pgpulse" in script.stdout


def test_job_pause_until_takes_a_duration(dsn: str, db: Any) -> None:
    made = pgpulse("job", "create", "backup", "--schedule", "0 3 * * *", *SHELL, dsn=dsn)
    assert made.returncode == 0, made.stderr
    paused = _json("job", "pause", "backup", "--until", "90m", dsn=dsn)
    left = db.execute("SELECT paused_until - now() AS left FROM pgpulse_jobs").fetchone()["left"]
    assert paused["status"] == "paused" and 89 * 60 < left.total_seconds() <= 90 * 60
    refused = pgpulse("job", "pause", "backup", "--until", "99999999999999", dsn=dsn)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert len(refused.stderr.splitlines()) == 1 and "until" in refused.stderr
