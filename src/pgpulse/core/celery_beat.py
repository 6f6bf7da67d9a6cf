"""A ``celery beat`` schedule as Pulse jobs (pure: reads an imported app's configuration, no I/O).

``pgpulse celery import --app proj.celery:app`` turns each entry of ``app.conf.beat_schedule``
into one ``celery`` job named as the entry, of source ``celery:<module:attr>``. How Celery's
schedules map to Pulse's:

* ``crontab(minute, hour, day_of_month, month_of_year, day_of_week)``: each field as Celery
  parsed it (a set of numbers) is written as a cron field: a list of numbers and ranges,
  ``first-last/step`` for an arithmetic run, and every value as ``*`` — but as ``0-59`` and
  ``0-23`` in minute and hour. Beat reads a crontab in wall-clock time, each local time once:
  in a repeated hour, on its first pass, which is Pulse's fixed-time rule (docs/design.md,
  invariant 7), and a field starting with ``*`` would make Pulse follow elapsed time instead.
  One difference stays: a local time inside a skipped hour (02:30 when clocks go from 02:00
  to 03:00) fires at 03:30 under beat (shifted by the gap) and at 03:00, the first instant
  after the gap, under Pulse (Vixie cron's rule).
  Celery fires on a day that matches day_of_month *and* day_of_week; Pulse's cron follows
  Vixie cron, where a day matching *either* fires when both fields are restricted. When one
  of the two holds every value (``*``) both rules agree. When both are restricted, the AND is
  written exactly if day_of_month is a union of the month's weeks 1-7, 8-14, 15-21, 22-28,
  29-31: the k-th week's weekday w is ``w#k`` (Celery's ``day_of_week=1,
  day_of_month="1-7"`` is ``* * 1#1``, the first Monday); any other pair has no Pulse
  equivalent and the entry is refused, naming both fields.
* ``timedelta``, a number of seconds, or ``schedule(run_every=...)``: ``@every`` (whole
  seconds, at least 1; ``relative=True`` is refused: an ``@every`` keeps its anchor).
* ``solar`` and any other schedule class (a subclass of crontab or schedule included): refused.
* Time zone: ``app.conf.timezone``; without one, UTC when ``enable_utc`` (Celery's default);
  beat would use the machine's zone otherwise, so that is refused.
* Catch-up: beat runs a cron entry that was missed while it was down once, at once, unless
  ``beat_cron_starting_deadline`` (seconds) says it is too late: ``coalesce`` without a
  deadline, ``skip`` with ``misfire_grace`` = the deadline with one. An interval entry missed
  is run once: ``coalesce``.
* ``args``, ``kwargs`` and ``options`` (``queue``, ``expires`` in seconds, ``headers``) become
  the payload; any other option (``priority``, ``exchange``, ``countdown``...) is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pgpulse.core.errors import InvalidInput
from pgpulse.core.jobs import JobSpec

__all__ = ["BeatImport", "app_timezone", "crontab_expression", "import_beat_schedule"]

#: Each crontab field: (Celery's attribute, its original text, lowest, highest value).
_FIELDS = (
    ("minute", "_orig_minute", 0, 59),
    ("hour", "_orig_hour", 0, 23),
    ("day_of_month", "_orig_day_of_month", 1, 31),
    ("month_of_year", "_orig_month_of_year", 1, 12),
    ("day_of_week", "_orig_day_of_week", 0, 6),
)
#: The weeks of a month Pulse's ``w#k`` picks from: the k-th weekday w falls in week k.
_WEEKS = {k: frozenset(range(7 * k - 6, min(7 * k, 31) + 1)) for k in range(1, 6)}
_ENTRY_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative"})
_OPTIONS = frozenset({"queue", "expires", "headers"})


class EntryRefused(InvalidInput):
    """One beat entry Pulse cannot take as it is (``field`` names the entry's part)."""


@dataclass(frozen=True, slots=True)
class BeatImport:
    """What a beat schedule becomes.

    Attributes:
        specs: one ``celery`` job per importable entry, in the schedule's order.
        refused: one line per entry that is not imported: ``entry 'x': why``.
    """

    specs: list[JobSpec] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _field_text(values: Iterable[int], low: int, high: int, *, star: bool) -> str:
    """A cron field for the set ``values``: every value is ``*`` (``star``) or ``low-high``;
    an arithmetic run of 3 or more is ``first-last/step``; else a list of numbers and ranges."""
    ordered = sorted(set(values))
    if ordered == list(range(low, high + 1)):
        return "*" if star else f"{low}-{high}"
    step = ordered[1] - ordered[0] if len(ordered) >= 3 else 0
    if step > 1 and ordered == list(range(ordered[0], ordered[-1] + 1, step)):
        return f"{ordered[0]}-{ordered[-1]}/{step}"
    parts: list[str] = []
    start = prev = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ",".join(parts)


def crontab_expression(schedule: Any) -> str:
    """The Pulse cron expression that fires when Celery's ``crontab`` ``schedule`` does (see
    the module docstring for the day rule).

    Raises:
        EntryRefused: day_of_month and day_of_week are both restricted and day_of_month is not
            a union of whole weeks (``field`` is ``schedule``).
    """
    # Minute and hour never start with ``*``: Pulse then reads the entry as a fixed-time job,
    # each local time once (the first pass of a repeated hour), as beat does; ``*`` would make
    # it follow elapsed time and fire in both passes.
    texts = [
        _field_text(getattr(schedule, attr), low, high, star=attr not in ("minute", "hour"))
        for attr, _, low, high in _FIELDS
    ]
    dom, dow = texts[2], texts[4]
    if dom != "*" and dow != "*":
        days = frozenset(schedule.day_of_month)
        weeks = [k for k, week in _WEEKS.items() if week <= days]
        if frozenset().union(*(_WEEKS[k] for k in weeks)) != days:
            raise EntryRefused(
                f"crontab(day_of_month={schedule._orig_day_of_month!r}, "
                f"day_of_week={schedule._orig_day_of_week!r}) fires on days matching both, and "
                "Pulse's cron (Vixie) fires on days matching either when both are restricted; "
                "only a day_of_month of whole weeks (1-7, 8-14, 15-21, 22-28, 29-31) has an "
                "equivalent (weekday#week): restrict one field, or split the entry",
                field="schedule",
                value=repr(schedule),
            )
        texts[2] = "*"
        texts[4] = ",".join(f"{w}#{k}" for w in sorted(schedule.day_of_week) for k in weeks)
    return " ".join(texts)


def _every(seconds: float, relative: bool) -> str:
    if relative:
        raise EntryRefused(
            "relative=True rounds each run to the interval's unit; Pulse's @every keeps its "
            "anchor: drop relative",
            field="relative",
            value=True,
        )
    if seconds < 1 or seconds != int(seconds):
        raise EntryRefused(
            f"interval of {seconds:g} seconds: Pulse's @every takes whole seconds, at least 1",
            field="schedule",
            value=seconds,
        )
    rest = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "@every " + "".join(parts)


def _schedule_of(value: Any, relative: bool) -> tuple[str, str]:
    """(Pulse schedule, kind: ``cron`` or ``interval``) of a beat entry's ``schedule``."""
    from celery.schedules import crontab, schedule, solar

    if isinstance(value, bool):
        pass  # a flag is not a number of seconds
    elif isinstance(value, int | float):
        return _every(float(value), relative), "interval"
    elif isinstance(value, timedelta):
        return _every(value.total_seconds(), relative), "interval"
    elif type(value) is crontab:
        return crontab_expression(value), "cron"
    elif type(value) is schedule:
        return _every(value.run_every.total_seconds(), relative or value.relative), "interval"
    if isinstance(value, solar):
        why = f"solar schedule {value!r} follows the sun; Pulse's schedules cannot express it"
    else:
        why = (
            f"schedule class {type(value).__module__}.{type(value).__qualname__} is not one "
            "Pulse can read (crontab, schedule, timedelta or seconds)"
        )
    raise EntryRefused(why, field="schedule", value=repr(value))


def _json(part: str, value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise EntryRefused(
            f"{part} {value!r} cannot be stored as JSON: {exc}", field=part, value=repr(value)
        ) from None


def _payload(entry: Mapping[str, Any]) -> dict[str, Any]:
    task = entry.get("task")
    if not isinstance(task, str):
        raise EntryRefused(f"task must be a string, got {task!r}", field="task", value=task)
    payload: dict[str, Any] = {"task": task}
    args = entry.get("args")
    if args:
        if not isinstance(args, list | tuple):
            raise EntryRefused(f"args must be a list or tuple, got {args!r}", field="args")
        payload["args"] = _json("args", list(args))
    kwargs = entry.get("kwargs")
    if kwargs:
        payload["kwargs"] = _json("kwargs", dict(kwargs))
    options = dict(entry.get("options") or {})
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise EntryRefused(
            f"option {unknown[0]!r} is not one the celery handler sends (it sends "
            f"{', '.join(sorted(_OPTIONS))}; routing options belong in the app's task_routes)",
            field=f"options.{unknown[0]}",
            value=options[unknown[0]],
        )
    for key in sorted(_OPTIONS & set(options)):
        payload[key] = _json(f"options.{key}", options[key])
    return payload


def app_timezone(conf: Any) -> str:
    """The zone beat reads crontab entries in: ``timezone``, else UTC under ``enable_utc``.

    Raises:
        InvalidInput: neither is set (beat would use the machine's zone): ``field="timezone"``.
    """
    zone = conf.timezone
    if zone:
        return str(getattr(zone, "key", zone))
    if conf.enable_utc:
        return "UTC"
    raise InvalidInput(
        "the app sets neither timezone nor enable_utc, so beat reads crontabs in this "
        "machine's zone: set app.conf.timezone",
        field="timezone",
        value=None,
    )


def _policy(conf: Any, kind: str) -> dict[str, Any]:
    deadline = conf.beat_cron_starting_deadline
    if kind == "cron" and deadline is not None:
        return {"catch_up": "skip", "misfire_grace": max(float(deadline), 1.0)}
    return {"catch_up": "coalesce"}


def import_beat_schedule(app: Any, *, tenant: str, source: str) -> BeatImport:
    """The jobs of ``app.conf.beat_schedule`` (module docstring: the mapping), each entry
    imported or refused on its own.

    Args:
        app: a Celery app.
        tenant: the jobs' tenant.
        source: the jobs' source, ``celery:<module:attr>``.

    Raises:
        InvalidInput: the app's zone cannot be known (:func:`app_timezone`), or its zone is
            not an IANA zone.
    """
    conf = app.conf
    zone = app_timezone(conf)
    result = BeatImport()
    for name, entry in dict(conf.beat_schedule or {}).items():
        try:
            if not isinstance(entry, Mapping):
                raise EntryRefused(f"is a {type(entry).__name__}, not a dict", field="entry")
            unknown = sorted(set(entry) - _ENTRY_KEYS)
            if unknown:
                raise EntryRefused(f"key {unknown[0]!r} is not one beat reads", field=unknown[0])
            expression, kind = _schedule_of(entry.get("schedule"), bool(entry.get("relative")))
            spec = JobSpec.create(
                name=str(name),
                schedule=expression,
                handler="celery",
                tenant=tenant,
                timezone=zone,
                payload=_payload(entry),
                source=source,
                meta={"celery_schedule": repr(entry.get("schedule"))},
                **_policy(conf, kind),
            )
        except InvalidInput as exc:
            if exc.field == "timezone":
                raise
            result.refused.append(f"entry {name!r}: {exc}")
            continue
        result.specs.append(spec)
    return result
