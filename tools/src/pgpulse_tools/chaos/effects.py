"""The occurrences' effects: duplicated, re-executed, repeated after a lost WAL, overlapping
(pure; from the executions the handlers recorded and the faults the runner logged).

* **duplicates** — occurrences with more than one committed effect, unless every earlier effect
  was written under a valid lease by an attempt that was then interrupted (its node faulted)
  before its outcome was recorded: that is at-least-once re-execution, counted as
  **re-executed**; or unless the database lost the record of every earlier effect in a failover
  (only the node's journal has it): counted as **occurrences repeated**, which only asynchronous
  replication may cause. An earlier effect whose attempt was recorded ``succeeded``, or that was
  written after its lease had expired, or interrupted with no fault on its node, is a duplicate.
  A failover loses only what committed before its kill: see :func:`_failover_after` for the
  instants compared and the clocks they are on.
* **overlaps** — two executions of one job whose [start, end] intervals intersect while both
  wrote their effect (neither was fenced). A job of the ``overlap`` kind (overlap ``allow``,
  N = :data:`OVERLAP_N`) may run N at once: for it, **overlaps**
  counts the instants at which more than N of its executions that wrote their effect ran at
  once. Two effects of one occurrence are duplicates above, whatever the kind. Only the
  schedule's occurrences count: triggers and backfills run beside the schedule under every
  policy (docs/states.md, "Extra occurrences"); a backfill's own bound is judged in
  :mod:`~pgpulse_tools.chaos.extras`, and a ``replace`` job's occurrences by
  :func:`replaced_late`.

An occurrence is (job, ``scheduled_for``) for the schedule's, its run id for an extra one
(:attr:`~pgpulse_tools.chaos.history.Execution.key`): a backfill of an instant the schedule ran is
another occurrence, and so is every trigger.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from pgpulse_tools.chaos.history import Execution, Fault, History

#: The ``overlap`` kind's bound (overlap ``allow``, its ``max_concurrency``): the workload gives
#: its jobs this bound and the checker counts their executions at once against it.
OVERLAP_N = 3


def _ts(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%H:%M:%S.%f")[:-3]


def _faulted(execution: Execution, faults: Iterable[Fault], margin: timedelta) -> Fault | None:
    """A fault on the execution's node (or the database) around the end of the execution."""
    at = execution.ended_at
    assert at is not None
    for fault in faults:
        if fault.target not in (None, execution.node_id):
            continue
        if fault.started_at - margin <= at <= fault.ended_at + margin:
            return fault
    return None


def _effect_at(execution: Execution) -> datetime:
    """The instant of an execution's effect on the database's clock: ``committed_at`` (taken
    inside the effect's statement), else — a history from before it was recorded — its end."""
    at = execution.committed_at or execution.ended_at
    assert at is not None  # an applied execution ended
    return at


def failover_after(history: History, at: datetime) -> str | None:
    """The first failover whose kill came at or after ``at``, described; ``None`` if none.

    ``at`` is an effect's :func:`_effect_at`: the database's ``clock_timestamp()`` inside the
    statement that wrote it, so never after its commit. Not the node journal's instant of the
    effect, which the node writes once it has the acknowledgement: under load a second or more
    later, past the kill of a primary that had committed the effect (a false duplicate). The
    kill time (``Fault.died_at``) is the harness's: its clock (the same machine's as the
    database's, shifted by the offset it measured at start) read once every process of the
    old primary had its SIGKILL (replication.py), or once Patroni's old leader refused writes,
    so never before the last commit that primary could make, up to the offset's error (half
    the round trip it was measured in: runner.py).

    Which direction of error is safe: ``at`` early or the kill late only widens, by
    milliseconds, the window of effects a failover may have lost — harmless, as no server
    takes writes between the kill and the promotion (tens of milliseconds later), and a record
    the database lost with no failover after it is still a duplicate. ``at`` late (the
    journal's instant) or the kill early turns a loss the failover explains into a false
    ``duplicate``: the error this avoids.
    """
    deaths = sorted(
        f.died_at for f in history.faults if f.kind == "failover" and f.died_at is not None
    )
    later = [died for died in deaths if died >= at]
    return f"failover at {_ts(later[0])}" if later else None


def _cause(
    history: History,
    earlier: Execution,
    succeeded: set[tuple[int, datetime, int, int | None]],
    margin: timedelta,
) -> tuple[str, str]:
    """Why an occurrence got another effect after ``earlier``'s: (``duplicate``,
    ``re-executed`` or ``repeated``, explanation)."""
    if not earlier.in_db:  # first: a success recorded under its token may be a reissue's
        moved = failover_after(history, _effect_at(earlier))
        if moved is None:
            return "duplicate", f"t{earlier.token}'s record is gone from the database, no failover"
        return "repeated", f"t{earlier.token}'s record was lost by the {moved}"
    if (*earlier.key, earlier.token) in succeeded:
        return (
            "duplicate",
            f"t{earlier.token} was recorded succeeded, then the occurrence ran again",
        )
    if not earlier.lease_ok_at_end:
        return "duplicate", f"t{earlier.token} wrote its effect after its lease had expired"
    fault = _faulted(earlier, history.faults, margin)
    if fault is None:
        return "duplicate", f"t{earlier.token} was interrupted with no fault on its node"
    return "re-executed", (
        f"t{earlier.token} was interrupted by the {fault.kind} of "
        f"{fault.target or 'the database'} at {_ts(fault.started_at)}"
    )


