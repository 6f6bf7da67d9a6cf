"""Input limits on every path: one nesting and integer rule for
payloads, configs and files (CLI, ``apply``, Python, HTTP), a size cap on input files, and the
names rule for who acknowledges an alert. Refusals are one line and exit 2, writing nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import add, pgpulse
from pgpulse.core.errors import InvalidInput, InvalidPayload
from pgpulse.core.jobs import JobSpec
from pgpulse.db.store import Store
from web_helpers import api_client, make_token

LONG_INT = "1" * 5000  # Python's own limit is 4,300 digits


def nested(levels: int) -> str:
    """JSON text of ``levels`` arrays, one inside the other."""
    return "[" * levels + "]" * levels


def http_payload(value: str) -> str:
    return f'{{"url": "https://8.8.8.8/hook", "json": {value}}}'


def jobs(db: Any) -> int:
    return int(db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"])


# --- one nesting and integer rule ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (LONG_INT, "holds an integer of more than 4,300 digits"),
        (nested(65), "is nested more than 64 levels deep"),  # 66 levels with the payload's
        (nested(5000), "is nested more than 64 levels deep"),
        # beyond a float's range: Python reads infinity, which JSON cannot store
        ("1e999", "payload.json must be a finite number, got 1e999"),
    ],
)
def test_job_create_and_trigger_refuse_a_payload_too_deep_or_a_number_too_long(
    dsn: str, db: Any, value: str, why: str
) -> None:
    created = pgpulse(
        "job", "create", "hook", "--schedule", "@daily", "--handler", "http",
        "--payload", http_payload(value), dsn=dsn,
    )  # fmt: skip
    assert (created.returncode, created.stderr) == (
        2,
        f"error: invalid value for --payload: {why}\n",
    )
    assert jobs(db) == 0
    made = pgpulse(
        "job", "create", "hook", "--schedule", "@daily", "--handler", "http",
        "--payload", http_payload(nested(64)), dsn=dsn,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    triggered = pgpulse("job", "trigger", "hook", "--payload", http_payload(value), dsn=dsn)
    assert (triggered.returncode, triggered.stderr) == (
        2,
        f"error: invalid value for --payload: {why}\n",
    )
    assert db.execute("SELECT count(*) AS n FROM pgpulse_occurrences").fetchone()["n"] == 0


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (LONG_INT, "config holds an integer of more than 4,300 digits"),
        (nested(5000), "config is nested more than 64 levels deep"),
    ],
)
def test_notifier_add_refuses_a_config_too_deep_or_a_number_too_long(
    dsn: str, db: Any, value: str, why: str
) -> None:
    config = f'{{"url": "https://8.8.8.8/hook", "timeout": {value}}}'
    added = pgpulse("notifier", "add", "hook", "--kind", "webhook", "--config", config, dsn=dsn)
    assert (added.returncode, added.stderr) == (2, f"error: {why}\n")
    assert db.execute("SELECT count(*) AS n FROM pgpulse_notifiers").fetchone()["n"] == 0


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (LONG_INT, "an integer has more than 4,300 digits"),
        (nested(5000), "a value is nested more than 64 levels deep"),
        (nested(65), "job 'hook': payload is nested more than 64 levels deep"),
    ],
)
def test_apply_refuses_a_file_too_deep_or_a_number_too_long(
    dsn: str, db: Any, tmp_path: Path, value: str, why: str
) -> None:
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[jobs.hook]\nschedule = "@daily"\nhandler = "http"\n'
        f'payload = {{url = "https://8.8.8.8/hook", json = {value}}}\n'
    )
    applied = pgpulse("apply", str(path), dsn=dsn)
    assert (applied.returncode, applied.stderr) == (2, f"error: {path}:4: {why}\n")
    assert jobs(db) == 0


def test_the_python_api_takes_what_the_http_api_takes_and_refuses_the_rest() -> None:
    """JobSpec.create and the HTTP API apply one rule: a value 64 levels below the payload
    passes, one 65 levels below does not (before, Python stored such a payload, which the API
    then refused to change)."""
    payload: dict[str, Any] = {"url": "https://8.8.8.8/hook", "json": json.loads(nested(64))}
    JobSpec.create(name="hook", schedule="@daily", handler="http", payload=payload)
    payload["json"] = [payload["json"]]
    with pytest.raises(InvalidPayload, match=r"^payload is nested more than 64 levels deep$"):
        JobSpec.create(name="hook", schedule="@daily", handler="http", payload=payload)
    payload["json"] = 10**5000
    with pytest.raises(InvalidPayload, match="integer of more than 4,300 digits"):
        JobSpec.create(name="hook", schedule="@daily", handler="http", payload=payload)
    with pytest.raises(InvalidInput, match=r"^meta is nested more than 64 levels deep$"):
        JobSpec.create(name="m", schedule="@daily", handler="http", payload={"url": "https://e.x"},
                       meta={"deep": json.loads(nested(65))})  # fmt: skip


async def test_a_payload_the_python_api_stored_can_be_changed_through_the_http_api(
    store: Store, db: Any
) -> None:
    payload = {"url": "https://8.8.8.8/hook", "json": json.loads(nested(64))}
    [job_id] = await add(store, JobSpec.create(name="hook", schedule="@daily", handler="http",
                                               payload=payload))  # fmt: skip
    token = await make_token(store, admin=True)
    async with api_client(store, token) as client:
        changed = await client.patch(f"/api/v1/jobs/{job_id}", json={"schedule": "@hourly"})
        assert changed.status_code == 200, changed.text
        too_deep = {"payload": {"url": "https://8.8.8.8/hook", "json": json.loads(nested(65))}}
        refused = await client.patch(f"/api/v1/jobs/{job_id}", json=too_deep)
    assert refused.status_code == 422, refused.text
    assert "payload is nested more than 64 levels deep" in refused.text
    row = db.execute("SELECT schedule, payload FROM pgpulse_jobs").fetchone()
    assert row == {"schedule": "@hourly", "payload": payload}


# --- input size cap ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("apply", "/dev/zero"),
        ("crontab", "import", "/dev/zero"),
        ("notifier", "add", "n", "--kind", "webhook", "--config", "@/dev/zero"),
    ],
)
def test_an_endless_input_file_is_refused_naming_the_limit(
    dsn: str, db: Any, args: tuple[str, ...]
) -> None:
    refused = pgpulse(*args, dsn=dsn, timeout=60)
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: /dev/zero is longer than 8 MiB (8,388,608 bytes), the most an input file may "
        "hold\n",
    )
    assert jobs(db) == 0


def test_endless_standard_input_is_refused_naming_the_limit(dsn: str) -> None:
    import os
    import subprocess

    from helpers import PGPULSE

    with open("/dev/zero", "rb") as zero:
        refused = subprocess.run(
            [PGPULSE, "notifier", "add", "n", "--kind", "webhook", "--config", "-"],
            stdin=zero,
            env={**os.environ, "PGPULSE_DATABASE_URL": dsn},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: standard input is longer than 8 MiB (8,388,608 bytes), the most an input file "
        "may hold\n",
    )


# --- alert ack --by --------------------------------------------------------------------------


def test_alert_ack_by_takes_a_name_and_refuses_control_characters(dsn: str, db: Any) -> None:
    db.execute("INSERT INTO pgpulse_alert_events (dedupe_key, rule) VALUES ('test/1', 'lag')")
    refused = pgpulse("alert", "ack", "1", "--by", "ana\x1b[2J\x1b]0;pwned\x07", dsn=dsn)
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: invalid value for --by: 'ana\\x1b[2J\\x1b]0;pwned\\x07' is not a valid name "
        "(1-200 printable characters, no leading or trailing space): it holds U+001B (a "
        "control character)\n",
    )
    row = db.execute("SELECT acknowledged_by FROM pgpulse_alert_events").fetchone()
    assert row == {"acknowledged_by": None}
    assert pgpulse("alert", "ack", "1", "--by", "Ana Lima", dsn=dsn).returncode == 0
    row = db.execute("SELECT acknowledged_by FROM pgpulse_alert_events").fetchone()
    assert row == {"acknowledged_by": "Ana Lima"}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (LONG_INT, "body holds an integer of more than 4,300 digits"),
        (nested(5000), "body is nested more than 64 levels deep"),
    ],
)
async def test_the_http_api_refuses_the_same_bodies_saying_why(
    store: Store, value: str, why: str
) -> None:
    """Python's JSON parser refuses these beyond JSON's grammar; FastAPI said only "There was
    an error parsing the body"."""
    token = await make_token(store, admin=True)
    body = '{"name": "hook", "schedule": "@daily", "handler": "http", "payload": %s}'
    async with api_client(store, token) as client:
        refused = await client.post(
            "/api/v1/jobs",
            content=body % http_payload(value),
            headers={"Content-Type": "application/json"},
        )
    assert refused.status_code == 400, refused.text
    assert refused.json() == {
        "error": {"code": "bad_request", "message": why, "field": "body", "value": None}
    }
