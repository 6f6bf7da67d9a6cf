"""Fencing tokens and run ids handed out twice (docs/design.md, invariant 9), from the executions
(pure; the database's rows and the nodes' journals, so a failover that lost the database's record
of a claim still shows it).

* **tokens reissued** — two executions of one job that were given the same fencing token (of
  one occurrence, for an occurrence with a lease of its own — the ``overlap`` and ``replace``
  kinds', a trigger's, a backfill's — whose token grows over its own claims). A token comes
  from one acknowledged claim and one claim starts one execution, so any repeat means the
  database handed the token out again (a failover that lost the claim's WAL).
* **double token holders** — such a pair whose holding intervals overlap: two nodes held "the
  current token" of a job at once, so neither fencing nor a token-ordered resource can tell them
  apart. An execution holds its token from its start to its end (or until it aborted); one with
  neither (its node was SIGKILLed) until its node's kill, at most for a lease.
* **run ids reissued** — one run id given to two different occurrences (a run id is shared by
  the attempts of one occurrence, never by two occurrences).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from itertools import combinations

from pgpulse_tools.chaos.history import Execution, History


def _ts(at: datetime) -> str:
    return at.strftime("%H:%M:%S.%f")[:-3]


def _holding(
    execution: Execution, lease: timedelta, kills: dict[str | None, list[datetime]]
) -> tuple[datetime, datetime]:
    if execution.ended_at is not None:
        return execution.started_at, execution.ended_at
    end = execution.started_at + lease
    killed = [at for at in kills.get(execution.node_id, []) if at >= execution.started_at]
    return execution.started_at, min([end, *killed])


def _who(execution: Execution) -> str:
    lost = "" if execution.in_db else ", lost by the database"
    return (
        f"{execution.node_id} @ {_ts(execution.started_at)} "
        f"(occurrence {_ts(execution.scheduled_for)}, attempt {execution.attempt}{lost})"
    )


def reissued_tokens(history: History) -> tuple[list[str], list[str]]:
    """Return (tokens reissued, double token holders), each described."""
    lease = timedelta(seconds=history.lease)
    kills: dict[str | None, list[datetime]] = defaultdict(list)
    for fault in history.faults:
        if fault.kind == "kill":
            kills[fault.target].append(fault.started_at)
    by_token: dict[tuple[int, int, int], list[Execution]] = defaultdict(list)
    for execution in history.executions:
        # an occurrence with a lease of its own numbers its claims itself
        own = execution.run_id if execution.own_lease and execution.run_id else 0
        by_token[(execution.job_id, own, execution.token)].append(execution)
    reissued: list[str] = []
    doubles: list[str] = []
    for (job_id, _, token), holders in sorted(by_token.items()):
        if len(holders) < 2:
            continue
        holders.sort(key=lambda e: (e.started_at, e.id))
        reissued.append(
            f"job {job_id} token t{token} held {len(holders)} times: "
            + "; ".join(_who(e) for e in holders)
        )
        for first, second in combinations(holders, 2):
            a_start, a_end = _holding(first, lease, kills)
            b_start, b_end = _holding(second, lease, kills)
            if a_start < b_end and b_start < a_end:
                doubles.append(
                    f"job {job_id} token t{token}: {_who(first)} until {_ts(a_end)} and "
                    f"{_who(second)} until {_ts(b_end)}"
                )
    return reissued, doubles


def reissued_run_ids(history: History) -> list[str]:
    """Run ids given to more than one occurrence, described."""
    occurrences: dict[int, dict[tuple[int, datetime], Execution]] = defaultdict(dict)
    for execution in history.executions:
        if execution.run_id is not None:
            key = (execution.job_id, execution.scheduled_for)
            occurrences[execution.run_id].setdefault(key, execution)
    return [
        f"run id {run_id} given to {len(held)} occurrences: "
        + "; ".join(f"job {e.job_id} {_who(e)}" for e in held.values())
        for run_id, held in sorted(occurrences.items())
        if len(held) > 1
    ]
