"""``./scripts/demo`` as README tells a new user to run it, at the shortest allowed duration, on
its own embedded PostgreSQL: it passes, every node works before the kill, and the commands it
prints at the end inspect its database. And the verdict's arithmetic: missed is an occurrence
the job moved past without a run, pending one it has not reached yet."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from helpers import utc
from pgpulse_tools.demo.run import NODES, _tally, next_steps

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_demo_passes_at_its_shortest_duration(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGPULSE_")}
    env["PGPULSE_DATA_DIR"] = str(tmp_path / "pgpulse")  # its own embedded server
    begun = time.monotonic()
    demo = subprocess.run(
        [str(ROOT / "scripts" / "demo"), "--duration", "20"],
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    wall = time.monotonic() - begun
    out = demo.stdout
    assert demo.returncode == 0, out + demo.stderr
    assert "\nOK: no duplicate, no missed run" in out, out
    assert "FAILED" not in out
    # the demo's own lines only: the nodes log to the files it names, not between its lines
    log_line = re.compile(r"\b(INFO|WARNING|ERROR)\s+pgpulse[.:]")
    assert not [line for line in (out + demo.stderr).splitlines() if log_line.search(line)]
    [logs_line] = [line for line in out.splitlines() if line.startswith("The nodes' logs")]
    logs = [Path(p) for p in logs_line.split(": ", 1)[1].split(", ")]
    assert [p.name for p in logs] == [f"{n}.log" for n in NODES]
    assert all(log_line.search(p.read_text()) for p in logs)  # INFO: "node-1 started with..."
    shutil.rmtree(logs[0].parent)  # a fresh temporary folder per demo run

    # every node named in the progress lines, and each did work before the kill
    progress = [line for line in out.splitlines() if "executions:" in line]
    assert progress and all(all(n in line for n in NODES) for line in progress), progress
    kill = next(i for i, line in enumerate(out.splitlines()) if "SIGKILL" in line)
    after_kill = next(line for line in out.splitlines()[kill:] if "executions:" in line)
    counts = dict(re.findall(r"(node-\d) (\d+)", after_kill))
    assert all(int(counts[n]) > 0 for n in NODES), after_kill

    # the verdict table: no duplicate and no missed occurrence, pending counted apart
    table = table_of(out)
    assert len(table) == 3 and all(row["job"].startswith("relay/") for row in table)
    assert all(row["duplicates"] == "0" and row["missed"] == "0" for row in table), table
    assert all(row["pending"].isdigit() for row in table)
    assert any("taken over:" in line for line in out.splitlines())

    # the printed commands work as printed
    printed = [line.split("#")[0].strip() for line in out.splitlines() if "--database" in line]
    status_command = next(shlex.split(c) for c in printed if c.endswith(" status"))
    [killed] = re.findall(r"SIGKILL (node-\d)", out)
    [status_hint] = [line for line in out.splitlines() if " status " in line and "#" in line]
    assert f"{killed} lost" in status_hint, status_hint  # as status shows it, not "stopped"
    assert status_command[-3:] == ["--database", "pgpulse_demo", "status"]
    shown = subprocess.run(status_command, env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("NO LIVE NODE: ")
    assert "database 'pgpulse_demo' on " in shown.stdout.splitlines()[0]
    runs_command = next(shlex.split(c) for c in printed if c.endswith(" runs --tenant relay"))
    runs = subprocess.run(runs_command, env=env, capture_output=True, text=True, timeout=60)
    assert runs.returncode == 0 and "succeeded" in runs.stdout
    print(f"demo --duration 20: wall {wall:.1f} s")  # figures for the report, not a target


def test_the_closing_hints_say_the_killed_node_is_lost_and_name_every_tenant() -> None:
    """The sixth trial read "nodes (all stopped now)" while status showed the killed one lost,
    and no hint for tenant local after importing /etc/cron.d."""
    steps = dict(next_steps("node-3", local=False))
    assert steps["status"].startswith("nodes (node-1, node-2 stopped, node-3 lost")
    assert not any("local" in args for args in steps)
    with_local = [args for args, _ in next_steps("node-3", local=True)]
    assert "job list --tenant local" in with_local and "runs --tenant local" in with_local
    assert with_local.index("job list --tenant relay") < with_local.index("job list --tenant local")


def table_of(out: str) -> list[dict[str, str]]:
    """The rows of the demo's verdict table (tabulate's plain format: columns under dashes)."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("job ") and "missed" in line)
    spans = [m.span() for m in re.finditer(r"-+", lines[at + 1])]
    names = [lines[at][a:b].strip() for a, b in spans]
    rows = []
    for line in lines[at + 2 :]:
        if not line.strip():
            break
        rows.append({n: line[a:b].strip() for n, (a, b) in zip(names, spans, strict=True)})
    return rows


def job_row(**fields: Any) -> dict[str, Any]:
    anchor = utc(2026, 12, 1, 12, 0, 30)
    return {
        "schedule": "* * * * *",
        "timezone": "UTC",
        "anchor_at": anchor,
        "accounted": [],
        "summarised": None,
        **fields,
    }


def test_missed_is_behind_the_job_and_pending_ahead_of_it() -> None:
    minute = timedelta(minutes=1)
    first = utc(2026, 12, 1, 12, 1)
    # occurrences 12:01 .. 12:05 by the stop; the job holds 12:04 (running or due)
    row = job_row(scheduled_for=first + 3 * minute, accounted=[first, first + minute])
    assert _tally(row, first + 4 * minute) == (5, 1, 2)  # 12:03 missed; 12:04, 12:05 pending
    caught_up = job_row(
        scheduled_for=first + 5 * minute, accounted=[first + i * minute for i in range(5)]
    )
    assert _tally(caught_up, first + 4 * minute) == (5, 0, 0)
    # a skipped summary row accounts for every occurrence from its first through its last
    summarised = job_row(
        scheduled_for=first + 4 * minute,
        accounted=[first, first + 3 * minute],
        summarised=[[first + minute, first + 2 * minute]],
    )
    assert _tally(summarised, first + 4 * minute) == (5, 0, 1)
