"""An upgrade from the previous release, mid-operation: a database at the previous release's
newest migration (:data:`PREVIOUS`), left as its nodes leave it while they work — a job mid-run
holding a lease, triggers pending, a backfill in flight (one occurrence done, one held, one
pending) and a history — is migrated to this release's schema without a row changing, the old
node's lease still renews on the new schema, and a node of this release takes over: it waits for
the lease, reaps it once expired and runs the lost attempt again, then runs the triggers and the
rest of the backfill, each once.

The state is written by this release's statements (node ``old-1``), then carried to a database
at schema :data:`PREVIOUS` by value, each row as that schema's table holds it (the columns added
since dropped; they hold their defaults, as no feature added since is used): what the previous
release's node writes to those columns, as its statements are this release's but for the new
columns. So the test keeps working whatever column a later migration adds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from helpers import add, spec
from pgpulse.core.model import AttemptResult, ClaimedJob
from pgpulse.db.database import open_pool
from pgpulse.db.migrations import migrate, schema_version
from pgpulse.db.run_control import BackfillPlan, RunControl, Triggered
from pgpulse.db.store import Store
from pgpulse.node.dispatch import plan_finish
from pgpulse.node.handlers import RunContext
from pgpulse.sql import migration_files
from test_engine import TRIGGERED_ONLY, running, wait_until
from test_occurrences import node

#: The previous release's newest migration.
PREVIOUS = 19
#: Every handler's shards, as a node alone in the cluster routes them.
SHARDS = tuple(range(64))


def tables(db: Any) -> list[str]:
    """Pulse's tables but the migration runner's own."""
    return [  # a partitioned table's rows are read through it, not through its partitions
        r["relname"]
        for r in db.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace"
            " AND relkind IN ('r', 'p') AND NOT relispartition"
            " AND relname <> 'pgpulse_migrations' ORDER BY 1"
        )
    ]


def every_row(db: Any, columns: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Every row of every Pulse table but the runner's own, by value (as JSON text, sorted);
    with ``columns``, only those of each table."""
    found = {}
    for table in tables(db):
        if columns is not None and table not in columns:  # added since: compared elsewhere
            continue
        rows = []
        for r in db.execute(
            sql.SQL("SELECT to_jsonb(t) AS row FROM {} t").format(sql.Identifier(table))
        ):
            row = r["row"]
            keep = None if columns is None else set(columns[table])
            rows.append(
                str(sorted((k, str(v)) for k, v in row.items() if keep is None or k in keep))
            )
        found[table] = sorted(rows)
    return found


def stored_columns(db: Any) -> dict[str, list[str]]:
    """Each table's columns a row is written to (not a generated one), in order."""
    found: dict[str, list[str]] = {}
    for r in db.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = 'public' AND is_generated = 'NEVER' ORDER BY ordinal_position"
    ):
        found.setdefault(r["table_name"], []).append(r["column_name"])
    return found


async def carry_to(db: Any, dsn: str, version: int) -> None:
    """Rebuild the database at schema ``version`` holding the same rows (each as that schema's
    table holds it) and sequence values."""
    rows = {
        t: [r["row"] for r in db.execute(
            sql.SQL("SELECT to_jsonb(t) AS row FROM {} t").format(sql.Identifier(t))
        )]
        for t in tables(db)
    }  # fmt: skip
    sequences = db.execute(
        "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = 'public'"
        " AND last_value IS NOT NULL"
    ).fetchall()
    db.execute("DROP SCHEMA public CASCADE")
    db.execute("CREATE SCHEMA public")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await migrate(conn, target=version) == list(range(1, version + 1))
    columns = stored_columns(db)
    # a table added since holds nothing here: no feature added since is used
    assert {t: v for t, v in rows.items() if t not in columns and v} == {}
    rows = {t: v for t, v in rows.items() if t in columns}
    db.execute("SET session_replication_role = replica")  # as a restore: no trigger, no check
    for table in rows:  # the rows a migration writes (the cluster's own) come with the rest
        db.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
    for table, values in rows.items():
        names = sql.SQL(", ").join(map(sql.Identifier, columns[table]))
        db.execute(
            sql.SQL(
                "INSERT INTO {t} ({c}) OVERRIDING SYSTEM VALUE"
                " SELECT {c} FROM jsonb_populate_recordset(NULL::{t}, %s)"
            ).format(t=sql.Identifier(table), c=names),
            (Jsonb(values),),
        )
    db.execute("SET session_replication_role = DEFAULT")
    for r in sequences:
        db.execute("SELECT setval(%s, %s)", (f"public.{r['sequencename']}", r["last_value"]))


async def test_an_upgrade_mid_operation_loses_nothing_and_a_new_node_takes_over(
    empty_dsn: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        await migrate(conn)
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as db:
        pool = await open_pool(empty_dsn, application_name="pgpulse-test", max_size=8)
        try:
            state = await previous_release_at_work(Store(pool), db)
        finally:
            await pool.close()
        await carry_to(db, empty_dsn, PREVIOUS)
        async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
            assert await schema_version(conn) == PREVIOUS
        pool = await open_pool(empty_dsn, application_name="pgpulse-test", max_size=8)
        try:
            await upgrade_and_take_over(Store(pool), empty_dsn, db, *state)
        finally:
            await pool.close()


#: What the previous release's node left: the job ids, the held job and occurrences, the
#: triggers and the backfill.
State = tuple[int, int, int, ClaimedJob, ClaimedJob, ClaimedJob, list[Triggered], BackfillPlan]


async def previous_release_at_work(store: Store, db: Any) -> State:
    # -- the previous release at work ------------------------------------------------------
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
    db.execute("UPDATE pgpulse_jobs SET next_run_at = '2100-01-01Z' WHERE id = %s", (hourly_id,))
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
        step.jobs or (await store.finish_and_claim_occurrences([], "old-1", work, 5, lease=5)).jobs
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
    return minutely_id, report_id, hourly_id, held, first, second, triggers, backfill


async def upgrade_and_take_over(
    store: Store,
    dsn: str,
    db: Any,
    minutely_id: int,
    report_id: int,
    hourly_id: int,
    held: ClaimedJob,
    first: ClaimedJob,
    second: ClaimedJob,
    triggers: list[Triggered],
    backfill: BackfillPlan,
) -> None:
    old_columns = stored_columns(db)
    before = every_row(db, old_columns)
    migrations_before = db.execute("SELECT version, name, applied_at FROM pgpulse_migrations")
    migrations_before = migrations_before.fetchall()

    # -- the first node of this release migrates ------------------------------------------
    latest = migration_files()[-1][0]
    async with store.pool.connection() as conn:
        assert await store.migrate() == list(range(PREVIOUS + 1, latest + 1))
        assert await schema_version(conn) == latest
    # every job, lease, occurrence, batch and run, by value (the new columns aside)
    assert every_row(db, old_columns) == before
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
