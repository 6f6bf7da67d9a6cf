"""Plans: what making the database match one source's definitions would change (pure).

A *source* is where definitions come from (``apply:<name>``, ``crontab:<path>``,
``code:<app>``). ``pgpulse apply``, ``crontab import --sync`` and ``App(prune=True)`` read the
source's definitions, lock its jobs, and compute a :class:`Plan` here from what is stored: per
job ``create``, ``update`` (with the fields that change, old and new), ``unchanged``, ``delete``
(a job of the source that the definitions no longer hold, with pruning), or ``orphan`` (the
same without pruning: kept, and listed). The store then writes the plan in the same transaction
(:meth:`Store.reconcile <pgpulse.db.store.Store.reconcile>`), or, for a dry run, writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pgpulse.core.audit import definition_diff, definition_of_row, definition_of_spec
from pgpulse.core.jobs import JobSpec

__all__ = ["Action", "Plan", "Step", "format_plan", "plan_source"]

Action = Literal["create", "update", "unchanged", "delete", "orphan"]
#: (tenant, name) of a job.
Key = tuple[str, str]
#: Actions that write something.
WRITES: frozenset[str] = frozenset({"create", "update", "delete"})


@dataclass(frozen=True, slots=True)
class Step:
    """One job's part of a plan.

    Attributes:
        action: ``create``, ``update``, ``unchanged``, ``delete`` or ``orphan`` (a job of the
            source its definitions no longer hold, kept because pruning was not asked for).
        tenant: the job's tenant.
        name: the job's name after the plan (for a rename, the new one).
        spec: the definition to write (``create``, ``update``, ``unchanged``), else ``None``.
        job_id: the stored job's id; for ``create``, ``None`` until the plan is written
            (:func:`pgpulse.db.reconcile.reconcile` then gives the created job's).
        changes: ``{"field": [old, new]}`` of an update (``name`` too when it is renamed).
        rename_from: an update's current name, when the job is also renamed (crontab sync).
    """

    action: Action
    tenant: str
    name: str
    spec: JobSpec | None = None
    job_id: int | None = None
    changes: dict[str, list[Any]] = field(default_factory=dict)
    rename_from: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """The steps that make the stored jobs of ``source`` match its definitions.

    Attributes:
        source: the source (``apply:nightly``, ``crontab:/etc/crontab``).
        steps: one per job, in the definitions' order, then the jobs they no longer hold.
    """

    source: str
    steps: list[Step]

    @property
    def changes_anything(self) -> bool:
        """Whether applying the plan writes anything (creates, updates or deletes)."""
        return any(step.action in WRITES for step in self.steps)

    def count(self, action: Action) -> int:
        """How many steps have ``action``."""
        return sum(step.action == action for step in self.steps)


def plan_source(
    source: str,
    specs: Sequence[JobSpec],
    stored: Mapping[Key, Mapping[str, Any]],
    *,
    prune: bool,
) -> Plan:
    """Plan the jobs of ``source`` by name: each spec creates its job, updates it (a job of
    another source with that name is taken over: ``source`` is one of its changes), or leaves
    it unchanged; every stored job of ``source`` no spec names is deleted (``prune``) or listed
    as an orphan.

    Args:
        source: the source the specs come from (each spec's ``source``).
        specs: the definitions, unique by (tenant, name).
        stored: the locked rows (:func:`pgpulse.db.writes.lock_definitions`) of the specs' names
            and of every job of ``source``.
        prune: delete the source's jobs that no spec names.
    """
    steps = [_step(spec, stored.get((spec.tenant, spec.name))) for spec in specs]
    named = {(spec.tenant, spec.name) for spec in specs}
    steps.extend(leftovers(source, stored, named, prune=prune))
    return Plan(source, steps)


def _step(spec: JobSpec, row: Mapping[str, Any] | None) -> Step:
    if row is None:
        return Step("create", spec.tenant, spec.name, spec)
    changes = definition_diff(definition_of_row(dict(row)), definition_of_spec(spec))
    return Step(
        "update" if changes else "unchanged", spec.tenant, spec.name, spec, row["id"], changes
    )


def leftovers(
    source: str, stored: Mapping[Key, Mapping[str, Any]], kept: Iterable[Key], *, prune: bool
) -> list[Step]:
    """The stored jobs of ``source`` not in ``kept``, as ``delete`` (``prune``) or ``orphan``
    steps, in (tenant, name) order."""
    keep = set(kept)
    return [
        Step("delete" if prune else "orphan", tenant, name, job_id=row["id"])
        for (tenant, name), row in sorted(stored.items())
        if row["source"] == source and (tenant, name) not in keep
    ]


def _shown(value: Any) -> str:
    """A field's value as a plan shows it: JSON (``null``, quoted text, objects)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


_MARKS = {"create": "+", "update": "~", "unchanged": "=", "delete": "-", "orphan": "?"}


def format_plan(plan: Plan, *, verbose: bool = False) -> list[str]:
    """The lines a person reads: one per job (``+`` create, ``~`` update, ``=`` unchanged,
    ``-`` delete, ``?`` kept although its source no longer defines it), an update's changed
    fields below it (``field: old -> new``), then a summary line. ``verbose`` adds a created
    job's fields."""
    lines: list[str] = []
    for step in plan.steps:
        label = f"{step.tenant}/{step.name}" if step.tenant != "default" else step.name
        note = {
            "create": "create",
            "update": "update",
            "unchanged": "unchanged",
            "delete": "delete (no longer defined)",
            "orphan": "no longer defined; kept (--prune deletes it)",
        }[step.action]
        lines.append(f"{_MARKS[step.action]} {label}: {note}")
        if step.action == "update" or (verbose and step.action == "create"):
            shown = step.changes.items() if step.action == "update" else _all_fields(step)
            for key, (old, new) in shown:
                lines.append(f"    {key}: {_shown(old)} -> {_shown(new)}")
    parts = [
        f"{plan.count('create')} to create",
        f"{plan.count('update')} to update",
        f"{plan.count('delete')} to delete",
        f"{plan.count('unchanged')} unchanged",
    ]
    if plan.count("orphan"):
        parts.append(f"{plan.count('orphan')} no longer defined, kept")
    lines.append(f"{plan.source}: {', '.join(parts)}")
    return lines


def _all_fields(step: Step) -> Iterable[tuple[str, list[Any]]]:
    """A created job's fields, and what else its step sets (its declared alert rules)."""
    assert step.spec is not None
    return {**definition_diff(None, definition_of_spec(step.spec)), **step.changes}.items()
