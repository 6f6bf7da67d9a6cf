"""Concurrency keys and priority (docs/policies.md, "Concurrency keys and priority"): a key's
limit holds exactly across real nodes, a limit of 1 is a mutex, waiting occurrences run in
order as slots free, priority orders a short claim within its starvation bound; bad input is
refused on every path; limits are per tenant."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from helpers import ALL_SHARDS, add, pgpulse, spec, utc
from pgpulse.cli.main import main
from pgpulse.core.errors import InvalidInput
from pgpulse.core.keys import MAX_PRIORITY, STARVATION_BOUND, check_concurrency_key, waiting_for
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from pgpulse.node.handlers import RunContext
from pgpulse.sql import QUERIES
from pgpulse.web.reads import Reads
from pgpulse.web.service import present_job
from test_claim import _explain_generic_claim
from test_engine import node, running, wait_until
from web_helpers import api_client, make_token

T0 = utc(2026, 1, 1, 0, 0, 30)
LATER = T0 + timedelta(minutes=5)
#: A schedule whose next occurrence is months away: the tests make occurrences due themselves.
FAR = "0 0 1 1 *"


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals (start, end) open at one instant: the handlers' own timestamps."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, step in events:  # an end sorts before a start at the same instant
        now += step
        most = max(most, now)
    return most


def due_at(db: Any, name: str, at: Any) -> None:
    """Make job ``name`` idle and due at ``at``, as a finished run's next occurrence would."""
    db.execute(
        "UPDATE pgpulse_jobs SET status = 'idle', next_run_at = %s, scheduled_for = %s,"
        " lease_expires_at = NULL, locked_by = NULL WHERE name = %s",
        (at, at, name),
    )


async def test_a_key_limit_holds_exactly_across_two_real_nodes(
    store: Store, dsn: str, db: Any
) -> None:
    """Ten jobs share key warehouse, limit 2; two nodes of four slots each run them, scheduled
    (each job row every second) and triggered (extra occurrences, which count alike): never more
    than 2 run at once by the handlers' own clocks, and 2 do run at once."""
    spans: list[tuple[float, float]] = []

    async def work(ctx: RunContext) -> None:
        start = time.monotonic()
        await asyncio.sleep(0.15)
        spans.append((start, time.monotonic()))

    await store.set_limit("default", "warehouse", 2)
    await add(
        store,
        *(
            spec(f"w{i}", "@every 1s", handler="work", concurrency_key="warehouse", priority=i)
            for i in range(10)
        ),
    )
    for i in range(3):
        await RunControl(store.pool).trigger("default", f"w{i}", {"extra": True})
    a, b = node(store, dsn, {"work": work}, slots=4), node(store, dsn, {"work": work}, slots=4)
    async with running(a), running(b):
        await wait_until(lambda: len(spans) >= 30)
    assert most_at_once(spans) == 2
    extra = db.execute(
        "SELECT count(*) AS n FROM pgpulse_runs WHERE kind = 'trigger' AND outcome = 'succeeded'"
    ).fetchone()
    assert extra["n"] == 3
    nodes = db.execute(
        "SELECT count(DISTINCT node_id) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
    ).fetchone()
    assert nodes["n"] == 2  # both nodes ran the key's jobs


async def test_a_limit_of_one_is_a_mutex_and_waiting_jobs_run_oldest_first(
    store: Store, db: Any
) -> None:
    """Limit 1: one claim at a time whatever the free slots; as it ends, the waiting
    occurrences run one by one in scheduled_for order."""
    await store.set_limit("default", "db", 1)
    await add(store, *(spec(f"m{i}", FAR, concurrency_key="db") for i in range(3)), now=T0)
    for i, name in enumerate(("m2", "m0", "m1")):  # due in this order
        due_at(db, name, T0 + timedelta(seconds=i))
    order = []
    for _ in range(3):
        [job] = await store.claim_due("n1", ALL_SHARDS, 5, lease=30, now=LATER)
        assert await store.claim_due("n2", ALL_SHARDS, 5, lease=30, now=LATER) == []
        order.append(job.name)
        db.execute(  # its run ends: the job holds its next occurrence, months away
            "UPDATE pgpulse_jobs SET status = 'idle', lease_expires_at = NULL,"
            " next_run_at = %s WHERE id = %s",
            (LATER + timedelta(days=30), job.id),
        )
    assert order == ["m2", "m0", "m1"]


