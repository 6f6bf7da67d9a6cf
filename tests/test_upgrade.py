"""An upgrade from the previous release, mid-operation: a database at schema 0018 (the previous
release's newest migration), left as its nodes leave it while they work — a job mid-run holding a
lease, triggers pending, a backfill in flight (one occurrence done, one held, one pending) and a
history — is migrated to this release's schema without a row changing, the old node's lease
still renews on the new schema, and a node of this release takes over: it waits for the lease,
reaps it once expired and runs the lost attempt again, then runs the triggers and the rest of
the backfill, each once.

The state is written through the Store's own statements at schema 0018 as node ``old-1`` of that
release would, each as the previous release sent it (:func:`previous_release`: this release's
statements but for what migration 0020 changed, the history's key and ``keep_runs``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from helpers import add, spec
from pgpulse.core.model import AttemptResult
from pgpulse.db.database import open_pool
from pgpulse.db.migrations import migrate, schema_version
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from pgpulse.node.dispatch import plan_finish
from pgpulse.node.handlers import RunContext
from pgpulse.sql import QUERIES, RAW_QUERIES, at_shard_count, migration_files
from test_engine import TRIGGERED_ONLY, running, wait_until
from test_occurrences import node

#: The previous release's newest migration.
PREVIOUS = 18
#: Every handler's shards, as a node alone in the cluster routes them.
SHARDS = tuple(range(64))


@contextmanager
def previous_release() -> Iterator[None]:
    """While in the ``with``, the Store sends the statements of the previous release: those of
    this one written over the history's primary key (id) instead of (id, scheduled_for), and
    without the job column keep_runs (migration 0020 added both)."""
    saved = (dict(RAW_QUERIES), dict(QUERIES))

    def before_0020(text: str) -> str:
        text = text.replace("ON CONFLICT (id, scheduled_for)", "ON CONFLICT (id)")
        return text.replace(", keep_runs", "").replace("j.keep_runs, ", "")

    RAW_QUERIES.update({name: before_0020(text) for name, text in saved[0].items()})
    QUERIES.update({name: before_0020(text) for name, text in saved[1].items()})
    at_shard_count.cache_clear()
    try:
        yield
    finally:
        RAW_QUERIES.update(saved[0])
        QUERIES.update(saved[1])
        at_shard_count.cache_clear()


def columns_of(db: Any) -> dict[str, list[str]]:
    """The columns of every Pulse table but the runner's own, by table (a partitioned table's,
    not its partitions': its rows are read through it)."""
    rows = db.execute(
        "SELECT c.relname AS table, a.attname AS column FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
        " WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition"
        " AND c.relname <> 'pgpulse_migrations' ORDER BY 1, a.attnum"
    )
    columns: dict[str, list[str]] = {}
    for row in rows:
        columns.setdefault(row["table"], []).append(row["column"])
    return columns


