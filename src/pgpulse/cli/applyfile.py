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
    spread = 300                       # run control: seconds of spread,
    not_after = 2027-01-01T00:00:00    # an active window (no offset: in the job's zone),
    calendars = ["holidays"]           # exclusion calendars, max_runs, auto_pause_after

A job takes every field ``pgpulse job create`` takes, under the names of :data:`JOB_FIELDS`
(``timezone`` for ``--tz``; ``payload`` a table, or JSON text as on the command line;
``not_before`` and ``not_after`` TOML date-times, TOML dates (their midnight, as on the command
line) or ISO 8601 text; ``calendars`` a list of names), and each is validated by
:meth:`JobSpec.create <pgpulse.core.jobs.JobSpec.create>`, as there. Any refusal —
malformed TOML, an unknown key, a bad value — is an :class:`ApplyFileError` naming the file, the
line (of the key when it can be found, else of the job's table) and the field. TOML is read by
the standard library's ``tomllib`` (YAML is not read: no YAML parser is a dependency).
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import PurePath
from typing import Any

from pgpulse.alerts.rules import RuleSpec, declared_rule
from pgpulse.core.definition import job_fields
from pgpulse.core.errors import InvalidInput, PulseError
from pgpulse.core.jobs import JobSpec
from pgpulse.core.json_limits import MAX_DEPTH, MAX_INT_DIGITS
from pgpulse.core.wording import did_you_mean

__all__ = ["JOB_FIELDS", "ApplyFile", "ApplyFileError", "parse_apply_file"]

#: The model's entries a job's table may set (:mod:`pgpulse.core.definition`).
_ENTRIES = tuple(entry for entry in job_fields(JobSpec) if entry.settable)
#: The keys of a job's table (and of ``[defaults]``): ``pgpulse job create``'s options, the
#: model's settable fields.
JOB_FIELDS: tuple[str, ...] = (*(entry.name for entry in _ENTRIES), "allow_private_target")
#: What a table may hold besides the job's fields: its alert rules.
TABLE_KEYS: tuple[str, ...] = (*JOB_FIELDS, "alerts")
_TEXT_FIELDS = tuple(entry.name for entry in _ENTRIES if entry.kind in ("text", "choice"))
_INSTANT_FIELDS = tuple(entry.name for entry in _ENTRIES if entry.kind == "instant")
_TOP_KEYS = ("source", "defaults", "jobs")
_SOURCE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
_KEY = r"""(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_-]+))"""
#: The blanks inside the brackets are stripped after the match: ``\s*`` around a lazy group
#: that also takes blanks made the time cubic in a run of them.
_HEADER = re.compile(r"^\s*\[([^\[\]]*)\]")
_DOTTED = re.compile(rf"\s*{_KEY}\s*(?:\.|$)")
_ASSIGN = re.compile(rf"^\s*{_KEY}\s*=")
#: No leading ``\s*``: searched for, it made the time quadratic in a run of blanks.
_AT_LINE = re.compile(r"\(at line (\d+), column (\d+)\)$")


class ApplyFileError(InvalidInput):
    """A definitions file is refused; ``str()`` is ``file:line: reason``.

    Attributes:
        others: the refusals of the file's later jobs, when several jobs are refused (the
            first is this one): ``pgpulse apply`` says every one, not only the first.
    """

    def __init__(self, path: str, line: int, reason: str, *, field: str | None, value: Any):
        super().__init__(f"{path}:{line}: {reason}", field=field, value=value)
        self.path = path
        self.line = line
        self.others: list[ApplyFileError] = []


@dataclass(frozen=True, slots=True)
class ApplyFile:
    """A parsed definitions file.

    Attributes:
        path: the file's name, as given.
        source: its source, ``apply:<name>``.
        specs: its jobs, validated, in file order.
        private_targets: names of the ``http`` jobs with ``allow_private_target = true``.
        rules: the alert rules of each job that declares ``alerts`` (its own or the
            defaults'), by (tenant, name), checked by
            :func:`~pgpulse.alerts.rules.declared_rule`.
        key_lines: the line of each key set in a job's (or the defaults', ``None``) table
            (dotted under ``alerts``: ``alerts.failures.notify``).
        table_lines: the line of each job's (or the defaults') table.
    """

    path: str
    source: str
    specs: list[JobSpec]
    private_targets: frozenset[str]
    rules: dict[tuple[str, str], tuple[RuleSpec, ...]] = field(default_factory=dict)
    key_lines: dict[tuple[str | None, str], int] = field(default_factory=dict, repr=False)
    table_lines: dict[str | None, int] = field(default_factory=dict, repr=False)

    def line_of(self, job: str, key: str | None) -> int:
        """The line where job ``job`` sets ``key`` (``payload.url``: where ``payload`` is set;
        ``alerts.failures.notify``: its nearest part that is set), else where ``[defaults]``
        does, else the line of the job's table."""
        top = key.split(".")[0] if key else None
        owner: str | None = job
        if top is not None and (job, top) not in self.key_lines and (None, top) in self.key_lines:
            owner = None
        return _line_of(self.key_lines, self.table_lines, owner, key)

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

    def rule_refusal(self, job: str, key: str, exc: InvalidInput) -> ApplyFileError:
        """``exc``, about alert rule ``key`` of job ``job``'s table (``alerts.failures.notify``),
        found in the database, as a refusal at the line that sets it (else the nearest
        enclosing table's)."""
        return ApplyFileError(
            self.path,
            self.line_of(job, key),
            f"job {job!r}: {_rule_reason(key, exc)}",
            field=key,
            value=exc.value,
        )


def _key_at(match: re.Match[str], first: int) -> str | None:
    """The key matched by the three groups from ``first`` (quoted or bare), or ``None``."""
    return next((g for g in match.groups()[first : first + 3] if g is not None), None)


def _line_of(
    keys: dict[tuple[str | None, str], int],
    tables: dict[str | None, int],
    job: str | None,
    key: str | None,
) -> int:
    """The line of ``key`` in ``job``'s table (for a dotted key, of its nearest part that is
    found: ``alerts.failures.notify``, else ``alerts.failures``, else ``alerts``), else the
    table's."""
    parts = key.split(".") if key else []
    for n in range(len(parts), 0, -1):
        line = keys.get((job, ".".join(parts[:n])))
        if line is not None:
            return line
    return tables.get(job, 1)


def _header(line: str) -> list[str] | None:
    """The dotted keys of a table header line (``[jobs."a.b".alerts]``), or ``None``."""
    match = _HEADER.match(line)
    if match is None or line.lstrip().startswith("[["):
        return None
    inner, keys, at = match.group(1).strip(), [], 0
    while at < len(inner):
        part = _DOTTED.match(inner, at)
        if part is None or part.end() == at:
            return None
        keys.append(_key_at(part, 0) or "")
        at = part.end()
    return keys


def _lines(text: str) -> tuple[dict[str | None, int], dict[tuple[str | None, str], int]]:
    """Where each job's table starts and each of its keys is set (``None``: ``[defaults]``),
    by a line scan: enough for the usual layout; other layouts fall back to the table's line.
    Keys of the ``alerts`` sub-tables are dotted: ``alerts``, ``alerts.failures``,
    ``alerts.failures.threshold``."""
    tables: dict[str | None, int] = {}
    keys: dict[tuple[str | None, str], int] = {}
    current: str | bool | None = False  # False: not in a job's or the defaults' table
    prefix = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = _header(line)
        if header is not None:
            current, prefix = _context(header)
            if current is not False:
                tables.setdefault(current, number)  # type: ignore[arg-type]
                if prefix:
                    keys.setdefault((current, prefix.rstrip(".")), number)  # type: ignore[arg-type]
            continue
        assign = _ASSIGN.match(line)
        key = _key_at(assign, 0) if assign else None
        if key is not None and current is not False:
            keys.setdefault((current, prefix + key), number)  # type: ignore[arg-type]
    return tables, keys


def _context(header: list[str]) -> tuple[str | bool | None, str]:
    """The job (``None``: the defaults; ``False``: neither) and the key prefix of a header's
    table: ``[jobs.a]`` is job ``a``; ``[jobs.a.alerts.failures]`` is job ``a``, prefix
    ``alerts.failures.``."""
    if header[:1] == ["jobs"] and len(header) >= 2:
        job: str | None = header[1]
        rest = header[2:]
    elif header[:1] == ["defaults"]:
        job, rest = None, header[1:]
    else:
        return False, ""
    if rest and (rest[0] != "alerts" or len(rest) > 2):
        return False, ""
    return job, "".join(f"{part}." for part in rest)


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
        line = _line_of(keys, tables, job, key)
        where = "defaults" if job is None else f"job {job!r}"
        return ApplyFileError(path, line, f"{where}: {reason}", field=key, value=value)

    name = _source_name(data, path)
    defaults = _table(data.get("defaults", {}), None, refuse)
    jobs = data.get("jobs", {})
    if not isinstance(jobs, dict):
        raise ApplyFileError(path, 1, "jobs must be a table of tables", field="jobs", value=jobs)
    specs: list[JobSpec] = []
    private: set[str] = set()
    rules: dict[tuple[str, str], tuple[RuleSpec, ...]] = {}
    refused: dict[str, ApplyFileError] = {}  # by text: a default's refusal is said once
    for job_name, fields in jobs.items():
        try:
            merged = {**defaults, **_table(fields, job_name, refuse)}
            if merged.pop("allow_private_target", False):
                private.add(job_name)
            alerts = merged.pop("alerts", None)
            spec = _spec(job_name, f"apply:{name}", merged, keys, refuse)
            if alerts is not None:
                where = job_name if "alerts" in fields else None
                rules[(spec.tenant, job_name)] = _rules(alerts, where, refuse)
            specs.append(spec)
        except ApplyFileError as exc:  # every job is checked: each refusal is said
            refused.setdefault(str(exc), exc)
    if refused:
        first, *others = refused.values()
        first.others = others
        raise first
    return ApplyFile(path, f"apply:{name}", specs, frozenset(private), rules, keys, tables)


def _spec(
    job_name: str,
    source: str,
    merged: dict[str, Any],
    keys: dict[tuple[str | None, str], int],
    refuse: Any,
) -> JobSpec:
    """Job ``job_name``'s definition from its fields and the defaults (``merged``); a refused
    field is said at the line that sets it: the job's, else the defaults'."""
    for required in ("schedule", "handler"):
        if required not in merged:
            raise refuse(job_name, None, f"{required} is required", None)
    try:
        return JobSpec.create(name=job_name, source=source, **merged)
    except InvalidInput as exc:
        field = exc.field if exc.field in JOB_FIELDS else None
        if field is not None and (job_name, field) not in keys and (None, field) in keys:
            raise refuse(None, field, exc.message, exc.value) from None
        raise refuse(job_name, field, exc.message, exc.value) from None


def _load(text: str, path: str) -> dict[str, Any]:
    """The TOML document, or an :class:`ApplyFileError` at TOML's own line."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        reason = f"a value is nested more than {MAX_DEPTH} levels deep"
        line = _deepest_line(text)
        raise ApplyFileError(path, line, reason, field="toml", value=None) from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _AT_LINE.search(message)
        if at:
            line = int(at.group(1))
            reason = f"{message[: at.start()].rstrip()} (column {at.group(2)})"
        else:  # "... (at end of document)"
            line, reason = max(1, len(text.splitlines())), message
        raise ApplyFileError(
            path, line, f"not valid TOML: {reason}", field="toml", value=None
        ) from None
    except ValueError:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        runs = (run for run in re.finditer("[0-9_]+", text) if len(run[0]) > MAX_INT_DIGITS)
        first = next(runs, None)
        line = 1 if first is None else text.count("\n", 0, first.start()) + 1
        reason = f"an integer has more than {MAX_INT_DIGITS:,} digits"
        raise ApplyFileError(path, line, reason, field="toml", value=None) from None


def _deepest_line(text: str) -> int:
    """The line where ``text``'s brackets (``[``, ``{``, strings not told apart) first nest
    more than :data:`~pgpulse.core.json_limits.MAX_DEPTH` deep, else 1: where a TOML document too
    deep for the parser is."""
    depth = 0
    for at, char in enumerate(text):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(char, 0)
        if depth > MAX_DEPTH:
            return text.count("\n", 0, at) + 1
    return 1


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
        if key not in TABLE_KEYS:
            raise refuse(
                job,
                key,
                f"unknown field {key!r}{did_you_mean(key, TABLE_KEYS)} "
                f"(fields: {', '.join(TABLE_KEYS)})",
                value,
            )
        if key == "alerts" and not isinstance(value, dict):
            raise refuse(job, key, f"alerts must be a table of rules, got {_toml(value)}", value)
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


def _rules(alerts: dict[str, Any], job: str | None, refuse: Any) -> tuple[RuleSpec, ...]:
    """A table's ``alerts``: each rule by kind, as :func:`declared_rule` validates it (the
    CLI's and the API's checks); a refusal names ``alerts.<kind>`` (``.threshold``,
    ``.notify``) at its line."""
    specs = []
    for kind, given in alerts.items():
        try:
            specs.append(declared_rule(kind, given))
        except InvalidInput as exc:
            sub = {"threshold": ".threshold", "notifiers": ".notify"}.get(exc.field or "", "")
            key = f"alerts.{kind}{sub}"
            raise refuse(job, key, _rule_reason(key, exc), exc.value) from None
    return tuple(specs)


def _rule_reason(key: str, exc: InvalidInput) -> str:
    """A rule's refusal as a file's reader reads it: the file's key first
    (``alerts.failures.notify: no notifier named 'nobody'``)."""
    reason = exc.message
    for name in (exc.field or "", "notifiers", "threshold"):
        if name and reason.startswith(f"{name}: "):
            reason = reason[len(name) + 2 :]
            break
    return f"{key}: {reason}"


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
