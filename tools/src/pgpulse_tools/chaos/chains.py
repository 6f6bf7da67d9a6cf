"""Chains in the chaos workload and their check (docs/chains.md): jobs ``chainN-a`` →
``chainN-b`` → ``chainN-c``, where ``a`` runs on its own clock and ``b`` and ``c`` (schedule
``@after``) run once after each succeeded run of the job before them.

**chain flows** (must be 0): for each edge upstream → downstream and each ``scheduled_for``, the
downstream's runs of kind ``after`` (ended or still queued) must be exactly as many as the
upstream's runs at that instant that ended ``succeeded``, and its skipped ``after`` runs as many
as those that ended ``failed`` or ``fenced``: each downstream occurrence exactly once per
succeeded upstream occurrence, whatever the faults. A downstream run that ended ``succeeded``
or ``fenced`` with no effect applied, or any other way but ``skipped``, is counted too (a run
lost). Pure: reads the run rows, jobs and executions of a :class:`History`; the topology
follows from the jobs' names.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from datetime import datetime
from itertools import pairwise

from pgpulse.core.jobs import JobSpec
from pgpulse_tools.chaos.history import History, Run

#: The handler of the chain jobs (registered in workload.py, as an async workload handler).
CHAIN_HANDLER = "chaos.chain"
#: How many chains A → B → C the workload holds.
CHAINS = 2
_LINKS = ("a", "b", "c")


def chain_jobs(seed: int) -> list[JobSpec]:
    """The chain jobs of the workload (deterministic in ``seed``): per chain, an upstream on a
    clock of 2 or 3 s (catch-up backfill or skip) and two followers with no clock of their own.
    Short, never failing on purpose: a failure is a fault's doing (fenced), and is checked
    as such."""
    rng = random.Random(f"chains:{seed}")
    specs: list[JobSpec] = []
    # the head's kind is backfilled by the runner (its backfills flow down); the followers'
    # schedule has no occurrence to backfill
    payload = {"kind": "chain", "min": 0.02, "max": 0.3, "fail": 0.0, "overlap": False}
    follows = {**payload, "kind": "chain-after"}
    for n in range(CHAINS):
        names = [f"chain{n}-{link}" for link in _LINKS]
        specs.append(
            JobSpec.create(
                name=names[0],
                schedule=rng.choice(("@every 2s", "@every 3s")),
                handler=CHAIN_HANDLER,
                catch_up=("backfill", "skip")[n % 2],
                misfire_grace=2.0,
                retry_backoff=0.2,
                payload=payload,
                source="chaos",
            )
        )
        specs.extend(
            JobSpec.create(
                name=name,
                schedule="@after",
                after=[upstream],
                handler=CHAIN_HANDLER,
                retry_backoff=0.2,
                payload=follows,
                source="chaos",
            )
            for upstream, name in pairwise(names)
        )
    return specs


def _edges(history: History) -> list[tuple[int, int, str]]:
    """(upstream id, downstream id, downstream name) of every chain edge, from the names."""
    ids = {job.name: job.id for job in history.jobs}
    pairs = [
        (f"chain{n}-{up}", f"chain{n}-{down}")
        for n in range(CHAINS)
        for up, down in pairwise(_LINKS)
    ]
    return [(ids[up], ids[down], down) for up, down in pairs if up in ids and down in ids]


def _ts(at: datetime) -> str:
    return at.strftime("%H:%M:%S.%f")[:-3]


def chain_flows(history: History) -> list[str]:
    """Every breach of the chain property (see the module), described."""
    runs_of: dict[int, list[Run]] = defaultdict(list)
    for run in history.runs:
        runs_of[run.job_id].append(run)
    applied = {e.run_id for e in history.executions if e.result == "applied" and e.extra}
    found: list[str] = []
    for up, down, name in _edges(history):
        ok = Counter(r.scheduled_for for r in runs_of[up] if r.outcome == "succeeded")
        bad = Counter(r.scheduled_for for r in runs_of[up] if r.outcome in ("failed", "fenced"))
        after = [r for r in runs_of[down] if r.kind == "after"]
        made = Counter(r.scheduled_for for r in after if r.outcome != "skipped")
        skipped = Counter(r.scheduled_for for r in after if r.outcome == "skipped")
        found.extend(
            f"{name} @ {_ts(at)}: {made[at]} runs after {ok[at]} succeeded upstream runs"
            for at in sorted(set(ok) | set(made))
            if ok[at] != made[at]
        )
        found.extend(
            f"{name} @ {_ts(at)}: {skipped[at]} skipped after {bad[at]} failed upstream runs"
            for at in sorted(set(bad) | set(skipped))
            if bad[at] != skipped[at]
        )
        for run in after:
            lost = run.outcome in ("succeeded", "fenced") and run.id not in applied
            if lost or run.outcome not in ("succeeded", "fenced", "skipped", "queued", "failed"):
                found.append(f"{name} r{run.id} @ {_ts(run.scheduled_for)}: {run.outcome}, lost")
    return found


def chain_summary(history: History) -> str:
    """How many downstream runs the chains made (information: the property was exercised)."""
    names = {job.id for job in history.jobs if job.name.startswith("chain")}
    after = [r for r in history.runs if r.kind == "after" and r.job_id in names]
    skipped = sum(1 for r in after if r.outcome == "skipped")
    return f"{len(after)} downstream runs ({skipped} skipped) over {CHAINS} chains A → B → C"
