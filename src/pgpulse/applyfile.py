"""Job definitions in TOML files, as ``pgpulse apply`` reads them (pure: no I/O, no clock).

A file is one *source*, ``apply:<name>``: its name is the file's stem unless the file says
``source = "..."``. Its jobs are tables under ``jobs``, keyed by name; ``[defaults]`` gives
fields every job of the file inherits::

    source = "billing"                 # optional: apply:billing (default: the file's stem)

    [defaults]                         # optional
    tenant = "acme"
    timezone = "Europe/Berlin"

    [jobs."billing.rollup"]
    schedule = "0 * * * *"
    handler = "shell"
    payload = { command = "rollup --hour" }
    catch_up = "backfill"
    spread = 300                       # run control (issue 19): seconds of spread,
    not_after = 2027-01-01T00:00:00    # an active window (no offset: in the job's zone),
    calendars = ["holidays"]           # exclusion calendars, max_runs, auto_pause_after

A job takes every field ``pgpulse job create`` takes, under the names of :data:`JOB_FIELDS`
(``timezone`` for ``--tz``; ``payload`` a table, or JSON text as on the command line;
``not_before`` and ``not_after`` TOML date-times, TOML dates (their midnight, as on the command
line) or ISO 8601 text; ``calendars`` a list of names), and each is validated by
:meth:`JobSpec.create <pgpulse.jobs.JobSpec.create>`, as there. Any refusal —
malformed TOML, an unknown key, a bad value — is an :class:`ApplyFileError` naming the file, the
line (of the key when it can be found, else of the job's table) and the field. TOML is read by
the standard library's ``tomllib`` (YAML is not read: no YAML parser is a dependency).
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import PurePath
from typing import Any

from pgpulse.audit import SETTABLE_FIELDS
from pgpulse.errors import InvalidInput, PulseError
from pgpulse.jobs import JobSpec

__all__ = ["JOB_FIELDS", "ApplyFile", "ApplyFileError", "parse_apply_file"]

#: The keys of a job's table (and of ``[defaults]``): ``pgpulse job create``'s options.
JOB_FIELDS: tuple[str, ...] = ("tenant", *SETTABLE_FIELDS, "allow_private_target")
_TEXT_FIELDS = ("schedule", "handler", "tenant", "timezone", "catch_up", "overlap")
_INSTANT_FIELDS = ("not_before", "not_after")
_TOP_KEYS = ("source", "defaults", "jobs")
_SOURCE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
_KEY = r"""(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_-]+))"""
_HEADER = re.compile(rf"^\s*\[\s*{_KEY}(?:\s*\.\s*{_KEY})?\s*\]")
_ASSIGN = re.compile(rf"^\s*{_KEY}\s*=")
_AT_LINE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


class ApplyFileError(InvalidInput):
    """A definitions file is refused; ``str()`` is ``file:line: reason``."""

    def __init__(self, path: str, line: int, reason: str, *, field: str | None, value: Any):
        super().__init__(f"{path}:{line}: {reason}", field=field, value=value)
        self.path = path
        self.line = line


@dataclass(frozen=True, slots=True)
class ApplyFile:
    """A parsed definitions file.

    Attributes:
        path: the file's name, as given.
        source: its source, ``apply:<name>``.
        specs: its jobs, validated, in file order.
        private_targets: names of the ``http`` jobs with ``allow_private_target = true``.
        tables: the line of each job's table (``None``: ``[defaults]``).
        keys: the line of each ``(job, key)`` set in the file (``None``: ``[defaults]``).
    """

    path: str
    source: str
    specs: list[JobSpec]
    private_targets: frozenset[str]
    tables: dict[str | None, int]
    keys: dict[tuple[str | None, str], int]

    def line_of(self, job: str, field: str | None) -> int:
        """The line where job ``job`` sets ``field`` (``payload.url``: where ``payload`` is
        set), else where ``[defaults]`` does, else the line of the job's table."""
        if field is not None:
            key = field.split(".", 1)[0]
            for table in (job, None):
                if (table, key) in self.keys:
                    return self.keys[(table, key)]
        return self.tables.get(job, 1)

    def refusal(self, job: str, exc: PulseError, hint: str = "") -> ApplyFileError:
        """``exc``, a refusal of job ``job`` found after parsing (its handler unknown, a
        calendar missing, an ``http`` target), as this file's error: ``file:line: job 'x':
        field: reason`` (the field said unless the reason starts with it), then ``hint``,
        with ``exc``'s field and value."""
        reason = exc.message + hint
        if exc.field and not reason.startswith(exc.field.split(".", 1)[0].rstrip("s")):
            reason = f"{exc.field}: {reason}"
        return ApplyFileError(
            self.path,
            self.line_of(job, exc.field),
            f"job {job!r}: {reason}",
            field=exc.field,
            value=exc.value,
        )


def _key_at(match: re.Match[str], first: int) -> str | None:
    """The key matched by the three groups from ``first`` (quoted or bare), or ``None``."""
    return next((g for g in match.groups()[first : first + 3] if g is not None), None)


