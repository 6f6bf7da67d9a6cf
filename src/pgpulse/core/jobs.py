"""Job definitions: the validated value object every boundary (CLI, code, crontab) builds.

A :class:`JobSpec` is pure data. Building one through :meth:`JobSpec.create` validates every field
(a built-in handler's payload too) and raises an :class:`~pgpulse.core.errors.InvalidInput` subclass
naming the field and value, so the store never sees a bad definition (docs/design.md, invariant 11).
Whether a handler is known needs the database (the handlers nodes registered): the store reads
them and refuses with :func:`check_handlers`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import unicodedata
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo

from pgpulse.core.definition import Field, check_field, define, job_fields
from pgpulse.core.errors import InvalidInput, InvalidPayload, UnknownHandler
from pgpulse.core.json_limits import check_shape, loads_json
from pgpulse.core.keys import MAX_PRIORITY, check_concurrency_key
from pgpulse.core.limits import AUTO_PAUSE_LIMIT, MAX_RUNS_LIMIT, check_calendars, check_window
from pgpulse.core.payloads import BUILTIN_HANDLER_NAMES, PAYLOAD_VALIDATORS
from pgpulse.core.placeholders import check_placeholders
from pgpulse.core.retention import check_keep_runs
from pgpulse.core.schedule import AFTER_SCHEDULE, Schedule, parse_schedule
from pgpulse.core.spread import MAX_SPREAD, check_spread
from pgpulse.core.wording import did_you_mean, given, json_given

CatchUp = Literal["skip", "backfill", "coalesce"]
CATCH_UP_POLICIES: tuple[CatchUp, ...] = ("skip", "backfill", "coalesce")
Overlap = Literal["forbid", "replace", "allow"]
OVERLAP_POLICIES: tuple[Overlap, ...] = ("forbid", "replace", "allow")

#: Names of handlers: an identifier-like ASCII name (it is also a registry key in code).
_HANDLER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$")
_KINDS = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Cs": "a lone surrogate: a byte that is not UTF-8",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Zs": "a space other than ' '",
}
#: Longest job or tenant name, characters.
MAX_NAME_CHARS = 200


def _name_problem(value: str) -> str | None:
    """Why ``value`` is not a job or tenant name, or ``None``: 1-200 printable characters
    (``str.isprintable``: no control, format — bidirectional overrides included — surrogate,
    private-use, unassigned or separator characters but the space), no space at either end."""
    if not 1 <= len(value) <= MAX_NAME_CHARS:
        return f"it has {len(value)} characters"
    if value != value.strip():
        return "it starts or ends with a space"
    return unprintable(value)


def unprintable(value: str) -> str | None:
    """Why ``value`` cannot be shown as it is (its first character that ``str.isprintable``
    refuses: a control, format, surrogate, private-use, unassigned or separator character but
    the space), e.g. ``it holds U+0007 (BELL, a control character)``; ``None`` if it can."""
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is None:
        return None
    kind = _KINDS.get(unicodedata.category(bad), "not printable")
    name = unicodedata.name(bad, "")
    return f"it holds U+{ord(bad):04X} ({f'{name}, ' if name else ''}{kind})"


#: The longest reason of a pause or a skip (it is shown wherever the job's status is).
MAX_REASON_CHARS = 500


def check_reason(reason: object) -> None:
    """Refuse the reason of a pause or a skip that is not text of at most
    :data:`MAX_REASON_CHARS` printable characters (:func:`unprintable`); ``None`` is none.

    Raises:
        InvalidInput: ``field="reason"``.
    """
    if reason is None:
        return
    if not isinstance(reason, str):
        raise InvalidInput(f"reason must be text, got {given(reason)}", field="reason", value=None)
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(
            f"reason has {len(reason)} characters; at most {MAX_REASON_CHARS}",
            field="reason",
            value=reason,
        )
    if (problem := unprintable(reason)) is not None:
        raise InvalidInput(
            f"reason {reason!r} is shown wherever the status is: {problem}",
            field="reason",
            value=reason,
        )


#: The longest source label (``crontab:PATH``, ``apply:PATH``, ``code:APP``).
MAX_SOURCE_CHARS = 500


def _check_source(source: object) -> str:
    """Refuse a ``source`` that is not 1-500 printable characters (it is shown and filtered on)."""
    if not isinstance(source, str):
        raise InvalidInput(f"source must be text, got {given(source)}", field="source", value=None)
    problem = None
    if not source or len(source) > MAX_SOURCE_CHARS:
        problem = f"must have 1 to {MAX_SOURCE_CHARS} characters, got {len(source)}"
    elif (why := unprintable(source)) is not None:
        problem = f"is shown wherever the job is: {why}"
    if problem is not None:
        raise InvalidInput(f"source {source!r} {problem}", field="source", value=source)
    return source


def check_key(tenant: object, name: object) -> None:
    """Refuse a (tenant, name) that no job can have (:func:`check_name` of each): the Python
    API's lookups (pause, resume, trigger, delete, history) say so naming the field, instead of
    sending the database text it cannot take (a NUL).

    Raises:
        InvalidInput: ``field`` is ``tenant`` or ``name``.
    """
    _check_name("tenant", tenant)
    _check_name("name", name)


def check_name(field_name: str, value: object) -> str:
    """``value`` if it is a valid job or tenant name (1-200 printable characters, no space at
    either end), else :class:`InvalidInput` naming ``field_name``, the value and why: the rule
    every write applies, for the reads that name a job or tenant too.

    Raises:
        InvalidInput: not a valid name (``field=field_name``).
    """
    return _check_name(field_name, value)


def _check_name(field_name: str, value: object, pattern: re.Pattern[str] | None = None) -> str:
    """``value`` if it is a valid name (``pattern``: a handler name), else InvalidInput."""
    problem: str | None
    if not isinstance(value, str):
        problem = "it is not text"
    elif pattern is None:
        problem = _name_problem(value)
    else:
        problem = None if pattern.match(value) else ""
    if problem is None:
        return cast(str, value)
    rule = (
        "a letter or _, then letters, digits and _.:- (at most 200)"
        if pattern is not None
        else "1-200 printable characters, no leading or trailing space"
    )
    raise InvalidInput(
        f"{field_name} {value!r} is not a valid name ({rule}){f': {problem}' if problem else ''}",
        field=field_name,
        value=value,
    )


#: The longest ``deadline``, seconds (a year): an occurrence's completion deadline after its
#: ``scheduled_for`` (docs/alerts.md, "Deadlines").
DEADLINE_LIMIT = 366 * 86400.0
#: The least ``misfire_grace``, seconds. A claim always comes some milliseconds after its
#: occurrence is due, so with less nothing would ever run on time (every occurrence skipped).
MIN_MISFIRE_GRACE = 1.0


def _check_misfire_grace(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1:
        raise InvalidInput(
            f"misfire_grace must be at least {MIN_MISFIRE_GRACE:g} second, got {given(value)}: a "
            "claim always comes a little after its occurrence is due, so a smaller grace would "
            "skip every occurrence",
            field="misfire_grace",
            value=value,
        )
    return cast(
        float, check_field(dataclasses.replace(_model()["misfire_grace"], check=None), value)
    )


#: The largest payload (and ``meta``) of a job: its JSON text, encoded as UTF-8, in bytes. One
#: limit on every path (CLI, Python API, crontab, code, HTTP): a payload travels with every
#: claim of its job, and PostgreSQL's jsonb would refuse only at 255 MB, mid-transaction.
MAX_PAYLOAD_BYTES = 64 * 1024


_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _too_large(size: int, value: object) -> InvalidPayload:
    return InvalidPayload(
        f"payload is {size:,} bytes of JSON; the limit is {MAX_PAYLOAD_BYTES:,} bytes",
        field="payload",
        value=f"<{size:,} bytes>",
    )


def parse_payload(value: object) -> dict[str, Any]:
    """Return a job payload as a JSON object.

    Args:
        value: a ``dict`` (must be JSON-serialisable) or a ``str`` holding a JSON object, at
            most :data:`MAX_PAYLOAD_BYTES` as UTF-8 JSON text.

    Returns:
        The payload as a ``dict``.

    Raises:
        InvalidPayload: the string is not JSON, the JSON is not an object, the dict holds
            values JSON cannot encode or text PostgreSQL cannot store (NUL characters, lone
            surrogates), it is too large, nested too deep or holds too long an integer
            (:func:`pgpulse.core.json_limits.check_shape`, the rule of every path); ``field`` is
            ``"payload"``.
    """
    if isinstance(value, str) and len(value) > MAX_PAYLOAD_BYTES:  # no need to parse it
        raise _too_large(len(value.encode("utf-8", "surrogatepass")), value)
    try:
        if isinstance(value, str):
            value = loads_json("payload", value)
        check_shape("payload", value)  # before json.dumps, which recurses
    except json.JSONDecodeError as exc:
        raise InvalidPayload(
            f"payload is not valid JSON ({exc.msg} at char {exc.pos}): {value!r}",
            field="payload",
            value=value,
        ) from None
    except InvalidInput as exc:  # its field: payload, or the path of a number out of range
        raise InvalidPayload(exc.message, field=exc.field or "payload", value=exc.value) from None
    if not isinstance(value, dict):
        raise InvalidPayload(
            f"payload must be a JSON object, got {json_given(value)}", field="payload", value=value
        )
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        # PostgreSQL's jsonb stores neither NUL characters nor lone surrogates. JSON writes a
        # NUL as the escape \\u0000 (an odd number of backslashes); a text that holds a
        # backslash and "u0000" (an even number) is fine.
        if _NUL_ESCAPE.search(text):
            raise ValueError("it holds a NUL character (\\u0000), which PostgreSQL cannot store")
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end].encode("utf-8", "backslashreplace").decode()
        raise InvalidPayload(
            f"payload cannot be encoded: it holds a lone surrogate ({bad}), which is not text",
            field="payload",
            value=bad,
        ) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidPayload(
            f"payload cannot be encoded as JSON: {exc}", field="payload", value=value
        ) from None
    if size > MAX_PAYLOAD_BYTES:
        raise _too_large(size, value)
    return cast(dict[str, Any], value)


def _check_meta(meta: dict[str, Any] | None) -> dict[str, Any]:
    try:
        return parse_payload(meta or {})
    except InvalidPayload as exc:
        raise InvalidInput(
            str(exc).replace("payload", "meta", 1), field="meta", value=meta
        ) from None


def _check_overlap(overlap: object, max_concurrency: object) -> None:
    """Refuse ``max_concurrency`` without ``allow``, and ``allow`` without a bound
    (docs/design.md, Policies: ``allow`` is "up to a bound")."""
    if max_concurrency is None:
        if overlap == "allow":
            raise InvalidInput(
                "overlap allow needs max_concurrency N, the most occurrences at once (1-1000)",
                field="max_concurrency",
                value=None,
            )
        return
    if overlap != "allow":
        raise InvalidInput(
            f"max_concurrency applies to overlap allow only (overlap is {overlap!r})",
            field="max_concurrency",
            value=max_concurrency,
        )


def _check_forked_limits(
    overlap: object,
    kind: str,
    *,
    max_runs: object,
    not_after: object,
    auto_pause_after: object,
) -> None:
    """Refuse a limit the job row cannot keep once its occurrences are forked off it
    (``overlap`` ``replace``/``allow``): ``max_runs``, ``not_after``, ``auto_pause_after`` and a
    one-off ``@at`` schedule count or end on the job row's own runs, which a forked job no
    longer has, and an ``@after`` schedule waits for the end of the job row's own run
    (docs/states.md, "Extra occurrences and run control").

    Raises:
        InvalidInput: ``field`` names the limit, its value given.
    """
    if overlap not in ("replace", "allow"):
        return
    for limit, value in (
        ("max_runs", max_runs),
        ("not_after", not_after),
        ("auto_pause_after", auto_pause_after),
    ):
        if value is not None:
            raise InvalidInput(
                f"{limit} applies to overlap forbid only (overlap is {overlap!r}): "
                "occurrences forked off the schedule do not count toward it",
                field=limit,
                value=value,
            )
    if kind == "once":
        raise InvalidInput(
            f"a one-off @at schedule applies to overlap forbid only (overlap is {overlap!r})",
            field="overlap",
            value=overlap,
        )
    if kind == "delay":  # a fork moves the job on at its start: there is no end to wait for
        raise InvalidInput(
            f"an @after schedule applies to overlap forbid only (overlap is {overlap!r}): its "
            "next occurrence waits for the run's end",
            field="overlap",
            value=overlap,
        )


def _check_timezone(timezone: object) -> str:
    """A zone's name (a ``ZoneInfo`` of the IANA database: its key); whether it is a zone is
    the schedule's check."""
    if isinstance(timezone, ZoneInfo) and timezone.key:
        timezone = timezone.key
    if not isinstance(timezone, str):
        raise InvalidInput(
            f"timezone must be an IANA zone's name, got {given(timezone)}",
            field="timezone",
            value=repr(timezone),
        )
    return timezone


