"""A short chaos run as part of the suite: real node processes, every fault kind, the checker.

One run (about 50 s: 30 s of faults, then settling) serves every test of this module. Seed 14
plans, with 3 nodes and a 3 s lease: SIGKILLs, two pauses past the lease, a stalled and a
dropping partition, delays, a fast and an immediate PostgreSQL restart, and two extra nodes
that join and leave; and, with the opt-in ``reshard`` fault, the shard count changed online.

The workload's effects use the ``lease`` guard (README's token rule, plus "the token's lease is
current", which a resource in Pulse's own database can check). With the token rule alone, a
sync handler's thread that outlives its paused node's lease can still land its effect before the
next owner has shown its token — a limit of token-only fencing, not of the engine — so the
verdict would depend on timing; ``pgpulse chaos --guard token`` measures that case.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgpulse_tools.chaos.checker import Verdict
from pgpulse_tools.chaos.faults import FAULT_KINDS, OPT_IN_KINDS

SEED = 14
#: The command a user types (run as ``python -m pgpulse``, the CLI's own loop: uvloop).
COMMAND = [
    *("chaos", "--duration", "30", "--nodes", "3", "--seed", str(SEED), "--jobs", "80"),
    *("--lease", "3", "--heartbeat", "0.5", "--slots", "24", "--drain-timeout", "2"),
    *("--guard", "lease"),
    # Every fault kind, and the opt-in one: the shard count changes online mid-run.
    *("--faults", ",".join((*FAULT_KINDS, *OPT_IN_KINDS))),
]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def chaos_run() -> Iterator[tuple[Verdict, str]]:
    """Run ``pgpulse chaos`` once, as a subprocess on the loop the CLI uses; yield its verdict
    (from ``--report``) and everything it printed. It starts its own PostgreSQL (in a temporary
    folder of its own), so it does not use the suite's server."""
    with tempfile.TemporaryDirectory(prefix="pgpulse-chaos-test-") as folder:
        report = Path(folder) / "verdict.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGPULSE_")}
        done = subprocess.run(
            [sys.executable, "-m", "pgpulse", *COMMAND, "--report", str(report)],
            capture_output=True,
            text=True,
            timeout=220,
            env=env,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode in (0, 1), output  # 1: a verdict that failed; anything else broke
        assert report.exists(), output
        verdict = Verdict.from_dict(json.loads(report.read_text()))
        assert (done.returncode == 0) == verdict.ok, output
        yield verdict, output


def test_the_run_injects_every_fault_kind_and_prints_its_seed(
    chaos_run: tuple[Verdict, str],
) -> None:
    verdict, output = chaos_run
    faults = verdict.figure("faults").value
    for kind in (*FAULT_KINDS, *OPT_IN_KINDS):
        assert f"{kind} " in faults, f"{kind} missing from {faults}"
    assert f"chaos seed {SEED}" in output and f"--seed {SEED}" in output
    assert "SIGSTOP node-" in output and "restart PostgreSQL (immediate)" in output
    executions = verdict.figure("executions").value
    assert int(executions.split()[0]) > 500 and "applied" in executions


def test_no_double_claim_nothing_unrecorded_nothing_stuck(chaos_run: tuple[Verdict, str]) -> None:
    """What the database itself guarantees held under every fault: one open claim per job with
    growing tokens (invariant 2), a record for every occurrence (4), no job left running on an
    expired lease (5). Checked apart from the verdict so a failure names its invariant."""
    verdict, _ = chaos_run
    for name in ("double claims", "unrecorded", "stuck"):
        figure = verdict.figure(name)
        assert figure.ok, f"{name}: {figure.value}\n" + "\n".join(figure.examples)


def test_the_verdict_is_ok(chaos_run: tuple[Verdict, str]) -> None:
    """Every must-be-zero figure is zero: no duplicate, overlap, lost run, stuck job or crash;
    and the fencing guard refused the late writes of the paused and partitioned nodes."""
    verdict, output = chaos_run
    assert verdict.ok, verdict.table()
    # Each pause froze a sync handler mid-run (faults.py), so its late effect met the guard.
    stop = r"SIGSTOP node-\d for [\d.]+s(?: \(the leader\))?( with job \d+ in flight)?"
    pauses = re.findall(stop, output)
    assert pauses and all(pauses), output
    assert int(verdict.figure("fenced").value) > 0, verdict.table()


@pytest.mark.timeout(60)
def test_a_failed_start_exits_3_in_one_line_and_leaves_no_folder(tmp_path: Path) -> None:
    """The command on a server that does not answer: one line on stderr, exit 3, and none of the
    temporary folders it made is left behind (TMPDIR points into this test's folder)."""
    with socket_port() as port:  # bound and not listening: connections are refused
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGPULSE_")}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pgpulse",
                "--database-url",
                f"postgresql://postgres@127.0.0.1:{port}/postgres",
                "chaos",
                "--duration",
                "5",
            ],
            capture_output=True,
            text=True,
            timeout=50,
            env={**env, "TMPDIR": str(tmp_path)},
            check=False,
        )
    assert done.returncode == 3, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []


@contextlib.contextmanager
def socket_port() -> Iterator[int]:
    """A loopback TCP port that is bound but not listening, for as long as the block runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
