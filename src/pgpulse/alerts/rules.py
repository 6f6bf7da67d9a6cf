"""Alert rules: their names, thresholds and the checks a rule passes before it is written (pure:
no I/O, no clock reads; the instants come from the caller).

A rule is (job or cluster-wide default, kind, threshold, notifiers). The kinds
(docs/alerts.md, "Rules"):

* per job — ``failures`` N consecutive failed runs (a count, default 1), ``late`` S seconds,
  ``skipped``, ``missed`` S seconds, ``silence`` W seconds (the dead-man's switch), ``recovered``;
  and ``checkin``, which fires nothing: the job's attempts ping its ``checkin`` notifiers;
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

from pgpulse.core.errors import InvalidInput
from pgpulse.core.schedule import Schedule
from pgpulse.core.wording import given, seconds_text

#: Rules about one job, and what their threshold means (None: it takes none).
JOB_RULES: dict[str, str | None] = {
    "failures": "consecutive failed runs",
    "late": "seconds after scheduled_for without a start",
    "skipped": None,
    "missed": "seconds a backfill occurrence may wait",
    "silence": "seconds without a successful run",
    "recovered": None,
    "checkin": None,
}
#: Rules about the cluster (set with ``--cluster``), and their threshold.
CLUSTER_RULES: dict[str, str | None] = {
    "node_died": None,
    "leader_changed": None,
    "lag": "seconds the most overdue job may wait",
    "no_live_node": "seconds the cluster may have no live node",
    "split_brain": None,
    "db_clock": None,
}
ALL_RULES = {**JOB_RULES, **CLUSTER_RULES}
#: Thresholds used when none is given.
DEFAULT_THRESHOLDS = {
    "failures": 1.0,
    "late": 60.0,
    "missed": 300.0,
    "lag": 60.0,
    "no_live_node": 60.0,
}
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
    if not isinstance(rule, str) or rule not in ALL_RULES:
        raise InvalidInput(
            f"rule must be one of {', '.join(ALL_RULES)}, got {rule!r}", field="rule", value=rule
        )
    if rule in CLUSTER_RULES and not cluster:
        raise InvalidInput(
            f"rule {rule!r} is about the cluster, not a job: set it as a cluster rule",
            field="rule",
            value=rule,
        )
    meaning = ALL_RULES[rule]
    value: float | None = None
    if threshold is not None:
        if meaning is None:
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
        if rule == "failures" and value != int(value):
            raise InvalidInput(
                f"threshold of 'failures' is a whole number of runs, got {given(threshold)}",
                field="threshold",
                value=threshold,
            )
    elif meaning is not None:
        value = DEFAULT_THRESHOLDS.get(rule)
        if value is None:
            raise InvalidInput(
                f"rule {rule!r} needs a threshold ({meaning})", field="threshold", value=None
            )
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
    return RuleSpec(rule, value, tuple(dict.fromkeys(notifiers)))


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
    """Refuse a rule whose notifiers cannot take what it sends: a ``checkin`` rule names
    ``checkin`` notifiers only (its attempts ping them), every other rule none of them (a
    check-in monitor takes pings, not alert documents).

    Args:
        spec: the validated rule.
        kinds: the kind of each notifier the rule names, by name.

    Raises:
        InvalidInput: ``field="notifiers"``, naming the first notifier that does not fit.
    """
    for name in spec.notifiers:
        kind = kinds[name]
        if spec.rule == CHECKIN_RULE and kind != "checkin":
            raise InvalidInput(
                f"notifiers: rule 'checkin' pings checkin notifiers, and {name!r} is a {kind}",
                field="notifiers",
                value=name,
            )
        if spec.rule != CHECKIN_RULE and kind == "checkin":
            raise InvalidInput(
                f"notifiers: {name!r} is a checkin notifier, which takes no alerts "
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
