"""Alert rules: their names, thresholds and the checks a rule passes before it is written (pure:
no I/O, no clock reads; the instants come from the caller).

A rule is (job or cluster-wide default, kind, threshold, notifiers). The kinds
(docs/alerts.md, "Rules"):

* per job — ``failures`` N consecutive failed runs (a count, default 1), ``late`` S seconds,
  ``skipped``, ``missed`` S seconds, ``silence`` W seconds (the dead-man's switch), ``recovered``;
  ``checkin``, which fires nothing: the job's attempts ping its ``checkin`` notifiers; and
  ``deadline``, an occurrence not succeeded by the job's own ``deadline`` field;
* cluster — ``node_died``, ``leader_changed``, ``lag`` S seconds, ``no_live_node`` S seconds;
  and ``split_brain`` and ``db_clock``, which the nodes raise from what they observe
  (:mod:`pgpulse.node.split_brain`, :mod:`pgpulse.node.db_clock`).

A job's own rule of a kind replaces the cluster-wide default of that kind.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from pgpulse.core.errors import InvalidInput
from pgpulse.core.schedule import Schedule
from pgpulse.core.wording import given, seconds_text

#: What a rule is about: one job (set per job, or as the default of every job without its own),
#: or the cluster (set with ``--cluster``).
Scope = Literal["job", "cluster"]


#: What a rule's notifiers take: alert documents (``webhook``, ``email``), or the check-in pings
#: of the job's attempts (``checkin``). A notifier kind declares the one it takes
#: (:data:`pgpulse.alerts.notifiers.NOTIFIER_KINDS`).
Takes = Literal["alerts", "checkins"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleKind:
    """One kind of alert rule: everything the edges need to know about it, declared once in
    :data:`RULE_KINDS`. :func:`parse_rule` checks a rule by its entry; the CLI's choices and
    help, the API's path parameter and body description, the apply files' ``[alerts]`` keys and
    the evaluation's statements (:data:`pgpulse.alerts.store.JOB_RULE_STATEMENTS`) derive from
    the table. Adding a kind is its entry here, a migration that widens the rules' CHECK and,
    when rows show it, its statements in ``sql/alerts.sql``.

    Attributes:
        name: the kind (``failures``...).
        scope: :data:`Scope`.
        doc: what fires it, in a sentence (docs/alerts.md, "Rules").
        threshold: what its threshold means; ``None``: it takes none.
        unit: the threshold's unit, ``runs`` (a whole number) or ``seconds``.
        default: the threshold when none is given; ``None``: it must be given.
        title: its events' title, as people read it (a message's subject, a webhook's text).
        takes: :data:`Takes`, what its notifiers must take.
        occurrence: its event is about one occurrence (the webhook's ``occurrence``, else
            ``null``).
        window: its threshold is a window the job's schedule must fit, checked against the
            job when the rule is written (:func:`check_silence_window`).
        statements: its evaluation statements in ``sql/alerts.sql`` (none: nodes raise it
            from what they observe, or it fires nothing).
        leader: only the leader sends its statements (a cluster rule's always are): what they
            find does not follow from a run a node just recorded, so the leader's regular
            evaluation is soon enough.
        first: evaluated before the other kinds (``recovered``: it closes only the events
            fired before it).
    """

    name: str
    scope: Scope
    doc: str
    threshold: str | None = None
    unit: Literal["runs", "seconds"] | None = None
    default: float | None = None
    title: str = ""
    takes: Takes = "alerts"
    occurrence: bool = False
    window: bool = False
    statements: tuple[str, ...] = ()
    leader: bool = False
    first: bool = False


#: Every rule kind, in the order messages list them.
RULE_KINDS: dict[str, RuleKind] = {
    kind.name: kind
    for kind in (
        RuleKind(
            name="failures",
            title="Job failed",
            occurrence=True,
            scope="job",
            doc="N consecutive failed runs",
            threshold="consecutive failed runs",
            unit="runs",
            default=1.0,
            statements=("alert_failures",),
        ),
        RuleKind(
            name="late",
            title="Job is late",
            occurrence=True,
            scope="job",
            doc="an occurrence not started S seconds after it was due",
            threshold="seconds after scheduled_for without a start",
            unit="seconds",
            default=60.0,
            statements=("alert_late",),
        ),
        RuleKind(
            name="skipped",
            title="Occurrence skipped",
            occurrence=True,
            scope="job",
            doc="occurrences recorded as skipped",
            statements=("alert_skipped",),
        ),
        RuleKind(
            name="missed",
            title="Occurrence missed",
            occurrence=True,
            scope="job",
            doc="a backfill occurrence still not run S seconds after it was due",
            threshold="seconds a backfill occurrence may wait",
            unit="seconds",
            default=300.0,
            statements=("alert_missed",),
        ),
        RuleKind(
            name="silence",
            title="Job is silent",
            scope="job",
            doc="no successful run for W seconds (the dead man's switch)",
            threshold="seconds without a successful run",
            unit="seconds",
            window=True,
            statements=("alert_silence",),
        ),
        RuleKind(
            name="recovered",
            title="Job recovered",
            scope="job",
            doc="a success after the job's open alerts",
            statements=("alert_recovered",),
            first=True,
        ),
        RuleKind(
            name="checkin",
            title="Check-in",
            occurrence=True,
            scope="job",
            doc="fires nothing: the job's attempts ping its checkin notifiers",
            takes="checkins",
        ),
        RuleKind(
            name="deadline",
            title="Deadline passed",
            occurrence=True,
            scope="job",
            doc="an occurrence not succeeded by its job's deadline (running, retrying, waiting "
            "or not started); the run goes on",
            statements=("alert_deadline", "alert_deadline_ended"),
            leader=True,
        ),
        RuleKind(
            name="node_died",
            title="Node died holding leases",
            scope="cluster",
            doc="a node that ran attempts went silent past its ttl",
            statements=("alert_node_died",),
        ),
        RuleKind(
            name="leader_changed",
            title="Leader changed",
            scope="cluster",
            doc="another node leads",
            statements=("alert_leader_changed",),
        ),
        RuleKind(
            name="lag",
            title="Lag over threshold",
            scope="cluster",
            doc="a job due more than S seconds ago and not started",
            threshold="seconds the most overdue job may wait",
            unit="seconds",
            default=60.0,
            statements=("alert_lag",),
        ),
        RuleKind(
            name="no_live_node",
            title="No live node",
            scope="cluster",
            doc="the cluster had no live node for more than S seconds",
            threshold="seconds the cluster may have no live node",
            unit="seconds",
            default=60.0,
        ),
        RuleKind(
            name="split_brain",
            title="Split brain: several hosts accept writes",
            scope="cluster",
            doc="two writable primaries (raised by the nodes)",
        ),
        RuleKind(
            name="db_clock",
            title="Database clock stepped",
            scope="cluster",
            doc="the database's clock stepped (raised by the nodes)",
        ),
    )
}
#: Rules about one job, and what their threshold means (None: it takes none).
JOB_RULES: dict[str, str | None] = {
    k.name: k.threshold for k in RULE_KINDS.values() if k.scope == "job"
}
#: Rules about the cluster (set with ``--cluster``), and their threshold.
CLUSTER_RULES: dict[str, str | None] = {
    k.name: k.threshold for k in RULE_KINDS.values() if k.scope == "cluster"
}
ALL_RULES = {**JOB_RULES, **CLUSTER_RULES}
#: Thresholds used when none is given.
DEFAULT_THRESHOLDS = {k.name: k.default for k in RULE_KINDS.values() if k.default is not None}
#: The rule whose notifiers are pinged by attempts (``checkin`` notifiers, and only they).
CHECKIN_RULE = "checkin"
#: Largest threshold accepted: a count of 10,000 failures, or about 10 years of seconds.
MAX_THRESHOLD = 10 * 366 * 86400.0
#: How far ahead a schedule's longest gap between occurrences is sought, and how many
#: occurrences at most (a `* * * * * *` schedule is judged by its first 2,000 seconds).
PERIOD_HORIZON = timedelta(days=800)
PERIOD_SAMPLES = 2000


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """A validated rule, before it is written.

    Attributes:
        rule: its kind (:data:`ALL_RULES`).
        threshold: a count (``failures``) or seconds (``late``, ``missed``, ``silence``,
            ``lag``); ``None`` for a kind that takes none.
        notifiers: names of the notifiers it goes to (checked to exist when written).
    """

    rule: str
    threshold: float | None
    notifiers: tuple[str, ...]


def parse_rule(rule: object, threshold: object, notifiers: object, *, cluster: bool) -> RuleSpec:
    """Validate a rule as given on any path (CLI, API, ``App``).

    Args:
        rule: the kind's name.
        threshold: a number (count or seconds), or ``None`` for the kind's default.
        notifiers: a list of notifier names (at least one).
        cluster: whether it is a cluster rule or default (no job).

    Raises:
        InvalidInput: ``field="rule"`` for an unknown kind (or a job rule given as a cluster rule
            and the other way round: ``node_died`` needs no job, ``silence`` a job or the
            default); ``field="threshold"`` for one that is not a positive finite number (a
            whole number for ``failures``) or given to a kind that takes none;
            ``field="notifiers"`` for an empty list or a name that is not a string.
    """
    kind = RULE_KINDS.get(rule) if isinstance(rule, str) else None
    if kind is None:
        raise InvalidInput(
            f"rule must be one of {', '.join(RULE_KINDS)}, got {rule!r}", field="rule", value=rule
        )
    if kind.scope == "cluster" and not cluster:
        raise InvalidInput(
            f"rule {rule!r} is about the cluster, not a job: set it as a cluster rule",
            field="rule",
            value=rule,
        )
    value = _threshold(kind, threshold)
    if (
        not isinstance(notifiers, list | tuple)
        or not notifiers
        or not all(isinstance(n, str) and n for n in notifiers)
    ):
        raise InvalidInput(
            f"notifiers must be a non-empty list of notifier names, got {notifiers!r}",
            field="notifiers",
            value=notifiers,
        )
    return RuleSpec(kind.name, value, tuple(dict.fromkeys(notifiers)))


def _threshold(kind: RuleKind, threshold: object) -> float | None:
    """``threshold`` of a rule of ``kind`` checked by its entry, or the kind's default."""
    rule = kind.name
    if threshold is None:
        if kind.threshold is not None and kind.default is None:
            raise InvalidInput(
                f"rule {rule!r} needs a threshold ({kind.threshold})", field="threshold", value=None
            )
        return kind.default
    if kind.threshold is None:
        raise InvalidInput(
            f"rule {rule!r} takes no threshold, got {given(threshold)}",
            field="threshold",
            value=threshold,
        )
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise InvalidInput(
            f"threshold must be a number, got {given(threshold)}",
            field="threshold",
            value=threshold,
        )
    value = float(threshold)
    if not math.isfinite(value) or value <= 0 or value > MAX_THRESHOLD:
        raise InvalidInput(
            f"threshold must be more than 0 and at most {MAX_THRESHOLD:,.0f}, "
            f"got {given(threshold)}",
            field="threshold",
            value=threshold,
        )
    if kind.unit == "runs" and value != int(value):
        raise InvalidInput(
            f"threshold of {rule!r} is a whole number of runs, got {given(threshold)}",
            field="threshold",
            value=threshold,
        )
    return value


def declared_rule(kind: str, given: object) -> RuleSpec:
    """A job's rule as code (:meth:`App.job <pgpulse.app.App.job>`'s ``alerts``) and apply
    files (``[jobs.NAME.alerts]``) declare it: ``{"notify": [names], "threshold": n}`` under
    its kind, validated by :func:`parse_rule` (``notify`` may be one name).

    Raises:
        InvalidInput: ``field="alerts.<kind>"`` for an entry that is not a mapping of
            ``notify`` and ``threshold``; else the rule's own refusal (``rule``, ``threshold``,
            ``notifiers``).
    """
    if not isinstance(given, Mapping) or set(given) - {"notify", "threshold"}:
        raise InvalidInput(
            f"alerts.{kind} must be a mapping of 'notify' (notifier names) and 'threshold', "
            f"got {given!r}",
            field=f"alerts.{kind}",
            value=given,
        )
    notify = given.get("notify")
    names = [notify] if isinstance(notify, str) else notify
    if names is not None and not isinstance(names, list | tuple):
        names = [names]  # refused by parse_rule, naming the value
    return parse_rule(kind, given.get("threshold"), list(names or ()), cluster=False)


def check_notifier_kinds(spec: RuleSpec, kinds: dict[str, str]) -> None:
    """Refuse a rule whose notifiers cannot take what it sends (:attr:`RuleKind.takes` against
    the notifier kind's own, :data:`pgpulse.alerts.notifiers.NOTIFIER_KINDS`): a ``checkin``
    rule names ``checkin`` notifiers only (its attempts ping them), every other rule none of
    them (a check-in monitor takes pings, not alert documents).

    Args:
        spec: the validated rule.
        kinds: the kind of each notifier the rule names, by name.

    Raises:
        InvalidInput: ``field="notifiers"``, naming the first notifier that does not fit.
    """
    from pgpulse.alerts.notifiers import NOTIFIER_KINDS  # which imports this module

    wanted = RULE_KINDS[spec.rule].takes
    for name in spec.notifiers:
        kind = kinds[name]
        takes = NOTIFIER_KINDS[kind].takes
        if wanted == takes:
            continue
        if wanted == "checkins":
            raise InvalidInput(
                f"notifiers: rule {spec.rule!r} pings checkin notifiers, and {name!r} is a {kind}",
                field="notifiers",
                value=name,
            )
        raise InvalidInput(
            f"notifiers: {name!r} is a {kind} notifier, which takes no alerts "
            "(use rule 'checkin' for a job's check-ins)",
            field="notifiers",
            value=name,
        )


def longest_gap(schedule: Schedule, after: datetime, anchor: datetime | None) -> float | None:
    """The longest time between two consecutive occurrences of ``schedule`` after ``after``
    (seconds), over :data:`PERIOD_HORIZON` or :data:`PERIOD_SAMPLES` occurrences, whichever
    comes first, and next to every change of its zone's UTC offset to come (the night the
    clocks go back, ``50 0-23 * * *`` is two hours apart once: the sample may not reach it);
    ``None`` when it has fewer than two occurrences there (a one-off, a schedule that fires
    once every few years).

    Args:
        schedule: the job's parsed schedule.
        after: an aware UTC instant to start from (the database's now).
        anchor: an interval schedule's anchor (the job's ``anchor_at``).
    """
    if schedule.interval is not None:
        return schedule.interval.total_seconds()
    end = after + PERIOD_HORIZON
    previous = schedule.next_after_or_none(after, anchor=anchor)
    longest: float | None = None
    for _ in range(PERIOD_SAMPLES):
        if previous is None or previous > end:
            break
        following = schedule.next_after_or_none(previous, anchor=anchor)
        if following is None or following > end:
            break
        gap = (following - previous).total_seconds()
        longest = gap if longest is None else max(longest, gap)
        previous = following
    at_changes = schedule.longest_gap_at_changes(after)
    if longest is None or at_changes is None:
        return longest
    return max(longest, at_changes.total_seconds())


def check_silence_window(
    window: float, schedule: Schedule, *, now: datetime, anchor: datetime | None
) -> None:
    """Refuse a ``silence`` window the schedule cannot meet: shorter than its longest gap
    between occurrences, the window would fire between two healthy runs.

    Args:
        window: the rule's threshold, seconds.
        schedule: the job's schedule.
        now: the instant to measure from (aware, UTC: the database's now).
        anchor: an interval schedule's anchor.

    Raises:
        InvalidInput: ``field="threshold"``, naming the window and the schedule's period; also
            for a schedule with fewer than two occurrences ahead (nothing to watch).
    """
    gap = longest_gap(schedule, now, anchor)
    if gap is None:
        raise InvalidInput(
            f"threshold: schedule {schedule.expr!r} has no two occurrences in the next "
            f"{PERIOD_HORIZON.days} days, so a silence window cannot watch it",
            field="threshold",
            value=window,
        )
    if window < gap:
        raise InvalidInput(
            f"threshold: a silence window of {seconds_text(window)} is shorter than the period of "
            f"schedule {schedule.expr!r} (up to {seconds_text(gap)} between occurrences)",
            field="threshold",
            value=window,
        )
