"""Who changes a job, and what changed: the audit trail's values (pure: no I/O, no clock).

Every write of a job — create, update, pause, resume, trigger, backfill, delete — is recorded in
``pgpulse_job_history`` in the transaction that makes it (issue 18, item 6), with the
:class:`Actor` that made it and the fields that changed (:func:`definition_diff`). The same diff
is the plan of ``pgpulse apply`` and ``crontab import --sync`` (:mod:`pgpulse.plan`).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from typing import Any

from pgpulse.jobs import JobSpec

__all__ = [
    "DEFINITION_FIELDS",
    "Actor",
    "cli_actor",
    "definition_diff",
    "definition_of_row",
    "definition_of_spec",
]

#: The fields of a job's definition, in the order plans and histories show them. A change of
#: any of them is an update (and a new revision); ``tenant`` and ``name`` identify the job.
DEFINITION_FIELDS: tuple[str, ...] = (
    "schedule",
    "timezone",
    "handler",
    "payload",
    "catch_up",
    "backfill_limit",
    "misfire_grace",
    "max_attempts",
    "retry_backoff",
    "timeout",
    "source",
    "meta",
    "overlap",
    "max_concurrency",
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


_DURATIONS = ("misfire_grace", "retry_backoff", "timeout")

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


def definition_of_spec(spec: JobSpec) -> dict[str, Any]:
    """The definition fields of ``spec`` (:data:`DEFINITION_FIELDS`), durations in seconds."""
    return {key: getattr(spec, key) for key in DEFINITION_FIELDS}


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
            out[key] = row[key]
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
