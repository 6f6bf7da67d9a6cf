"""``pgpulse lint`` against a real database (what runs showed, live nodes, calendars), its exit
codes and JSON; and the 30-day diff that ``apply --dry-run`` and ``crontab import --sync
--dry-run`` print after their plan."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, time, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from helpers import pgpulse
from pgpulse.cli.applyfile import parse_apply_file
from pgpulse.cli.main import main
from pgpulse.core.lint import Observed
from pgpulse.core.plan import plan_source
from pgpulse.db.store import Store
from test_lint import CLEAN, CRAFTED

ROOT = Path(__file__).resolve().parents[1]


def cli(dsn: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--database-url", dsn, "--log-level", "WARNING", *args])


def ok(result: Result, code: int = 0) -> Result:
    assert result.exit_code == code, (result.output, result.exception)
    return result


def live_node(db: Any, handlers: list[str], shell: str = "run") -> None:
    db.execute(
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, last_heartbeat, handlers, shell, ttl) "
        "VALUES ('n1', 'host', 1, now(), %s, %s, 30)",
        (handlers, shell),
    )


def job_id(db: Any, name: str, tenant: str = "acme") -> int:
    row = db.execute(
        "SELECT id FROM pgpulse_jobs WHERE tenant = %s AND name = %s", (tenant, name)
    ).fetchone()
    return int(row["id"])


def runs(db: Any, job: int, *, lag: float, duration: float, count: int = 50) -> None:
    """``count`` finished runs of ``job``, each started ``lag`` seconds after its spread
    instant and lasting ``duration`` seconds."""
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
        "finished_at, kind) "
        "SELECT j.id, s.at, 1, 'succeeded', s.at + o.off + make_interval(secs => %(lag)s), "
        "       s.at + o.off + make_interval(secs => %(lag)s + %(duration)s), 'scheduled' "
        "FROM pgpulse_jobs j "
        "CROSS JOIN LATERAL (SELECT pgpulse_spread_offset(j.id, j.spread) AS off) o "
        "CROSS JOIN LATERAL generate_series(1, %(count)s) AS g(n) "
        "CROSS JOIN LATERAL "
        "(SELECT date_trunc('hour', now()) - g.n * interval '10 minutes' AS at) s "
        "WHERE j.id = %(job)s",
        {"job": job, "lag": lag, "duration": duration, "count": count},
    )


def arrange(dsn: str, db: Any, tmp_path: Path) -> Path:
    """The crafted file's observed hazards made real: a live node with shell and http, the
    tenant's calendar, and stored jobs ``laggard`` and ``slow`` with their runs."""
    live_node(db, ["shell", "http"])
    soon = date.today() + timedelta(days=10)
    ok(cli(dsn, "calendar", "set", "holidays", "--tenant", "acme", "--date", soon.isoformat()))
    stored = tmp_path / "stored.toml"
    stored.write_text(
        '[defaults]\ntenant = "acme"\nhandler = "shell"\nspread = 60\n'
        'schedule = "*/10 * * * *"\n'
        '[jobs.laggard]\npayload = { command = "l" }\n'
        '[jobs.slow]\npayload = { command = "s" }\n'
    )
    ok(cli(dsn, "apply", str(stored)))
    runs(db, job_id(db, "laggard"), lag=30, duration=1)
    runs(db, job_id(db, "slow"), lag=0.1, duration=60)
    crafted = tmp_path / "crafted.toml"
    crafted.write_text(CRAFTED)
    return crafted


