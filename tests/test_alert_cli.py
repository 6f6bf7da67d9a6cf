"""``pgpulse notifier`` and ``pgpulse alert`` as a user types them (real subprocesses)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import add, pgpulse, spec
from pgpulse.core.errors import InvalidInput
from pgpulse.db.store import Store
from test_engine import wait_until

SECRET = "whsec_0123456789abcdef"
SLACK = "https://93.184.215.14/services/T0123ABCD/B0456EFGH/xZ7kQ9Lm2Pq"


async def test_notifiers_rules_silences_and_acknowledgements(
    store: Store, dsn: str, db: Any
) -> None:
    await add(store, spec("nightly", schedule="0 3 * * *"))
    config = json.dumps({"url": SLACK, "secret": SECRET})
    added = pgpulse("notifier", "add", "slack", "--kind", "webhook", "--config", config, dsn=dsn)
    assert (added.returncode, added.stdout) == (0, "created webhook notifier slack (id 1)\n")
    listed = pgpulse("notifier", "list", "--json", dsn=dsn)
    [shown] = json.loads(listed.stdout)
    assert shown["config"]["url"] == "https://93.184.215.14/services/***/***/***"
    assert shown["config"]["secret"] == "***"
    assert SECRET not in listed.stdout + pgpulse("notifier", "list", dsn=dsn).stdout
    assert "T0123ABCD" not in listed.stdout

    said = []
    for args in (
        ("failures", "--threshold", "3", "--job", "nightly"),
        ("silence", "--threshold", "1d", "--job", "nightly"),
        ("late", "--threshold", "5m"),
        ("lag", "--threshold", "2m"),
        ("lag", "--threshold", "3m"),
    ):
        done = pgpulse("alert", "rule", "set", *args, "--notify", "slack", dsn=dsn)
        assert done.returncode == 0, done.stderr
        said.append(done.stdout)
    # The id is the rule's, said so: a bare "(id 1)" after the job's name read as the job's.
    assert said == [
        "set rule failures of job nightly (rule id 1)\n",
        "set rule silence of job nightly (rule id 2)\n",
        "set rule late of the cluster (rule id 3)\n",
        "set rule lag of the cluster (rule id 4)\n",
        "replaced rule lag of the cluster (rule id 4)\n",
    ]
    rules = json.loads(pgpulse("alert", "rule", "list", "--json", dsn=dsn).stdout)
    assert [(r["job"], r["rule"], r["threshold"], r["notifiers"]) for r in rules] == [
        (None, "lag", 180.0, ["slack"]),
        (None, "late", 300.0, ["slack"]),
        ("nightly", "failures", 3.0, ["slack"]),
        ("nightly", "silence", 86400.0, ["slack"]),
    ]
    # --job: the rules that apply to the job, the default `late` among them, no cluster rule
    # (the fifth trial saw `lag` listed for a job).
    for_job = json.loads(
        pgpulse("alert", "rule", "list", "--job", "nightly", "--json", dsn=dsn).stdout
    )
    assert [(r["job"], r["rule"]) for r in for_job] == [
        (None, "late"),
        ("nightly", "failures"),
        ("nightly", "silence"),
    ]
    in_use = pgpulse("notifier", "remove", "slack", dsn=dsn)
    assert in_use.returncode == 2 and "used by rules" in in_use.stderr

    silenced = pgpulse("alert", "silence", "nightly", "--for", "2h", "--reason", "deploy", dsn=dsn)
    assert silenced.returncode == 0 and silenced.stdout.startswith("silenced job nightly until")
    everything = pgpulse("alert", "silence", "--all", "--for", "30m", dsn=dsn)
    assert everything.returncode == 0, everything.stderr
    silences = json.loads(pgpulse("alert", "silences", "--json", dsn=dsn).stdout)
    assert [(s["job"], s["reason"]) for s in silences] == [(None, ""), ("nightly", "deploy")]
    table = pgpulse("alert", "silences", dsn=dsn).stdout.splitlines()
    assert [line.split()[1:3] for line in table[2:]] == [["(all)", "(all)"], ["default", "nightly"]]

    db.execute(
        "INSERT INTO pgpulse_alert_events (dedupe_key, rule) VALUES ('test/1', 'lag') RETURNING id"
    )
    assert pgpulse("alert", "ack", "1", "--by", "ana", dsn=dsn).returncode == 0
    [event] = json.loads(pgpulse("alert", "list", "--json", dsn=dsn).stdout)
    assert (event["state"], event["acknowledged_by"]) == ("acknowledged", "ana")
    assert event["job"] is None  # the table says what it is about: the cluster
    assert pgpulse("alert", "list", dsn=dsn).stdout.splitlines()[2].split()[:3] == [
        "1",
        "lag",
        "cluster",
    ]

    for rule, job in (("failures", "nightly"), ("silence", "nightly")):
        assert pgpulse("alert", "rule", "remove", rule, "--job", job, dsn=dsn).returncode == 0
    for rule in ("late", "lag"):
        assert pgpulse("alert", "rule", "remove", rule, dsn=dsn).returncode == 0
    assert pgpulse("notifier", "remove", "slack", dsn=dsn).returncode == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ("notifier", "add", "x", "--kind", "webhook", "--config", '{"url": "http://127.0.0.1/h"}'),
            "config.url",
        ),
        (
            ("notifier", "add", "x", "--kind", "email", "--config",
             '{"host": "localhost", "from": "pulse@", "to": "ops@example.com"}'),
            "config.from",
        ),
        (("alert", "rule", "set", "flaky", "--notify", "x"), "rule must be one of"),
        (("alert", "rule", "set", "failures", "--notify", "nobody"), "no notifier named 'nobody'"),
        (
            ("alert", "rule", "set", "silence", "--threshold", "10m", "--job", "nightly",
             "--notify", "ops"),
            "shorter than the period",
        ),
        (("alert", "silence", "nightly", "--for", "soon"), "for: 'soon' is not a duration"),
        (
            ("alert", "silence", "nightly", "--for", "0s"),
            "at most 31,622,400 s (366 d), got 0 s",  # not 3.16224e+07 s
        ),
        (("alert", "ack", "99"), "no alert with id 99"),
        (
            ("alert", "rule", "set", "failures", "--threshold", "0", "--notify", "ops"),
            "at most 316,224,000, got 0",  # not 3.16224e+08 (sixth trial)
        ),
        (
            ("notifier", "add", "x", "--kind", "webhook", "--config", '{"url": 5}'),
            "config.url must be a string, got 5",  # the value, not 'int'
        ),
        (
            ("notifier", "add", "x", "--kind", "webhook", "--config", '{"url": ["s3cret"]}'),
            "config.url must be a string, got an array",  # what it is, not what it holds
        ),
        (
            ("notifier", "add", "x", "--kind", "webhook", "--config",
             '{"url": "https://93.184.215.14/h", "timeout": true}'),
            "config.timeout must be a number, got true",  # JSON's spelling, not True
        ),
    ],
)  # fmt: skip
async def test_refused_input_is_one_line_exit_2_and_writes_nothing(
    store: Store, dsn: str, db: Any, args: tuple[str, ...], says: str
) -> None:
    await add(store, spec("nightly", schedule="0 3 * * *"))
    ops = json.dumps({"url": "https://93.184.215.14/hook"})
    assert (
        pgpulse("notifier", "add", "ops", "--kind", "webhook", "--config", ops, dsn=dsn).returncode
        == 0
    )
    refused = pgpulse(*args, dsn=dsn)
    assert refused.returncode == 2, refused
    assert says in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    counts = db.execute(
        "SELECT (SELECT count(*) FROM pgpulse_notifiers) AS n, "
        "(SELECT count(*) FROM pgpulse_alert_rules) AS r, "
        "(SELECT count(*) FROM pgpulse_alert_silences) AS s"
    ).fetchone()
    assert counts == {"n": 1, "r": 0, "s": 0}


async def test_rules_declared_in_code_are_set_when_a_node_starts(dsn: str, db: Any) -> None:
    """The app's tenant (acme) may name the cluster's notifier only once an admin shared it
    with acme (a tenant's alerts reach the organisation's channels only through a share)."""
    ops = json.dumps({"url": "https://93.184.215.14/hook"})
    assert (
        pgpulse("notifier", "add", "ops", "--kind", "webhook", "--config", ops, dsn=dsn).returncode
        == 0
    )
    app = {"PYTHONPATH": str(Path(__file__).parent)}
    refused = pgpulse("node", "run", "--app", "alerts_code_app:app", dsn=dsn, env=app)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "error: the code of node "
        + refused.stderr.split("the code of node ", 1)[1].split(" ", 1)[0]
        + " may not send alerts of tenant 'acme' to notifier 'ops': it is the cluster's and not "
        "shared with 'acme' (an admin shares it: pgpulse notifier share ops acme)\n"
    )
    assert db.execute("SELECT count(*) AS n FROM pgpulse_alert_rules").fetchone()["n"] == 0
    shared = pgpulse("notifier", "share", "ops", "acme", dsn=dsn)
    assert (shared.returncode, shared.stdout) == (0, "notifier ops is shared with acme\n")
    env = {**os.environ, "PGPULSE_DATABASE_URL": dsn, **app}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pgpulse", "node", "run", "--app", "alerts_code_app:app",
        "--heartbeat", "0.5", "--lease", "3", env=env,
    )  # fmt: skip
    try:
        await wait_until(
            lambda: (
                db.execute("SELECT count(*) AS n FROM pgpulse_alert_rules").fetchone()["n"] == 2
            ),
            within=30,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await proc.wait()
    rules = json.loads(
        pgpulse(
            "alert", "rule", "list", "--tenant", "acme", "--job", "nightly", "--json", dsn=dsn
        ).stdout
    )
    assert [(r["rule"], r["threshold"], r["notifiers"]) for r in rules] == [
        ("failures", 2.0, ["ops"]),
        ("silence", 172800.0, ["ops"]),
    ]


def test_a_rule_naming_a_missing_notifier_refuses_the_start_and_writes_nothing(
    dsn: str, db: Any
) -> None:
    """The declared jobs and their rules are one write: a rule the database refuses (no
    notifier 'ops' here) stops the start in one line naming the job and the app, and leaves
    no job (seventh trial: the job was written, then waited for good)."""
    env = {"PYTHONPATH": str(Path(__file__).parent)}
    refused = pgpulse("node", "run", "--app", "alerts_code_app:app", dsn=dsn, env=env)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith("error: job 'nightly' of app code:default: alerts: "), (
        refused.stderr
    )
    assert "no notifier named 'ops'" in refused.stderr and refused.stderr.count("\n") == 1
    counts = db.execute(
        "SELECT (SELECT count(*) FROM pgpulse_jobs) AS jobs, "
        "(SELECT count(*) FROM pgpulse_alert_rules) AS rules"
    ).fetchone()
    assert counts == {"jobs": 0, "rules": 0}


def test_a_malformed_rule_in_code_is_refused_at_declaration() -> None:
    from pgpulse import App

    with pytest.raises(InvalidInput) as refused:
        App().job("j", schedule="@hourly", alerts={"failures": {"notify": ["ops"], "every": 2}})
    assert refused.value.field == "alerts.failures"
    with pytest.raises(InvalidInput) as unknown:
        App().job("j", schedule="@hourly", alerts={"flaky": {"notify": ["ops"]}})
    assert unknown.value.field == "rule"
    with pytest.raises(InvalidInput) as named:  # an app declares many jobs: it says whose
        App(name="billing").job("nightly", schedule="@daily", alerts={"failures": {"threshold": 0}})
    assert str(named.value).startswith("job 'nightly' of app code:billing: alerts: threshold ")
    assert named.value.job == ("default", "nightly")


def test_a_refused_threshold_names_its_option(dsn: str) -> None:
    """`alert rule set --threshold 0` is worded as every option's refusal (the ninth trial read
    the field's name, 'threshold must be ...')."""
    refused = pgpulse("alert", "rule", "set", "failures", "--threshold", "0", "--notify", "ops",
                      dsn=dsn)  # fmt: skip
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: invalid value for --threshold: must be more than 0 and at most 316,224,000, "
        "got 0\n",
    )