def every_row(db: Any, columns: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Every row of every Pulse table but the runner's own, by value (as JSON text, sorted);
    of ``columns`` only (by table: those a table had before a migration added others)."""
    shape = columns_of(db) if columns is None else columns
    return {
        table: sorted(
            r["row"]
            for r in db.execute(
                sql.SQL("SELECT to_jsonb(t)::text AS row FROM (SELECT {} FROM {}) t").format(
                    sql.SQL(", ").join(map(sql.Identifier, names)), sql.Identifier(table)
                )
            )
        )
        for table, names in shape.items()
    }


async def test_an_upgrade_mid_operation_loses_nothing_and_a_new_node_takes_over(
    empty_dsn: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        assert await migrate(conn, target=PREVIOUS) == list(range(1, PREVIOUS + 1))
        assert await schema_version(conn) == PREVIOUS
    pool = await open_pool(empty_dsn, application_name="pgpulse-test", max_size=8)
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as db:
        try:
            await upgrade_mid_operation(Store(pool), empty_dsn, db)
        finally:
            await pool.close()


async def upgrade_mid_operation(store: Store, dsn: str, db: Any) -> None:
    # -- the previous release at work, at schema 0018 -------------------------------------
    with previous_release():
        minutely_id, report_id, hourly_id = await add(
            store,
            spec("minutely", schedule="* * * * *", handler="work"),
            spec("report", schedule=TRIGGERED_ONLY, handler="report"),
            spec("hourly", schedule="* * * * *", handler="work"),
        )
        now = db.execute("SELECT now() AS t").fetchone()["t"]
        minute = now.replace(second=0, microsecond=0)
        # history: two earlier runs of minutely (one failed after 3 attempts)
        db.execute(
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, node_id,"
            " fencing_token, started_at, finished_at, error) VALUES"
            " (%(j)s, %(a)s, 1, 'succeeded', 'old-1', 1, %(a)s, %(a)s, NULL),"
            " (%(j)s, %(b)s, 3, 'failed', 'old-1', 4, %(b)s, %(b)s, 'boom')",
            {
                "j": minutely_id,
                "a": minute - timedelta(minutes=20),
                "b": minute - timedelta(minutes=19),
            },
        )
        # minutely due now, hourly's live schedule out of the way (only its backfill runs)
        db.execute(
            "UPDATE pgpulse_jobs SET scheduled_for = now() - interval '1 s', next_run_at = now() -"
            " interval '1 s', fencing_token = 4 WHERE id = %s",
            (minutely_id,),
        )
        db.execute(
            "UPDATE pgpulse_jobs SET next_run_at = '2100-01-01Z' WHERE id = %s", (hourly_id,)
        )
        control = RunControl(store.pool)
        triggers = [await control.trigger("default", "report", {"n": n}) for n in (1, 2)]
        backfill = await control.backfill(
            "default",
            "hourly",
            start=minute - timedelta(minutes=5),
            end=minute - timedelta(minutes=3),
        )
        assert len(backfill.selected) == 3 and backfill.batch_id is not None
        work = {"work": SHARDS}
        [first] = (await store.finish_and_claim_occurrences([], "old-1", work, 5, lease=5)).jobs
        done = plan_finish(first, AttemptResult(True), first.db_now)
        step = await store.finish_and_claim_occurrences([done], "old-1", work, 5, lease=5)
        assert step.written == {first.key}
        held_occurrence = (
            step.jobs
            or (await store.finish_and_claim_occurrences([], "old-1", work, 5, lease=5)).jobs
        )
        [second] = held_occurrence  # the batch runs one at a time: the third waits
        [held] = (await store.finish_and_claim([], "old-1", work, 5, lease=5)).jobs
        assert held.id == minutely_id and held.fencing_token == 5
        job_row = db.execute(
            "SELECT status, locked_by, lease_expires_at > now() AS leased, fencing_token, run_id"
            " FROM pgpulse_jobs WHERE id = %s",
            (minutely_id,),
        ).fetchone()
        assert job_row == {
            "status": "running", "locked_by": "old-1", "leased": True, "fencing_token": 5,
            "run_id": held.run_id,
        }  # fmt: skip
        pending = db.execute(
            "SELECT kind, locked_by FROM pgpulse_occurrences ORDER BY kind, id"
        ).fetchall()
        assert [(r["kind"], r["locked_by"]) for r in pending] == [
            ("backfill", "old-1"), ("backfill", None), ("trigger", None), ("trigger", None),
        ]  # fmt: skip
        shape = columns_of(db)
        before = every_row(db, shape)
        migrations_before = db.execute("SELECT version, name, applied_at FROM pgpulse_migrations")
        migrations_before = migrations_before.fetchall()

    # -- the first node of this release migrates ------------------------------------------
    latest = migration_files()[-1][0]
    async with store.pool.connection() as conn:
        assert await store.migrate() == list(range(PREVIOUS + 1, latest + 1))
        assert await schema_version(conn) == latest
    # every job, lease, occurrence, batch and run, by value (of the columns it had)
    assert every_row(db, shape) == before
    kept = db.execute(
        "SELECT version, name, applied_at FROM pgpulse_migrations WHERE version <= %s",
        (PREVIOUS,),
    ).fetchall()
    assert kept == migrations_before
    # the old node is still running during the deploy: its leases renew on the new schema
    assert await store.renew([held.key, second.key], lease=4) == {held.key, second.key}

    # -- then it is gone, and a node of this release takes over ---------------------------
    ran: list[tuple[str, str, Any]] = []

    async def handler(ctx: RunContext) -> None:
        ran.append((ctx.job_name, ctx.kind, ctx.payload.get("n")))

    async with running(node(store, dsn, {"work": handler, "report": handler}, node_id="new-1")):
        # it leaves alone what old-1 holds while the lease lasts
        leases = db.execute(
            "SELECT locked_by FROM pgpulse_jobs WHERE id = %(j)s UNION ALL SELECT locked_by"
            " FROM pgpulse_occurrences WHERE id = %(o)s",
            {"j": minutely_id, "o": second.occurrence},
        ).fetchall()
        assert [r["locked_by"] for r in leases] == ["old-1", "old-1"]
        await wait_until(lambda: finished(db, held.run_id) == 6, within=15)
    runs = {
        r["id"]: r
        for r in db.execute(
            "SELECT id, job_id, kind, outcome, attempts, node_id, fencing_token, batch_id"
            " FROM pgpulse_runs ORDER BY id"
        )
    }
    # the held run: reaped once its lease expired, run again as attempt 2, fenced by token 6
    assert runs[held.run_id]["outcome"] == "succeeded"
    assert [runs[held.run_id][k] for k in ("node_id", "attempts", "fencing_token")] == [
        "new-1", 2, 6,
    ]  # fmt: skip
    # the backfill: the first by old-1, the held one again and the pending one by new-1
    assert [
        (runs[o]["outcome"], runs[o]["node_id"], runs[o]["attempts"])
        for o in (first.occurrence, second.occurrence)
    ] == [("succeeded", "old-1", 1), ("succeeded", "new-1", 2)]
    backfills = [r for r in runs.values() if r["kind"] == "backfill"]
    assert len(backfills) == 3 and {r["outcome"] for r in backfills} == {"succeeded"}
    assert {r["batch_id"] for r in backfills} == {backfill.batch_id}
    # the triggers, each once, with their payloads
    assert sorted(x for x in ran if x[0] == "report") == [
        ("report", "trigger", 1), ("report", "trigger", 2),
    ]  # fmt: skip
    assert [runs[t.occurrence]["outcome"] for t in triggers] == ["succeeded", "succeeded"]
    assert sorted(x[1] for x in ran if x[0] == "hourly") == ["backfill", "backfill"]
    # nothing left over, nothing held by the old node, and the history kept
    assert db.execute("SELECT count(*) AS n FROM pgpulse_occurrences").fetchone()["n"] == 0
    assert {r["running"] for r in db.execute("SELECT running FROM pgpulse_batches")} == {0}
    held_by_old = db.execute(
        "SELECT (SELECT count(*) FROM pgpulse_jobs WHERE locked_by = 'old-1')"
        " + (SELECT count(*) FROM pgpulse_occurrences WHERE locked_by = 'old-1') AS n"
    ).fetchone()
    assert held_by_old["n"] == 0
    assert [(r["outcome"], r["attempts"]) for r in runs.values() if r["job_id"] == minutely_id][
        :2
    ] == [("succeeded", 1), ("failed", 3)]
    assert report_id in {r["job_id"] for r in runs.values()}


def finished(db: Any, held_run: int) -> int:
    """How many of the held run, the triggers and the backfill's occurrences have succeeded."""
    row = db.execute(
        "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'succeeded'"
        " AND (kind <> 'scheduled' OR id = %s)",
        (held_run,),
    ).fetchone()
    return int(row["n"])
