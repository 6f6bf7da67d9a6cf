"""Pulse on a Patroni-managed cluster, as users run one: etcd and two Patroni members on
127.0.0.1 (Debian's ``patroni`` and ``etcd-server``, or PyPI's), two ``pgpulse node run``
processes on a multi-host DSN, and ``patronictl failover`` in the middle of the chaos
harness's workload; the harness's verdict decides. Skipped, saying why, where the programs are
missing. About 30 s (Patroni's bootstrap is most of it).
"""

from __future__ import annotations

import pytest

from helpers import cluster_pg_bin
from pgpulse_tools.chaos.checker import Verdict
from pgpulse_tools.chaos.cluster import NodeSettings
from pgpulse_tools.chaos.patroni import missing_programs
from pgpulse_tools.chaos.runner import ChaosConfig, run_chaos

MISSING = missing_programs()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(150),
    pytest.mark.server_programs,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"needs {', '.join(MISSING)} on the PATH (apt-get install patroni etcd-server)",
    ),
]


async def test_a_patronictl_failover_mid_run_keeps_every_promise() -> None:
    lines: list[str] = []
    config = ChaosConfig(
        duration=5,  # one fault, at 2 s: the failover
        nodes=2,
        seed=5,
        jobs=21,
        node=NodeSettings(lease=3.0, heartbeat=0.5, slots=16, drain_timeout=1.0),
        settle=5.0,
        kinds=("failover",),
        replication="async",
        patroni=True,
        pg_bin=cluster_pg_bin(),
    )
    verdict: Verdict = await run_chaos(config, lines.append)
    output = "\n".join(lines)
    assert "managed by Patroni" in output and "rebuilt by patroni" in output, output
    assert verdict.figure("faults").value == "1 (failover 1)", output
    assert verdict.figure("failovers survived").value == "1/1", verdict.table()
    for name in ("double token holders", "tokens reissued", "occurrences repeated", "lost"):
        assert verdict.figure(name).value == "0", verdict.table()
    assert verdict.ok, verdict.table()