def duplicates(history: History) -> tuple[list[str], list[str], list[str]]:
    """Return (duplicated occurrences, explained at-least-once re-executions, occurrences
    repeated after a failover lost their record), described. An occurrence is a duplicate if
    any earlier effect is; repeated if any is repeated and none is a duplicate."""
    succeeded: set[tuple[int, datetime, int, int | None]] = {
        (*e.key, e.token) for e in history.run_events if e.outcome == "succeeded"
    }
    applied: dict[tuple[int, datetime, int], list[Execution]] = defaultdict(list)
    for execution in history.executions:
        if execution.result == "applied":
            applied[execution.key].append(execution)
    margin = timedelta(seconds=history.lease)
    found: dict[str, list[str]] = {"duplicate": [], "re-executed": [], "repeated": []}
    for (job_id, scheduled_for, run_id), effects in sorted(applied.items()):
        if len(effects) < 2:
            continue
        extra = f" ({effects[0].occurrence} r{run_id})" if run_id else ""
        effects.sort(key=lambda e: (_effect_at(e), e.id))
        causes = [_cause(history, earlier, succeeded, margin) for earlier in effects[:-1]]
        line = (
            f"job {job_id} @ {_ts(scheduled_for)}{extra}: {len(effects)} effects by "
            + ", ".join(f"{e.node_id}/t{e.token}@{_ts(_effect_at(e))}" for e in effects)
            + " — "
            + "; ".join(text for _, text in causes)
        )
        kinds = {kind for kind, _ in causes}
        verdict = next(k for k in ("duplicate", "repeated", "re-executed") if k in kinds)
        found[verdict].append(line)
    return found["duplicate"], found["re-executed"], found["repeated"]


def overlaps(history: History, allowed: int = OVERLAP_N) -> list[str]:
    """Pairs of executions of one job's schedule that both applied their effect with
    intersecting [start, end] intervals; for a job of the ``overlap`` kind, each instant more
    than ``allowed`` of them ran at once (extra occurrences run beside: not counted; a
    ``replace`` job's are judged by :func:`replaced_late`)."""
    by_job: dict[int, list[Execution]] = defaultdict(list)
    for execution in history.executions:
        if execution.result == "applied" and not execution.extra:
            by_job[execution.job_id].append(execution)
    found: list[str] = []
    for job_id, runs in sorted(by_job.items()):
        if runs[0].kind == "replace":
            continue
        if runs[0].kind == "overlap":
            found.extend(_beyond(job_id, runs, allowed))
            continue
        runs.sort(key=lambda e: (e.started_at, e.id))
        latest: Execution | None = None
        for run in runs:
            assert run.ended_at is not None
            if (
                latest is not None
                and latest.ended_at is not None
                and run.started_at < latest.ended_at
            ):
                found.append(
                    f"job {job_id}: {latest.node_id}/t{latest.token} "
                    f"[{_ts(latest.started_at)}, {_ts(latest.ended_at)}] and "
                    f"{run.node_id}/t{run.token} [{_ts(run.started_at)}, "
                    f"{_ts(run.ended_at)}]"
                )
            if latest is None or (latest.ended_at is not None and run.ended_at > latest.ended_at):
                latest = run
    return found


def most_at_once(history: History) -> int:
    """The most executions of one ``overlap``-kind job that wrote their effect and ran at once
    (0 without such jobs): proof that ``allow`` overlapped at all."""
    most = 0
    by_job: dict[int, list[Execution]] = defaultdict(list)
    for execution in history.executions:
        if execution.result == "applied" and execution.kind == "overlap" and not execution.extra:
            by_job[execution.job_id].append(execution)
    for runs in by_job.values():
        edges = sorted(
            [(run.started_at, 1) for run in runs]
            + [(run.ended_at, -1) for run in runs if run.ended_at is not None]
        )
        now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
    return most


def _beyond(job_id: int, runs: list[Execution], allowed: int) -> list[str]:
    """The starts at which more than ``allowed`` of ``runs`` (applied executions of one job)
    ran at once (a sweep over their [start, end] intervals; an end before a start at the same
    instant)."""
    edges = sorted(
        [(run.started_at, 1, run) for run in runs]
        + [(run.ended_at, -1, run) for run in runs if run.ended_at is not None],
        key=lambda edge: (edge[0], edge[1]),
    )
    found: list[str] = []
    now: list[Execution] = []
    for _, step, run in edges:
        if step < 0:
            now.remove(run)
            continue
        now.append(run)
        if len(now) > allowed:
            found.append(
                f"job {job_id}: {len(now)} executions at once at {_ts(run.started_at)} "
                f"(allowed {allowed}): "
                + ", ".join(f"{e.node_id}/r{e.run_id}t{e.token}" for e in now)
            )
    return found


