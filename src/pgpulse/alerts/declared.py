"""Alert rules declared with a job's definition, in a definitions file (``[jobs.NAME.alerts]``,
:mod:`pgpulse.cli.applyfile`): planned and written by :func:`pgpulse.db.reconcile.reconcile` in its
transaction, like the job's other fields.

A job that declares ``alerts`` owns its rules: after the write it has exactly the declared ones
(a kind no longer declared is removed; ``alerts = {}`` removes them all). A job that declares
none keeps the rules set by hand (CLI, API). The checks are the CLI's and the API's:
:func:`~pgpulse.alerts.rules.parse_rule` when the file is read, then, against the database and
before anything is written, that each notifier exists and fits the rule
(:func:`~pgpulse.alerts.store.notifier_ids`) and that a ``silence`` window is not shorter than
the job's new schedule's period (:func:`~pgpulse.alerts.rules.check_silence_window`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pgpulse.alerts.rules import RULE_KINDS, RuleSpec, check_silence_window
from pgpulse.alerts.store import ALERT_QUERIES, notifier_ids
from pgpulse.core.access import OPERATOR, Writer, check_alert_write
from pgpulse.core.errors import InvalidInput
from pgpulse.core.plan import Key, Plan, Step
from pgpulse.core.schedule import parse_schedule

__all__ = ["DeclaredRules", "RuleRefused", "plan_rules", "rules_document", "write_rules"]


class RuleRefused(InvalidInput):
    """A declared rule is refused against the database; ``job`` is its job's (tenant, name)
    and ``kind`` the rule (``field`` is ``alerts.<kind>.notify`` or ``alerts.<kind>.threshold``),
    so a file's reader can say where it is."""

    job: Key

    def __init__(self, exc: InvalidInput, job: Key, kind: str) -> None:
        key = "notify" if exc.field == "notifiers" else (exc.field or "threshold")
        super().__init__(exc.message, field=f"alerts.{kind}.{key}", value=exc.value)
        self.job = job
        self.kind = kind


def rules_document(specs: Sequence[RuleSpec]) -> dict[str, dict[str, Any]]:
    """Rules as a plan shows them: ``{kind: {"notify": [...], "threshold": n}}`` by kind
    (``threshold`` left out for a kind that takes none)."""
    document: dict[str, dict[str, Any]] = {}
    for spec in sorted(specs, key=lambda s: s.rule):
        entry: dict[str, Any] = {"notify": list(spec.notifiers)}
        if spec.threshold is not None:
            entry["threshold"] = spec.threshold
        document[spec.rule] = entry
    return document


async def _stored(conn: Any, job_ids: list[int]) -> dict[int, list[RuleSpec]]:
    cur = await conn.execute(ALERT_QUERIES["job_rules"], {"job_ids": job_ids})
    stored: dict[int, list[RuleSpec]] = {}
    for row in await cur.fetchall():
        spec = RuleSpec(row["rule"], row["threshold"], tuple(row["notifiers"]))
        stored.setdefault(row["job_id"], []).append(spec)
    return stored


async def plan_rules(
    conn: Any,
    plans: Sequence[Plan],
    rules: Mapping[Key, Sequence[RuleSpec]],
    *,
    clock: datetime,
    writer: Writer = OPERATOR,
) -> list[Plan]:
    """Check the declared rules against the database and put their changes in the plans: a
    step whose job's rules change gets ``alerts: [old, new]`` among its changes (an
    ``unchanged`` step becomes an ``update``).

    Args:
        conn: a connection in the reconcile's transaction.
        plans: the sources' plans.
        rules: the declared rules of each job that declares them, by (tenant, name).
        clock: the database's now (for the ``silence`` window check).
        writer: who writes (:func:`~pgpulse.core.access.check_alert_write`, as for the CLI).

    Raises:
        RuleRefused: a notifier does not exist or does not fit the rule, or a ``silence``
            window is shorter than the job's schedule's period; nothing is written.
        Forbidden: ``writer`` may not manage the alerts of a job's tenant, or may not send
            them to a notifier (neither the tenant's nor shared with it).
    """
    ids = [
        step.job_id
        for plan in plans
        for step in plan.steps
        if step.job_id is not None and (step.tenant, step.name) in rules
    ]
    stored = await _stored(conn, ids) if ids else {}
    out = []
    for plan in plans:
        steps = []
        for step in plan.steps:
            declared = rules.get((step.tenant, step.name))
            if declared is None or step.spec is None or step.action not in _PLANNED:
                steps.append(step)
                continue
            check_alert_write(writer, step.tenant)
            for spec in declared:
                await _check(conn, spec, step, clock, writer)
            old = rules_document(stored.get(step.job_id, []) if step.job_id else [])
            new = rules_document(declared)
            if old != new:
                action = "update" if step.action == "unchanged" else step.action
                step = dataclasses.replace(
                    step, action=action, changes={**step.changes, "alerts": [old, new]}
                )
            steps.append(step)
        out.append(Plan(plan.source, steps))
    return out


_PLANNED = frozenset({"create", "update", "unchanged"})


async def _check(conn: Any, spec: RuleSpec, step: Step, clock: datetime, writer: Writer) -> None:
    """The database's checks of one declared rule of ``step``'s job (its new definition);
    ``writer``'s right to use each notifier for the job's tenant
    (:func:`~pgpulse.core.access.check_notifier_use`) among them."""
    assert step.spec is not None
    try:
        await notifier_ids(conn, spec, tenant=step.tenant, writer=writer)
        if RULE_KINDS[spec.rule].window and spec.threshold is not None:
            schedule = parse_schedule(step.spec.schedule, step.spec.timezone)
            check_silence_window(spec.threshold, schedule, now=clock, anchor=None)
    except InvalidInput as exc:
        raise RuleRefused(exc, (step.tenant, step.name), spec.rule) from None


async def write_rules(
    conn: Any, rules: Mapping[Key, Sequence[RuleSpec]], job_ids: Mapping[Key, int]
) -> None:
    """Make each declaring job's own rules exactly its declared ones (after its definition is
    written: ``job_ids`` has the ids of created jobs too)."""
    for key, declared in rules.items():
        job_id = job_ids.get(key)
        if job_id is None:
            continue
        await conn.execute(
            ALERT_QUERIES["remove_job_rules_except"],
            {"job_id": job_id, "keep": [spec.rule for spec in declared]},
        )
        for spec in declared:
            await conn.execute(
                ALERT_QUERIES["set_rule"],
                {
                    "job_id": job_id,
                    "rule": spec.rule,
                    "threshold": spec.threshold,
                    "notifiers": await notifier_ids(conn, spec),
                },
            )


@dataclasses.dataclass(frozen=True, slots=True)
class DeclaredRules:
    """The alert rules declared with jobs' definitions, by (tenant, name), as
    :func:`pgpulse.db.reconcile.reconcile` plans and writes them in its transaction (its
    ``rules``: :class:`~pgpulse.db.reconcile.Declared`).

    Attributes:
        rules: each declaring job's rules.
    """

    rules: Mapping[Key, Sequence[RuleSpec]]

    async def plan(
        self, conn: Any, plans: Sequence[Plan], *, clock: datetime, writer: Writer = OPERATOR
    ) -> list[Plan]:
        """:func:`plan_rules` (RuleRefused, Forbidden: nothing is written)."""
        return await plan_rules(conn, plans, self.rules, clock=clock, writer=writer)

    async def write(self, conn: Any, job_ids: Mapping[Key, int]) -> None:
        """:func:`write_rules`."""
        await write_rules(conn, self.rules, job_ids)