def _lines(text: str) -> tuple[dict[str | None, int], dict[tuple[str | None, str], int]]:
    """Where each job's table starts and each of its keys is set (``None``: ``[defaults]``),
    by a line scan: enough for the usual layout; other layouts fall back to the table's line."""
    tables: dict[str | None, int] = {}
    keys: dict[tuple[str | None, str], int] = {}
    current: str | bool | None = False  # False: not in a job's or the defaults' table
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            outer, inner = _key_at(header, 0), _key_at(header, 3)
            if outer == "jobs" and inner is not None:
                current = inner
                tables.setdefault(current, number)
            elif outer == "defaults" and inner is None:
                current = None
                tables.setdefault(None, number)
            else:
                current = False
            continue
        assign = _ASSIGN.match(line)
        key = _key_at(assign, 0) if assign else None
        if key is not None and current is not False:
            keys.setdefault((current, key), number)  # type: ignore[arg-type]
    return tables, keys


def parse_apply_file(text: str, *, path: str) -> ApplyFile:
    """Parse and validate a definitions file (see the module docstring for its layout).

    Args:
        text: the file's content.
        path: its name as the caller gave it (errors name it; its stem names the source).

    Returns:
        An :class:`ApplyFile` whose specs have source ``apply:<name>``.

    Raises:
        ApplyFileError: malformed TOML (with TOML's line), an unknown key, a value of the
            wrong type, or a field :meth:`JobSpec.create` refuses (schedule, zone, payload,
            policy...), naming the line and the field.
    """
    data = _load(text, path)
    tables, keys = _lines(text)

    def refuse(job: str | None, key: str | None, reason: str, value: Any) -> ApplyFileError:
        line = keys.get((job, key), tables.get(job, 1)) if key else tables.get(job, 1)
        where = "defaults" if job is None else f"job {job!r}"
        return ApplyFileError(path, line, f"{where}: {reason}", field=key, value=value)

    name = _source_name(data, path)
    defaults = _table(data.get("defaults", {}), None, refuse)
    jobs = data.get("jobs", {})
    if not isinstance(jobs, dict):
        raise ApplyFileError(path, 1, "jobs must be a table of tables", field="jobs", value=jobs)
    specs: list[JobSpec] = []
    private: set[str] = set()
    for job_name, fields in jobs.items():
        merged = {**defaults, **_table(fields, job_name, refuse)}
        if merged.pop("allow_private_target", False):
            private.add(job_name)
        for required in ("schedule", "handler"):
            if required not in merged:
                raise refuse(job_name, None, f"{required} is required", None)
        try:
            specs.append(JobSpec.create(name=job_name, source=f"apply:{name}", **merged))
        except InvalidInput as exc:
            field = exc.field if exc.field in JOB_FIELDS else None
            if field is not None and (job_name, field) not in keys and (None, field) in keys:
                raise refuse(None, field, exc.message, exc.value) from None
            raise refuse(job_name, field, exc.message, exc.value) from None
    return ApplyFile(path, f"apply:{name}", specs, frozenset(private), tables, keys)


def _load(text: str, path: str) -> dict[str, Any]:
    """The TOML document, or an :class:`ApplyFileError` at TOML's own line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _AT_LINE.search(message)
        if at:
            line, reason = int(at.group(1)), _AT_LINE.sub(f" (column {at.group(2)})", message)
        else:  # "... (at end of document)"
            line, reason = max(1, len(text.splitlines())), message
        raise ApplyFileError(
            path, line, f"not valid TOML: {reason}", field="toml", value=None
        ) from None


def _source_name(data: dict[str, Any], path: str) -> str:
    """The file's source name: its ``source`` key, else its stem; unknown top keys refused."""
    for key in data:
        if key not in _TOP_KEYS:
            raise ApplyFileError(
                path,
                1,
                f"unknown key {key!r} (a file holds {', '.join(_TOP_KEYS)})",
                field=key,
                value=data[key],
            )
    name = data.get("source", PurePath(path).stem)
    if not isinstance(name, str) or not _SOURCE_NAME.match(name):
        raise ApplyFileError(
            path,
            1,
            f"source {_toml(name)} is not a valid name (letters, digits, _.-; at most 100)",
            field="source",
            value=name,
        )
    return name


def _table(fields: object, job: str | None, refuse: Any) -> dict[str, Any]:
    """Check one job's (or the defaults') table: known keys, values of the right type."""
    if not isinstance(fields, dict):
        raise refuse(job, None, "must be a table of fields", fields)
    for key, value in fields.items():
        if key not in JOB_FIELDS:
            raise refuse(
                job, key, f"unknown field {key!r} (fields: {', '.join(JOB_FIELDS)})", value
            )
        if key in _TEXT_FIELDS and not isinstance(value, str):
            raise refuse(job, key, f"{key} must be text, got {_toml(value)}", value)
        if key == "allow_private_target" and not isinstance(value, bool):
            raise refuse(job, key, f"{key} must be true or false, got {_toml(value)}", value)
        if key in _INSTANT_FIELDS and isinstance(value, time):
            raise refuse(
                job, key, f"{key} {_toml(value)} is a time of day: give a date and time", value
            )
    if job is None and "payload" in fields:
        raise refuse(job, "payload", "payload cannot be a default (give it per job)", None)
    # A TOML date (2027-01-01) is its midnight in the job's zone, as `job create --not-before
    # 2027-01-01` reads it: handed on as that ISO text.
    return {
        key: value.isoformat()
        if key in _INSTANT_FIELDS and isinstance(value, date) and not isinstance(value, datetime)
        else value
        for key, value in fields.items()
    }


def _toml(value: object) -> str:
    """``value`` as a TOML file writes it, for messages (never a Python repr): ``"text"``,
    ``true``, ``2027-01-01``, ``[1, 2]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, date | time):  # a datetime is a date
        return value.isoformat()
    if isinstance(value, list):
        return f"[{', '.join(_toml(item) for item in value)}]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return str(value)