async def test_jobs_without_a_limit_and_other_tenants_keys_are_not_held_back(
    store: Store, db: Any
) -> None:
    """A limit is per tenant: tenant a's limit of 1 on key k holds back a's jobs only; b's jobs
    with the same key (no limit) and jobs without a key all run."""
    await store.set_limit("a", "k", 1)
    await add(
        store,
        *(spec(f"a{i}", tenant="a", concurrency_key="k") for i in range(3)),
        *(spec(f"b{i}", tenant="b", concurrency_key="k") for i in range(3)),
        *(spec(f"c{i}") for i in range(3)),
        now=T0,
    )
    claimed = await store.claim_due("n", ALL_SHARDS, 20, lease=30, now=LATER)
    tenants = sorted((job.tenant, job.name[0]) for job in claimed)
    assert tenants == [("a", "a")] + [("b", "b")] * 3 + [("default", "c")] * 3
    assert [
        (r["tenant"], r["key"], r["running"], r["jobs"], r["waiting"])
        for r in await store.list_limits()
    ] == [("a", "k", 1, 3, 2)]


async def test_priority_goes_first_when_slots_are_short(store: Store, db: Any) -> None:
    """Three jobs due at once, one slot: highest priority first, then the rest by due time."""
    await add(
        store,
        spec("low", FAR),
        spec("mid", FAR, priority=5),
        spec("high", FAR, priority=10),
        spec("older", FAR),
        now=T0,
    )
    for i, name in enumerate(("older", "low", "mid", "high")):
        due_at(db, name, T0 + timedelta(seconds=i))
    order = []
    for _ in range(4):
        [job] = await store.claim_due("n", ALL_SHARDS, 1, lease=30, now=T0 + timedelta(seconds=10))
        order.append(job.name)
    assert order == ["high", "mid", "older", "low"]


async def test_a_due_occurrence_is_passed_over_for_at_most_the_starvation_bound(
    store: Store, db: Any
) -> None:
    """A job of priority 0 due at T waits behind a job of priority 10 due after it while it is
    late by less than the bound (60 s); beyond it, due order wins (an injected clock)."""
    await add(store, spec("patient", FAR), spec("urgent", FAR, priority=MAX_PRIORITY), now=T0)
    due_at(db, "patient", T0)
    due_at(db, "urgent", T0 + timedelta(seconds=30))
    within = T0 + timedelta(seconds=STARVATION_BOUND - 1)
    [first] = await store.claim_due("n", ALL_SHARDS, 1, lease=30, now=within)
    assert first.name == "urgent"
    due_at(db, "urgent", T0 + timedelta(seconds=30))
    beyond = T0 + timedelta(seconds=STARVATION_BOUND + 1)
    [first] = await store.claim_due("n", ALL_SHARDS, 1, lease=30, now=beyond)
    assert first.name == "patient"
    assert "interval '60 seconds'" in QUERIES["claim_jobs"]  # the bound the docs state


async def test_the_claim_reads_both_due_indexes_by_index(store: Store, dsn: str) -> None:
    """The claim's two scans stay index scans of their partial indexes in the generic plan a
    node's claim session uses; nothing scans pgpulse_jobs whole."""
    await add(store, *(spec(f"j{i}") for i in range(50)), spec("p", priority=3), now=T0)
    nodes = await _explain_generic_claim(dsn, 5, LATER)
    indexes = {node.get("Index Name") for node in nodes}
    assert {"pgpulse_jobs_due", "pgpulse_jobs_due_priority"} <= indexes
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"]


async def test_a_job_held_back_by_its_key_says_what_it_waits_for(store: Store, db: Any) -> None:
    """job show, the API and the dashboard present a job through present_job: a due idle job
    whose key is at its limit waits "for warehouse (2 of 2 running)"."""
    await store.set_limit("default", "warehouse", 2)
    ids = await add(store, *(spec(f"w{i}", concurrency_key="warehouse") for i in range(3)))
    await store.claim_due("n", ALL_SHARDS, 5, lease=300, now=utc(2030, 1, 1))
    await store.register_node("n", hostname="h", pid=1, slots=4, handlers=["noop"], ttl=60)
    db.execute(
        "UPDATE pgpulse_jobs SET next_run_at = now() - interval '1 minute' WHERE status = 'idle'"
    )  # due by the database's own clock, as web.sql reads it
    rows = [await Reads(store.reads).job(i, tenant="default") for i in ids]
    shown = [present_job(row) for row in rows if row is not None]
    waiting = [job["waiting"] for job in shown if job["status"] == "idle"]
    assert waiting == [waiting_for("warehouse", 2, 2)] == ["for warehouse (2 of 2 running)"]