def test_lint_finds_each_hazard_of_the_crafted_file(dsn: str, db: Any, tmp_path: Path) -> None:
    crafted = arrange(dsn, db, tmp_path)
    result = ok(cli(dsn, "lint", str(crafted), "--herd", "2", "--json"))
    document = json.loads(result.output)
    assert set(document) == {"file", "tenant", "jobs", "now", "findings", "counts"}
    assert document["file"] == str(crafted) and document["jobs"] == 12
    found = {(f["code"], f["job"]): f for f in document["findings"]}
    assert set(found) >= {
        ("handler", "report"),
        ("timeout", "slow"),
        ("misfire-grace", "laggard"),
        ("dst-gap", "ny-nightly"),
        ("dst-fold", "ny-early"),
        ("calendar", "invoices"),
        ("backfill-limit", "rollup"),
    }
    assert [f["code"] for f in document["findings"]].count("herd") == 1
    assert "p99 lag of its last 50 runs, 30 s" in found[("misfire-grace", "laggard")]["message"]
    assert "p95 duration of its last 50 runs, 60 s (1 min)" in found[("timeout", "slow")]["message"]
    soon = date.today() + timedelta(days=10)
    assert found[("calendar", "invoices")]["dates"] == [f"{soon.isoformat()}T09:00:00+00:00"]
    now = datetime.fromisoformat(document["now"])
    gap = datetime.fromisoformat(found[("dst-gap", "ny-nightly")]["dates"][0])
    assert now < gap <= now + timedelta(days=366)
    assert gap.month == 3 and gap.hour == 7  # the second Sunday of March, 02:00 EST
    assert document["counts"] == {
        "error": 2,
        "warning": len(document["findings"]) - 2,
    }


def test_exit_codes_for_ci(dsn: str, db: Any, tmp_path: Path) -> None:
    crafted = arrange(dsn, db, tmp_path)
    clean = tmp_path / "clean.toml"
    clean.write_text(CLEAN)
    ok(cli(dsn, "calendar", "set", "holidays", "--tenant", "acme", "--date", "2027-01-01"))
    assert ok(cli(dsn, "lint", str(crafted), "--exit-code"), 1)
    assert ok(cli(dsn, "lint", str(crafted)), 0)  # findings, but not asked to fail
    result = ok(cli(dsn, "lint", str(clean), "--exit-code", "--herd", "2"), 0)
    assert result.output == f"{clean}: 2 jobs, 0 errors, 0 warnings\n"
    broken = tmp_path / "broken.toml"
    broken.write_text('[jobs.x]\nschedule = "61 * * * *"\nhandler = "shell"\n')
    refused = cli(dsn, "lint", str(broken), "--exit-code")
    assert refused.exit_code == 2
    assert "broken.toml:2:" in refused.output


def test_lint_of_the_stored_jobs(dsn: str, db: Any, tmp_path: Path) -> None:
    live_node(db, ["shell"], shell="off")
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[jobs.rollup]\nschedule = "0 * * * *"\nhandler = "shell"\ncatch_up = "backfill"\n'
        'payload = { command = "r" }\n'
    )
    ok(cli(dsn, "apply", str(path)))
    result = ok(cli(dsn, "lint", "--exit-code"), 1)
    assert result.output.splitlines() == [
        "error: handler: rollup: no live node allows shell jobs (pgpulse node run "
        "--allow-shell-jobs): its runs wait for one",
        "warning: backfill-limit: rollup: catch_up backfill without backfill_limit: every "
        "occurrence missed in an outage runs, oldest first (24 runs after a day down) "
        "[suggest: backfill_limit = 24]",
        "tenant 'default': 1 job, 1 error, 1 warning",
    ]
    assert ok(cli(dsn, "lint", "--tenant", "acme", "--exit-code"), 0).output == (
        "tenant 'acme': 0 jobs, 0 errors, 0 warnings\n"
    )


