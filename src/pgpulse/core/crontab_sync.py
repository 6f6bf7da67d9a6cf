"""``crontab import --sync``: which stored job each line of an edited crontab is (pure).

A crontab file is one source, ``crontab:<absolute path>``. Syncing makes that source's jobs
match the file: each line is paired with one stored job of the source, and then that job is
left unchanged, updated in place (same id, so its run history and audit trail stay), or, for a
line no job pairs with, created; a job no line pairs with is deleted. Lines are paired in three
passes, each in file order against the jobs in creation (id) order, each pass over what the
previous ones left (and only within the job's tenant):

1. **Same line**: the same schedule, zone, user, command and standard input (what the job's
   name hashes, :func:`~pgpulse.core.crontab.job_name_for`). The line is unchanged, or changed only
   in its environment (a new ``PATH=`` above it): an update. A moved line pairs here, so moving
   lines changes nothing; of identical lines, the first pairs with the oldest job.
2. **Same command** (user, command and standard input) under another schedule or zone: an
   edited schedule — an update in place.
3. **Same schedule** (schedule, zone and user) with another command: an edited command — an
   update in place.

A line both rescheduled and given another command pairs with nothing: its old job is deleted
and a new one created. An updated job takes the name its new line gives (the rename is in its
audit trail), so a later plain ``crontab import`` of the same file finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from pgpulse.core.audit import definition_diff, definition_of_row, definition_of_spec
from pgpulse.core.crontab import identity_of
from pgpulse.core.jobs import JobSpec
from pgpulse.core.plan import Key, Plan, Step, leftovers

__all__ = ["plan_crontab_sync"]

_Identity = tuple[Any, ...]
#: The three passes: what of (schedule, zone, user, command, stdin) must be equal.
_PASSES: tuple[Callable[[_Identity], Hashable], ...] = (
    lambda i: i,
    lambda i: (i[2], i[3], i[4]),
    lambda i: (i[0], i[1], i[2]),
)


def plan_crontab_sync(
    source: str, specs: Sequence[JobSpec], stored: Mapping[Key, Mapping[str, Any]]
) -> Plan:
    """Plan the sync of one crontab file (see the module docstring for how lines pair).

    Args:
        source: the file's source, ``crontab:<absolute path>``.
        specs: the file's lines as jobs (:func:`~pgpulse.core.crontab.entry_to_spec`), in file
            order.
        stored: the locked rows of the source's jobs and of the jobs the specs name.

    Returns:
        The plan: per line ``create``, ``update`` (with ``rename_from`` when the name changes)
        or ``unchanged``; then a ``delete`` per job no line pairs with.
    """
    jobs = sorted(
        (row for row in stored.values() if row["source"] == source), key=lambda r: r["id"]
    )
    wanted = [identity_of(s.schedule, s.timezone, s.payload) for s in specs]
    have = [identity_of(r["schedule"], r["timezone"], r["payload"]) for r in jobs]
    paired: dict[int, Mapping[str, Any]] = {}
    free = list(range(len(jobs)))
    for key in _PASSES:
        for index, identity in enumerate(wanted):
            if index in paired:
                continue
            tenant = specs[index].tenant
            match = next(
                (j for j in free if jobs[j]["tenant"] == tenant and key(have[j]) == key(identity)),
                None,
            )
            if match is not None:
                paired[index] = jobs[match]
                free.remove(match)
    steps: list[Step] = []
    for index, spec in enumerate(specs):
        row = paired.get(index) or stored.get((spec.tenant, spec.name))
        if row is None:
            steps.append(Step("create", spec.tenant, spec.name, spec))
            continue
        changes = definition_diff(definition_of_row(dict(row)), definition_of_spec(spec))
        renamed = row["name"] != spec.name
        if renamed:
            changes = {"name": [row["name"], spec.name], **changes}
        steps.append(
            Step(
                "update" if changes else "unchanged",
                spec.tenant,
                spec.name,
                spec,
                row["id"],
                changes,
                rename_from=row["name"] if renamed else None,
            )
        )
    kept = {(r["tenant"], r["name"]) for r in paired.values()}
    kept |= {(s.tenant, s.name) for s in specs}
    steps.extend(leftovers(source, stored, kept, prune=True))
    return Plan(source, steps)
