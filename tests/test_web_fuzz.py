"""Fuzz the API from its own OpenAPI document with Schemathesis (its command line, against a
live server on a real PostgreSQL): no 5xx for any input, responses match the document, and no
request refused with a 4xx writes anything (the ``no_write_on_4xx`` check of fuzz_hooks.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from pgpulse.core.policy import WebSettings
from web_helpers import LiveServer, sync_token

HOOKS = Path(__file__).with_name("fuzz_hooks.py")
#: Cases per operation and phase (the examples and coverage phases add their own boundary cases
#: whatever this is); the suite's run takes about half a minute on two cores. A longer fuzz:
#: ``PGPULSE_FUZZ_EXAMPLES=100 ./scripts/test tests/test_web_fuzz.py``.
MAX_EXAMPLES = os.environ.get("PGPULSE_FUZZ_EXAMPLES", "6")
SEED = os.environ.get("PGPULSE_FUZZ_SEED", "20261129")


def _seed(base_url: str, token: str, db: Any) -> None:
    """Jobs with ids 1 to 4 and a run with id 1, so generated requests reach real rows."""
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as client:
        for name in ("nightly-report", "hourly-sync", "weekly-digest", "monthly-close"):
            response = client.post(
                "/api/v1/jobs",
                json={
                    "name": name,
                    "schedule": "0 3 * * *",
                    "handler": "http",
                    "payload": {"url": "https://93.184.215.14/hook"},
                },
            )
            assert response.status_code == 201, response.text
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
        "finished_at, output) VALUES (1, now(), 1, 'succeeded', now(), now(), 'ok')"
    )


@pytest.mark.timeout(240)
def test_schemathesis_finds_no_server_error_and_no_write_on_refusal(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    token = sync_token(dsn, admin=True)
    with LiveServer(dsn, WebSettings()) as server:
        _seed(server.base_url, token, db)
        env = {
            **os.environ,
            "PGPULSE_FUZZ_DSN": dsn,
            "SCHEMATHESIS_HOOKS": str(HOOKS),
            "NO_COLOR": "1",
        }
        result = subprocess.run(
            [
                str(Path(sys.executable).with_name("schemathesis")),
                "run",
                f"{server.base_url}/api/v1/openapi.json",
                "-H",
                f"Authorization: Bearer {token}",
                "--checks",
                "all",
                # Schema-valid but semantically wrong input (a cron expression that never fires, an
                # http job without a url, a made-up cursor) is rightly refused with 422.
                "--exclude-checks",
                "positive_data_acceptance",
                "--workers",
                "1",
                "--max-examples",
                MAX_EXAMPLES,
                "--seed",
                SEED,
                "--phases",
                "examples,coverage,fuzzing",
                "--suppress-health-check",
                "all",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=220,
            check=False,
        )
    summary = result.stdout[result.stdout.find("SUMMARY") :]
    print(summary)  # shown with -rP; the README quotes it
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    generated = re.search(r"(\d+) generated", summary)
    assert generated is not None and int(generated.group(1)) > 20 * int(MAX_EXAMPLES)
