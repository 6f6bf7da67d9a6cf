"""``pgpulse apply`` with alert rules in the file (``[jobs.NAME.alerts]``), as a real subprocess:
the rules are checked as the CLI checks them, shown in the plan's diff, written with the jobs,
changed and removed with the file; a refusal names the file, the line and the field, and
writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import pgpulse
from pgpulse.alerts.rules import RuleSpec
from pgpulse.alerts.store import AlertStore
from pgpulse.cli.applyfile import parse_apply_file
from pgpulse.core.errors import InvalidInput
from pgpulse.db.store import Store

FILE = """\
[jobs.backup]
schedule = "0 3 * * *"
handler = "shell"
payload = { command = "backup" }

[jobs.backup.alerts]
failures = { notify = ["ops"], threshold = 2 }
silence = { notify = "ops", threshold = 172800 }

[jobs.quiet]
schedule = "@hourly"
handler = "shell"
payload = { command = "true" }
"""


def _rules(db: Any) -> list[tuple[str, str, float | None, list[str]]]:
    rows = db.execute(
        "SELECT j.name, r.rule, r.threshold, ARRAY(SELECT n.name FROM pgpulse_notifiers n "
        "WHERE n.id = ANY (r.notifiers) ORDER BY n.name) AS notifiers FROM pgpulse_alert_rules r "
        "JOIN pgpulse_jobs j ON j.id = r.job_id ORDER BY j.name, r.rule"
    ).fetchall()
    return [(r["name"], r["rule"], r["threshold"], r["notifiers"]) for r in rows]


async def _notifiers(store: Store) -> None:
    alerts = AlertStore(store.pool)
    await alerts.add_notifier("ops", "webhook", {"url": "https://93.184.215.14/hook"})
    await alerts.add_notifier("pager", "webhook", {"url": "https://93.184.215.14/page"})
    await alerts.add_notifier("hc", "checkin", {"url": "https://93.184.215.14/ping"})


async def test_apply_writes_diffs_changes_and_removes_a_jobs_rules(
    store: Store, dsn: str, db: Any, tmp_path: Path
) -> None:
    await _notifiers(store)
    path = tmp_path / "nightly.toml"
    path.write_text(FILE)
    dry = pgpulse("apply", "--dry-run", "--json", str(path), dsn=dsn)
    assert dry.returncode == 0, dry.stderr
    [plan] = json.loads(dry.stdout)
    assert plan["applied"] is False  # a trial could not tell a dry run's JSON from a write's
    backup = next(s for s in plan["steps"] if s["name"] == "backup")
    assert backup["action"] == "create"
    assert backup["changes"]["alerts"] == [
        {},
        {
            "failures": {"notify": ["ops"], "threshold": 2.0},
            "silence": {"notify": ["ops"], "threshold": 172800.0},
        },
    ]
    assert _rules(db) == []  # a dry run writes nothing

    applied = pgpulse("apply", "--json", str(path), dsn=dsn)
    assert applied.returncode == 0, applied.stderr
    # applied, the report names each created job's id (it said null as the dry run does)
    [done] = json.loads(applied.stdout)
    ids = {r["name"]: r["id"] for r in db.execute("SELECT id, name FROM pgpulse_jobs")}
    assert done["applied"] is True and ids
    assert {s["name"]: (s["action"], s["job_id"]) for s in done["steps"]} == {
        name: ("create", job_id) for name, job_id in ids.items()
    }
    assert all(s["job_id"] is None for s in plan["steps"])  # the dry run created none
    assert _rules(db) == [
        ("backup", "failures", 2.0, ["ops"]),
        ("backup", "silence", 172800.0, ["ops"]),
    ]
    # A rule set by hand on a job whose table declares no alerts is the CLI's: apply keeps it.
    by_hand = pgpulse("alert", "rule", "set", "late", "--job", "quiet", "--notify", "ops", dsn=dsn)
    assert by_hand.returncode == 0, by_hand.stderr
    again = pgpulse("apply", str(path), dsn=dsn)
    assert again.returncode == 0 and again.stdout.strip().endswith("nothing to change")

    # The file changes a threshold, drops silence, adds a check-in: the plan says so, field by
    # field, and the job's own rules become the file's.
    path.write_text(
        FILE.replace('silence = { notify = "ops", threshold = 172800 }', "").replace(
            "threshold = 2 }", 'threshold = 3 }\ncheckin = { notify = ["hc"] }'
        )
    )
    changed = pgpulse("apply", str(path), dsn=dsn)
    assert changed.returncode == 0, changed.stderr
    assert "~ backup: update" in changed.stdout
    alerts_line = next(line for line in changed.stdout.splitlines() if "alerts:" in line)
    old, new = alerts_line.split("->")
    assert '"silence"' in old and '"silence"' not in new and '"checkin"' in new
    assert _rules(db) == [
        ("backup", "checkin", None, ["hc"]),
        ("backup", "failures", 3.0, ["ops"]),
        ("quiet", "late", 60.0, ["ops"]),
    ]
    # alerts = {} removes them all; --prune of a job takes its rules with it.
    path.write_text(FILE.split("[jobs.backup.alerts]")[0] + "alerts = {}\n")
    assert pgpulse("apply", "--prune", str(path), dsn=dsn).returncode == 0
    assert _rules(db) == []


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if needle in line)


#: Rules refused: the first three by the database's checks (a notifier's existence and kind, the
#: window against the schedule), the others as the file is read (the fourth through a real
#: ``pgpulse apply`` too, the rest in-process).
REFUSED = [
    ('failures = { notify = ["nobody"] }', "alerts.failures.notify", "no notifier named"),
    ('failures = { notify = ["hc"] }', "alerts.failures.notify", "takes no alerts"),
    ('silence = { notify = ["ops"], threshold = 600 }', "alerts.silence.threshold", "period"),
    ('failures = { notify = ["ops"], threshold = 1.5 }', "alerts.failures.threshold", "whole"),
    ('lag = { notify = ["ops"] }', "alerts.lag", "about the cluster"),
    ('flaky = { notify = ["ops"] }', "alerts.flaky", "rule must be one of"),
    ('failures = { notify = ["ops"], treshold = 3 }', "alerts.failures", "mapping of"),
    ("failures = { notify = [] }", "alerts.failures.notify", "non-empty list"),
]


def _with(entry: str) -> str:
    text = FILE.replace(
        'failures = { notify = ["ops"], threshold = 2 }\nsilence = { notify = "ops", '
        "threshold = 172800 }",
        entry,
    )
    assert entry in text
    return text


def _where(path: str, text: str, entry: str, field: str) -> str:
    line = _line(text, entry.split(" =")[0] + " =")
    return f"{path}:{line}: job 'backup': {field}: "


@pytest.mark.parametrize(("entry", "field", "message"), REFUSED[:4])
async def test_a_refused_rule_names_file_line_and_field_and_writes_nothing(
    store: Store, dsn: str, db: Any, tmp_path: Path, entry: str, field: str, message: str
) -> None:
    await _notifiers(store)
    text = _with(entry)
    path = tmp_path / "nightly.toml"
    path.write_text(text)
    result = pgpulse("apply", str(path), dsn=dsn)
    assert result.returncode == 2, result.stdout
    line = result.stderr.strip()
    assert line.startswith(f"error: {_where(str(path), text, entry, field)}"), line
    assert message in line and "\n" not in line
    assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
    assert _rules(db) == []


@pytest.mark.parametrize(("entry", "field", "message"), REFUSED[4:])
def test_a_malformed_rule_is_refused_as_the_file_is_read(
    entry: str, field: str, message: str
) -> None:
    text = _with(entry)
    with pytest.raises(InvalidInput) as refused:
        parse_apply_file(text, path="nightly.toml")
    assert str(refused.value).startswith(_where("nightly.toml", text, entry, field))
    assert message in str(refused.value) and refused.value.field == field


def test_rules_as_sub_tables_and_defaults_with_their_lines() -> None:
    text = """\
[defaults.alerts]
recovered = { notify = ["ops"] }

[jobs.a]
schedule = "@hourly"
handler = "shell"
payload = { command = "true" }

[jobs.a.alerts.failures]
notify = ["ops", "pager"]
threshold = 0

[jobs.b]
schedule = "@hourly"
handler = "shell"
payload = { command = "true" }
"""
    with pytest.raises(InvalidInput) as refused:
        parse_apply_file(text, path="f.toml")
    assert str(refused.value).startswith("f.toml:11: job 'a': alerts.failures.threshold: ")
    parsed = parse_apply_file(text.replace("threshold = 0", "threshold = 4"), path="f.toml")
    assert parsed.rules == {
        ("default", "a"): (RuleSpec("failures", 4.0, ("ops", "pager")),),
        ("default", "b"): (RuleSpec("recovered", None, ("ops",)),),  # the defaults'
    }
