"""The web edge's commands: tokens are printed once and stored hashed; ``pgpulse serve`` serves
until SIGTERM and refuses bad options with one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner, Result

from helpers import pgpulse
from pgpulse.cli.main import main

PGPULSE = str(Path(sys.executable).with_name("pgpulse"))


def cli(dsn: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--database-url", dsn, "--log-level", "WARNING", *args])


def test_token_create_list_revoke(dsn: str, db: Any) -> None:
    created = cli(dsn, "token", "create", "--tenant", "acme", "--label", "ci")
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip().splitlines()[-1]
    assert secret.startswith("pgp_") and len(secret) == 47
    assert "shown only now" in created.stderr
    listed = json.loads(cli(dsn, "token", "list", "--json").stdout)
    assert [(t["id"], t["prefix"], t["tenant"], t["admin"], t["revoked_at"]) for t in listed] == [
        (1, secret[:12], "acme", False, None)
    ]
    assert secret not in json.dumps(listed)
    assert cli(dsn, "token", "revoke", "1").exit_code == 0
    assert db.execute("SELECT revoked_at IS NOT NULL AS gone FROM pgpulse_api_tokens").fetchone()[
        "gone"
    ]
    again = cli(dsn, "token", "revoke", "1")
    assert again.exit_code == 2 and "token 1 was revoked already (at 20" in again.stderr
    missing = cli(dsn, "token", "revoke", "99")
    assert missing.exit_code == 2 and "no live token with id 99" in missing.stderr
    tenantless = cli(dsn, "token", "create")
    assert tenantless.exit_code == 2 and "--tenant" in tenantless.stderr
    both = cli(dsn, "token", "create", "--tenant", "acme", "--admin")
    assert (both.exit_code, both.stderr) == (
        2,
        "error: an --admin token sees every tenant; drop --tenant 'acme' (or --admin)\n",
    )
    assert db.execute("SELECT count(*) AS n FROM pgpulse_api_tokens").fetchone()["n"] == 1


def test_serve_refuses_bad_options(dsn: str) -> None:
    bad_allow = cli(dsn, "serve", "--http-allow", "http://x/")
    assert bad_allow.exit_code == 2 and "--http-allow" in bad_allow.output
    bad_listen = cli(dsn, "serve", "--listen", "localhost:http")
    assert bad_listen.exit_code == 2
    assert bad_listen.stderr.strip() == (
        "error: invalid value for --listen: 'localhost:http' is not HOST:PORT, e.g. 127.0.0.1:9100"
    )


def test_node_run_refusals_name_the_option_the_variable_and_the_values(dsn: str) -> None:
    """A node's bad address names its option and the variable that gave it, as every other
    refusal does; a lease too short names both values. Nothing starts (exit 2)."""
    metrics = pgpulse("node", "run", dsn=dsn, env={"PGPULSE_NODE_RUN_METRICS": "nohost"})
    assert (metrics.returncode, metrics.stderr) == (
        2,
        "error: invalid value for --metrics: 'nohost' is not HOST:PORT, e.g. 127.0.0.1:9100 "
        "(from the environment variable PGPULSE_NODE_RUN_METRICS)\n",
    )
    # a port past TCP's 16 bits is an address whose port is out of range, not "not HOST:PORT"
    far = pgpulse("node", "run", "--http", "127.0.0.1:99999", dsn=dsn)
    assert (far.returncode, far.stdout, far.stderr) == (
        2,
        "",
        "error: invalid value for --http: '127.0.0.1:99999': port 99999 is out of range "
        "(1-65535)\n",
    )
    lease = pgpulse("node", "run", "--lease", "5", "--heartbeat", "10", dsn=dsn)
    assert (lease.returncode, lease.stderr) == (
        2,
        "error: invalid value for --lease: lease must be longer than two heartbeat intervals "
        "(2 x 10 s), got lease 5 s\n",
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_answers_until_sigterm(dsn: str) -> None:
    token = cli(dsn, "token", "create", "--admin").stdout.strip().splitlines()[-1]
    port = _free_port()
    env = {
        **os.environ,
        "PGPULSE_DATABASE_URL": dsn,
        "PGPULSE_SERVE_LISTEN": f"127.0.0.1:{port}",
        "PGPULSE_LOG_FORMAT": "json",
        "PGPULSE_LOG_LEVEL": "INFO",
    }
    proc = subprocess.Popen([PGPULSE, "serve"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:  # wait for the port to answer (bounded)
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert health.json()["ok"] is True
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/jobs").status_code == 401
        # A write logs at INFO with extras (a reserved LogRecord key in them would make every
        # create and PATCH answer 500 after committing).
        headers = {"Authorization": f"Bearer {token}"}
        job: dict[str, Any] = {"name": "hook", "schedule": "@hourly", "handler": "http"}
        job["payload"] = {"url": "https://93.184.215.14/"}
        api = f"http://127.0.0.1:{port}/api/v1/jobs"
        created = httpx.post(api, json=job, headers=headers, timeout=10)
        assert created.status_code == 201, created.text
        patched = httpx.patch(
            f"{api}/{created.json()['id']}", json={"schedule": "@daily"}, headers=headers
        )
        assert patched.status_code == 200, patched.text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 0
    actions = [
        json.loads(line).get("action") for line in stderr.splitlines() if line.startswith("{")
    ]
    assert "web_serving" in actions and "web_stopped" in actions
    assert actions.count("api_job_saved") == 2
    assert f"on http://127.0.0.1:{port}" in stderr


def test_a_token_label_that_cannot_be_shown_is_refused(dsn: str, db: Any) -> None:
    """DEL and a bidi override would be shown as they are by token list and the audit trail."""
    for label, why in (("a\x7fb", "U+007F"), ("\u202eic", "U+202E")):
        refused = pgpulse("token", "create", "--admin", "--label", label, dsn=dsn)
        assert (refused.returncode, refused.stdout) == (2, ""), refused
        assert refused.stderr.startswith(f"error: label {label!r} is shown by token list")
        assert why in refused.stderr
    assert db.execute("SELECT count(*) AS n FROM pgpulse_api_tokens").fetchone()["n"] == 0


def test_a_number_option_refuses_nan_and_infinity() -> None:
    for value in ("nan", "inf", "1e400"):
        refused = pgpulse("status", "--max-lag", value)
        assert (refused.returncode, refused.stdout) == (2, ""), refused
        assert refused.stderr == (
            f"error: invalid value for --max-lag: {value!r} is not a finite number.\n"
        )
