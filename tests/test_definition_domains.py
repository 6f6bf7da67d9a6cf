"""A job definition's single-column checks live on domains (migration 0013): they still refuse a
bad value written straight into pgpulse_jobs, the hot path assigns none of those columns, and a
database migrated from 0012 keeps its jobs unchanged."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.rows import dict_row

from helpers import add, pgpulse, spec
from pgpulse.db import migrations
from pgpulse.db.migrations import migrate
from pgpulse.db.store import Store
from pgpulse.sql import QUERIES, migration_files

# (column, a refused value, an accepted value, the domain's constraint that refuses it)
MOVED = [
    ("schedule_kind", "weekly", "once", "pgpulse_schedule_kind_known"),
    ("payload", "[]", '{"a": 1}', "pgpulse_payload_is_object"),
    ("payload", '"text"', "{}", "pgpulse_payload_is_object"),
    ("catch_up", "later", "coalesce", "pgpulse_catch_up_known"),
    ("overlap", "queue", "replace", "pgpulse_overlap_known"),
    ("backfill_limit", "0", "1", "pgpulse_positive_count_at_least_one"),
    ("max_attempts", "0", "1", "pgpulse_positive_count_at_least_one"),
    ("max_runs", "-1", "1", "pgpulse_positive_count_at_least_one"),
    ("auto_pause_after", "0", "1", "pgpulse_positive_count_at_least_one"),
    ("misfire_grace", "0.5 seconds", "1 second", "pgpulse_misfire_grace_at_least_1s"),
    ("spread", "-0.5", "0", "pgpulse_spread_within_a_day"),
    ("spread", "86400.5", "86400", "pgpulse_spread_within_a_day"),
]

#: The statements that run per firing or per heartbeat: none may assign a domain-typed column
#: (a domain's check is evaluated where a value is assigned).
HOT = (
    "record_skips_and_auto_pauses",
    "finish_jobs",
    "claim_jobs",
    "next_job_due",
    "finish_occurrences",
    "claim_occurrences",
    "next_occurrence_due",
    "renew",
    "hand_back_jobs",
    "hand_back_occurrences",
    "heartbeat",
    "reap_job_leases",
    "reap_occurrence_leases",
    "end_pauses",
)

#: The columns a job row needs, as SQL; a test overrides one with its value.
_ROW = {
    "tenant": "'default'",
    "schedule": "'@every 1h'",
    "schedule_kind": "'interval'",
    "handler": "'noop'",
    "anchor_at": "now()",
    "scheduled_for": "now()",
    "next_run_at": "now()",
}


def _insert(db: Any, column: str, value: str, name: str) -> None:
    values = {k: sql.SQL(v) for k, v in _ROW.items()} | {column: sql.Placeholder("value")}
    statement = sql.SQL("INSERT INTO pgpulse_jobs (name, {}) VALUES (%(name)s, {})").format(
        sql.SQL(", ").join(map(sql.Identifier, values)), sql.SQL(", ").join(values.values())
    )
    db.execute(statement, {"name": name, "value": value})


def _set(db: Any, column: str, value: str) -> None:
    db.execute(
        sql.SQL("UPDATE pgpulse_jobs SET {} = %(value)s WHERE name = 'kept'").format(
            sql.Identifier(column)
        ),
        {"value": value},
    )


@pytest.mark.parametrize(("column", "bad", "good", "constraint"), MOVED)
def test_a_moved_check_still_refuses_a_bad_value_written_straight_into_the_table(
    db: Any, column: str, bad: str, good: str, constraint: str
) -> None:
    _insert(db, column, good, "kept")
    with pytest.raises(errors.CheckViolation) as inserted:
        _insert(db, column, bad, "refused")
    assert inserted.value.diag.constraint_name == constraint
    with pytest.raises(errors.CheckViolation) as updated:
        _set(db, column, bad)
    assert updated.value.diag.constraint_name == constraint
    _set(db, column, good)
    names = db.execute("SELECT name FROM pgpulse_jobs ORDER BY name").fetchall()
    assert names == [{"name": "kept"}]


@pytest.mark.parametrize(
    ("column", "bad", "constraint"),
    [
        ("resume_mode", "never", "pgpulse_jobs_resume_mode_check"),
        ("status", "sleeping", "pgpulse_jobs_status_check"),
        ("max_concurrency", "0", "pgpulse_jobs_max_concurrency_check"),
    ],
)
def test_the_checks_kept_on_the_table_still_refuse(
    db: Any, column: str, bad: str, constraint: str
) -> None:
    _insert(db, "payload", "{}", "kept")
    with pytest.raises(errors.CheckViolation) as updated:
        _set(db, column, bad)
    assert updated.value.diag.constraint_name == constraint
    assert updated.value.diag.table_name == "pgpulse_jobs"


def test_no_hot_statement_assigns_a_domain_typed_column(db: Any) -> None:
    """A column the claim, renewal, hand-back or heartbeat writes keeps a plain type (its check,
    if any, on the table); the definition columns are on domains."""
    typed = {
        row["attname"]
        for row in db.execute(
            "SELECT a.attname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = 'pgpulse_jobs'::regclass AND a.attnum > 0 AND t.typtype = 'd'"
        ).fetchall()
    }
    assert typed == {
        "schedule_kind", "payload", "catch_up", "overlap", "backfill_limit", "max_attempts",
        "max_runs", "auto_pause_after", "misfire_grace", "spread", "keep_runs",
    }  # fmt: skip
    assigned: set[str] = set()
    for name in HOT:
        for segment in re.findall(
            r"UPDATE pgpulse_jobs\b.*?\bSET\b(.*?)(?:\bFROM\b|\bWHERE\b|\bRETURNING\b)",
            QUERIES[name],
            re.DOTALL,
        ):
            assigned |= set(re.findall(r"(?:^|,)\s*(\w+)\s*=", segment))
    assert {"status", "lease_expires_at", "fencing_token", "resume_mode"} <= assigned
    assert assigned & typed == set()


async def test_a_payload_reads_back_as_a_dict_through_the_store_and_job_show(
    store: Store, dsn: str
) -> None:
    """Row descriptions report a domain's base type: ``payload`` still loads as a dict, the
    other moved columns as before."""
    payload = {"command": "echo hi", "cwd": "/tmp", "env": {"A": "1"}}
    await add(
        store,
        spec("typed", "@every 5m", handler="shell", payload=payload, catch_up="backfill",
             backfill_limit=3, max_runs=7, auto_pause_after=2, spread=30.0, misfire_grace=90.0),
    )  # fmt: skip
    job = await store.get_job("default", "typed")
    assert job["payload"] == payload
    assert (job["catch_up"], job["backfill_limit"], job["max_runs"]) == ("backfill", 3, 7)
    assert (job["auto_pause_after"], job["max_attempts"], job["spread"]) == (2, 3, 30.0)
    assert job["overlap"] == "forbid" and job["schedule_kind"] == "interval"
    shown = pgpulse("job", "show", "typed", "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["payload"] == payload


async def test_a_database_migrated_from_0012_keeps_its_jobs(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = migration_files()
    assert [v for v, _, _ in files].index(13) == 12
    monkeypatch.setattr(migrations, "migration_files", lambda: files[:12])
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        assert await migrate(conn) == list(range(1, 13))
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as db:
        db.execute(
            "INSERT INTO pgpulse_jobs (tenant, name, schedule, schedule_kind, handler, payload, "
            "catch_up, backfill_limit, misfire_grace, max_attempts, spread, max_runs, "
            "auto_pause_after, overlap, max_concurrency, anchor_at, scheduled_for, next_run_at) "
            "SELECT 'default', 'job-' || i, '@every 1h', 'interval', 'noop', "
            "jsonb_build_object('i', i), (ARRAY['skip', 'backfill', 'coalesce'])[1 + i % 3], "
            "nullif(i % 4, 0), make_interval(secs => 1 + i), 1 + i % 5, (i * 1.5) % 86400, "
            "nullif(i % 3, 0), nullif(i % 2, 0), "
            "(ARRAY['forbid', 'replace', 'allow'])[1 + i % 3], "
            "CASE WHEN i % 3 = 2 THEN 1 + i % 4 END, now(), now(), now() "
            "FROM generate_series(1, 500) AS i"
        )
        before = db.execute("SELECT * FROM pgpulse_jobs ORDER BY id").fetchall()
    monkeypatch.setattr(migrations, "migration_files", lambda: files)
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as conn:
        assert await migrate(conn) == [v for v, _, _ in files[12:]]
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as db:
        after = db.execute("SELECT * FROM pgpulse_jobs ORDER BY id").fetchall()
        kinds = db.execute(
            "SELECT format_type(atttypid, NULL) AS type FROM pg_attribute "
            "WHERE attrelid = 'pgpulse_jobs'::regclass AND attname = 'payload'"
        ).fetchone()
    # later migrations may add columns (with their defaults); the columns of 0012 keep every value
    assert len(after) == 500 and [{k: row[k] for k in before[0]} for row in after] == before
    assert kinds == {"type": "pgpulse_payload"}