def at_once(runs: list[Execution], allowed: int) -> list[tuple[datetime, list[Execution]]]:
    """The starts at which more than ``allowed`` of ``runs`` ran at once, with those running
    (a sweep over their [start, end] intervals; an end before a start at the same instant)."""
    edges = sorted(
        [(run.started_at, 1, run) for run in runs]
        + [(_effect_at(run), -1, run) for run in runs if run.ended_at is not None],
        key=lambda edge: (edge[0], edge[1]),
    )
    found: list[tuple[datetime, list[Execution]]] = []
    now: list[Execution] = []
    for instant, step, run in edges:
        if step < 0:
            now.remove(run)
            continue
        now.append(run)
        if len(now) > allowed:
            found.append((instant, list(now)))
    return found


#: Fault kinds that keep a node from hearing, at its next renewal, that its occurrence was
#: replaced (it cannot renew: stopped, cut off, or slowed past a heartbeat).
UNHEARING = frozenset({"pause", "partition", "delay", "kill"})


def replaced_late(history: History) -> tuple[list[str], list[str]]:
    """A ``replace`` job's effects of two occurrences whose executions overlapped for longer
    than Pulse promises: (violations, excused), described.

    What is promised (docs/policies.md, docs/states.md "Overlap"): the statement that forks
    the new occurrence cancels the running one (its row deleted, its run ``cancelled``), and
    its holder learns it at its next renewal — "at most one heartbeat later" — and cancels the
    handler at once. The new occurrence's execution starts after that fork, so an earlier
    execution whose effect was written more than a heartbeat after a later occurrence's
    execution started ran past its cancellation. Only effects written under a current lease
    count (``lease_ok_at_end``: a stale one is a fencing matter, counted apart), and a pair is
    excused, not a violation, when the earlier one's node had a fault (:data:`UNHEARING`) from
    the later one's start to the effect: it could not hear its next renewal's answer.
    """
    bound = timedelta(seconds=history.heartbeat)
    by_job: dict[int, list[Execution]] = defaultdict(list)
    for execution in history.executions:
        if (
            execution.result == "applied"
            and execution.kind == "replace"
            and not execution.extra
            and execution.lease_ok_at_end
        ):
            by_job[execution.job_id].append(execution)
    found: list[str] = []
    excused: list[str] = []
    for job_id, runs in sorted(by_job.items()):
        runs.sort(key=lambda e: (e.started_at, e.id))
        for i, earlier in enumerate(runs):
            end = _effect_at(earlier)
            for later in runs[i + 1 :]:
                if later.started_at >= end:
                    break
                if later.scheduled_for == earlier.scheduled_for or end - later.started_at <= bound:
                    continue
                line = (
                    f"job {job_id}: {earlier.node_id}/r{earlier.run_id} "
                    f"(@ {_ts(earlier.scheduled_for)}) wrote its effect at {_ts(end)}, "
                    f"{(end - later.started_at).total_seconds():.3f}s after "
                    f"{later.node_id}/r{later.run_id} (@ {_ts(later.scheduled_for)}) started "
                    f"at {_ts(later.started_at)} (bound: heartbeat {bound.total_seconds():g}s)"
                )
                fault = next(
                    (
                        f
                        for f in history.faults
                        if f.kind in UNHEARING
                        and f.target == earlier.node_id
                        and f.started_at <= end
                        and f.ended_at >= later.started_at
                    ),
                    None,
                )
                if fault is None:
                    found.append(line)
                else:
                    excused.append(f"{line}; {fault.kind} of {fault.target}")
    return found, excused


def replace_margin(history: History) -> float | None:
    """The largest lead, in seconds, of a ``replace`` job's effect (written under a current
    lease) over the start of the next occurrence's execution after it began (negative: every
    replaced or finished effect came before the next occurrence started); ``None`` without
    such pairs. Information: how close :func:`replaced_late`'s bound was approached."""
    by_job: dict[int, list[Execution]] = defaultdict(list)
    for execution in history.executions:
        if (
            execution.result == "applied"
            and execution.kind == "replace"
            and not execution.extra
            and execution.lease_ok_at_end
        ):
            by_job[execution.job_id].append(execution)
    most: float | None = None
    for runs in by_job.values():
        runs.sort(key=lambda e: (e.started_at, e.id))
        for earlier, later in itertools.pairwise(runs):
            if later.scheduled_for == earlier.scheduled_for:
                continue
            lead = (_effect_at(earlier) - later.started_at).total_seconds()
            most = lead if most is None else max(most, lead)
    return most
