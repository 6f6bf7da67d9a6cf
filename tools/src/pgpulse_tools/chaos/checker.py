"""The history checker: a pure function from a recorded :class:`History` to a :class:`Verdict`.

Figures (docs/design.md, invariants 2–5; "must be 0" figures decide the exit code):

* **duplicates**, **re-executed**, **occurrences repeated**, **overlaps** — see
  :mod:`pgpulse_tools.chaos.effects`; **allow at once** (information): the most executions of
  one ``overlap``-kind job (overlap ``allow``, N = 3) that ran at once, which overlaps bounds.
* **key beyond limit**, **key at once** (information) — a concurrency key's limit across nodes:
  see :mod:`pgpulse_tools.chaos.keys`.
* **double token holders**, **tokens reissued**, **run ids reissued** — see
  :mod:`pgpulse_tools.chaos.tokens` (invariant 9: must be 0 with any replication).
* **double claims** — from the engine's own ``pgpulse_runs`` writes: a claim of a job while the
  previous claim's token was neither finished, released nor reaped, or a token that did not grow.
* **lost** — occurrences due by the settle point, passed by their job, whose handler never
  finished: of any catch-up policy, a run the engine ended ``fenced`` (its attempts interrupted
  ``MAX_INTERRUPTIONS`` times, or exhausted) with no effect applied; of a ``backfill`` job, also
  a run left in any state but ``succeeded`` or ``failed`` (a failed run is the handler's own
  failures using up ``max_attempts``, counted in **failed runs**).
* **unrecorded** — occurrences of any policy due by the settle point, passed by their job, with
  no ``pgpulse_runs`` row (each must be run or recorded skipped). The occurrences due are the
  schedule's, and the instants acknowledged payload-less triggers moved a job row to (one of
  those with no run is counted in **extras unrecorded**, or **extras lost by a failover**).
* **replaced** (information) — runs of a ``replace`` job recorded ``cancelled``, "replaced by
  the occurrence at …": a legitimate end without the handler (a ``cancelled`` run for any other
  reason is **lost**: nothing in the harness cancels one).
* **replace overlaps** — a ``replace`` job's effect written more than a heartbeat after a later
  occurrence's execution started (:func:`~pgpulse_tools.chaos.effects.replaced_late`: the
  replaced holder cancels at its next renewal); **replace late in faults** (information): the
  same, its node stopped, cut off or slowed then.
  **replace lead** (information): the most any such effect came after the next occurrence's
  start (negative: always before), how close the bound came.
* **extras lost**, **extras unrecorded**, **extras lost by a failover**, **backfill beyond
  bound**, **extras failed**,
  **extras checked**, **backfill at once** (information: the most of one batch seen at once,
  and how many batches reached their bound) — the triggers and backfills the runner requested
  during the faults: see :mod:`pgpulse_tools.chaos.extras`.
* **queued at check** — occurrences due by the settle point that their job has not reached yet,
  or that it forked (overlap ``allow``/``replace``) and are still to run (a backlog still
  draining; the runner waits for every job's backlog before the check, up to a bound): they
  are not checked, and **occurrences checked** says how many of those due were (all, when the
  backlog drained).
* **stuck** — jobs ``running`` with a lease expired for longer than the sweeper needs, or
  ``failed`` (never scheduled again), at the check.
* **node crashes** — node processes that exited on their own, or hung on SIGTERM.
* **fenced** — executions whose late effect was refused by the token guard (expected > 0 when
  nodes were paused or partitioned: proof that the guard fired).
* **lag**, **recovery** — see :mod:`pgpulse_tools.chaos.timing`.
* on a replicated cluster, **failovers survived** (each followed by a claim on the new primary:
  must be all) and **failover to first claim** — see :mod:`pgpulse_tools.chaos.timing`.

Rules per replication mode: with ``async`` a failover may lose the last acknowledged commits, so
**occurrences repeated** is information there; with ``sync`` (and on one server) it must be 0.
Every other must-be-0 figure must be 0 in every mode: a lost WAL may repeat an occurrence, never
lose one (a job row and its run row commit together), and never give one token to two holders.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tabulate import tabulate

from pgpulse.core.schedule import parse_schedule
from pgpulse.core.wording import plural
from pgpulse_tools.chaos import keys
from pgpulse_tools.chaos.chains import chain_flows, chain_summary
from pgpulse_tools.chaos.effects import (
    OVERLAP_N,
    duplicates,
    most_at_once,
    overlaps,
    replace_margin,
    replaced_late,
)
from pgpulse_tools.chaos.extras import account as account_extras
from pgpulse_tools.chaos.extras import excuse, requests_made
from pgpulse_tools.chaos.history import (
    CLOSING_OUTCOMES,
    History,
    Job,
    Run,
    RunEvent,
    load_history,
)
from pgpulse_tools.chaos.timing import failovers, lags, recoveries, spread
from pgpulse_tools.chaos.tokens import reissued_run_ids, reissued_tokens

#: Faults that can leave a node holding a lease it cannot use (zombies).
ZOMBIE_MAKERS = frozenset({"pause", "partition"})
#: Rules that decide the verdict.
DECISIVE = frozenset({"must be 0", "must be all"})
_EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class Figure:
    """One line of the verdict.

    Attributes:
        name: the figure's name.
        value: its value as printed.
        rule: ``must be 0``, ``must be all``, ``expected > 0`` or ``info``.
        ok: whether the rule holds (always true for ``info``).
        examples: a few offending or illustrative items.
    """

    name: str
    value: str
    rule: str = "info"
    ok: bool = True
    examples: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The checker's result: figures in print order."""

    figures: tuple[Figure, ...]

    @property
    def ok(self) -> bool:
        """Whether every ``must be 0`` figure is 0 and every ``must be all`` one is all."""
        return all(f.ok for f in self.figures if f.rule in DECISIVE)

    def figure(self, name: str) -> Figure:
        """The figure called ``name``. Raises :class:`KeyError` if there is none."""
        for fig in self.figures:
            if fig.name == name:
                return fig
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        """The verdict as JSON-ready data (``pgpulse chaos --report FILE`` writes it)."""
        return {"ok": self.ok, "figures": [asdict(f) for f in self.figures]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        """The verdict :meth:`as_dict` wrote. Raises :class:`KeyError` or :class:`TypeError`
        on data of another shape."""
        return cls(
            tuple(
                Figure(**{**f, "examples": tuple(f.get("examples", ()))}) for f in data["figures"]
            )
        )

    def table(self) -> str:
        """The verdict as a text table, followed by examples of every non-empty figure."""
        rows = [
            [f.name, f.value, f.rule, "ok" if f.ok else "FAIL" if f.rule in DECISIVE else "WARN"]
            for f in self.figures
        ]
        text = tabulate(rows, headers=["figure", "value", "rule", ""])
        for fig in self.figures:
            if fig.examples:
                text += f"\n\n{fig.name}:\n" + "\n".join(f"  {e}" for e in fig.examples)
        return text


def _count(name: str, items: Sequence[str], rule: str = "must be 0") -> Figure:
    ok = not items if rule == "must be 0" else True
    return Figure(name, str(len(items)), rule, ok, tuple(items[:_EXAMPLES]))


def _ts(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%H:%M:%S.%f")[:-3]


def double_claims(events: Sequence[RunEvent]) -> list[str]:
    """Claims (``running`` writes) of a job whose previous claim was still open, or whose
    token did not grow, in the engine's own ``pgpulse_runs`` writes ordered by instant."""
    open_claims: dict[int, RunEvent] = {}
    last_token: dict[int, int] = {}
    found: list[str] = []
    for event in sorted(events, key=lambda e: (e.at, e.id)):
        if event.kind != "scheduled":
            continue  # a trigger's or a backfill's run: a lease of its own, beside the job row
        job = event.job_id
        if event.outcome == "running":
            previous = open_claims.get(job)
            if previous is not None and previous.token != event.token:
                found.append(
                    f"job {job}: {event.node_id} claimed t{event.token} at "
                    f"{_ts(event.at)} while t{previous.token} of {previous.node_id} "
                    f"(claimed {_ts(previous.at)}) was still open"
                )
            if event.token is not None and last_token.get(job, -1) >= event.token:
                found.append(
                    f"job {job}: token t{event.token} at {_ts(event.at)} did not grow "
                    f"(last t{last_token[job]})"
                )
            open_claims[job] = event
            if event.token is not None:
                last_token[job] = max(last_token.get(job, -1), event.token)
        elif event.outcome in CLOSING_OUTCOMES and event.token is not None:
            claim = open_claims.get(job)
            if claim is not None and claim.token == event.token:
                del open_claims[job]
    return found


@dataclass(frozen=True, slots=True)
class Accounting:
    """What became of the occurrences due by the settle point (:func:`unaccounted`), each
    list described. ``due`` counts them all; every one not ``queued`` was checked."""

    lost: list[str]
    missing: list[str]
    queued: list[str]
    failed: list[str]
    due: int
    replaced: list[str] = field(default_factory=list)
    #: payload-less triggers' acknowledged instants with no run: (request instant, described)
    moved_missing: list[tuple[datetime, str]] = field(default_factory=list)


def _replaced(job: Job, run: Run) -> bool:
    """Whether ``run`` is a ``replace`` job's occurrence that a newer one replaced."""
    return (
        job.overlap == "replace"
        and run.outcome == "cancelled"
        and (run.error or "").startswith("replaced by the occurrence at ")
    )


def _lost(catch_up: str, run: Run, applied: bool) -> bool:
    """Whether ``run`` ended without its handler finishing: ``fenced`` by the engine (the run's
    attempts were interrupted, or exhausted) with no effect ``applied``, under any policy; or
    ``cancelled`` other than by a replacement (:func:`_replaced`, judged first), under any
    policy; or, for a ``backfill`` job, anything but a success or the handler's own
    failures."""
    if run.outcome == "fenced":
        return not applied
    if run.outcome == "cancelled":
        return True
    return catch_up == "backfill" and run.outcome not in ("succeeded", "failed")


def unaccounted(history: History) -> Accounting:
    """Account for every occurrence due by the settle point.

    An occurrence due by the settle point is *queued* while its job still holds it or an
    earlier one (a backlog the settle period did not drain: lag, not loss, and not checked).
    Otherwise it must have a run record, or it is *unrecorded*; a run the engine ended without
    its handler finishing is *lost* (:func:`_lost`); a run ended ``failed`` is the handler's
    own (listed, not a violation).
    """
    scheduled = [r for r in history.runs if r.kind == "scheduled"]  # extras: extras.py
    runs = {(r.job_id, r.scheduled_for): r for r in scheduled}
    summaries: dict[int, list[Run]] = defaultdict(list)  # skipped rows of many occurrences
    for r in scheduled:
        if r.last_scheduled_for is not None:
            summaries[r.job_id].append(r)
    applied = {
        (e.job_id, e.scheduled_for)
        for e in history.executions
        if e.result == "applied" and not e.extra
    }
    asked = _moved(history)
    moved_missing: list[tuple[datetime, str]] = []
    lost: list[str] = []
    missing: list[str] = []
    queued: list[str] = []
    failed: list[str] = []
    replaced: list[str] = []
    due_count = 0
    for job in history.jobs:
        schedule = parse_schedule(job.schedule, job.timezone)
        on_schedule = set(
            schedule.occurrences_between(
                job.anchor_at, history.settle_at, anchor=job.anchor_at, limit=1_000_000
            )
        )
        due = sorted(on_schedule | {at for (job_id, at) in asked if job_id == job.id})
        due_count += len(due)
        for at in due:
            run = runs.get((job.id, at)) or _summary_of(summaries[job.id], at)
            pending = job.scheduled_for is not None and job.scheduled_for <= at
            # a forked occurrence (overlap allow/replace) the job row passed, still to run
            pending = pending or (run is not None and run.outcome == "queued")
            if pending and (run is None or run.outcome != "succeeded"):
                queued.append(
                    f"{job.name} (id {job.id}) @ {_ts(at)}: "
                    f"{run.outcome if run else 'not yet claimed'}"
                )
            elif run is None and at not in on_schedule:  # an acknowledged trigger's: extras
                moved_missing.append(
                    (
                        asked[(job.id, at)],
                        f"{job.name} (id {job.id}): payload-less trigger acknowledged at "
                        f"{_ts(asked[(job.id, at)])} for {_ts(at)}: no run",
                    )
                )
            elif run is None:
                missing.append(f"{job.name} (id {job.id}, {job.catch_up}) @ {_ts(at)}: no run")
            elif _replaced(job, run):
                replaced.append(f"{job.name} (id {job.id}) @ {_ts(at)}: {run.error}")
            elif _lost(job.catch_up, run, (job.id, at) in applied):
                lost.append(
                    f"{job.name} (id {job.id}, {job.catch_up}) @ {_ts(at)}: {run.outcome} "
                    f"after {plural(run.attempts, 'attempt')}, no effect applied"
                )
            elif run.outcome == "failed":
                failed.append(
                    f"{job.name} (id {job.id}) @ {_ts(at)}: failed after "
                    + plural(run.attempts, "attempt")
                )
    return Accounting(lost, missing, queued, failed, due_count, replaced, moved_missing)


def _moved(history: History) -> dict[tuple[int, datetime], datetime]:
    """The instants acknowledged payload-less triggers moved a job row to, by the settle
    point: (job, instant) -> the request's instant."""
    return {
        (request.job_id, request.scheduled_for): request.at
        for request in history.requests
        if request.kind == "trigger_job"
        and request.ok
        and request.scheduled_for is not None
        and request.scheduled_for <= history.settle_at
    }


def _summary_of(summaries: Sequence[Run], at: datetime) -> Run | None:
    """The skipped summary row that stands for the occurrence ``at``, if one does."""
    return next(
        (r for r in summaries if r.scheduled_for <= at <= (r.last_scheduled_for or at)), None
    )


def stuck(history: History) -> list[str]:
    """Jobs left ``running`` on an expired lease (beyond the sweeper's reach) or ``failed``."""
    grace = timedelta(seconds=2 * history.heartbeat + 1)
    found = []
    for job in history.jobs:
        if (
            job.status == "running"
            and job.lease_expires_at is not None
            and job.lease_expires_at < history.checked_at - grace
        ):
            found.append(
                f"{job.name} (id {job.id}): running on {job.locked_by}, lease expired "
                f"at {_ts(job.lease_expires_at)}"
            )
        elif job.status == "failed":
            found.append(f"{job.name} (id {job.id}): failed — {job.last_error}")
    return found


def check(history: History) -> Verdict:
    """Check a recorded history against Pulse's invariants (pure; no I/O, no clock).

    Args:
        history: the rows a chaos run recorded, and its faults.

    Returns:
        The :class:`Verdict`; ``verdict.ok`` is false when a must-be-zero figure is not zero.
    """
    dups, reexecuted, repeated = duplicates(history)
    extras = account_extras(history)
    late, late_in_faults = replaced_late(history)
    tokens_again, doubles = reissued_tokens(history)
    account = unaccounted(history)
    moved_missing, moved_lost = excuse(history, account.moved_missing)
    fenced = [
        f"job {e.job_id} @ {_ts(e.scheduled_for)}: {e.node_id}/t{e.token} ended {_ts(e.ended_at)}"
        for e in history.executions
        if e.result == "fenced"
    ]
    zombies = any(f.kind in ZOMBIE_MAKERS for f in history.faults)
    stale = [
        f"job {e.job_id} @ {_ts(e.scheduled_for)}: {e.node_id}/t{e.token} ({e.kind}) "
        f"wrote at {_ts(e.ended_at)}"
        for e in history.executions
        if e.result == "applied" and e.lease_ok_at_end is False
    ]
    crashes = [
        f"{x.node_id} {x.why} (code {x.returncode}) at {_ts(x.at)}" for x in history.node_exits
    ]
    steady, faulty = lags(history)
    recovery, notes = recoveries(history)
    by_result: dict[str, int] = defaultdict(int)
    for execution in history.executions:
        by_result[execution.result or "unfinished"] += 1
    return Verdict(
        (
            _count("duplicates", dups),
            _count(
                "occurrences repeated",
                repeated,
                "info" if history.replication == "async" else "must be 0",
            ),
            _count("overlaps", overlaps(history, OVERLAP_N)),
            Figure("allow at once", f"{most_at_once(history)} (overlap allow, N = {OVERLAP_N})"),
            _count("key beyond limit", keys.beyond_limit(history)),
            Figure("key at once", keys.most_at_once(history)),
            _count("double claims", double_claims(history.run_events)),
            _count("double token holders", doubles),
            _count("tokens reissued", tokens_again),
            _count("run ids reissued", reissued_run_ids(history)),
            _count("lost", account.lost),
            _count("unrecorded", account.missing),
            _count("replace overlaps", late),
            _count("extras lost", extras.lost),
            _count("extras unrecorded", extras.unrecorded + moved_missing),
            _count("backfill beyond bound", extras.beyond),
            _count("chain flows", chain_flows(history)),
            Figure("chains", chain_summary(history)),
            _count("stuck", stuck(history)),
            _count("node crashes", crashes),
            Figure(
                "fenced",
                str(len(fenced)),
                "expected > 0" if zombies else "info",
                bool(fenced) or not zombies,
                tuple(fenced[:_EXAMPLES]),
            ),
            _count("re-executed", reexecuted, "info"),
            _count("queued at check", account.queued, "info"),
            Figure(
                "occurrences checked",
                f"{account.due - len(account.queued)}/{account.due}"
                + (f" ({len(account.queued)} queued, not checked)" if account.queued else ""),
                "expected all",
                not account.queued,
            ),
            _count("failed runs", account.failed, "info"),
            _count("replaced", account.replaced, "info"),
            _count("replace late in faults", late_in_faults, "info"),
            Figure(
                "extras checked",
                f"{extras.total - len(extras.queued)}/{extras.total} ({extras.triggers} "
                f"triggers, {extras.backfills} backfill occurrences)"
                + (f" ({len(extras.queued)} queued, not checked)" if extras.queued else ""),
                "expected all",
                not extras.queued,
                tuple(extras.queued[:_EXAMPLES]),
            ),
            _count("extras failed", extras.failed, "info"),
            _count("extras lost by a failover", extras.unrecorded_by_failover + moved_lost, "info"),
            Figure(
                "backfill at once",
                f"{extras.most[0]} (its max_concurrency {extras.most[1]}); "
                f"{extras.at_bound} batches reached their bound",
            ),
            Figure("replace lead", _lead(replace_margin(history), history.heartbeat)),
            Figure("requests", requests_made(history)),
            _count("stale effects", stale, "info"),
            Figure("lag steady", spread(steady, (50, 99))),
            Figure("lag in faults", spread(faulty, (50, 99))),
            Figure("recovery", spread(recovery, (50,)), "info", True, tuple(notes[:_EXAMPLES])),
            *_failover_figures(history),
            Figure(
                "executions",
                f"{len(history.executions)} ("
                + ", ".join(f"{k} {v}" for k, v in sorted(by_result.items()))
                + ")",
                examples=(),
            ),
            Figure(
                "faults",
                str(len(history.faults))
                + " ("
                + ", ".join(
                    f"{k} {sum(1 for f in history.faults if f.kind == k)}"
                    for k in sorted({f.kind for f in history.faults})
                )
                + ")",
            ),
        )
    )


def _lead(lead: float | None, heartbeat: float) -> str:
    if lead is None:
        return "no replace job wrote two effects"
    return (
        f"{lead:+.3f}s (the most a replace effect came after the next start; bound {heartbeat:g}s)"
    )


def _failover_figures(history: History) -> tuple[Figure, ...]:
    """On a replicated cluster: failovers survived, and death-to-first-claim times."""
    if history.replication is None:
        return ()
    times, missed, notes = failovers(history)
    total = len(times) + len(missed)
    return (
        Figure(
            "failovers survived",
            f"{len(times)}/{total}",
            "must be all",
            not missed,
            tuple(missed[:_EXAMPLES]),
        ),
        Figure(
            "failover to first claim",
            spread(times, (50,)),
            examples=tuple(notes[:_EXAMPLES]),
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pgpulse_tools.chaos.checker HISTORY.json``: check a saved history again (a run
    keeps ``history.json`` in its folder); print the verdict; return 0 if it is ok, else 1."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m pgpulse_tools.chaos.checker HISTORY.json", file=sys.stderr)
        return 2
    verdict = check(load_history(Path(args[0])))
    print(verdict.table())
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
