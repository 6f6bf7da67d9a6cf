"""``pgpulse status`` as a user runs it, after a real SIGKILL of a real node process: a killed
node is shown lost with no shards and nothing running, the live nodes' shards add up to the
shard count (64 here),
the headline says what matters and names the database, ``--check`` fails only when no node
is alive or a due job is too late, and a restarted node shows its new start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
import pytest

from helpers import PGPULSE, pgpulse

HEARTBEAT = 0.5  # node_ttl = max(3 * 0.5, 2 * 0.5 + 1) = 2 s


@contextmanager
def nodes(dsn: str) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Start node processes by id; every one still running is SIGKILLed at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(node_id: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [PGPULSE, "node", "run", "--node-id", node_id, "--heartbeat", str(HEARTBEAT)],
            env={**os.environ, "PGPULSE_DATABASE_URL": dsn},
        )
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def status(dsn: str) -> dict[str, Any]:
    shown = pgpulse("status", "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    document: dict[str, Any] = json.loads(shown.stdout)
    return document


def wait_for(dsn: str, condition: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        document = status(dsn)
        if condition(document):
            return document
        assert time.monotonic() < deadline, f"{what} never happened: {document}"
        time.sleep(0.3)


def by_id(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node_id"]: n for n in document["nodes"]}


def settled(*alive: str, lost: tuple[str, ...] = ()) -> Callable[[dict[str, Any]], bool]:
    """The given nodes alive and sharing all 64 shards, the ``lost`` ones lost, a leader."""

    def check(document: dict[str, Any]) -> bool:
        found = by_id(document)
        return (
            all(found.get(n, {}).get("alive") for n in alive)
            and all(found.get(n, {}).get("state") == "lost" for n in lost)
            and sum(len(found[n]["shards"]) for n in alive) == 64
            and document["leader"] in alive
        )

    return check


def database_of(db: Any) -> str:
    """How status names the test's database (a socket folder stands for host and port)."""
    info = db.info
    where = info.host if info.host.startswith("/") else f"{info.host}:{info.port}"
    return f"database {info.dbname!r} on {where}"


@pytest.mark.slow
def test_status_after_a_real_sigkill(dsn: str, db: Any) -> None:
    where = database_of(db)
    with nodes(dsn) as start:
        start("node-a")
        b = start("node-b")
        before = wait_for(dsn, settled("node-a", "node-b"), "two live nodes")
        first_start = by_id(before)["node-b"]["started_at"]
        leader = before["leader"]
        assert before["headline"] == f"2 nodes alive, leader {leader}, 0 jobs due — {where}"

        b.send_signal(signal.SIGKILL)
        b.wait(10)
        after = wait_for(dsn, settled("node-a", lost=("node-b",)), "node-b lost")
        killed = by_id(after)["node-b"]
        assert (killed["alive"], killed["state"], killed["shards"], killed["running"]) == (
            False,
            "lost",
            [],
            0,
        )
        shown = pgpulse("status", "--check", dsn=dsn)
        assert shown.returncode == 0, shown.stderr  # one node alive is a working cluster
        lines = shown.stdout.splitlines()
        assert lines[0] == (
            "1 node alive, leader node-a, 0 jobs due; 1 node lost (node-b) — " + where
        )
        rows = {line.split()[0]: line.split() for line in lines[4:6]}
        assert rows["node-a"][1:2] == ["alive"] and rows["node-a"][3] == "64"
        assert rows["node-b"][1:2] == ["lost"] and rows["node-b"][3:5] == ["0", "0/10"]

        start("node-b")  # a restart under the same id: a new start
        again = wait_for(dsn, settled("node-a", "node-b"), "node-b back")
        restarted = by_id(again)["node-b"]["started_at"]
        assert datetime.fromisoformat(restarted) > datetime.fromisoformat(first_start)
        assert datetime.fromisoformat(restarted) > datetime.fromisoformat(killed["last_heartbeat"])
    # every node killed (the context's end): no live node, and --check says so
    wait_for(dsn, lambda d: not any(n["alive"] for n in d["nodes"]), "every node lost")
    down = pgpulse("status", "--check", dsn=dsn)
    assert down.returncode == 1
    assert (
        down.stdout.splitlines()[0]
        == f"NO LIVE NODE: 0 jobs due; 2 nodes lost (node-a, node-b) — {where}"
    )
    assert down.stderr == "check failed: no live node\n"