def test_notifiers_of_a_tenant_and_shared_ones(dsn: str, db: Any) -> None:
    """`notifier add --tenant`, `notifier share` and `unshare`, as a user types them."""
    hook = json.dumps({"url": "https://93.184.215.14/hook"})
    added = pgpulse("notifier", "add", "hook", "--kind", "webhook", "--config", hook,
                    "--tenant", "acme", dsn=dsn)  # fmt: skip
    assert (added.returncode, added.stdout) == (
        0, "created webhook notifier hook of tenant acme (id 1)\n"
    )  # fmt: skip
    shared = pgpulse("notifier", "share", "hook", "zeta", "beta", dsn=dsn)
    assert (shared.returncode, shared.stdout) == (0, "notifier hook is shared with beta, zeta\n")
    [row] = json.loads(pgpulse("notifier", "list", "--json", dsn=dsn).stdout)
    assert (row["tenant"], row["shared_with"]) == ("acme", ["beta", "zeta"])
    table = pgpulse("notifier", "list", dsn=dsn).stdout.splitlines()
    assert table[0].split()[:5] == ["id", "name", "kind", "tenant", "shared_with"]
    assert table[2].split()[:5] == ["1", "hook", "webhook", "acme", "beta,zeta"]
    left = pgpulse("notifier", "unshare", "hook", "zeta", "beta", dsn=dsn)
    assert (left.returncode, left.stdout) == (0, "notifier hook is shared with no tenant\n")
    missing = pgpulse("notifier", "share", "nope", "acme", dsn=dsn)
    assert (missing.returncode, missing.stderr) == (2, "error: no notifier named 'nope'\n")
    bad = pgpulse("notifier", "share", "hook", " acme", dsn=dsn)
    assert bad.returncode == 2 and bad.stderr.startswith("error: tenant ' acme' is not a valid")
    assert db.execute("SELECT shared_with FROM pgpulse_notifiers").fetchone()["shared_with"] == []
