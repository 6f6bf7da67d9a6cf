"""Prometheus metrics: the functions the engine calls, the cluster gauges read at scrape, the
node's sidecar servers on real sockets, and a real node feeding the metrics as it runs jobs."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
from prometheus_client import REGISTRY

from helpers import add, spec, utc
from pgpulse.alerts import services as alert_services
from pgpulse.core.model import ClaimedJob
from pgpulse.core.planner import Advance
from pgpulse.db.store import Store
from pgpulse.node import metrics
from pgpulse.node.engine import Node
from pgpulse.node.handlers import RunContext
from pgpulse.web.server import web_sidecar
from web_helpers import node_config


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def claimed_job(attempt: int = 1) -> ClaimedJob:
    at = utc(2026, 1, 1, 12, 0)
    return ClaimedJob(
        id=1,
        tenant="t",
        name="j",
        schedule="* * * * *",
        timezone="UTC",
        handler="h",
        payload={},
        catch_up="skip",
        backfill_limit=None,
        misfire_grace=60.0,
        max_attempts=3,
        retry_backoff=1.0,
        timeout=None,
        anchor_at=at,
        scheduled_for=at,
        attempt=attempt,
        fencing_token=7,
        run_id=1,
        db_now=at + timedelta(seconds=0.2),
    )


def test_observe_finish_counts_outcome_lag_duration_and_skips() -> None:
    job = claimed_job()
    before = {
        "ok": sample("pgpulse_runs_total", outcome="succeeded"),
        "lag": sample("pgpulse_run_lag_seconds_count"),
        "lag_sum": sample("pgpulse_run_lag_seconds_sum"),
        "dur": sample("pgpulse_run_duration_seconds_sum", outcome="succeeded"),
        "skipped": sample("pgpulse_skipped_occurrences_total"),
        "fenced": sample("pgpulse_fenced_writes_rejected_total"),
    }
    advance = Advance(utc(2026, 1, 1, 12, 3), 2, utc(2026, 1, 1, 12, 1), utc(2026, 1, 1, 12, 2))
    metrics.observe_finish(
        "succeeded", job, True, advance=advance, ended_at=job.db_now + timedelta(seconds=1.5)
    )
    assert sample("pgpulse_runs_total", outcome="succeeded") == before["ok"] + 1
    assert sample("pgpulse_run_lag_seconds_count") == before["lag"] + 1
    assert abs(sample("pgpulse_run_lag_seconds_sum") - before["lag_sum"] - 0.2) < 1e-9
    assert (
        abs(sample("pgpulse_run_duration_seconds_sum", outcome="succeeded") - before["dur"] - 1.5)
        < 1e-9
    )
    assert sample("pgpulse_skipped_occurrences_total") == before["skipped"] + 2

    # A skipped claim: the planner's advance counts the claimed occurrence among its skipped ones.
    metrics.observe_finish("skipped", job, True, advance=advance)
    assert sample("pgpulse_skipped_occurrences_total") == before["skipped"] + 4
    metrics.observe_finish(
        "retrying", claimed_job(attempt=2), True, ended_at=job.db_now + timedelta(seconds=1)
    )
    assert sample("pgpulse_run_lag_seconds_count") == before["lag"] + 1  # retries: no lag
    metrics.observe_finish("succeeded", job, False, ended_at=job.db_now)
    assert sample("pgpulse_fenced_writes_rejected_total") == before["fenced"] + 1
    assert sample("pgpulse_runs_total", outcome="succeeded") == before["ok"] + 1


def test_node_gauges_and_claims() -> None:
    claims = sample("pgpulse_claim_duration_seconds_count")
    claimed = sample("pgpulse_claimed_jobs_total")
    metrics.observe_claim(0.004, 3)
    metrics.observe_claim(0.002, 0)
    metrics.set_running(2)
    metrics.set_shards(21)
    metrics.lease_renewal_failed()
    assert sample("pgpulse_claim_duration_seconds_count") == claims + 2
    assert sample("pgpulse_claimed_jobs_total") == claimed + 3
    assert sample("pgpulse_node_running_attempts") == 2
    assert sample("pgpulse_node_shards_owned") == 21
    assert sample("pgpulse_lease_renewals_failed_total") >= 1


async def test_cluster_gauges_are_read_at_scrape(store: Store, db: Any) -> None:
    await add(store, *[spec(f"j{i}") for i in range(3)])
    db.execute("UPDATE pgpulse_jobs SET status = 'paused' WHERE name = 'j0'")
    db.execute(
        "UPDATE pgpulse_jobs SET next_run_at = now() - interval '30 seconds' WHERE name = 'j1'"
    )
    body, content_type = await metrics.exposition(store)
    text = body.decode()
    assert content_type.startswith("text/plain")
    assert 'pgpulse_jobs{state="total"} 3.0' in text
    assert 'pgpulse_jobs{state="paused"} 1.0' in text
    assert 'pgpulse_jobs{state="due"} 1.0' in text
    assert 29 < sample("pgpulse_jobs_max_lag_seconds") < 60


async def test_node_sidecar_serves_metrics_and_the_app(dsn: str) -> None:
    async with (
        web_sidecar(dsn, None, metrics="127.0.0.1:0", http="127.0.0.1:0") as bound,
        httpx.AsyncClient() as client,
    ):
        scrape = await client.get("http://{}:{}/metrics".format(*bound["metrics"]))
        health = await client.get("http://{}:{}/healthz".format(*bound["metrics"]))
        login = await client.get("http://{}:{}/ui/login".format(*bound["http"]))
    assert scrape.status_code == 200 and "pgpulse_runs_total" in scrape.text
    assert health.json()["ok"] is True
    assert login.status_code == 200 and "Sign in" in login.text
    assert login.headers["x-frame-options"] == "DENY"


async def test_a_running_node_feeds_the_metrics(store: Store, dsn: str) -> None:
    done = asyncio.Event()
    count = 0

    async def tick(ctx: RunContext) -> str:
        nonlocal count
        count += 1
        if count >= 2:
            done.set()
        return "ok"

    succeeded = sample("pgpulse_runs_total", outcome="succeeded")
    claims = sample("pgpulse_claim_duration_seconds_count")
    lags = sample("pgpulse_run_lag_seconds_count")
    await add(store, spec("tick", "@every 1s", "tick"))
    node = Node(store, dsn, {"tick": tick}, node_config(node_id="metrics-node"))
    alert_services.register(node)  # as App.run_node does
    task = asyncio.create_task(node.run())
    try:
        async with asyncio.timeout(20):
            await done.wait()
        # read while the node runs: a stopping node may own nothing by its last heartbeat
        assert sample("pgpulse_node_shards_owned") == 64
    finally:
        node.stop()
        await task  # drains: the second attempt's outcome is written before run() returns
    assert sample("pgpulse_runs_total", outcome="succeeded") >= succeeded + 2
    assert sample("pgpulse_claim_duration_seconds_count") > claims
    assert sample("pgpulse_run_lag_seconds_count") >= lags + 2
    assert sample("pgpulse_node_running_attempts") == 0


def test_run_histograms_count_a_value_in_the_first_bucket_it_does_not_exceed() -> None:
    """The run histograms are plain numbers rendered at scrape: a value equal to a bound counts
    in that bound's bucket (``le`` is "less than or equal"), one above every bound only in
    +Inf, and each bucket is cumulative."""

    def buckets(name: str, **labels: str) -> list[float]:
        return [sample(f"{name}_bucket", le=le, **labels) for le in ("0.005", "0.01", "+Inf")]

    lag0 = buckets("pgpulse_run_lag_seconds")
    dur0 = sample("pgpulse_run_duration_seconds_bucket", le="3600.0", outcome="fenced")
    inf0 = sample("pgpulse_run_duration_seconds_bucket", le="+Inf", outcome="fenced")
    metrics.observe_run("fenced", 0.01, 3600.5)
    assert [b - a for a, b in zip(lag0, buckets("pgpulse_run_lag_seconds"), strict=True)] == [
        0.0,
        1.0,
        1.0,
    ]
    assert sample("pgpulse_run_duration_seconds_bucket", le="3600.0", outcome="fenced") == dur0
    assert sample("pgpulse_run_duration_seconds_bucket", le="+Inf", outcome="fenced") == inf0 + 1
    assert sample("pgpulse_runs_total", outcome="fenced") >= 1
