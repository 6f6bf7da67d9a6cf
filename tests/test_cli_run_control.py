"""``pgpulse job trigger --payload``, ``pgpulse job backfill`` and ``job create --overlap`` as a
user types them (real subprocesses), with their one-line refusals."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from helpers import pgpulse

SHELL = '{"command": "echo hi"}'


def create(dsn: str, *extra: str) -> None:
    done = pgpulse(
        "job", "create", "hourly", "--schedule", "0 * * * *", "--handler", "shell",
        "--payload", SHELL, *extra, dsn=dsn,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def counts(db: Any) -> tuple[int, int]:
    """(batches, extra occurrences) written."""
    row = db.execute(
        "SELECT (SELECT count(*) FROM pgpulse_batches) AS b,"
        " (SELECT count(*) FROM pgpulse_occurrences) AS o"
    ).fetchone()
    return row["b"], row["o"]


def test_trigger_with_a_payload_queues_one_occurrence_with_it(dsn: str, db: Any) -> None:
    create(dsn)
    done = pgpulse("job", "trigger", "hourly", "--payload", '{"command": "echo once"}', dsn=dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("triggered hourly with the given payload: extra occurrence ")
    assert done.stdout.rstrip().endswith(", kind trigger)")
    row = db.execute("SELECT kind, payload FROM pgpulse_occurrences").fetchone()
    assert row == {"kind": "trigger", "payload": {"command": "echo once"}}


def test_backfill_lists_then_queues_the_exact_set(dsn: str, db: Any) -> None:
    create(dsn)
    h = db.execute("SELECT date_trunc('hour', now()) AS h").fetchone()["h"]
    hours = [h - timedelta(hours=k) for k in (5, 4, 3, 2, 1)]
    job_id = db.execute("SELECT id FROM pgpulse_jobs").fetchone()["id"]
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, finished_at)"
        " VALUES (%(j)s, %(a)s, 1, 'succeeded', now()), (%(j)s, %(b)s, 3, 'failed', now()),"
        " (%(j)s, %(c)s, 0, 'skipped', now())",
        {"j": job_id, "a": hours[0], "b": hours[1], "c": hours[2]},
    )
    span = ["--from", hours[0].isoformat(), "--to", hours[-1].isoformat()]
    dry = pgpulse("job", "backfill", "hourly", *span, "--dry-run", dsn=dsn)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"keep  {hours[0].isoformat()}  succeeded",
        f"run   {hours[1].isoformat()}  failed",
        f"run   {hours[2].isoformat()}  skipped",
        f"run   {hours[3].isoformat()}  missing",
        f"run   {hours[4].isoformat()}  missing",
        "dry run: 4 of 5 occurrences of hourly would run",
    ]
    assert counts(db) == (0, 0)
    done = pgpulse(
        "job", "backfill", "hourly", *span, "--newest-first", "--max-concurrency", "2",
        "--json", dsn=dsn,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert [o["scheduled_for"] for o in shown["occurrences"] if o["selected"]] == [
        at.isoformat().replace("+00:00", "Z") for at in reversed(hours[1:])
    ]  # instants in JSON as the API writes them
    rows = db.execute(
        "SELECT o.scheduled_for, b.max_concurrency FROM pgpulse_occurrences o"
        " JOIN pgpulse_batches b ON b.id = o.batch_id ORDER BY o.position"
    ).fetchall()
    assert [(r["scheduled_for"], r["max_concurrency"]) for r in rows] == [
        (at, 2) for at in reversed(hours[1:])
    ]


def test_a_backfill_repeated_after_it_ran_adds_nothing(dsn: str, db: Any) -> None:
    """The trial's double submit: once a backfill's occurrences ran, the same request (and one
    of a part of its range) selects nothing, and its dry run says why."""
    create(dsn)
    h = db.execute("SELECT date_trunc('hour', now()) AS h").fetchone()["h"]
    hours = [h - timedelta(hours=k) for k in (3, 2, 1)]
    span = ["--from", hours[0].isoformat(), "--to", hours[-1].isoformat()]
    first = pgpulse("job", "backfill", "hourly", *span, dsn=dsn)
    assert first.returncode == 0, first.stderr
    batch = db.execute("SELECT id FROM pgpulse_batches").fetchone()["id"]
    assert (
        first.stdout.splitlines()[-1]
        == f"queued 3 of 3 occurrences of hourly (batch id {batch}: `pgpulse runs hourly` lists "
        "them as kind backfill)"
    )
    # the occurrences end as a node ends them: the row goes, its run row (same id) stays
    db.execute(
        "WITH ended AS (DELETE FROM pgpulse_occurrences RETURNING *)"
        " INSERT INTO pgpulse_runs (id, job_id, scheduled_for, attempts, outcome, finished_at,"
        " kind, batch_id) OVERRIDING SYSTEM VALUE"
        " SELECT id, job_id, scheduled_for, 1, 'succeeded', now(), kind, batch_id FROM ended"
    )
    dry = pgpulse("job", "backfill", "hourly", *span, "--dry-run", dsn=dsn)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        *[f"keep  {at.isoformat()}  succeeded" for at in hours],
        "dry run: 0 of 3 occurrences of hourly would run",
    ]
    for part, n in ((span, 3), (["--from", hours[1].isoformat(), "--to", hours[1].isoformat()], 1)):
        again = pgpulse("job", "backfill", "hourly", *part, dsn=dsn)
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines()[-1] == (
            f"nothing to backfill: none of {n} occurrence{'s' * (n != 1)} of hourly selected"
        )
        assert counts(db) == (1, 0)  # no new batch, no new occurrence
    kinds = db.execute("SELECT kind, count(*) AS n FROM pgpulse_runs GROUP BY kind").fetchall()
    assert [(r["kind"], r["n"]) for r in kinds] == [("backfill", 3)]
    # a backfill's run is not late: it has no lag (the seventh trial read 188-247 s of it)
    db.execute("UPDATE pgpulse_runs SET started_at = finished_at")
    listed = json.loads(pgpulse("runs", "hourly", "--json", dsn=dsn).stdout)
    assert [(r["kind"], r["lag"]) for r in listed] == [("backfill", None)] * 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["job", "create", "x", "--schedule", "@hourly", "--handler", "shell",
             "--payload", SHELL, "--max-concurrency", "3"],
            "invalid value for --max-concurrency: applies to overlap allow only "
            "(overlap is 'forbid')",
        ),
        (
            ["job", "create", "x", "--schedule", "@hourly", "--handler", "shell",
             "--payload", SHELL, "--overlap", "allow"],
            "invalid value for --max-concurrency: overlap allow needs max_concurrency N, the most "
            "occurrences at once (1-1000)",
        ),
        (
            ["job", "trigger", "hourly", "--payload", "[1]"],
            "invalid value for --payload: must be a JSON object, got [1]",
        ),
        # a refusal quotes a JSON value in JSON's spelling (it said None, True)
        (
            ["job", "trigger", "hourly", "--payload", "null"],
            "invalid value for --payload: must be a JSON object, got null",
        ),
        (
            ["job", "trigger", "hourly", "--payload", '[true, false, "x"]'],
            'invalid value for --payload: must be a JSON object, got [true, false, "x"]',
        ),
        (
            ["job", "backfill", "hourly", "--from", "2026-01-02T00:00Z", "--to",
             "2026-01-01T00:00Z"],
            "invalid value for --to: 2026-01-01T00:00:00+00:00 is before from "
            "2026-01-02T00:00:00+00:00",
        ),
        (
            ["job", "backfill", "hourly", "--from", "2026-01-01T00:00Z", "--to",
             "2026-01-01T05:00Z", "--max-concurrency", "0"],
            "invalid value for --max-concurrency: must be a whole number from 1 to 1000, got 0",
        ),
        # instants a day from either end of Python's years (the adversarial tester's traceback)
        (
            ["job", "backfill", "hourly", "--from", "0001-01-01T00:00+14:00", "--to",
             "2026-01-01T05:00Z"],
            "invalid value for --from: 0001-01-01T00:00:00+14:00 is out of range: Pulse takes "
            "instants from 0001-01-02 to 9999-12-30 (UTC)",
        ),
        (
            ["job", "pause", "hourly", "--until", "9999-12-31T23:59"],
            "invalid value for --until: '9999-12-31T23:59' is out of range: Pulse takes instants "
            "from 0001-01-02 to 9999-12-30 (UTC)",
        ),
        (
            ["job", "create", "once", "--schedule", "@at 0001-01-01T00:00:00Z", "--tz",
             "America/New_York", "--handler", "shell", "--payload", SHELL],
            "invalid value for --schedule: '@at 0001-01-01T00:00:00Z': @at "
            "'0001-01-01T00:00:00Z' is out of range: Pulse takes instants from 0001-01-02 to "
            "9999-12-30 (UTC)",
        ),
        (
            ["job", "create", "hourly", "--schedule", "@hourly", "--handler", "shell",
             "--payload", SHELL, "--not-before", "0001-01-01T00:00:00"],
            "invalid value for --not-before: '0001-01-01T00:00:00' is out of range: Pulse takes "
            "instants from 0001-01-02 to 9999-12-30 (UTC)",
        ),
    ],
)  # fmt: skip
def test_bad_requests_are_one_line_exit_2_and_write_nothing(
    dsn: str, db: Any, args: list[str], message: str
) -> None:
    create(dsn)
    done = pgpulse(*args, dsn=dsn)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip().splitlines() == [f"error: {message}"]
    assert counts(db) == (0, 0)
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 1


def test_a_trigger_payloads_url_is_checked_as_job_creates(dsn: str, db: Any) -> None:
    """`job trigger --payload` on an http job refuses a loopback URL as `job create` does, and
    --allow-private-target is the operator's exception (it ran any URL a payload gave)."""
    made = pgpulse("job", "create", "hook", "--schedule", "0 * * * *", "--handler", "http",
                   "--payload", '{"url": "https://93.184.215.14/hook"}', dsn=dsn)  # fmt: skip
    assert made.returncode == 0, made.stderr
    local = '{"url": "http://127.0.0.1:9/hook"}'
    refused = pgpulse("job", "trigger", "hook", "--payload", local, dsn=dsn)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith(
        "error: invalid value for --payload: payload.url 'http://127.0.0.1:9/hook' targets "
        "127.0.0.1 (loopback)"
    )
    assert counts(db) == (0, 0)
    allowed = pgpulse("job", "trigger", "hook", "--payload", local, "--allow-private-target",
                      dsn=dsn)  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.startswith("triggered hook with the given payload: extra occurrence ")
    assert counts(db) == (1, 1)  # one batch of one extra occurrence
