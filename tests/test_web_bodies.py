"""What the API reads a request body as (pgpulse.web.bodies), and how it echoes refused values:
``curl -d`` (form-typed) JSON is read as JSON, truncated or empty JSON is 400, another type is 415
naming the Content-Type; a refused instant is echoed as ISO 8601, never a Python repr; naive
instants are read as the CLI reads them (a backfill's as UTC, a pause's in the job's zone)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pgpulse.db.store import Store
from web_helpers import api_client, make_token

PUBLIC_URL = "https://93.184.215.14/hook"  # a public address literal: no DNS needed
JOB = json.dumps(
    {"name": "hook", "schedule": "0 * * * *", "handler": "http", "payload": {"url": PUBLIC_URL}}
)
FORM = "application/x-www-form-urlencoded"  # what curl -d sends unless told otherwise


def names(db: Any) -> list[str]:
    return [r["name"] for r in db.execute("SELECT name FROM pgpulse_jobs ORDER BY id")]


@pytest.mark.parametrize("content_type", [FORM, "text/plain", None, "application/json"])
async def test_a_json_body_is_read_as_json_whatever_curl_labels_it(
    store: Store, db: Any, content_type: str | None
) -> None:
    token = await make_token(store, "acme")
    headers = {} if content_type is None else {"content-type": content_type}
    async with api_client(store, token) as client:
        created = await client.post("/api/v1/jobs", content=JOB, headers=headers)
    assert created.status_code == 201, created.text
    assert (created.json()["name"], created.json()["schedule"]) == ("hook", "0 * * * *")
    assert names(db) == ["hook"]


async def test_truncated_empty_and_foreign_bodies_get_one_clear_refusal(
    store: Store, db: Any
) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        truncated = await client.post(
            "/api/v1/jobs", content='{"name":"api.bad",', headers={"content-type": FORM}
        )
        empty = await client.post("/api/v1/jobs", content=b"", headers={"content-type": FORM})
        xml = await client.post(
            "/api/v1/jobs", content="<job/>", headers={"content-type": "application/xml"}
        )
        multipart = await client.post("/api/v1/jobs", files={"f": ("job.json", JOB.encode())})
    assert truncated.status_code == 400
    assert truncated.json()["error"] == {
        "code": "invalid_json",
        "message": "body is not valid JSON: Expecting property name enclosed in double quotes "
        "at character 18",
        "field": "body",
        "value": None,
    }
    assert empty.status_code == 400
    assert empty.json()["error"]["message"] == "body is empty: this route takes a JSON object"
    assert xml.status_code == 415
    assert xml.json()["error"] == {
        "code": "unsupported_media_type",
        "message": "Content-Type 'application/xml' is not JSON: the API reads request bodies as "
        "JSON (send Content-Type: application/json)",
        "field": "content-type",
        "value": "application/xml",
    }
    assert multipart.status_code == 415
    assert multipart.json()["error"]["value"] == "multipart/form-data"  # not its boundary
    assert names(db) == []
    # the 415 body is the API's compact JSON, as every other answer
    assert xml.text.startswith('{"error":{"code":"unsupported_media_type"')


async def test_routes_with_optional_bodies_take_none_whatever_the_label(
    store: Store, db: Any
) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        job = (await client.post("/api/v1/jobs", content=JOB)).json()
        paused = await client.post(
            f"/api/v1/jobs/{job['id']}/pause", headers={"content-type": FORM}
        )
    assert paused.status_code == 200, paused.text
    assert db.execute("SELECT status FROM pgpulse_jobs").fetchone()["status"] == "paused"


async def test_naive_instants_read_as_the_cli_reads_them_and_refusals_echo_iso_text(
    store: Store, db: Any
) -> None:
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        job = (
            await client.post("/api/v1/jobs", json={**json.loads(JOB), "timezone": "Asia/Tokyo"})
        ).json()
        h = db.execute("SELECT date_trunc('hour', now()) AS h").fetchone()["h"]
        start, end = h - timedelta(hours=2), h - timedelta(hours=1)
        naive = {
            "from": start.replace(tzinfo=None).isoformat(),
            "to": end.replace(tzinfo=None).isoformat(),
        }
        backfill = f"/api/v1/jobs/{job['id']}/backfill"
        plan = await client.post(backfill, json={**naive, "dry_run": True})
        future = (h + timedelta(hours=3)).replace(tzinfo=None)
        refused = await client.post(
            backfill, json={"from": naive["from"], "to": future.isoformat()}
        )
        # a pause's until, naive, is in the job's zone (Tokyo: UTC+9), as `job pause --until`
        until = (datetime.now(UTC) + timedelta(days=2)).replace(tzinfo=None, microsecond=0)
        paused = await client.post(
            f"/api/v1/jobs/{job['id']}/pause", json={"until": until.isoformat()}
        )
    assert plan.status_code == 200, plan.text
    shown = [datetime.fromisoformat(o["scheduled_for"]) for o in plan.json()["occurrences"]]
    assert shown == [start, end]  # UTC, as the CLI reads them
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert (error["field"], error["value"]) == ("to", future.replace(tzinfo=UTC).isoformat())
    assert "datetime.datetime" not in refused.text
    assert paused.status_code == 200, paused.text
    stored = db.execute("SELECT paused_until FROM pgpulse_jobs").fetchone()["paused_until"]
    assert stored == until.replace(tzinfo=ZoneInfo("Asia/Tokyo"))


async def test_a_lone_surrogate_is_refused_in_pulses_words(store: Store, db: Any) -> None:
    """JSON ``\\ud800`` is no Unicode text: refused naming the field as a payload's is (pydantic
    said "unable to parse raw data as a unicode string")."""
    token = await make_token(store, "acme")
    body = JOB.replace('"hook"', '"a\\ud800b"')
    async with api_client(store, token) as client:
        refused = await client.post(
            "/api/v1/jobs", content=body, headers={"content-type": "application/json"}
        )
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "name"
    assert refused.json()["error"]["message"].startswith("name holds an unpaired surrogate")
    assert names(db) == []


@pytest.mark.parametrize(
    ("field", "sent"),
    [
        ("spread", "1e999"),
        ("timeout", "-1E+400"),
        ("misfire_grace", "NaN"),
        ("max_attempts", "Infinity"),
        ("payload.items.1", "2e999"),
    ],
)
async def test_a_number_no_float_holds_is_refused_quoted_as_sent(
    store: Store, db: Any, field: str, sent: str
) -> None:
    """A JSON number beyond a float's range was read as infinity and echoed as "inf" (a value
    the client never sent); NaN and Infinity (not JSON) too. Refused with 422 naming the field
    and quoting the text sent; nothing written."""
    job = json.loads(JOB)
    if field.startswith("payload."):
        body = json.dumps(job).replace('"payload": {', f'"payload": {{"items": [1, {sent}], ')
    else:
        body = json.dumps(job)[:-1] + f', "{field}": {sent}}}'
    token = await make_token(store, "acme")
    async with api_client(store, token) as client:
        refused = await client.post(
            "/api/v1/jobs", content=body, headers={"content-type": "application/json"}
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == {
            "code": "invalid_input",
            "message": f"{field} must be a finite number, got {sent}",
            "field": field,
            "value": sent,
        }
        made = (await client.post("/api/v1/jobs", content=JOB)).json()
        patched = await client.patch(f"/api/v1/jobs/{made['id']}", content='{"spread": 1e999}')
        assert patched.json()["error"]["message"] == "spread must be a finite number, got 1e999"
    assert names(db) == ["hook"]
