"""Triggers and backfills the runner requested during the faults, judged (pure; from the
requests as the API answered them, the run rows and the executions).

An extra occurrence (a trigger with a payload, each occurrence of a backfill) is identified by
its run id (``pgpulse_occurrences.id``, its ``pgpulse_runs`` row's id), never by (job,
``scheduled_for``): a backfill re-runs an instant the schedule already ran, and two triggers
may share an instant. Its effect is keyed so too (workload.py); two effects of one are
**duplicates** (:mod:`~pgpulse_tools.chaos.effects`).

* **extras lost** — an extra occurrence whose run ended without its handler finishing: run
  ``succeeded`` with no effect applied, ``fenced`` with none (its attempts interrupted), or
  ``cancelled``, ``skipped``, or left ``running``/``retrying`` with no occurrence row to run it
  again. Nothing in the workload cancels one (``replace`` cancels only the schedule's
  occurrences; the harness never pauses a job), so each is a loss. A run ``failed`` is the
  handler's own planned failures using up ``max_attempts`` (**extras failed**, information).
* **extras unrecorded** — an acknowledged request whose occurrences have no run row and no
  pending occurrence: a trigger's run id, or an instant a backfill selected that its batch
  lacks; or a run of the batch at an instant it did not select (and, from
  :func:`~pgpulse_tools.chaos.checker.unaccounted`, a payload-less trigger's instant with no
  run). Must be 0 — unless replication is asynchronous and a failover's kill came after the
  request was made: such a failover may lose acknowledged commits (docs/design.md), so the request
  is counted in **extras lost by a failover** (information) instead. A request's commit comes
  after the harness's instant of it, so a failover killed before that cannot explain it.
* **backfill beyond bound** — an instant at which more executions of one backfill request's
  occurrences ran at once than its ``max_concurrency`` (a sweep over the [start, effect]
  intervals of the executions that wrote their effect under a current lease: each lay inside
  its lease, and the bound is on leases held at once, across nodes).
* **extras queued at check** — extra occurrences still pending or running at the check (not
  checked; the runner waits for them to drain first, up to a bound).

A payload-less trigger moves the job row's own occurrence to now (a ``scheduled`` run): the
checker adds its acknowledged instant to the occurrences the job must account for
(:func:`~pgpulse_tools.chaos.checker.unaccounted`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from pgpulse.core.wording import plural
from pgpulse_tools.chaos.effects import at_once, failover_after
from pgpulse_tools.chaos.history import Execution, History, Run


def _ts(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%H:%M:%S.%f")[:-3]


@dataclass(frozen=True, slots=True)
class ExtraAccounting:
    """What became of the extra occurrences (each list described).

    Attributes:
        lost, failed, queued: as the module says.
        unrecorded: acknowledged requests' occurrences with no record (or runs never asked).
        unrecorded_by_failover: the same, after which an asynchronous failover came.
        beyond: backfill batches over their bound.
        most: the most executions of one backfill batch seen at once, as (count, its bound);
            how many batches reached their bound (information: the bound was exercised).
        total: extra occurrences known (run rows and pending ones); checked = total - queued.
        triggers, backfills: how many of them were triggers and backfills.
    """

    lost: list[str]
    failed: list[str]
    queued: list[str]
    unrecorded: list[str]
    beyond: list[str]
    unrecorded_by_failover: list[str]
    total: int
    triggers: int
    backfills: int
    most: tuple[int, int] = (0, 0)
    at_bound: int = 0


def _describe(run: Run) -> str:
    return f"job {run.job_id} {run.kind} r{run.id} @ {_ts(run.scheduled_for)}"


def account(history: History) -> ExtraAccounting:
    """Judge every extra occurrence and every acknowledged request (see the module)."""
    # a chain's runs (kind after) are judged by chains.py
    extras = {
        r.id: r for r in history.runs if r.kind in ("trigger", "backfill") and r.id is not None
    }
    applied: dict[int, list[Execution]] = defaultdict(list)
    for e in history.executions:
        if e.extra and e.run_id is not None and e.result == "applied":
            applied[e.run_id].append(e)
    lost: list[str] = []
    failed: list[str] = []
    queued: list[str] = []
    for run_id, run in sorted(extras.items()):
        effects = len(applied.get(run_id, ()))
        if run.outcome == "queued":
            queued.append(f"{_describe(run)}: pending or running")
        elif run.outcome == "failed":
            failed.append(f"{_describe(run)}: failed after {plural(run.attempts, 'attempt')}")
        elif run.outcome in ("succeeded", "fenced"):
            if not effects:
                lost.append(
                    f"{_describe(run)}: {run.outcome} after {plural(run.attempts, 'attempt')}, "
                    "no effect applied"
                )
        else:
            lost.append(
                f"{_describe(run)}: {run.outcome} after {plural(run.attempts, 'attempt')}"
                + (f" ({run.error})" if run.error else "")
                + ("" if effects else ", no effect applied")
            )
    beyond, most, at_bound = _beyond_bound(history, extras)
    unrecorded, by_failover = excuse(history, _unrecorded(history, extras))
    return ExtraAccounting(
        lost=lost,
        failed=failed,
        queued=queued,
        unrecorded=unrecorded,
        unrecorded_by_failover=by_failover,
        beyond=beyond,
        most=most,
        at_bound=at_bound,
        total=len(extras),
        triggers=sum(1 for r in extras.values() if r.kind == "trigger"),
        backfills=sum(1 for r in extras.values() if r.kind == "backfill"),
    )


def excuse(history: History, found: list[tuple[datetime, str]]) -> tuple[list[str], list[str]]:
    """Split ``found`` ((request instant, description) of acknowledged requests with no
    record) into (unexplained, lost by an asynchronous failover whose kill came after the
    request)."""
    unexplained: list[str] = []
    lost: list[str] = []
    for at, line in found:
        failover = failover_after(history, at) if history.replication == "async" else None
        if failover is None:
            unexplained.append(line)
        else:
            lost.append(f"{line} — the {failover} may have lost it")
    return unexplained, lost


def _unrecorded(history: History, extras: dict[int, Run]) -> list[tuple[datetime, str]]:
    found: list[tuple[datetime, str]] = []
    by_batch: dict[int, list[Run]] = defaultdict(list)
    for run in extras.values():
        if run.kind == "backfill" and run.batch_id is not None:
            by_batch[run.batch_id].append(run)
    for request in history.requests:
        if not request.ok:
            continue
        if request.kind == "trigger" and request.run_id is not None:
            made = extras.get(request.run_id)
            if made is None or made.kind != "trigger" or made.job_id != request.job_id:
                found.append(
                    (
                        request.at,
                        f"job {request.job_id}: trigger r{request.run_id} acknowledged at "
                        f"{_ts(request.at)}: "
                        + ("no run" if made is None else f"its run is {_describe(made)}"),
                    )
                )
        elif request.kind == "backfill" and request.batch_id is not None:
            runs = by_batch.get(request.batch_id, [])
            have = {r.scheduled_for for r in runs if r.job_id == request.job_id}
            asked = set(request.selected)
            missing = ", ".join(_ts(m) for m in sorted(asked - have)[:3])
            unasked = ", ".join(_ts(u) for u in sorted(have - asked)[:3])
            if missing or unasked or len(runs) != len(asked):
                found.append(
                    (
                        request.at,
                        f"job {request.job_id}: backfill batch {request.batch_id} acknowledged at "
                        f"{_ts(request.at)} selected {len(asked)}, has {len(runs)} runs"
                        + (f"; missing {missing}" if missing else "")
                        + (f"; not selected {unasked}" if unasked else ""),
                    )
                )
    return found


def _beyond_bound(
    history: History, extras: dict[int, Run]
) -> tuple[list[str], tuple[int, int], int]:
    bounds = {
        r.batch_id: r.max_concurrency
        for r in history.requests
        if r.ok and r.kind == "backfill" and r.batch_id is not None and r.max_concurrency
    }
    batch_of = {run_id: run.batch_id for run_id, run in extras.items() if run.kind == "backfill"}
    by_batch: dict[int, list[Execution]] = defaultdict(list)
    for e in history.executions:
        if (
            e.occurrence == "backfill"
            and e.result == "applied"
            and e.lease_ok_at_end
            and e.run_id is not None
        ):
            batch = batch_of.get(e.run_id)
            if batch in bounds:
                by_batch[batch].append(e)
    found: list[str] = []
    most = (0, 0)
    at_bound = 0
    for batch, runs in sorted(by_batch.items()):
        allowed = bounds[batch]
        seen = _most(runs)
        most = max(most, (seen, allowed))
        at_bound += seen >= allowed
        for instant, running in at_once(runs, allowed):
            found.append(
                f"backfill batch {batch} of job {runs[0].job_id}: {len(running)} at once at "
                f"{_ts(instant)} (max_concurrency {allowed}): "
                + ", ".join(f"{e.node_id}/r{e.run_id}t{e.token}" for e in running)
            )
    return found, most, at_bound


def _most(runs: list[Execution]) -> int:
    """The most of ``runs`` that ran at once."""
    bound = 0
    while at_once(runs, bound):
        bound += 1
    return bound


def requests_made(history: History) -> str:
    """The requests made, in words (information)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for request in history.requests:
        counts[request.kind][0 if request.ok else 1] += 1
    selected = sum(len(r.selected) for r in history.requests if r.ok and r.kind == "backfill")
    parts = [
        f"{kind} {ok}" + (f" (+{no} refused or unanswered)" if no else "")
        for kind, (ok, no) in sorted(counts.items())
    ]
    return (", ".join(parts) or "none") + f"; {selected} backfill occurrences selected"