def test_status_check_fails_on_a_late_job_and_names_the_database(dsn: str, db: Any) -> None:
    create = ("job", "create", "report", "--schedule", "@hourly", "--handler", "shell")
    assert pgpulse(*create, "--payload", '{"command": "true"}', dsn=dsn).returncode == 0
    db.execute("UPDATE pgpulse_jobs SET next_run_at = now() - interval '90 seconds'")
    late = pgpulse("status", "--max-lag", "30", dsn=dsn)  # --max-lag implies --check
    assert late.returncode == 1
    assert late.stdout.startswith("NO LIVE NODE: 1 job due, oldest 9")
    assert late.stderr.startswith(
        "check failed: no live node; the most overdue job (default/report) is 9"
    ), late.stderr
    assert " s late, over --max-lag 30 s; it waits: " in late.stderr  # no node runs shell
    db.execute("UPDATE pgpulse_jobs SET last_outcome = 'failed'")  # its last run failed
    failing = pgpulse("status", dsn=dsn).stdout
    assert "0 paused, 1 whose last run failed, 0 that cannot be scheduled, 0 completed;" in failing
    checked = json.loads(pgpulse("status", "--json", "--check", dsn=dsn).stdout)
    assert (checked["jobs"]["failing"], checked["jobs"]["failed"]) == (1, 0)
    assert checked["check"]["ok"] is False and len(checked["check"]["problems"]) == 2
    assert checked["database"] in checked["headline"]
    url = f"postgresql://postgres:s3cret-pw@127.0.0.1:1/{db.info.dbname}"
    refused = pgpulse("--database-url", url, "status")
    assert refused.returncode == 3 and "s3cret-pw" not in refused.stderr + refused.stdout


