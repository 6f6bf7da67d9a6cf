"""What a child process of a node gets from the node's environment: a shell
job's command gets an explicit environment, never the node's settings. A real node process runs
a real shell job ``env`` and the recorded output is read back from the database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from psycopg.conninfo import make_conninfo

from helpers import add, spec
from pgpulse.db.store import Store
from test_engine import wait_until

NODE_PASSWORD = "Hunter2-libpq-secret"


def _node(dsn: str, *options: str, extra_env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``pgpulse node run --allow-shell-jobs`` as its own OS process; Popen returns at once."""
    env = {**os.environ, "PGPULSE_DATABASE_URL": dsn, **extra_env}
    return subprocess.Popen(
        [sys.executable, "-m", "pgpulse", "--log-level", "WARNING", "node", "run",
         "--allow-shell-jobs", "--heartbeat", "0.3", "--poll", "0.3", "--lease", "3",
         "--drain-timeout", "1", *options],
        env=env,
        stderr=subprocess.PIPE,
    )  # fmt: skip


def _output(db: Any) -> str | None:
    """The output of the shell job's run, once it ended (a failed run's output too)."""
    row = db.execute(
        "SELECT outcome, error, output FROM pgpulse_runs WHERE outcome <> 'running'"
    ).fetchone()
    if row is None:
        return None
    assert row["outcome"] == "succeeded", row
    return str(row["output"])


async def test_a_shell_command_never_sees_the_database_url_or_libpq_variables(
    store: Store, dsn: str, db: Any
) -> None:
    """The node holds PGPULSE_DATABASE_URL (with a password), PGPASSWORD and PGSERVICEFILE; the
    command's `env` shows none of them, nor a variable the node was not told to pass; the one
    named with --shell-env (from its environment variable too) is passed, as are the base's."""
    dsn_with_password = make_conninfo(dsn, password=f"{NODE_PASSWORD}-in-url")
    payload = {"command": "env", "env": {"FROM_JOB": "job-value"}}
    await add(store, spec("printenv", schedule="0 0 1 1 *", handler="shell", payload=payload))
    await store.trigger_job("default", "printenv")
    node = _node(
        dsn_with_password,
        "--shell-env",
        "PULSE_TEST_PASSED",
        extra_env={
            "PGPASSWORD": NODE_PASSWORD,
            "PGSERVICEFILE": "/etc/pulse-service-file",
            "PULSE_TEST_PASSED": "passed-value",
            "PULSE_TEST_ALSO_PASSED": "also-passed",
            "PULSE_TEST_NOT_PASSED": "not-passed-value",
            "PGPULSE_NODE_RUN_SHELL_ENV": "PULSE_TEST_ALSO_PASSED",
            "LANG": "C.UTF-8",
        },
    )
    try:
        await wait_until(lambda: _output(db) is not None)
    finally:
        node.send_signal(signal.SIGTERM)
        _, stderr = node.communicate(timeout=20)
    output = _output(db)
    assert output is not None
    env = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    assert NODE_PASSWORD not in output, stderr
    assert "PGPULSE_DATABASE_URL" not in env
    assert "PGPASSWORD" not in env
    assert "PGSERVICEFILE" not in env
    assert "PULSE_TEST_NOT_PASSED" not in env
    # The command line wins over the variable, as for every option (click's rule).
    assert "PULSE_TEST_ALSO_PASSED" not in env
    assert env["PULSE_TEST_PASSED"] == "passed-value"
    assert env["FROM_JOB"] == "job-value"
    assert env["PGPULSE_JOB"] == "printenv"
    assert env["LANG"] == "C.UTF-8"
    assert env["PATH"] == os.environ["PATH"]
    assert not {n for n in env if n.startswith("PG") and not n.startswith("PGPULSE_")}
    assert {n for n in env if n.startswith("PGPULSE_")} == {
        "PGPULSE_JOB", "PGPULSE_TENANT", "PGPULSE_SCHEDULED_FOR", "PGPULSE_ATTEMPT",
        "PGPULSE_RUN_ID", "PGPULSE_FENCING_TOKEN", "PGPULSE_DATA_INTERVAL_START",
        "PGPULSE_DATA_INTERVAL_END", "PGPULSE_LAST_SUCCESS_AT",
        "PGPULSE_LAST_SUCCESS_SCHEDULED_FOR",
    }  # fmt: skip


async def test_the_node_variable_names_shell_env_too(store: Store, dsn: str, db: Any) -> None:
    """PGPULSE_NODE_RUN_SHELL_ENV (names separated by spaces) is --shell-env's fallback."""
    await add(store, spec("printenv", schedule="0 0 1 1 *", handler="shell",
                          payload={"command": "env"}))  # fmt: skip
    await store.trigger_job("default", "printenv")
    node = _node(
        dsn,
        extra_env={
            "PULSE_TEST_ONE": "one",
            "PULSE_TEST_TWO": "two",
            "PGPULSE_NODE_RUN_SHELL_ENV": "PULSE_TEST_ONE PULSE_TEST_TWO",
        },
    )
    try:
        await wait_until(lambda: _output(db) is not None)
    finally:
        node.send_signal(signal.SIGTERM)
        node.communicate(timeout=20)
    output = _output(db)
    assert output is not None
    assert "PULSE_TEST_ONE=one\n" in output
    assert "PULSE_TEST_TWO=two\n" in output


def test_shell_env_refuses_a_pulse_setting_or_a_libpq_variable(dsn: str) -> None:
    """Named on the command line or in the variable, PGPULSE_* and PG* names are refused in one
    line, exit 2, before the node starts (no node row written)."""
    from helpers import pgpulse

    refused = pgpulse("node", "run", "--shell-env", "HOME", "--shell-env", "PGPASSWORD", dsn=dsn)
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        2,
        "",
        "error: invalid value for --shell-env: 'PGPASSWORD' is a libpq variable (PG*: the "
        "database's credentials), never passed to commands\n",
    )
    refused = pgpulse(
        "node", "run", dsn=dsn, env={"PGPULSE_NODE_RUN_SHELL_ENV": "LC_ALL PGPULSE_DATABASE_URL"}
    )
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: invalid value for --shell-env: 'PGPULSE_DATABASE_URL' is a Pulse setting "
        "(PGPULSE_*), never passed to commands (from the environment variable "
        "PGPULSE_NODE_RUN_SHELL_ENV)\n",
    )
