"""Who changes a job, and what changed: the audit trail's values (pure: no I/O, no clock).

Every write of a job — create, update, pause, resume, trigger, backfill, delete — is recorded in
``pgpulse_job_history`` in the transaction that makes it (one commits only with the other),
with the :class:`Actor` that made it and the fields that changed (:func:`definition_diff`). The
same diff is the plan of ``pgpulse apply`` and ``crontab import --sync`` (:mod:`pgpulse.core.plan`).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pgpulse.core.definition import job_fields
from pgpulse.core.jobs import JobSpec

__all__ = [
    "DEFINITION_FIELDS",
    "SETTABLE_FIELDS",
    "Actor",
    "cli_actor",
    "definition_diff",
    "definition_of_row",
    "definition_of_spec",
]

#: The fields of a job's definition, in the order plans and histories show them: the model's
#: (:mod:`pgpulse.core.definition`) but ``tenant`` and ``name``, which identify the job. A change
#: of any of them is an update (and a new revision).
DEFINITION_FIELDS: tuple[str, ...] = tuple(
    entry.name for entry in job_fields(JobSpec) if not entry.identity
)


#: The definition fields a writer sets (the CLI's ``job create`` options, the API's job
#: document, an apply file's job table): :data:`DEFINITION_FIELDS` but the ones the path itself
#: decides (``source``) or that only code declares (``meta``); the model's ``settable``.
SETTABLE_FIELDS: tuple[str, ...] = tuple(
    entry.name for entry in job_fields(JobSpec) if entry.settable and not entry.identity
)

#: The fields stored as intervals: a row holds them in seconds as ``<name>_s``.
_DURATIONS = tuple(entry.name for entry in job_fields(JobSpec) if entry.interval)
#: The fields that hold lists of names (a spec's tuple, a row's list).
_NAMES = tuple(entry.name for entry in job_fields(JobSpec) if entry.kind == "names")
#: The fields in seconds that cannot be null (a float, whichever number was stored).
_SECONDS = tuple(
    entry.name for entry in job_fields(JobSpec) if entry.kind == "seconds" and not entry.nullable
)


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes a change, and through which path.

    Attributes:
        source: the path of a state change (``cli``, ``api``); a definition's own source is
            recorded for writes of definitions.
        name: who: ``os:<user>`` for the command line, ``token:<id> (<label>)`` for the API,
            ``code:<app>@<node>`` for a node declaring its app's jobs, ``python`` for the
            Python API by default.
    """

    source: str
    name: str


#: The Python API's actor when the caller names none.
PYTHON_ACTOR = Actor("python", f"python:{os.getpid()}")


def cli_actor() -> Actor:
    """The actor of the ``pgpulse`` command: the operating system's user (``getpass``, which
    reads ``LOGNAME``/``USER`` then the password database), ``os:?`` when none is known."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a container's random uid)
        user = "?"
    return Actor("cli", f"os:{user}")


def _comparable(key: str, value: Any) -> Any:
    """A field's value as diffs compare and the audit trail stores it (JSON): instants as UTC
    ISO 8601 text, names (calendars) as a list, seconds that cannot be null as a float."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if key in _NAMES:
        return list(value or ())
    if key in _SECONDS:
        return float(value or 0.0)
    return value


def definition_of_spec(spec: JobSpec) -> dict[str, Any]:
    """The definition fields of ``spec`` (:data:`DEFINITION_FIELDS`), durations in seconds,
    instants as UTC ISO 8601 text."""
    return {key: _comparable(key, getattr(spec, key)) for key in DEFINITION_FIELDS}


def definition_of_row(row: dict[str, Any]) -> dict[str, Any]:
    """The definition fields of a stored job row, as :func:`definition_of_spec` gives a spec's.

    Args:
        row: a job row with the durations in seconds as ``misfire_grace_s``,
            ``retry_backoff_s`` and ``timeout_s`` (``queries.sql``: ``lock_definitions``,
            ``get_job``).
    """
    out: dict[str, Any] = {}
    for key in DEFINITION_FIELDS:
        if key in _DURATIONS:
            value = row[f"{key}_s"]
            out[key] = None if value is None else float(value)
        else:
            out[key] = _comparable(key, row[key])
    return out


def definition_diff(
    old: dict[str, Any] | None, new: dict[str, Any], *, ignore: tuple[str, ...] = ()
) -> dict[str, list[Any]]:
    """The fields that differ between two definitions, as ``{"field": [old, new]}``.

    Args:
        old: the stored definition (:func:`definition_of_row`), or ``None`` for a new job
            (every field is then a change from ``None``).
        new: the definition about to be written (:func:`definition_of_spec`).
        ignore: fields left out of the comparison.

    Returns:
        The changed fields in :data:`DEFINITION_FIELDS` order; empty when nothing changes.
    """
    return {
        key: [None if old is None else old[key], new[key]]
        for key in DEFINITION_FIELDS
        if key not in ignore and (old is None or old[key] != new[key])
    }
