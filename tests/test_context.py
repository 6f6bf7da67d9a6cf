"""The occurrence's context (docs/chains.md): what a handler gets besides its run —
``previous_scheduled_for`` (its data interval's start), the last success, and a downstream
run's upstream runs — in a real node's handler, in an ``http`` payload's placeholders (a real
HTTP receiver on 127.0.0.1) and in a shell command's environment; and placeholders that do not
exist, refused at write time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from helpers import add, spec, utc
from pgpulse.core.errors import InvalidPayload
from pgpulse.core.jobs import JobSpec
from pgpulse.db.store import Store
from pgpulse.node.builtins import http_handler, shell_handler
from pgpulse.node.handlers import RunContext
from test_builtins import LoopbackServer, make_ctx
from test_builtins import server as server  # the loopback receiver: a fixture
from test_cli import cli
from test_engine import node, running, wait_until

SCHEDULED = utc(2026, 1, 2, 3)
PREVIOUS = utc(2026, 1, 1, 3)
CONTEXT = {
    "previous_scheduled_for": PREVIOUS,
    "last_success_at": utc(2026, 1, 1, 3, 0, 7),
    "last_success_scheduled_for": PREVIOUS,
    "upstream_run_ids": (11, 12),
    "scheduled_for": SCHEDULED,
}


async def test_a_chain_s_handlers_get_the_data_interval_last_success_and_upstream_runs(
    store: Store, dsn: str, db: Any
) -> None:
    seen: list[RunContext] = []

    async def work(ctx: RunContext) -> None:
        seen.append(ctx)

    await add(
        store,
        spec("extract", schedule="@every 1s", handler="work"),
        spec("load", schedule="@after", handler="work", after=["extract"]),
    )

    def loads() -> int:
        return sum(1 for c in seen if c.job_name == "load")

    async with running(node(store, dsn, {"work": work})):
        await wait_until(lambda: loads() >= 2, within=30)
    extracts = [c for c in seen if c.job_name == "extract"]
    first, second = extracts[0], extracts[1]
    assert first.previous_scheduled_for == first.scheduled_for - timedelta(seconds=1)
    assert (first.last_success_at, first.last_success_scheduled_for) == (None, None)
    assert second.last_success_scheduled_for == first.scheduled_for
    assert second.last_success_at is not None and second.last_success_at > first.scheduled_for
    first_load, second_load = [c for c in seen if c.job_name == "load"][:2]
    assert first_load.last_success_scheduled_for is None
    # a run of kind after: its job's after batch keeps its last success
    assert second_load.last_success_scheduled_for == first_load.scheduled_for
    by_instant = {c.scheduled_for: c for c in extracts}
    for load in (c for c in seen if c.job_name == "load"):
        upstream = by_instant[load.scheduled_for]
        assert load.kind == "after"
        assert load.upstream_run_ids == (upstream.run_id,)
        assert load.previous_scheduled_for == upstream.previous_scheduled_for


async def test_http_placeholders_are_filled_in_the_url_headers_and_body(
    server: LoopbackServer,
) -> None:
    payload = {
        "url": server.url("/ok?from={data_interval_start}&to={scheduled_for}"),
        "method": "POST",
        "headers": {"X-Interval": "{data_interval_start}/{data_interval_end}"},
        "json": {"since": "{last_success_scheduled_for}", "run": "{run_id}", "raw": "{x"},
    }
    await http_handler(make_ctx(payload, **CONTEXT))
    [request] = server.requests
    assert request.path == ("/ok?from=2026-01-01T03:00:00%2B00:00&to=2026-01-02T03:00:00%2B00:00")
    assert request.headers["x-interval"] == ("2026-01-01T03:00:00+00:00/2026-01-02T03:00:00+00:00")
    assert request.body == (b'{"since":"2026-01-01T03:00:00+00:00","run":"1001","raw":"{x"}')


async def test_the_shell_environment_carries_the_context() -> None:
    out = await shell_handler(make_ctx({"command": "env"}, **CONTEXT))
    env = dict(line.split("=", 1) for line in (out or "").splitlines() if "=" in line)
    assert env["PGPULSE_DATA_INTERVAL_START"] == "2026-01-01T03:00:00+00:00"
    assert env["PGPULSE_DATA_INTERVAL_END"] == "2026-01-02T03:00:00+00:00"
    assert env["PGPULSE_LAST_SUCCESS_AT"] == "2026-01-01T03:00:07+00:00"
    assert env["PGPULSE_LAST_SUCCESS_SCHEDULED_FOR"] == "2026-01-01T03:00:00+00:00"
    assert env["PGPULSE_UPSTREAM_RUN_IDS"] == "11,12"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"url": "https://93.184.215.14/x?d={day}"}, "payload.url"),
        ({"url": "https://93.184.215.14/", "headers": {"X-A": "{nope}"}}, "payload.headers.X-A"),
        ({"url": "https://93.184.215.14/", "body": "at {when}"}, "payload.body"),
        ({"url": "https://93.184.215.14/", "json": {"a": ["{b}"]}}, "payload.json.a[0]"),
    ],
)
def test_a_placeholder_that_does_not_exist_is_refused_naming_the_field(
    payload: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidPayload, match="which is no placeholder") as refused:
        JobSpec.create(name="hook", schedule="@daily", handler="http", payload=payload)
    assert refused.value.field == field


def test_json_text_in_a_body_is_not_a_placeholder() -> None:
    body = '{"a": {"b": 1}} at {scheduled_for}'
    made = JobSpec.create(
        name="hook",
        schedule="@daily",
        handler="http",
        payload={"url": "https://93.184.215.14/", "body": body},
    )
    assert made.payload["body"] == body


def test_the_cli_refuses_an_unknown_placeholder_in_one_line(dsn: str, db: Any) -> None:
    payload = '{"url": "https://93.184.215.14/{day}"}'
    result = cli(
        dsn,
        "job",
        "create",
        "hook",
        "--schedule",
        "@daily",
        "--handler",
        "http",
        "--payload",
        payload,
    )
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert "{day}, which is no placeholder" in result.output
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
