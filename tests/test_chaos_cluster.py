"""A short ``pgpulse chaos --cluster`` run as part of the suite: three real node processes on a
primary and a synchronous standby of the harness's own, through two failovers (replication cut,
SIGKILL of the primary's process tree, promotion, pg_rewind of the old primary) and a switchover.

Seed 1 plans, with a 3 s lease over 20 s: a switchover, then two failovers, one at a time (each
waits for the previous rebuild). About 50 s. With synchronous replication nothing a node was
told is lost, so every must-be-zero figure is zero — repeated occurrences and tokens handed out
twice included — and every failover is followed by claims on the new primary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import cluster_pg_bin
from pgpulse_tools.chaos.checker import Verdict

SEED = 1
COMMAND = [
    *("chaos", "--cluster", "--replication", "sync", "--faults", "failover,switchover"),
    *("--duration", "20", "--nodes", "3", "--seed", str(SEED), "--jobs", "60"),
    *("--lease", "3", "--heartbeat", "0.5", "--slots", "24", "--drain-timeout", "2"),
]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.server_programs]


def _pg_bin() -> list[str]:
    folder = cluster_pg_bin()
    return [] if folder is None else ["--pg-bin", str(folder)]


@pytest.fixture(scope="module")
def cluster_run() -> Iterator[tuple[Verdict, str]]:
    """Run the command once, as a subprocess on the CLI's loop; yield its verdict and output."""
    with tempfile.TemporaryDirectory(prefix="pgpulse-chaos-cluster-test-") as folder:
        report = Path(folder) / "verdict.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGPULSE_")}
        done = subprocess.run(
            [sys.executable, "-m", "pgpulse", *COMMAND, *_pg_bin(), "--report", str(report)],
            capture_output=True,
            text=True,
            timeout=170,
            env=env,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode in (0, 1), output
        assert report.exists(), output
        verdict = Verdict.from_dict(json.loads(report.read_text()))
        assert (done.returncode == 0) == verdict.ok, output
        yield verdict, output


def test_the_run_fails_over_twice_and_switches_over_once(cluster_run: tuple[Verdict, str]) -> None:
    verdict, output = cluster_run
    assert verdict.figure("faults").value == "3 (failover 2, switchover 1)", output
    assert "on a sync-replicated cluster" in output and f"--seed {SEED}" in output
    assert "rebuilt by pg_rewind" in output or "rebuilt by pg_basebackup" in output
    assert int(verdict.figure("executions").value.split()[0]) > 500


def test_every_failover_is_survived_and_the_first_claim_follows_within_seconds(
    cluster_run: tuple[Verdict, str],
) -> None:
    verdict, _ = cluster_run
    assert verdict.figure("failovers survived").value == "3/3", verdict.table()
    first = verdict.figure("failover to first claim").value  # "p50 0.462s / max 0.680s / n=3"
    worst = float(first.split("max ")[1].split("s")[0])
    assert worst < 5.0, verdict.table()


def test_with_sync_replication_nothing_repeats_and_no_token_is_held_twice(
    cluster_run: tuple[Verdict, str],
) -> None:
    verdict, _ = cluster_run
    for name in (
        "occurrences repeated",
        "double token holders",
        "tokens reissued",
        "run ids reissued",
        "lost",
    ):
        figure = verdict.figure(name)
        assert figure.ok and figure.value == "0", f"{name}: {figure.value}\n" + "\n".join(
            figure.examples
        )


def test_the_verdict_is_ok(cluster_run: tuple[Verdict, str]) -> None:
    verdict, _ = cluster_run
    assert verdict.ok, verdict.table()


@pytest.mark.timeout(60)
def test_a_cluster_that_cannot_start_exits_2_in_one_line_and_leaves_no_folder(
    tmp_path: Path,
) -> None:
    """``--pg-bin`` names a folder without PostgreSQL's programs: one line naming the field and
    the folder, exit 2, and none of the temporary folders the run made is left (TMPDIR points
    into this test's folder)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGPULSE_")}
    done = subprocess.run(
        [sys.executable, "-m", "pgpulse", *COMMAND, "--pg-bin", str(empty)],
        capture_output=True,
        text=True,
        timeout=50,
        env={**env, "TMPDIR": str(scratch)},
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: pg_bin"), done.stderr
    assert str(empty) in errors[0] and "Traceback" not in done.stdout + done.stderr
    assert list(scratch.iterdir()) == []