def test_a_job_running_on_a_lost_node_is_counted_as_such(dsn: str, db: Any) -> None:
    """A job whose node died mid-run stays 'running' until its lease ends: status says it is
    on a node no longer alive and when the sweeper returns it (the fifth trial read "1
    running" after a SIGKILL as a job still being run)."""
    create = ("job", "create", "report", "--schedule", "@hourly", "--handler", "shell")
    assert pgpulse(*create, "--payload", '{"command": "true"}', dsn=dsn).returncode == 0
    db.execute(
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, last_heartbeat, state) "
        "VALUES ('gone', 'h', 1, now() - interval '1 hour', 'alive')"
    )
    until = db.execute(
        "UPDATE pgpulse_jobs SET status = 'running', locked_by = 'gone', attempt = 1, "
        "lease_expires_at = date_trunc('second', now()) + interval '40 seconds' "
        "RETURNING lease_expires_at"
    ).fetchone()["lease_expires_at"]
    shown = pgpulse("status", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    assert (
        f"1 running (1 on nodes no longer alive, returned when their leases end by "
        f"{until.isoformat(timespec='seconds')})" in shown.stdout
    ), shown.stdout
    counted = json.loads(pgpulse("status", "--json", dsn=dsn).stdout)["jobs"]
    assert (counted["running"], counted["running_on_lost"]) == (1, 1)


def test_database_reaches_another_database_of_the_server(
    server_dsn: str, dsn: str, db: Any
) -> None:
    """--database NAME on the given server, and on the embedded one (by --data-dir) when the
    suite runs on it: status names the database it reached, never a password."""
    assert (
        pgpulse(
            "job",
            "create",
            "x",
            "--schedule",
            "@daily",
            "--handler",
            "shell",
            "--payload",
            '{"command": "true"}',
            dsn=dsn,
        ).returncode
        == 0
    )
    env = {"PGPULSE_DATABASE": db.info.dbname}
    given = pgpulse("--database-url", server_dsn, "status", env=env)
    assert given.returncode == 0, given.stderr
    assert given.stdout.splitlines()[0].endswith(f"— {database_of(db)}")
    assert "jobs: 1 total" in given.stdout
    socket = db.info.host
    if socket.startswith("/") and socket.endswith("/pgdata"):  # the suite's embedded server
        embedded = pgpulse(
            "--data-dir",
            socket.removesuffix("/pgdata"),
            "--database",
            db.info.dbname,
            "status",
            env={"PGPULSE_DATABASE_URL": ""},
        )
        assert embedded.returncode == 0, embedded.stderr
        assert embedded.stdout.splitlines()[0].endswith(f"— {database_of(db)} (embedded)")
        url = pgpulse(
            *("--data-dir", socket.removesuffix("/pgdata"), "--database", db.info.dbname),
            *("db", "url"),
            env={"PGPULSE_DATABASE_URL": ""},
        )
        assert url.returncode == 0, url.stderr
        with psycopg.connect(url.stdout.strip()) as conn:
            assert conn.info.dbname == db.info.dbname
    missing = pgpulse("--database-url", server_dsn, "--database", "no_such_db", "status")
    assert missing.returncode == 3 and "no_such_db" in missing.stderr


APP = """
from pgpulse import App, RunContext

app = App()


@app.handler("trial.hello")
async def hello(ctx: RunContext) -> str:
    return "hello"
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["cwd", "app_dir", "module_alone"])
def test_node_run_imports_the_app_from_the_current_folder(
    dsn: str, db: Any, tmp_path: Any, where: str
) -> None:
    (tmp_path / "trialapp.py").write_text(APP)
    args = ["node", "run", "--app", "trialapp:app", "--node-id", "trial", "--heartbeat", "0.5"]
    if where == "app_dir":
        args[4:4] = ["--app-dir", str(tmp_path)]
    if where == "module_alone":  # --app trialapp means trialapp:app
        args[3] = "trialapp"
    proc = subprocess.Popen(
        [PGPULSE, *args],
        env={**os.environ, "PGPULSE_DATABASE_URL": dsn},
        cwd="/" if where == "app_dir" else tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not db.execute(
            "SELECT 1 FROM pgpulse_nodes WHERE node_id = 'trial' AND 'trial.hello' = ANY(handlers)"
        ).fetchone():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr


@pytest.mark.parametrize("level", ["warning", "info", "json"])
def test_node_run_says_once_that_it_started_at_every_log_level(dsn: str, level: str) -> None:
    """The sixth trial's node sat silent at the default level: one line says it started, on
    the database as status names it (stderr stays JSON alone in --log-format json)."""
    options = ["--log-level", "info" if level == "json" else level]
    options += ["--log-format", "json"] if level == "json" else []
    proc = subprocess.Popen(
        [PGPULSE, *options, "node", "run", "--node-id", "hello", "--slots", "3"],
        env={**os.environ, "PGPULSE_DATABASE_URL": dsn},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the node's first line (pytest-timeout bounds it)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 0, rest
    lines = (first + rest).splitlines()
    if level == "json":
        assert all(line.startswith("{") for line in lines), lines
        return
    headline = pgpulse("status", dsn=dsn).stdout.splitlines()[0]
    database = headline.split(" — ", 1)[1]
    said = f"node hello started with 3 slots on {database}"
    started = [line for line in lines if line.startswith("node hello started")]
    if level == "warning":
        assert started == [f"{said}; --log-level info shows more"], lines
    else:
        assert started == [said], lines


def test_node_run_with_an_app_it_cannot_import_is_one_line(dsn: str, tmp_path: Any) -> None:
    refused = pgpulse("node", "run", "--app", "nosuchmodule:app", dsn=dsn)
    assert refused.returncode == 2
    assert refused.stderr == (
        "error: invalid value for --app: cannot load 'nosuchmodule:app': "
        "No module named 'nosuchmodule'\n"
    )
    (tmp_path / "noapp.py").write_text("application = None\n")
    alone = pgpulse("node", "run", "--app", "noapp", "--app-dir", str(tmp_path), dsn=dsn)
    assert (alone.returncode, alone.stderr) == (
        2,
        "error: invalid value for --app: cannot load 'noapp': module 'noapp' has no attribute "
        "'app' (--app noapp means noapp:app)\n",
    )
    # A job the module declares is refused at import (fifth trial: a traceback, exit 1).
    for name, line, reason in (
        ("badcron", 'schedule="61 * * * *"', "minute field: 61 is out of range 0-59"),
        ("badzone", 'schedule="@every 60s", timezone="Mars/X"', "Mars/X"),
    ):
        (tmp_path / f"{name}.py").write_text(
            "from pgpulse import App\napp = App()\n"
            f"@app.job('j', {line})\nasync def j(ctx):\n    return None\n"
        )
        bad = pgpulse("node", "run", "--app", name, "--app-dir", str(tmp_path), dsn=dsn)
        assert bad.returncode == 2, bad.stderr
        assert bad.stderr.startswith(
            f"error: invalid value for --app: cannot load '{name}': a job it declares is refused: "
        ), bad.stderr
        assert reason in bad.stderr and bad.stderr.count("\n") == 1
    # The module's own code raises, or does not compile (seventh trial: a traceback, exit 1).
    for name, source, said in (
        ("badargs", "from pgpulse import App\napp = App(bogus=True)\n",
         "TypeError: App.__init__() got an unexpected keyword argument 'bogus'"),
        ("badboom", "x = 1\nraise RuntimeError('boom at import')\n",
         "RuntimeError: boom at import"),
        ("badsyntax", "def f(:\n", "SyntaxError: invalid syntax"),
        ("badexit", "import sys\nsys.exit(5)\n", "it called sys.exit(5) while imported"),
    ):  # fmt: skip
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        bad = pgpulse("node", "run", "--app", name, "--app-dir", str(tmp_path), dsn=dsn)
        at = source.count("\n") if name != "badsyntax" else 1
        assert (bad.returncode, bad.stderr) == (
            2,
            f"error: invalid value for --app: cannot load '{name}': {said} ({path}:{at}) "
            "(--log-level debug shows the traceback)\n",
        )


def test_nodes_long_lost_or_stopped_are_one_line_and_all_lists_them(dsn: str, db: Any) -> None:
    db.execute(
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, last_heartbeat, state, ttl) VALUES "
        "('just-stopped', 'h', 1, now() - interval '10 minutes', 'stopped', 2),"
        "('old-a', 'h', 2, now() - interval '2 hours', 'stopped', 2),"
        "('old-b', 'h', 3, now() - interval '3 hours', 'stopped', 2),"
        "('old-lost', 'h', 4, now() - interval '2 hours', 'alive', 2)"
    )
    shown = pgpulse("status", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    rows = [
        line.split()[0] for line in shown.stdout.splitlines() if line.startswith(("just", "old"))
    ]
    assert rows == ["just-stopped"]
    assert (
        "2 stopped nodes and 1 lost node not shown: silent for over 3,600 s (1 h) "
        "(status --all lists them)"
    ) in shown.stdout.splitlines()
    assert "lost (" not in shown.stdout.splitlines()[0]  # the headline names no old lost node
    every = pgpulse("status", "--all", dsn=dsn)
    listed = [
        line.split()[:2] for line in every.stdout.splitlines() if line.startswith(("just", "old"))
    ]
    assert listed == [
        ["just-stopped", "stopped"],
        ["old-a", "stopped"],
        ["old-b", "stopped"],
        ["old-lost", "lost"],
    ]
    assert "not shown" not in every.stdout
    document = json.loads(pgpulse("status", "--json", dsn=dsn).stdout)
    assert [n["node_id"] for n in document["nodes"]] == ["just-stopped"]
    assert document["not_shown"].startswith("2 stopped nodes and 1 lost node not shown")


def test_a_dashboard_url_that_is_not_a_web_address_is_refused(dsn: str) -> None:
    """Alerts link to --dashboard-url: an ftp:// or host-less value is refused at the start
    (the eighth trial's ftp://x was taken)."""
    refused = pgpulse("node", "run", "--dashboard-url", "ftp://x", dsn=dsn)
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: invalid value for --dashboard-url: 'ftp://x' is not an http or https address "
        "such as https://pulse.example.com\n",
    )


@pytest.mark.parametrize(("given", "why"), [(" ", "it starts or ends with a space"),
                                            ("", "it has 0 characters")])  # fmt: skip
def test_a_blank_node_id_is_refused(dsn: str, db: Any, given: str, why: str) -> None:
    """A node id is shown by status, logs and alerts: a blank one is refused as a job's name is
    (the eighth trial's `--node-id ' '` ran, its name column empty); nothing is written."""
    refused = pgpulse("node", "run", "--node-id", given, dsn=dsn)
    assert (refused.returncode, refused.stderr) == (
        2,
        f"error: invalid value for --node-id: {given!r} is not a valid name (1-200 printable "
        f"characters, no leading or trailing space): {why}\n",
    )
    assert db.execute("SELECT count(*) AS n FROM pgpulse_nodes").fetchone()["n"] == 0