def _with_schedule(value: object) -> object:
    """A field checked with the schedule (:func:`_check_rules`): as given, for now."""
    return value


def _default(entry: Field) -> Any:
    """The value of a field left out (a fresh one of a mutable default)."""
    return copy.copy(entry.default) if isinstance(entry.default, dict) else entry.default


def _check_rules(values: dict[str, Any]) -> None:
    """The rules between fields, on the fields each checked (:meth:`JobSpec.create`): the
    schedule in its zone, the spread and window against it, the policies' companions, the
    limits forked occurrences cannot keep, a built-in handler's payload. Normalises
    ``values`` in place (the schedule stripped, the spread a float, the window's instants UTC).
    """
    schedule, timezone = values["schedule"], values["timezone"]
    parsed = parse_schedule(schedule, timezone)  # raises InvalidSchedule, UnknownTimeZone
    values["schedule"] = schedule.strip()
    values["spread"] = check_spread(values["spread"], parsed.kind, parsed.interval, schedule=parsed)
    values["not_before"], values["not_after"] = check_window(
        values["not_before"], values["not_after"], timezone
    )
    catch_up, backfill_limit = values["catch_up"], values["backfill_limit"]
    if backfill_limit is not None and catch_up != "backfill":
        raise InvalidInput(
            f"backfill_limit applies to catch_up backfill only (catch_up is {catch_up!r})",
            field="backfill_limit",
            value=backfill_limit,
        )
    _check_overlap(values["overlap"], values["max_concurrency"])
    _check_forked_limits(
        values["overlap"],
        parsed.kind,
        max_runs=values["max_runs"],
        not_after=values["not_after"],
        auto_pause_after=values["auto_pause_after"],
    )
    _check_after_schedule(values["after"], parsed, values["name"])
    validator = PAYLOAD_VALIDATORS.get(values["handler"])
    if validator is not None:
        validator(values["payload"])
    if values["handler"] == "http":  # at write time only: a stored payload runs as it did
        check_placeholders(values["payload"])