def test_a_deleted_upstream_is_named_by_the_delete_and_by_lint(dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "chain.toml"
    path.write_text(
        '[defaults]\nhandler = "http"\n'
        + "".join(
            f'[jobs.{name}]\n{when}\npayload = {{ url = "https://93.184.215.14/x" }}\n'
            for name, when in (
                ("extract", 'schedule = "0 3 * * *"'),
                ("load", 'schedule = "@after"\nafter = ["extract"]'),
                ("report", 'schedule = "@after"\nafter = ["extract"]'),
            )
        )
    )
    ok(cli(dsn, "apply", str(path)))
    assert "upstream" not in ok(cli(dsn, "lint")).output
    deleted = ok(cli(dsn, "job", "delete", "extract"))
    assert deleted.output.splitlines() == [
        "deleted extract",
        "note: load, report follow extract (after) and wait for its runs from now on (pgpulse "
        "lint reports it as an upstream error)",
    ]
    assert [
        line
        for line in ok(cli(dsn, "lint", "--exit-code"), 1).output.splitlines()
        if "upstream" in line
    ] == [
        f"error: upstream: {name}: after names 'extract', a job tenant 'default' does not have "
        "(deleted or renamed since?): it waits for it and never runs"
        for name in ("load", "report")
    ]
    gone = json.loads(ok(cli(dsn, "job", "delete", "load", "--json")).output)
    assert gone["followers"] == []


def test_lint_of_the_example_crontab_as_a_process(dsn: str) -> None:
    done = pgpulse("lint", str(ROOT / "examples" / "relay.crontab"), "--exit-code", dsn=dsn)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4
    assert all(line.startswith("error: handler: relay.") for line in lines[:3])
    assert lines[-1].endswith("relay.crontab: 3 jobs, 3 errors, 0 warnings")


# -- the dry runs' 30-day diff -----------------------------------------------------------------

NIGHTLY = '[jobs.nightly]\nschedule = "{schedule}"\nhandler = "shell"\ncatch_up = "{catch_up}"\n'
NIGHTLY += 'payload = {{ command = "n" }}\n{extra}'


def nightly(
    path: Path, schedule: str = "0 3 * * *", catch_up: str = "skip", extra: str = ""
) -> Path:
    path.write_text(NIGHTLY.format(schedule=schedule, catch_up=catch_up, extra=extra))
    return path


INSTANT = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ"


def test_apply_dry_run_shows_the_next_thirty_days(dsn: str, db: Any, tmp_path: Path) -> None:
    path = nightly(tmp_path / "nightly.toml")
    ok(cli(dsn, "apply", str(path)))
    nightly(path, schedule="0 4 * * *")
    out = ok(cli(dsn, "apply", "--dry-run", str(path))).output.splitlines()
    # the plan's lines first, as before
    assert out[:5] == [
        f"apply:nightly ({path})",
        "~ nightly: update",
        '    schedule: "0 3 * * *" -> "0 4 * * *"',
        "apply:nightly: 0 to create, 1 to update, 0 to delete, 0 unchanged",
        "dry run: nothing written",
    ]
    assert re.fullmatch(rf"next 30 days, from {INSTANT} \(occurrences added, removed\):", out[5])
    assert out[6] == "~ nightly: +30 -30"
    added = re.fullmatch(rf"    added: ({INSTANT}), ({INSTANT}), ({INSTANT}), \.\.\.", out[7])
    assert added is not None and all(t.endswith(" 04:00:00Z") for t in added.groups())
    assert re.fullmatch(rf"    removed: {INSTANT}(, {INSTANT}){{2}}, \.\.\.", out[8])
    assert len(out) == 9
    document = json.loads(ok(cli(dsn, "apply", "--dry-run", "--json", str(path))).output)
    month = document[0]["steps"][0]["next_30_days"]
    assert (month["added"], month["removed"], month["pending"]) == (30, 30, None)
    assert len(month["first_added"]) == 3
    # nothing is shown when nothing would be written
    ok(cli(dsn, "apply", str(path)))
    assert "next 30 days" not in ok(cli(dsn, "apply", "--dry-run", str(path))).output


def test_a_catch_up_change_says_what_the_due_occurrences_do(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    path = nightly(tmp_path / "nightly.toml", extra="misfire_grace = 1\n")
    ok(cli(dsn, "apply", str(path)))
    db.execute(
        "UPDATE pgpulse_jobs SET scheduled_for = date_trunc('day', now()) - interval '3 days' "
        "+ interval '3 hours', next_run_at = now() WHERE name = 'nightly'"
    )
    nightly(path, catch_up="backfill", extra="misfire_grace = 1\nbackfill_limit = 10\n")
    out = ok(cli(dsn, "apply", "--dry-run", str(path))).output.splitlines()
    assert out[-2] == "~ nightly: +0 -0"
    pending = re.fullmatch(
        rf"    pending: (\d) occurrences due \({INSTANT} to {INSTANT}\): now 0 run, (\d) "
        r"skipped; after the change (\d) run, 0 skipped",
        out[-1],
    )
    assert pending is not None, out[-1]
    due, skipped, run = pending.groups()
    assert due == skipped == run and due in ("3", "4")  # today's 03:00 may be to come
    # a window change restarts the job: the due occurrences do not run
    tomorrow = (datetime.now(UTC) + timedelta(days=2)).date().isoformat()
    nightly(path, extra=f"misfire_grace = 1\nnot_before = {tomorrow}T00:00:00Z\n")
    document = json.loads(ok(cli(dsn, "apply", "--dry-run", "--json", str(path))).output)
    effect = document[0]["steps"][0]["next_30_days"]["pending"]
    assert effect["restart"] is True and effect["after"] == {"runs": 0, "skipped": 0}
    assert effect["held_after"] == f"{tomorrow}T03:00:00+00:00"


def test_crontab_sync_dry_run_shows_the_next_thirty_days(dsn: str, db: Any, tmp_path: Path) -> None:
    path = tmp_path / "jobs.crontab"
    path.write_text("0 3 * * * backup\n*/30 * * * * poll\n")
    ok(cli(dsn, "crontab", "import", "--sync", str(path)))
    path.write_text("0 3 * * 1-5 backup\n")
    out = ok(cli(dsn, "crontab", "import", "--sync", "--dry-run", str(path))).output
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("next 30 days")))
    assert "dry run: nothing written" in lines[:start]
    diff = lines[start + 1 :]
    heads = [line for line in diff if not line.startswith("    ")]
    now = datetime.now(UTC)
    weekends = sum(
        1
        for k in range(32)
        if now < (t := datetime.combine(now.date() + timedelta(days=k), time(3), UTC))
        and t <= now + timedelta(days=30)
        and t.weekday() >= 5
    )
    assert heads[0].startswith("~ ") and heads[0].endswith(f": +0 -{weekends}")
    assert heads[1].startswith("- ") and heads[1].endswith(": +0 -1440")  # every 30 min


