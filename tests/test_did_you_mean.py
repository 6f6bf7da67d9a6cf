"""A mistyped zone, field or handler is refused with the nearest right one named, as a user
types the command (real ``pgpulse`` processes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import pgpulse
from pgpulse.core.policy import WebSettings
from pgpulse.core.wording import did_you_mean
from web_helpers import LiveServer, sync_token

CREATE = ("job", "create", "nightly", "--schedule", "@daily")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(("--handler", "shell", "--payload", '{"comand": "backup"}'),
                     "payload.comand is not a field of this handler (did you mean 'command'?)",
                     id="payload_field"),
        pytest.param(("--handler", "htp", "--payload", "{}"),
                     "'htp' of job 'nightly' is not built in and no node has registered "
                     "it (did you mean 'http'?)", id="handler"),
        pytest.param(("--handler", "shell", "--payload", '{"command": "x"}', "--tz",
                      "america/new_york"),
                     "'america/new_york' is refused: it is not an IANA time zone name (did you "
                     "mean 'America/New_York'?)", id="zone_case"),
        pytest.param(("--handler", "shell", "--payload", '{"command": "x"}', "--tz",
                      "Europe/Lodnon"),
                     "(did you mean 'Europe/London'?)", id="zone_typo"),
    ],
)  # fmt: skip
def test_a_mistyped_name_says_the_nearest(dsn: str, args: tuple[str, ...], says: str) -> None:
    refused = pgpulse(*CREATE, *args, dsn=dsn)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert len(refused.stderr.splitlines()) == 1 and says in refused.stderr


def test_an_apply_file_field_says_the_nearest(dsn: str, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('[jobs.a]\nschedule = "@hourly"\nhandler = "shell"\ntimezon = "UTC"\n')
    refused = pgpulse("apply", str(jobs), dsn=dsn)
    assert refused.returncode == 2
    assert "jobs.toml:4: job 'a': unknown field 'timezon' (did you mean 'timezone'?)" in (
        refused.stderr
    )


def test_nothing_near_names_nothing() -> None:
    assert did_you_mean("zzzzzz", ["command", "stdin"]) == ""
    assert did_you_mean(3, ["command"]) == ""


def test_an_api_body_field_says_the_nearest(dsn: str, db: Any) -> None:
    """Over a real socket, POST /api/v1/jobs with `max_atempts` is refused with 422 naming the
    nearest field, as `pgpulse apply` does, with the value sent; nothing is written."""
    token = sync_token(dsn, "acme")
    body = {"name": "nightly", "schedule": "@daily", "handler": "http",
            "payload": {"url": "https://93.184.215.14/hook"}, "max_atempts": 3}  # fmt: skip
    with (
        LiveServer(dsn, WebSettings()) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}
        ) as http,
    ):
        refused = http.post("/api/v1/jobs", json=body)
        far_body = {**{k: v for k, v in body.items() if k != "max_atempts"}, "zzzzzz": 1}
        far = http.post("/api/v1/jobs", json=far_body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == {
        "code": "invalid_input",
        "message": "max_atempts is not a field of this request (did you mean 'max_attempts'?)",
        "field": "max_atempts",
        "value": 3,
    }
    assert far.status_code == 422, far.text
    assert far.json()["error"]["message"] == "zzzzzz is not a field of this request"
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0


def test_an_unknown_calendar_says_the_nearest(dsn: str, db: Any) -> None:
    """`job create --calendar hols` where the tenant has `hol`: refused (exit 2, one line,
    nothing written) naming the nearest calendar; a name near none names none."""
    made = pgpulse("calendar", "set", "hol", "--date", "2030-12-25", dsn=dsn)
    assert made.returncode == 0, made.stderr
    for name, near in (("hols", " (did you mean 'hol'?)"), ("zzzzzz", "")):
        refused = pgpulse(*CREATE, "--handler", "shell", "--payload", '{"command": "x"}',
                          "--calendar", name, dsn=dsn)  # fmt: skip
        assert (refused.returncode, refused.stdout) == (2, ""), refused.stderr
        assert refused.stderr.splitlines() == [
            f"error: invalid value for --calendar: calendar {name!r} of job 'nightly' does not "
            f"exist in tenant 'default'{near} (create it with: pgpulse calendar set {name} ...)"
        ]
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
