"""Why an occurrence ran, or did not: the trace ``pgpulse why`` prints (pure: facts in, trace out).

:func:`build_trace` takes what Pulse already stores about one job around an instant
(:class:`WhyFacts`: the job row, its run rows next to the instant, its newest audit rows, the
handlers of live nodes, its calendars, all read by :mod:`pgpulse.db.why`) and says what became
of the occurrence at or nearest that instant: its fate (:data:`FATES`), the facts behind it, a few
lines a person reads in ten seconds, and what Pulse cannot know. It reads no clock and does no
I/O: the database's instant comes in with the facts (docs/design.md, invariant 1).
Its wording (the labelled lines, instants, the daylight-saving note) is
:mod:`pgpulse.core.why_text`.

The rules it explains are the ones that decided: catch-up and its reasons
(:mod:`pgpulse.node.dispatch`), daylight saving (docs/design.md, invariant 7), spread
(:mod:`pgpulse.core.spread`), fencing (docs/design.md, invariant 3) and pauses
(docs/states.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.errors import PulseError
from pgpulse.core.routing import waiting_reason
from pgpulse.core.schedule import parse_schedule
from pgpulse.core.spread import spread_offset
from pgpulse.core.why_text import dst_note, fact_lines, iso, jsonable, pause_words
from pgpulse.core.wording import plural, seconds_text
from pgpulse.core.zones import load_zone

#: Every fate a trace names, and what it means (docs/why.md has the same table).
FATES: dict[str, str] = {
    "succeeded": "it ran and its handler succeeded",
    "failed": "it ran and its last attempt failed",
    "running": "it runs now",
    "retrying": "an attempt ended and the next one waits",
    "fenced": "its attempts were interrupted too often (or exhausted) and the run was ended",
    "cancelled": "it was cancelled (replaced by a newer occurrence, or by a person)",
    "superseded": "skipped: a later occurrence was due, and catch-up skip runs the newest",
    "missed": "skipped: later than the job's misfire_grace",
    "coalesced": "skipped: coalesced into a later occurrence",
    "backfill_limit": "skipped: older than the newest backfill_limit occurrences",
    "calendar": "skipped: a calendar excludes its local date",
    "skipped": "skipped, for the reason its row records",
    "window": "outside the job's window (not_before / not_after)",
    "paused": "the job was paused",
    "overlap": "waiting: the job's previous run still holds it (overlap forbid)",
    "no_handler": "waiting: no live node has the job's handler",
    "due": "due, not claimed yet",
    "pending": "not due yet",
    "completed": "the job had completed before it",
    "job_failed": "the job cannot be scheduled (status failed)",
    "before_job": "the job did not exist yet",
    "deleted": "the job was deleted",
    "unrecorded": "no record of it",
}

#: Skip reasons as :mod:`pgpulse.node.dispatch` and :mod:`pgpulse.core.limits` write them, by
#: the prefix of the recorded text, and the fate each means.
_SKIP_PREFIXES = (
    ("superseded", "superseded"),
    ("missed", "missed"),
    ("coalesced", "coalesced"),
    ("skipped: older than the newest", "backfill_limit"),
    ("paused", "paused"),
    ("calendar ", "calendar"),
    ("outside the job's window", "window"),
)

#: The error a swept lease leaves on its attempt (``reap_job_leases``): the holder lost it, and
#: any write it sends later names a token that is no longer current.
_LEASE_LOST = "lease of node "


@dataclass(frozen=True, slots=True)
class WhyFacts:
    """What Pulse stores about one job around an instant, as :mod:`pgpulse.db.why` reads it.

    Attributes:
        at: the instant asked about (aware).
        now: the database's instant of the read (aware).
        tenant, name: the job as it was asked for.
        job: the job row (``pgpulse_jobs`` columns by name, ``misfire_grace`` in seconds), or
            ``None`` when no such job exists now.
        runs: the job's scheduled run rows next to ``at`` (a few before, a few after), each with
            ``attempt_log`` (:func:`pgpulse.db.store.attempt_log`).
        history: the job's newest audit rows, newest first (``at``, ``action``, ``source``,
            ``actor``, ``changes``).
        history_complete: ``history`` reaches the job's first audit row (else older pauses are
            not known).
        live_handlers: the handlers some live node advertises.
        calendars: the job's calendars as stored now.
    """

    at: datetime
    now: datetime
    tenant: str
    name: str
    job: Mapping[str, Any] | None
    runs: Sequence[Mapping[str, Any]] = ()
    history: Sequence[Mapping[str, Any]] = ()
    history_complete: bool = True
    live_handlers: frozenset[str] = frozenset()
    calendars: Sequence[ExclusionCalendar] = ()


@dataclass(slots=True)
class Trace:
    """The fate of one occurrence, for people (``lines``) and programs (:meth:`as_json`).

    Attributes:
        tenant, name, job_id: the job (``job_id`` ``None`` when it never existed).
        at: the instant asked about.
        occurrence: the occurrence at or nearest ``at`` (aware UTC), ``None`` when there is none.
        fate: one of :data:`FATES`.
        summary: the fate in one sentence.
        facts: the facts behind it, JSON-ready except for datetimes (``scheduled``,
            ``spread_offset``, ``attempts``, ``skip``, ``pause``, ``waiting_for``...).
        unknown: what Pulse cannot know here, and why.
    """

    tenant: str
    name: str
    job_id: int | None
    at: datetime
    occurrence: datetime | None
    fate: str = "unrecorded"
    summary: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The trace as one JSON object (instants as ISO 8601 text), with ``lines``."""
        found: dict[str, Any] = jsonable(
            {
                "tenant": self.tenant,
                "name": self.name,
                "job_id": self.job_id,
                "at": self.at,
                "occurrence": self.occurrence,
                "fate": self.fate,
                "summary": self.summary,
                **self.facts,
                "unknown": self.unknown,
                "lines": self.lines(),
            }
        )
        return found

    def lines(self) -> list[str]:
        """The trace as a person reads it: a headline, then one labelled line per fact."""
        when = iso(self.occurrence) if self.occurrence else "no occurrence"
        out = [f"{self.name} ({self.tenant}) {when}: {self.fate} — {self.summary}"]
        out.extend(f"  {label:<12} {text}" for label, text in fact_lines(self.facts))
        out.extend(f"  {'cannot know':<12} {text}" for text in self.unknown)
        return out