async def test_observed_percentiles_read_the_last_runs_only(
    store: Store, db: Any, tmp_path: Path
) -> None:
    from pgpulse.db.lint_reads import lint_facts, stored_specs

    live_node(db, ["http"], shell="dry-run")
    path = tmp_path / "stored.toml"
    path.write_text(
        '[jobs.poll]\nschedule = "*/10 * * * *"\nhandler = "shell"\npayload = { command = "p" }\n'
    )
    await store.reconcile(
        [("apply:stored", parse_apply_file(path.read_text(), path=str(path)).specs)],
        partial(plan_source, prune=False),
    )
    poll = job_id(db, "poll", tenant="default")
    runs(db, poll, lag=1000, duration=900, count=100)  # the older ones (ids first)
    db.execute("UPDATE pgpulse_runs SET scheduled_for = scheduled_for - interval '30 days'")
    runs(db, poll, lag=2, duration=3, count=200)
    specs, notes = await stored_specs(store, "default")
    assert notes == [] and [s.name for s in specs] == ["poll"]
    facts = await lint_facts(store, specs, ttl=10)
    # the last 200 runs only: the 100 older, slower ones are not read
    assert facts.observed == {("default", "poll"): Observed(200, 2.0, 3.0)}
    assert facts.live_handlers == {"http", "shell"}  # a dry-run shell node counts
    assert facts.calendars == {"default": ()}
    assert facts.now.tzinfo is not None


def test_lint_of_a_crontab_reads_its_zone(dsn: str, db: Any, tmp_path: Path) -> None:
    live_node(db, ["shell"])
    path = tmp_path / "backup.crontab"
    path.write_text("CRON_TZ=Europe/Berlin\n30 2 * * * backup\n0 4 * * * report\n")
    result = ok(cli(dsn, "lint", str(path), "--tenant", "ops", "--json"))
    document = json.loads(result.output)
    assert document["tenant"] == "ops" and document["jobs"] == 2
    assert [(f["code"], f["tenant"]) for f in document["findings"]] == [
        ("dst-gap", "ops"),
        ("dst-fold", "ops"),
    ]
    gap, fold = document["findings"]
    assert gap["job"] == fold["job"] and gap["job"].startswith("backup")
    assert "Europe/Berlin skips 02:00-03:00: its 02:30 does not exist" in gap["message"]
    assert gap["dates"][0].endswith("T01:00:00+00:00")  # the last Sunday of March, 03:00 CEST
    assert fold["dates"][0].endswith("T00:30:00+00:00")  # 02:30 CEST, the first pass
    refused = cli(dsn, "lint", str(tmp_path / "missing.crontab"))
    assert refused.exit_code == 2
    bad = tmp_path / "bad.crontab"
    bad.write_text("61 * * * * x\n")
    refused = cli(dsn, "lint", str(bad))
    assert refused.exit_code == 2
    assert "bad.crontab:1" in refused.output