def check_after(names: Iterable[str]) -> tuple[str, ...]:
    """Upstream job names as a job lists them (its ``after``): each a valid job name
    (:func:`check_name`), duplicates dropped, in the order given. Whether each exists, and
    whether they make a cycle, are the store's checks (they need the table).

    Raises:
        InvalidInput: ``field="after"``: a name that is not valid, or a bare string (which
            would be read as its letters).
    """
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise InvalidInput(
            f"after must be a list of job names, got {given(names)}", field="after", value=names
        )
    checked: dict[str, None] = {}
    for name in names:
        checked[_check_name("after", name)] = None
    return tuple(checked)


def _check_after_schedule(after: tuple[str, ...], parsed: Schedule, name: str) -> None:
    """Refuse ``@after`` (no clock of its own) without upstreams, and a job that follows
    itself (docs/chains.md)."""
    if parsed.expr.lower() == AFTER_SCHEDULE and not after:
        raise InvalidInput(
            "schedule @after runs a job only after its upstreams: give after = [names]",
            field="after",
            value=[],
        )
    if name in after:
        raise InvalidInput(
            f"after names the job itself: cycle {name} → {name}", field="after", value=name
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """A validated job definition, unique by (tenant, name): the job definition model.

    Each field is declared once, with its model entry (:func:`~pgpulse.core.definition.define`:
    kind, unit, bounds, default, CLI flag and help, whether a writer sets it, its column), from
    which the edges derive their checks, bodies, options and column lists
    (:mod:`pgpulse.core.definition`). A new field is one entry here, a migration and the SQL
    that writes and reads it.

    Attributes:
        tenant: owner of the job; jobs of different tenants never clash by name.
        name: the job's name within its tenant.
        schedule: the schedule expression as given (cron, macro or ``@every``).
        timezone: IANA zone name the cron fields are read in (default ``UTC``).
        handler: name of the registered handler that runs the job (``shell``, ``http``...).
        payload: JSON object handed to the handler.
        catch_up: ``skip``, ``backfill`` or ``coalesce`` (docs/design.md, Policies).
        backfill_limit: with ``backfill``, keep only the newest N missed occurrences; ``None``
            keeps all.
        misfire_grace: seconds an occurrence may be late and still run under ``skip`` (at
            least :data:`MIN_MISFIRE_GRACE`).
        max_attempts: attempts per occurrence before the run is failed (>= 1).
        retry_backoff: base of the exponential retry backoff, seconds (> 0).
        timeout: per-attempt limit in seconds, or ``None`` for no limit.
        source: where the definition came from: ``cli``, ``api`` (the HTTP API),
            ``python`` (the Python API: the default, as its audit rows' actor ``python:<pid>``),
            ``code:<app>``, ``crontab:<path>``, ``apply:<name>``.
        meta: free-form facts kept with the job (crontab user, ``MAILTO``...), a JSON object.
        overlap: ``forbid`` (an occurrence waits for the running one), ``replace`` (a new
            occurrence cancels the running one) or ``allow`` (up to ``max_concurrency`` at
            once); docs/design.md, Policies; docs/states.md, "Extra occurrences".
        max_concurrency: with ``allow`` (and only then, where it is required), how many
            occurrences of the job may run at once (1-1000).
        spread: seconds; each occurrence fires at ``scheduled_for`` plus the job's stable
            offset in [0, spread) (:mod:`pgpulse.core.spread`); 0 for none.
        not_before, not_after: the active window (aware UTC instants, or ``None`` for open):
            no occurrence before or after them.
        max_runs: the job is ``completed`` after this many runs; ``None`` for no limit.
        calendars: names of the tenant's exclusion calendars (:mod:`pgpulse.core.calendars`).
        auto_pause_after: pause the job after this many consecutive failed runs (``None``:
            never).
        deadline: seconds after ``scheduled_for`` (for a backfilled occurrence, after it was
            queued) by which each occurrence must have succeeded, or ``None``; past it the
            ``deadline`` alert rule fires once per occurrence and the run goes on
            (docs/alerts.md, "Deadlines").
        after: names of upstream jobs of the tenant (docs/chains.md): each run of one that
            ends succeeded gives this job an occurrence at its ``scheduled_for``; with several,
            once all of them succeeded for it. With the schedule ``@after`` the job has no
            clock of its own; with any other it keeps that one too.
        after_timeout: seconds, with several upstreams: how long after the first succeeded
            the others may take before the occurrence is recorded skipped.
        keep_runs: the job's own history retention, narrower than the global one: ``"30d"``
            (runs finished in the last 30 days) or ``"1000"`` (its newest 1,000 runs); ``None``:
            the global one only (:mod:`pgpulse.core.retention`).
        concurrency_key: a key whose limit (per tenant) bounds how many occurrences of its
            jobs run at once across every node (:mod:`pgpulse.core.keys`); ``None``: none.
        priority: 0 (the default) to 1000; higher runs first when slots are short, within the
            starvation bound (:data:`pgpulse.core.keys.STARVATION_BOUND`).
    """

    tenant: str = define(
        "default",
        kind="text",
        doc="Owner of the job; jobs of different tenants never clash by name.",
        identity=True,
        maximum=MAX_NAME_CHARS,
        listed=True,
        claimed=True,
        check=lambda value: _check_name("tenant", value),
    )
    name: str = define(
        kind="text",
        doc="The job's name within its tenant.",
        identity=True,
        settable=False,
        maximum=MAX_NAME_CHARS,
        listed=True,
        claimed=True,
        check=lambda value: _check_name("name", value),
        example="nightly-report",
    )
    schedule: str = define(
        kind="text",
        doc="Cron expression, @macro, @every duration or @at instant (a one-off).",
        flag="--schedule",
        minimum=1,
        maximum=200,
        listed=True,
        claimed=True,
        example="0 3 * * *",
    )
    timezone: str = define(
        "UTC",
        kind="text",
        doc="IANA time zone the schedule is read in.",
        flag="--tz",
        minimum=1,
        maximum=100,
        listed=True,
        claimed=True,
        check=_check_timezone,
        example="Europe/Paris",
    )
    handler: str = define(
        kind="text",
        doc="Handler name (shell, http, or your own).",
        flag="--handler",
        minimum=1,
        maximum=200,
        listed=True,
        claimed=True,
        check=lambda value: _check_name("handler", value, _HANDLER_RE),
        example="http",
    )
    payload: dict[str, Any] = define(
        factory=dict,
        kind="json",
        doc="JSON object handed to the handler.",
        flag="--payload",
        claimed=True,
        check=lambda value: parse_payload({} if value is None else value),
    )
    catch_up: CatchUp = define(
        "skip",
        kind="choice",
        choices=CATCH_UP_POLICIES,
        doc="Missed occurrences: skip (record as skipped; run the newest if within "
        "--misfire-grace), backfill (run each, oldest first), coalesce (run once).",
        flag="--catch-up",
        listed=True,
        claimed=True,
    )
    backfill_limit: int | None = define(
        None,
        kind="int",
        nullable=True,
        minimum=1,
        maximum=1_000_000,
        unit="occurrences",
        doc="With backfill: run only the newest N missed occurrences.",
        flag="--backfill-limit",
        claimed=True,
    )
    misfire_grace: float = define(
        60.0,
        kind="seconds",
        unit="seconds",
        minimum=MIN_MISFIRE_GRACE,
        maximum=366 * 86400.0,
        doc="How late an occurrence still runs (at least 1 s).",
        flag="--misfire-grace",
        interval=True,
        claimed=True,
        check=_check_misfire_grace,
    )
    max_attempts: int = define(
        3,
        kind="int",
        minimum=1,
        maximum=1000,
        doc="Attempts per occurrence; after the last failure the run is failed.",
        flag="--max-attempts",
        claimed=True,
    )
    retry_backoff: float = define(
        1.0,
        kind="seconds",
        unit="seconds",
        minimum=0.001,
        maximum=86400.0,
        doc="Base retry delay (it doubles with each attempt).",
        flag="--retry-backoff",
        interval=True,
        claimed=True,
    )
    timeout: float | None = define(
        3600.0,
        kind="seconds",
        unit="seconds",
        nullable=True,
        minimum=0.001,
        maximum=30 * 86400.0,
        doc="Per-attempt time limit (at most 30 days).",
        flag="--timeout",
        interval=True,
        claimed=True,
    )
    source: str = define(
        "python",
        kind="text",
        doc="Where the definition came from (cli, api, python, code:APP, crontab:PATH, "
        "apply:NAME).",
        settable=False,
        check=_check_source,
    )
    meta: dict[str, Any] = define(
        factory=dict,
        kind="json",
        doc="Free-form facts kept with the job (crontab user, MAILTO...).",
        settable=False,
        check=_check_meta,
    )
    overlap: Overlap = define(
        "forbid",
        kind="choice",
        choices=OVERLAP_POLICIES,
        doc="An occurrence due while one runs: forbid (wait for it), replace (cancel it and "
        "start), allow (run beside it, up to --max-concurrency at once).",
        flag="--overlap",
        claimed=True,
    )
    max_concurrency: int | None = define(
        None,
        kind="int",
        nullable=True,
        minimum=1,
        maximum=1000,
        doc="With --overlap allow (required there): most occurrences running at once.",
        flag="--max-concurrency",
        claimed=True,
    )
    spread: float = define(
        0.0,
        kind="seconds",
        unit="seconds",
        minimum=0.0,
        maximum=MAX_SPREAD,
        doc="Fire each occurrence at its instant plus this job's stable offset in "
        "[0, SPREAD) (jobs sharing a schedule then do not all fire at once). Not with @at.",
        flag="--spread",
        listed=True,
        claimed=True,
        check=_with_schedule,
    )
    not_before: datetime | None = define(
        None,
        kind="instant",
        nullable=True,
        doc="No occurrence before this instant (ISO 8601; without an offset, in the job's zone).",
        flag="--not-before",
        listed=True,
        check=_with_schedule,
    )
    not_after: datetime | None = define(
        None,
        kind="instant",
        nullable=True,
        doc="No occurrence after this instant; after the last one the job is completed.",
        flag="--not-after",
        listed=True,
        claimed=True,
        check=_with_schedule,
    )
    max_runs: int | None = define(
        None,
        kind="int",
        nullable=True,
        minimum=1,
        maximum=MAX_RUNS_LIMIT,
        unit="runs",
        doc="Completed after this many runs (skips do not count).",
        flag="--max-runs",
        listed=True,
    )
    calendars: tuple[str, ...] = define(
        (),
        kind="names",
        doc="Exclusion calendars (pgpulse calendar set): occurrences on their dates are skipped.",
        flag="--calendar",
        listed=True,
        claimed=True,
        check=lambda value: check_calendars(() if value is None else value),
    )
    auto_pause_after: int | None = define(
        None,
        kind="int",
        nullable=True,
        minimum=1,
        maximum=AUTO_PAUSE_LIMIT,
        unit="runs",
        doc="Pause the job after this many consecutive failed runs.",
        flag="--auto-pause-after",
        listed=True,
        claimed=True,
    )
    deadline: float | None = define(
        None,
        kind="seconds",
        unit="seconds",
        nullable=True,
        minimum=1.0,
        maximum=DEADLINE_LIMIT,
        doc="Seconds after scheduled_for by which each occurrence must have succeeded; past "
        "it the deadline alert fires once, and the run goes on.",
        flag="--deadline",
        interval=True,
    )

    after: tuple[str, ...] = define(
        (),
        kind="names",
        doc="Upstream jobs of the tenant: each succeeded run of one gives this job a run at "
        "its scheduled_for (with several, once all succeeded for it). Schedule @after: no "
        "clock of its own.",
        flag="--after",
        listed=True,
        check=lambda value: check_after(() if value is None else value),
    )
    after_timeout: float = define(
        3600.0,
        kind="seconds",
        unit="seconds",
        minimum=1.0,
        maximum=30 * 86400.0,
        doc="With several upstreams: how long after the first succeeded the others may take; "
        "past it the occurrence is recorded skipped.",
        flag="--after-timeout",
        interval=True,
    )
    keep_runs: str | None = define(
        None,
        kind="text",
        nullable=True,
        doc="Keep less history for this job than the global retention: 30d (its runs finished "
        "in the last 30 days) or 1000 (its newest 1,000 runs).",
        flag="--keep-runs",
        check=check_keep_runs,
        example="30d",
    )
    concurrency_key: str | None = define(
        None,
        kind="text",
        nullable=True,
        maximum=200,
        doc="Concurrency key: with a limit on it (pgpulse limit set KEY N), at most N "
        "occurrences of the tenant's jobs with this key run at once, across every node.",
        flag="--concurrency-key",
        listed=True,
        check=check_concurrency_key,
        example="warehouse",
    )
    priority: int = define(
        0,
        kind="int",
        minimum=0,
        maximum=MAX_PRIORITY,
        doc="When a node has fewer free slots than due occurrences, higher priority runs "
        "first (then the oldest due); none waits more than 60 s behind later ones.",
        flag="--priority",
        listed=True,
    )

    @classmethod
    def create(
        cls,
        *,
        name: str,
        schedule: str,
        handler: str,
        tenant: str = "default",
        **options: Any,
    ) -> JobSpec:
        """Validate every field and build a :class:`JobSpec`.

        Each field is checked by its model entry (:func:`~pgpulse.core.definition.check_field`),
        then the rules between fields. ``options`` are the other fields (their defaults where
        left out). Units: ``misfire_grace``, ``retry_backoff``, ``timeout`` and ``spread`` are
        seconds; ``not_before`` and ``not_after`` are aware instants or ISO 8601 text (without an
        offset, read in ``timezone``); ``timezone`` a zone's name or a ``ZoneInfo``. Whether a
        one-off ``@at`` instant is already past, and whether the calendars exist, need the
        database's clock and tables: the store decides.

        Raises:
            TypeError: an option that is no field of a job.
            InvalidSchedule: the schedule is malformed or can never fire.
            UnknownTimeZone: ``timezone`` is not an IANA zone.
            InvalidPayload: ``payload`` is not a JSON object (or JSON text of one), or a
                built-in handler's payload lacks, mistypes or misspells a field
                (:data:`~pgpulse.core.payloads.PAYLOAD_VALIDATORS`).
            InvalidInput: any other field is out of range (``schedule`` or ``timezone`` not
                text, ``source`` not 1-500 printable characters); ``field`` names it.
        """
        given_values: dict[str, Any] = {
            "tenant": tenant,
            "name": name,
            "schedule": schedule,
            "handler": handler,
            **options,
        }
        values: dict[str, Any] = {}
        for entry in job_fields(cls):
            value = given_values.pop(entry.name, _default(entry))
            values[entry.name] = check_field(entry, value)
        if given_values:
            raise TypeError(
                f"JobSpec.create() got an unexpected keyword argument {next(iter(given_values))!r}"
            )
        _check_rules(values)
        return cls(**values)

    def parsed_schedule(self) -> Schedule:
        """Return the parsed :class:`~pgpulse.core.schedule.Schedule` of this job (pure, no I/O)."""
        return parse_schedule(self.schedule, self.timezone)


def unknown_handlers(specs: Iterable[JobSpec], known: Collection[str]) -> set[str]:
    """The handlers of ``specs`` that are neither built in nor in ``known`` (pure)."""
    return {spec.handler for spec in specs} - set(BUILTIN_HANDLER_NAMES) - set(known)


def check_handlers(specs: Iterable[JobSpec], known: Collection[str]) -> None:
    """Refuse the first spec whose handler is neither built in nor in ``known`` (pure).

    Args:
        specs: the job definitions about to be written.
        known: handler names known besides the built-in ones: the caller's own and those the
            nodes registered (``Store.registered_handlers``).

    Raises:
        UnknownHandler: ``field`` is ``"handler"``, ``value`` the name; the message lists the
            known handlers.
    """
    names = set(BUILTIN_HANDLER_NAMES) | set(known)
    for spec in specs:
        if spec.handler not in names:
            raise UnknownHandler(
                f"handler {spec.handler!r} of job {spec.name!r} is not built in and no "
                f"node has registered it{did_you_mean(spec.handler, names)} "
                f"(known: {', '.join(sorted(names))})",
                field="handler",
                value=spec.handler,
            )


def _model() -> dict[str, Field]:
    """The model's entries by name."""
    return {entry.name: entry for entry in job_fields(JobSpec)}


#: Upper bounds of the numeric fields (the model's): beyond them a value is a mistake, and some
#: would overflow PostgreSQL's integer or interval types. Durations in seconds.
LIMITS: dict[str, float] = {
    entry.name: entry.maximum
    for entry in job_fields(JobSpec)
    if entry.kind in ("int", "seconds") and entry.maximum is not None
}