def test_limit_set_list_and_delete_on_the_command_line(dsn: str) -> None:
    def cli(*args: str) -> Any:
        return CliRunner().invoke(main, ["--database-url", dsn, *args])

    assert cli("limit", "set", "warehouse", "2").output == (
        "created limit warehouse: at most 2 running at once\n"
    )
    assert cli("limit", "set", "warehouse", "1").output.startswith("changed limit warehouse")
    listed = cli("limit", "list", "--json")
    assert '"max_running": 1' in listed.output
    assert cli("limit", "delete", "warehouse").output == "deleted limit warehouse\n"
    missing = cli("limit", "delete", "warehouse")
    assert missing.exit_code != 0 and "no limit on key 'warehouse'" in missing.output


def test_limit_as_a_user_types_it(dsn: str, db: Any) -> None:
    """`pgpulse limit` as a real subprocess: set, list, delete, and a refused limit (one line,
    exit 2, nothing written)."""
    done = pgpulse("limit", "set", "warehouse", "2", dsn=dsn)
    assert (done.returncode, done.stdout) == (
        0,
        "created limit warehouse: at most 2 running at once\n",
    ), done.stderr
    listed = pgpulse("limit", "list", "--json", dsn=dsn)
    assert listed.returncode == 0, listed.stderr
    assert '"max_running": 2' in listed.stdout
    refused = pgpulse("limit", "set", "warehouse", "0", dsn=dsn)
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "invalid value for N" in refused.stderr
    row = db.execute("SELECT max_running FROM pgpulse_limits WHERE key = 'warehouse'").fetchone()
    assert row["max_running"] == 2  # the refusal wrote nothing
    gone = pgpulse("limit", "delete", "warehouse", dsn=dsn)
    assert (gone.returncode, gone.stdout) == (0, "deleted limit warehouse\n"), gone.stderr
    assert db.execute("SELECT count(*) AS n FROM pgpulse_limits").fetchone()["n"] == 0


#: ``job create j`` of an hourly shell job, as typed (the refusals below add one bad option).
SHELL_JOB = (
    *("job", "create", "j", "--schedule", "@hourly"),
    *("--handler", "shell", "--payload", '{"command": "true"}'),
)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["limit", "set", "warehouse", "0"], "invalid value for N"),
        (["limit", "set", "warehouse", "100001"], "invalid value for N"),
        (["limit", "set", "bad key", "2"], "key"),
        (
            [
                *SHELL_JOB,
                "--priority",
                "1001",
            ],
            "priority",
        ),
        (
            [
                *SHELL_JOB,
                "--concurrency-key",
                "a b",
            ],
            "--concurrency-key",
        ),
    ],
)
def test_bad_input_on_the_command_line_is_one_line_exit_2_and_writes_nothing(
    dsn: str, db: Any, args: list[str], field: str
) -> None:
    result = CliRunner().invoke(main, ["--database-url", dsn, *args])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert field in result.output
    counts = db.execute(
        "SELECT (SELECT count(*) FROM pgpulse_limits) AS limits,"
        " (SELECT count(*) FROM pgpulse_jobs) AS jobs"
    ).fetchone()
    assert counts == {"limits": 0, "jobs": 0}


def test_a_key_is_checked_naming_its_field() -> None:
    assert check_concurrency_key("db:primary/eu-1") == "db:primary/eu-1"
    with pytest.raises(InvalidInput) as refused:
        check_concurrency_key("", "key")
    assert refused.value.field == "key"


async def test_the_api_sets_lists_and_deletes_limits_of_its_tenant_only(
    store: Store, db: Any
) -> None:
    token = await make_token(store, tenant="a")
    async with api_client(store, token) as client:
        made = await client.put("/api/v1/limits/warehouse", json={"max_running": 2})
        other = await client.put("/api/v1/limits/warehouse?tenant=b", json={"max_running": 2})
        low = await client.put("/api/v1/limits/warehouse", json={"max_running": 0})
        bad = await client.put("/api/v1/limits/bad%20key", json={"max_running": 2})
        listed = await client.get("/api/v1/limits")
        gone = await client.delete("/api/v1/limits/warehouse")
        again = await client.delete("/api/v1/limits/warehouse")
    assert made.status_code == 200, made.text
    assert made.json() == {
        "tenant": "a",
        "key": "warehouse",
        "max_running": 2,
        "running": 0,
        "jobs": 0,
        "waiting": 0,
    }
    assert other.status_code == 403
    assert (low.status_code, bad.status_code) == (422, 422)
    assert "max_running" in low.text and "key" in bad.json()["error"]["field"]
    assert [row["key"] for row in listed.json()] == ["warehouse"]
    assert (gone.status_code, again.status_code) == (204, 404)
    assert db.execute("SELECT count(*) AS n FROM pgpulse_limits").fetchone()["n"] == 0