def build_trace(facts: WhyFacts) -> Trace:
    """The trace of the occurrence at or nearest ``facts.at`` (pure).

    Args:
        facts: what the store holds around the instant (:class:`WhyFacts`).

    Returns:
        A :class:`Trace`. A job that does not exist now is ``deleted`` when its audit trail
        says so (else ``unrecorded``); otherwise the occurrence is the schedule's, or a run
        row's, nearest ``at`` (the earlier one on a tie).
    """
    if facts.job is None:
        return _missing_job(facts)
    return _Tracer(facts, facts.job).trace()


class _Tracer:
    """One trace in the making: the job's schedule, the chosen occurrence and its facts."""

    def __init__(self, facts: WhyFacts, job: Mapping[str, Any]) -> None:
        self.facts, self.job = facts, job
        self.schedule = parse_schedule(job["schedule"], job["timezone"])
        self.anchor: datetime = job["anchor_at"]
        self.offset = spread_offset(job["id"], float(job["spread"] or 0))
        self.runs = sorted(facts.runs, key=lambda r: r["scheduled_for"])
        self.occurrence = self._nearest()
        self.trace_ = Trace(job["tenant"], job["name"], job["id"], facts.at, self.occurrence)

    # -- the occurrence ---------------------------------------------------------------------

    def _nearest(self) -> datetime | None:
        at = self.facts.at
        found: list[datetime] = [r["scheduled_for"] for r in self.runs]
        found.append(self.job["scheduled_for"])
        with suppress(PulseError):  # near an instant there may be no occurrence
            before = self.schedule.last_at_or_before(at, anchor=self.anchor)
            if before is not None:
                found.append(before)
            after = self.schedule.next_after_or_none(at, anchor=self.anchor)
            if after is not None:
                found.append(after)
        return min(found, key=lambda t: (abs(t - at), t)) if found else None

    def trace(self) -> Trace:
        t = self.trace_
        if self.occurrence is None:
            t.summary = "the schedule has no occurrence near this instant"
            return t
        t.facts["scheduled"] = self._scheduled(self.occurrence)
        if self.offset:
            t.facts["spread_offset"] = self.offset.total_seconds()
        self._explain(self.occurrence)
        self._note_schedule_changes(self.occurrence)
        return t

    def _explain(self, occurrence: datetime) -> None:
        row = next((r for r in self.runs if r["scheduled_for"] == occurrence), None)
        covering = row or next(
            (
                r
                for r in self.runs
                if r["outcome"] == "skipped"
                and r["scheduled_for"] <= occurrence <= (r["last_scheduled_for"] or occurrence)
            ),
            None,
        )
        if covering is not None and covering["outcome"] == "skipped":
            self._skipped(covering, occurrence)
        elif row is not None:
            self._ran(row)
        elif self.job["status"] == "running" and self.job["scheduled_for"] == occurrence:
            self._ran(None)
        elif occurrence >= self.job["scheduled_for"]:
            self._ahead(occurrence)
        else:
            self._behind(occurrence)

    # -- when it was due ---------------------------------------------------------------------

    def _scheduled(self, occurrence: datetime) -> dict[str, Any]:
        zone = load_zone(self.job["timezone"])
        local = occurrence.astimezone(zone)
        return {
            "utc": occurrence,
            "local": f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}",
            "timezone": self.job["timezone"],
            "daylight_saving": dst_note(self.schedule, occurrence),
            "due_at": occurrence + self.offset,
        }

    # -- a run row: attempts ------------------------------------------------------------------

    def _ran(self, row: Mapping[str, Any] | None) -> None:
        t, job = self.trace_, self.job
        log = list(row["attempt_log"]) if row is not None else []
        live = job["status"] == "running" and job["scheduled_for"] == self.occurrence
        if live:  # the attempt running now is on the job row, not yet in the run row
            log = [a for a in log if a["fencing_token"] != job["fencing_token"]]
            log.append(
                {
                    "attempt": job["attempt"],
                    "node_id": job["locked_by"],
                    "fencing_token": job["fencing_token"],
                    "started_at": job["claimed_at"],
                    "ended_at": None,
                    "outcome": "running",
                    "error": None,
                }
            )
        outcome = "running" if live else row["outcome"] if row is not None else "running"
        t.fate = outcome if outcome in FATES else "succeeded"
        if row is not None:
            t.facts["run_id"] = row["id"]
        attempts = [self._attempt(a) for a in log]
        t.facts["attempts"] = attempts
        if attempts and attempts[0]["started_at"] is not None:
            first = attempts[0]
            t.facts["claim"] = {
                "node": first["node"],
                "at": first["started_at"],
                "lag": first["lag"],
            }
        t.summary = self._ran_summary(outcome, attempts, row)
        if any(a["fenced"] for a in attempts):
            t.unknown.append(
                "what a fenced node's handler did after its lease was lost: it cancels its own "
                "work when it cannot renew (docs/design.md, invariant 3), but a stalled process "
                "does so only when it wakes, and its refused writes are not stored"
            )

    def _attempt(self, a: Mapping[str, Any]) -> dict[str, Any]:
        due = self.occurrence + self.offset if self.occurrence else None
        started = a["started_at"]
        # a swept lease, or a run cancelled under it (overlap replace, pause --cancel): its
        # holder's token no longer names a lease, so whatever it writes later is refused
        lost = (a["error"] or "").startswith(_LEASE_LOST)
        taken = lost or (a["outcome"] == "cancelled" and a["node_id"] is not None)
        return {
            "attempt": a["attempt"],
            "token": a["fencing_token"],
            "node": a["node_id"],
            "started_at": started,
            "ended_at": a["ended_at"],
            "lag": (started - due).total_seconds() if started and due else None,
            "outcome": "lease lost" if lost else a["outcome"],
            "error": a["error"],
            "fenced": taken,
        }

    def _ran_summary(
        self, outcome: str, attempts: list[dict[str, Any]], row: Mapping[str, Any] | None
    ) -> str:
        count = plural(len(attempts), "attempt")
        if outcome == "running":
            last = attempts[-1]
            return (
                f"attempt {last['attempt']} runs on {last['node']} (token {last['token']}), "
                f"lease until {iso(self.job['lease_expires_at'])}"
            )
        if outcome == "succeeded":
            return f"ran on {attempts[-1]['node'] if attempts else '?'}, {count}"
        error = row["error"] if row is not None else None
        return f"{outcome} after {count}" + (f": {error}" if error else "")

    # -- a skipped row --------------------------------------------------------------------------

    def _skipped(self, row: Mapping[str, Any], occurrence: datetime) -> None:
        t = self.trace_
        reason: str = row["error"] or "skipped"
        kind = next((f for prefix, f in _SKIP_PREFIXES if reason.startswith(prefix)), "skipped")
        t.fate = kind
        skip: dict[str, Any] = {
            "reason": reason,
            "run_id": row["id"],
            "recorded_at": row["finished_at"],
            "first": row["scheduled_for"],
            "last": row["last_scheduled_for"] or row["scheduled_for"],
            "occurrences": row["occurrences"],
        }
        t.facts["skip"] = skip
        t.summary = reason
        if kind in ("superseded", "coalesced", "backfill_limit"):
            skip["superseded_by"] = self._superseder(skip["last"])
            by = skip["superseded_by"]
            if by is not None:
                t.summary += f"; it gave way to {iso(by['scheduled_for'])} ({by['outcome']})"
        elif kind == "missed":
            self._late(skip, occurrence)
        elif kind == "calendar":
            skip["calendar"] = self._calendar_rule(reason.removeprefix("calendar "), occurrence)
            t.summary = f"{reason}: {skip['calendar']['rule']}"
        elif kind == "paused":
            self._pause_around(occurrence)

    def _superseder(self, last: datetime) -> dict[str, Any] | None:
        with suppress(PulseError):  # near an instant there may be no occurrence
            held = self.schedule.next_after_or_none(last, anchor=self.anchor)
            row = next((r for r in self.runs if r["scheduled_for"] > last), None)
            if row is not None and (held is None or row["scheduled_for"] <= held):
                return {"scheduled_for": row["scheduled_for"], "run_id": row["id"],
                        "outcome": row["outcome"]}  # fmt: skip
            if held is not None and held == self.job["scheduled_for"]:
                return {"scheduled_for": held, "run_id": self.job["run_id"],
                        "outcome": self.job["status"]}  # fmt: skip
        return None

    def _late(self, skip: dict[str, Any], occurrence: datetime) -> None:
        grace = float(self.job["misfire_grace"])
        late = (skip["recorded_at"] - (occurrence + self.offset)).total_seconds()
        skip["grace"] = grace
        skip["late_by"] = late
        skip["past_grace_by"] = late - grace
        self.trace_.summary = (
            f"missed: recorded {seconds_text(late)} after it was due, "
            f"{seconds_text(late - grace)} past its misfire_grace of {seconds_text(grace)}"
        )
        self.trace_.unknown.append(
            "the instant of the claim that judged it is not stored: the lateness is measured at "
            "the write that recorded the skip, which follows that claim within one claim step"
        )

    def _calendar_rule(self, name: str, occurrence: datetime) -> dict[str, Any]:
        day = occurrence.astimezone(load_zone(self.job["timezone"])).date()
        found = next((c for c in self.facts.calendars if c.name == name), None)
        rule = f"calendar {name} no longer exists (deleted since)"
        if found is not None and day in found.dates:
            rule = f"{day.isoformat()} is one of its listed dates"
        elif found is not None and found.excludes(day):
            region = (found.country or "") + (f"-{found.subdivision}" if found.subdivision else "")
            rule = f"{day.isoformat()} is a public holiday of {region}"
        elif found is not None:
            rule = f"calendar {name} no longer excludes {day.isoformat()} (changed since)"
        return {"name": name, "date": day, "rule": rule}

    # -- no row: the occurrence the job holds, or one after it ---------------------------------

    def _ahead(self, occurrence: datetime) -> None:
        t, job, now = self.trace_, self.job, self.facts.now
        status, held = job["status"], job["scheduled_for"]
        not_after = job["not_after"]
        if not_after is not None and occurrence > not_after:
            t.fate, t.summary = "window", f"after the job's window (not_after {iso(not_after)})"
        elif status == "completed":
            self._completed()
        elif status == "paused":
            self._paused_now()
        elif status == "failed":
            t.fate = "job_failed"
            t.summary = f"the job cannot be scheduled: {job['last_error'] or 'status failed'}"
        elif status == "running":
            self._overlap(occurrence)
        elif job["max_concurrency"] is not None and job["forks"] >= job["max_concurrency"]:
            t.fate = "overlap"
            t.summary = (
                f"waiting: overlap allow, and {job['forks']} of its occurrences run "
                f"(max_concurrency {job['max_concurrency']})"
            )
            t.facts["waiting_for"] = {"running": job["forks"], "max": job["max_concurrency"]}
        elif job["handler"] not in self.facts.live_handlers and job["next_run_at"] <= now:
            t.fate, t.summary = "no_handler", waiting_reason(job["handler"])
            t.facts["waiting_for"] = {"handler": job["handler"], "since": job["next_run_at"]}
        elif occurrence > held:
            t.fate = "pending"
            t.summary = f"the job holds {iso(held)} first; this one comes after it"
        elif job["next_run_at"] > now:
            t.fate = "pending"
            retry = " (a retry)" if job["attempt"] else ""
            t.summary = f"due at {iso(job['next_run_at'])}{retry}"
        else:
            t.fate = "due"
            late = (now - job["next_run_at"]).total_seconds()
            t.summary = (
                f"due since {iso(job['next_run_at'])} ({seconds_text(late)}), not claimed yet"
            )

    def _overlap(self, occurrence: datetime) -> None:
        t, job = self.trace_, self.job
        if occurrence + self.offset > self.facts.now:
            t.fate, t.summary = "pending", f"due at {iso(occurrence + self.offset)}"
            return
        t.fate = "overlap"
        holder = {
            "scheduled_for": job["scheduled_for"],
            "run_id": job["run_id"],
            "node": job["locked_by"],
            "since": job["claimed_at"],
        }
        t.facts["waiting_for"] = holder
        t.summary = (
            f"waiting for the run of {iso(job['scheduled_for'])} (run {job['run_id']} on "
            f"{job['locked_by']} since {iso(job['claimed_at'])}): overlap {job['overlap']}; "
            "when it ends, catch-up decides whether this one runs late or is skipped"
        )

    def _completed(self) -> None:
        t, job = self.trace_, self.job
        t.fate = "completed"
        why = "its schedule ended"
        if job["max_runs"] is not None and job["runs_done"] >= job["max_runs"]:
            why = f"it ran max_runs ({job['max_runs']}) times"
        elif job["not_after"] is not None:
            why = f"its window ended (not_after {iso(job['not_after'])})"
        t.summary = f"the job completed at {iso(job['last_finished_at'])}: {why}"
        t.facts["completed"] = {"at": job["last_finished_at"], "why": why}

    def _paused_now(self) -> None:
        t, job = self.trace_, self.job
        t.fate = "paused"
        pause = self._last("pause", self.facts.now)
        t.facts["pause"] = {
            "by": pause["actor"] if pause else None,
            "at": pause["at"] if pause else None,
            "reason": job["pause_reason"],
            "until": job["paused_until"],
        }
        t.summary = pause_words(t.facts["pause"]) + (
            f" until {iso(job['paused_until'])}" if job["paused_until"] else ", until resumed"
        )
        if pause is None:
            t.unknown.append(self._history_limit())

    # -- no row, before the occurrence the job holds -------------------------------------------

    def _behind(self, occurrence: datetime) -> None:
        t, job = self.trace_, self.job
        if occurrence < job["created_at"]:
            t.fate = "before_job"
            t.summary = f"the job was created at {iso(job['created_at'])}, after it"
        elif job["not_before"] is not None and occurrence < job["not_before"]:
            t.fate = "window"
            t.summary = f"before the job's window (not_before {iso(job['not_before'])})"
        elif self._pause_around(occurrence):
            t.summary += "; the resume skipped the occurrences inside the pause, unrecorded"
        else:
            t.fate = "unrecorded"
            t.summary = "no run row holds it"
            t.unknown.append(
                "why it has no row: run rows older than the history's keep window are pruned, "
                "and a schedule changed since may never have had this occurrence"
            )

    def _pause_around(self, occurrence: datetime) -> bool:
        """Record the pause in effect when ``occurrence`` was due, if the audit trail read
        shows one; return whether it did."""
        due = occurrence + self.offset
        pause = self._last("pause", due)
        if pause is None:
            if not self.facts.history_complete:
                self.trace_.unknown.append(self._history_limit())
            return False
        resume = next(
            (
                h
                for h in reversed(self.facts.history)
                if h["action"] == "resume" and h["at"] > pause["at"]
            ),
            None,
        )
        if resume is not None and resume["at"] <= due:
            return False
        reason = (pause["changes"].get("pause_reason") or [None, None])[1]
        facts: dict[str, Any] = {"by": pause["actor"], "at": pause["at"], "reason": reason}
        if resume is not None:
            facts["resumed_by"], facts["resumed_at"] = resume["actor"], resume["at"]
            mode = (resume["changes"].get("resume_mode") or [None, "skip"])[1]
            facts["resume_mode"] = mode
        self.trace_.fate = "paused"
        self.trace_.facts["pause"] = facts
        self.trace_.summary = pause_words(facts) + (
            f"; resumed {iso(facts['resumed_at'])} by {facts['resumed_by']} "
            f"(mode {facts['resume_mode']})"
            if resume is not None
            else ""
        )
        return True

    def _last(self, action: str, at_or_before: datetime) -> Mapping[str, Any] | None:
        return next(
            (h for h in self.facts.history if h["action"] == action and h["at"] <= at_or_before),
            None,
        )

    def _history_limit(self) -> str:
        oldest = self.facts.history[-1]["at"] if self.facts.history else None
        return (
            "pauses before "
            + (iso(oldest) if oldest else "the first change read")
            + ": only the job's newest audit rows are read (pgpulse job history has them all)"
        )

    def _note_schedule_changes(self, occurrence: datetime) -> None:
        changed = [
            h
            for h in self.facts.history
            if h["action"] == "update"
            and h["at"] > occurrence
            and {"schedule", "timezone", "spread"} & set(h["changes"])
        ]
        if changed:
            self.trace_.unknown.append(
                f"the schedule as it was: it changed at {iso(changed[-1]['at'])}, and the "
                "occurrence is computed from the current one"
            )


def _missing_job(facts: WhyFacts) -> Trace:
    t = Trace(facts.tenant, facts.name, None, facts.at, None)
    deleted = next((h for h in facts.history if h["action"] == "delete"), None)
    if deleted is None:
        t.summary = "no such job, and no record of one"
        return t
    t.job_id = deleted["job_id"]
    t.fate = "deleted"
    t.summary = f"the job was deleted at {iso(deleted['at'])} by {deleted['actor']}"
    t.facts["deleted"] = {"at": deleted["at"], "by": deleted["actor"], "source": deleted["source"]}
    t.unknown.append("what became of its occurrences: a job's runs are deleted with it")
    return t
