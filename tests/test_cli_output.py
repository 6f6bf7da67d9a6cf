"""What the command line prints, as a user sees it from real processes: ``job show`` grouped for
people and, with ``--json``, the API's very job; ISO 8601 instants with ``T`` and an offset in
every JSON output (CLI and API); RFC 3339 UTC times on JSON log lines; names never cut."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from helpers import apgpulse, pgpulse
from pgpulse.db.store import Store
from web_helpers import api_client, make_token

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)$")
INSTANT_KEYS = re.compile(r"(_at|_for|^upcoming|^last_heartbeat)$")
SHELL = '{"command": "pg_dump pulse > /backups/pulse.sql"}'


def instants(value: Any, key: str = "") -> list[tuple[str, Any]]:
    """Every (key, value) under ``value`` whose key names an instant."""
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in instants(v, k)]
    if isinstance(value, list):
        return [pair for v in value for pair in instants(v, key)]
    return [(key, value)] if INSTANT_KEYS.search(key) and value is not None else []


def assert_iso(document: Any, *required: str) -> None:
    found = instants(document)
    assert {k for k, _ in found} >= set(required), found
    bad = [(k, v) for k, v in found if not (isinstance(v, str) and ISO.match(v))]
    assert bad == []


async def seed(store: Store, db: Any) -> int:
    """A Paris backup job with two finished runs (arranged in SQL: the view is under test)."""
    created = await apgpulse(
        *("job", "create", "backup", "--schedule", "0 3 * * *", "--handler", "shell"),
        *("--payload", SHELL, "--tz", "Europe/Paris", "--max-attempts", "5"),
        dsn=store_dsn(db),
    )
    assert created.returncode == 0, created.stderr
    job_id: int = db.execute("SELECT id FROM pgpulse_jobs").fetchone()["id"]
    for day, outcome, error in ((1, "succeeded", None), (2, "failed", "exit 3\nsecond line")):
        db.execute(
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, node_id, "
            "fencing_token, started_at, finished_at, error) VALUES (%s, %s, 1, %s, 'node-a', "
            "%s, %s, %s, %s)",
            (
                job_id,
                datetime(2026, 11, day, 2, tzinfo=UTC),
                outcome,
                day,
                datetime(2026, 11, day, 2, 0, 1, tzinfo=UTC),
                datetime(2026, 11, day, 2, 0, 3, 500_000, tzinfo=UTC),
                error,
            ),
        )
    return job_id


def store_dsn(db: Any) -> str:
    info = db.info
    return f"host={info.host} port={info.port} dbname={info.dbname} user={info.user}"


async def test_job_show_json_is_the_api_job(store: Store, db: Any) -> None:
    job_id = await seed(store, db)
    shown = await apgpulse("job", "show", "backup", "--json", dsn=store_dsn(db))
    assert shown.returncode == 0, shown.stderr
    cli_job = json.loads(shown.stdout)
    async with api_client(store, await make_token(store, admin=True)) as client:
        api_job = (await client.get(f"/api/v1/jobs/{job_id}")).json()
    assert cli_job == api_job
    assert cli_job["misfire_grace"] == 60.0 and "misfire_grace_s" not in cli_job
    assert_iso(cli_job, "created_at", "scheduled_for", "upcoming")
    assert cli_job["upcoming"][0].endswith("T03:00:00+01:00")


async def test_job_show_groups_the_job_for_people(store: Store, db: Any) -> None:
    await seed(store, db)
    shown = await apgpulse("job", "show", "backup", dsn=store_dsn(db))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("next occurrences"))
    assert lines[0].startswith("job default/backup (id ")
    assert [line for line in lines if line and not line.startswith(" ")][1:] == [
        "definition",
        "state",
        "current occurrence",
        "next occurrences (Europe/Paris)",
        "last runs (2)",
    ]
    assert "  schedule        0 3 * * *: at 03:00 (Europe/Paris)" in lines
    assert f"  payload         {SHELL}" in lines
    assert "  attempts        5, backoff base 1 s" in lines
    assert "  catch-up        skip, misfire grace 60 s (1 min)" in lines
    assert all(line.endswith("T03:00:00+01:00") for line in lines[head + 1 : head + 6])
    runs = lines[lines.index("last runs (2)") + 3 :]
    assert runs[0].split() == [
        *("2026-11-02T02:00:00+00:00", "failed", "1", "node-a", "1", "s", "2.5", "s"),
        *("exit", "3…"),
    ]
    assert runs[0].endswith("exit 3…")  # the first line of a longer error, marked as cut
    assert runs[1].split()[:2] == ["2026-11-01T02:00:00+00:00", "succeeded"]


async def test_every_json_instant_is_iso_8601_with_t_and_an_offset(store: Store, db: Any) -> None:
    job_id = await seed(store, db)
    target = store_dsn(db)
    created = await apgpulse("token", "create", "--admin", "--label", "ci", dsn=target)
    assert created.returncode == 0, created.stderr
    tokens = json.loads((await apgpulse("token", "list", "--json", dsn=target)).stdout)
    assert_iso(tokens, "created_at")
    runs = json.loads((await apgpulse("runs", "--json", dsn=target)).stdout)
    assert_iso(runs, "scheduled_for", "started_at", "finished_at")
    jobs = json.loads((await apgpulse("job", "list", "--json", dsn=target)).stdout)
    assert_iso(jobs, "scheduled_for")
    await store.register_node("n1", hostname="h", pid=1, slots=4, handlers=["x"])
    status = json.loads((await apgpulse("status", "--json", dsn=target)).stdout)
    assert_iso(status, "started_at", "last_heartbeat")
    async with api_client(store, await make_token(store, admin=True)) as client:
        assert_iso((await client.get(f"/api/v1/jobs/{job_id}")).json(), "created_at", "upcoming")
        assert_iso((await client.get("/api/v1/runs")).json(), "scheduled_for", "finished_at")
        assert_iso((await client.get("/api/v1/cluster")).json(), "last_heartbeat")


def test_json_log_lines_carry_an_rfc_3339_utc_time(dsn: str) -> None:
    made = pgpulse(
        "token",
        "create",
        "--admin",
        dsn=dsn,
        env={"PGPULSE_LOG_FORMAT": "json", "PGPULSE_LOG_LEVEL": "INFO", "TZ": "Asia/Tokyo"},
    )
    assert made.returncode == 0, made.stderr
    [line] = [json.loads(x) for x in made.stderr.splitlines() if '"token_created"' in x]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"]), line
    logged = datetime.fromisoformat(line["time"])
    assert abs(logged - datetime.now(UTC)) < timedelta(minutes=1)


def test_listed_names_are_whole_and_can_be_typed_back(dsn: str, tmp_path: Path) -> None:
    tab = tmp_path / "nightly-maintenance.crontab"
    tab.write_text(
        "15 2 * * * /usr/local/bin/backup-database --full > /var/log/backup.log 2>&1\n"
        '*/10 * * * * echo "relay: health check upstream providers at $(date -u +\\%T)"\n'
    )
    imported = pgpulse("crontab", "import", str(tab), dsn=dsn)
    assert imported.returncode == 0, imported.stderr
    long_name = "reports." + "quarterly-revenue-by-region-" * 4 + "final"
    create = ("job", "create", long_name, "--schedule", "@daily", "--handler", "shell")
    assert pgpulse(*create, "--payload", '{"command": "true"}', dsn=dsn).returncode == 0
    listed = pgpulse("job", "list", dsn=dsn)
    assert listed.returncode == 0, listed.stderr
    shown_names = [line.split()[0] for line in listed.stdout.splitlines()[2:]]
    assert len(shown_names) == 3 and long_name in shown_names
    assert "nightly-maintenance.backup-database-" in " ".join(shown_names)
    assert "nightly-maintenance.echo-relay-health-check-" in " ".join(shown_names)
    for name in shown_names:
        assert len(name) <= max(len(long_name), 60)
        shown = pgpulse("job", "show", name, dsn=dsn)
        assert shown.returncode == 0 and shown.stdout.startswith(f"job default/{name} ")


def test_counts_are_worded_in_the_singular_and_the_plural(dsn: str, tmp_path: Path) -> None:
    """Never "1 attempts", "1 job(s)": one rule (pgpulse.core.wording.plural) for every count."""
    from pgpulse.core.wording import plural

    assert [plural(1, "attempt"), plural(2, "attempt"), plural(0, "job")] == [
        "1 attempt",
        "2 attempts",
        "0 jobs",
    ]
    assert [plural(1.0, "second"), plural(0.5, "second"), plural(1200, "run")] == [
        "1 second",
        "0.5 seconds",
        "1,200 runs",
    ]
    crontab = tmp_path / "one.crontab"
    crontab.write_text("0 3 * * * backup\n")
    imported = pgpulse("crontab", "import", str(crontab), dsn=dsn)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.splitlines()[-2] == (  # then the note: no node allows shell jobs
        f"imported 1 job from {crontab}: 1 created, 0 already imported"
    )
    again = pgpulse("crontab", "import", str(crontab), dsn=dsn)
    assert again.stdout.splitlines()[-1] == (
        f"imported 1 job from {crontab}: 0 created, 1 already imported"
    )
    crontab.write_text("0 3 * * * backup\n* * *\n")
    refused = pgpulse("crontab", "import", str(crontab), dsn=dsn)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == "error: 1 line refused; nothing imported"
    assert "found 3 fields" in refused.stderr


def test_crontab_import_says_what_a_percent_does_and_names_a_guarded_line_by_its_command(
    dsn: str, tmp_path: Path
) -> None:
    crontab = tmp_path / "host.crontab"
    crontab.write_text(
        "0 3 * * * date +%F > /tmp/today\n"
        "0 1 * * * test -x /usr/bin/certbot && "
        'perl -e "sleep int(rand(43200))" && certbot -q renew\n'
    )
    imported = pgpulse("crontab", "import", str(crontab), dsn=dsn)
    assert imported.returncode == 0, imported.stderr
    assert imported.stderr.splitlines() == [
        f"note: {crontab}:1: % starts standard input, as in cron: the job runs 'date +' with "
        "input 'F > /tmp/today\\n' (1 line); write \\% for a literal percent sign"
    ]
    names = [line.split()[1] for line in imported.stdout.splitlines()[:-1]]
    assert names[0].startswith("host.date-")
    assert re.fullmatch(r"host\.certbot-renew-[0-9a-f]{8}", names[1]), names


def test_a_job_missing_in_its_tenant_names_the_tenants_that_have_it(dsn: str) -> None:
    for tenant in ("acme", "beta"):
        made = pgpulse(
            *("job", "create", "api.sync", "--tenant", tenant, "--schedule", "@daily"),
            *("--handler", "shell", "--payload", SHELL),
            dsn=dsn,
        )
        assert made.returncode == 0, made.stderr
    shown = pgpulse("job", "show", "api.sync", dsn=dsn)
    assert (shown.returncode, shown.stderr) == (
        2,
        "error: no job named 'api.sync' in tenant 'default' (tenants 'acme', 'beta' have one: "
        "--tenant NAME)\n",
    )
    assert pgpulse("job", "delete", "api.sync", "--tenant", "beta", dsn=dsn).returncode == 0
    paused = pgpulse("job", "pause", "api.sync", dsn=dsn)
    assert paused.stderr == (
        "error: no job named 'api.sync' in tenant 'default' (tenant 'acme' has one: "
        "--tenant acme)\n"
    )


def test_a_value_refused_from_the_environment_names_the_variable(dsn: str) -> None:
    args = ("job", "create", "nightly", "--schedule", "@daily", "--handler", "shell")
    refused = pgpulse(
        *args, "--payload", SHELL, dsn=dsn, env={"PGPULSE_JOB_CREATE_TZ": "Mars/Olympus"}
    )
    assert refused.returncode == 2
    assert refused.stderr.endswith(" (from the environment variable PGPULSE_JOB_CREATE_TZ)\n")
    typed = pgpulse(*args, "--payload", SHELL, "--tz", "Mars/Olympus", dsn=dsn)
    assert typed.returncode == 2 and "environment" not in typed.stderr


def test_crontab_import_names_its_argument_file(tmp_path: Path) -> None:
    missing = pgpulse("crontab", "import", str(tmp_path / "nosuch.crontab"))
    assert missing.returncode == 2
    assert (
        missing.stderr
        == f"error: invalid value for 'FILE': File '{tmp_path}/nosuch.crontab' does not exist.\n"
    )
