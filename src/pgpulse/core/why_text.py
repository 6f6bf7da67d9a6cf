"""How a ``pgpulse why`` trace is worded (pure): the labelled lines of its facts, its instants,
and the daylight-saving note of an occurrence (docs/design.md, invariant 7). The facts
themselves are found by :mod:`pgpulse.core.why`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pgpulse.core.schedule import Schedule
from pgpulse.core.wording import plural, seconds_text
from pgpulse.core.zones import is_utc, load_zone, offsets


def dst_note(schedule: Schedule, occurrence: datetime) -> str | None:
    """How daylight saving placed ``occurrence`` of a cron ``schedule`` (docs/design.md,
    invariant 7), or ``None`` when it did not: a fixed-time job whose wall time a jump forward
    skipped fires at the first instant after the gap; a wall time repeated when clocks go back
    fires once (fixed-time, first pass) or in both passes (elapsed-time).

    Args:
        schedule: the job's schedule (only cron schedules in a zone other than UTC move).
        occurrence: an occurrence of it (aware).
    """
    cron = schedule.cron
    if cron is None or is_utc(schedule.timezone):
        return None
    zone = load_zone(schedule.timezone)
    local = occurrence.astimezone(zone)
    wall = local.replace(tzinfo=None)
    on_the_fields = (
        wall.hour in cron.hours and wall.minute in cron.minutes and wall.second in cron.seconds
    )
    if not on_the_fields:
        before = (occurrence - timedelta(seconds=1)).astimezone(zone)
        jump = (local.utcoffset() or timedelta()) - (before.utcoffset() or timedelta())
        if jump > timedelta():
            return (
                f"clocks went forward {seconds_text(jump.total_seconds())} at {wall:%H:%M} "
                f"{local.tzname()}: its wall time did not exist that day, so this fixed-time "
                "job fired at the first instant after the gap"
            )
        return None
    first, second = offsets(zone, wall)
    if first <= second:
        return None
    if cron.elapsed:
        which = "second" if local.fold else "first"
        return (
            f"{wall:%H:%M} happened twice that day (clocks went back); an elapsed-time job "
            f"fires in both passes, and this is the {which} ({local.tzname()})"
        )
    return (
        f"{wall:%H:%M} happened twice that day (clocks went back); a fixed-time job fires on "
        f"the first pass only ({local.tzname()})"
    )


def pause_words(pause: Mapping[str, Any]) -> str:
    """A pause in words: ``paused at T by os:alice (db migration)`` (``by``, ``at`` and
    ``reason`` each left out when unknown)."""
    by = f" by {pause['by']}" if pause.get("by") else ""
    at = f" at {iso(pause['at'])}" if pause.get("at") else ""
    reason = f" ({pause['reason']})" if pause.get("reason") else ""
    return f"paused{at}{by}{reason}"


def iso(value: datetime | None) -> str:
    """An instant in UTC, to the second (to the millisecond when it has a fraction)."""
    if value is None:
        return "-"
    spec = "milliseconds" if value.microsecond else "seconds"
    return value.astimezone(UTC).isoformat(timespec=spec).replace("+00:00", "Z")


def jsonable(value: Any) -> Any:
    """``value`` with every instant as :func:`iso` text and every date in ISO 8601, through
    dicts, lists and tuples (a trace's facts, ready for ``json.dumps``)."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "isoformat"):  # a date
        return value.isoformat()
    return value


def fact_lines(facts: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """The labelled lines of a trace's facts, in reading order."""
    scheduled = facts.get("scheduled")
    if scheduled:
        local = scheduled["local"]
        yield (
            "scheduled",
            iso(scheduled["utc"])
            + ("" if local.endswith(" UTC") else f" = {local} ({scheduled['timezone']})"),
        )
        if scheduled["daylight_saving"]:
            yield "dst", scheduled["daylight_saving"]
    if "spread_offset" in facts and scheduled:
        yield (
            "spread",
            (f"+{seconds_text(facts['spread_offset'])}: due at {iso(scheduled['due_at'])}"),
        )
    claim = facts.get("claim")
    if claim:
        lag = "" if claim["lag"] is None else f", lag {claim['lag']:.3f} s"
        yield "claimed", f"by {claim['node']} at {iso(claim['at'])}{lag}"
    for a in facts.get("attempts", ()):
        yield f"attempt {a['attempt']}", _attempt_words(a)
    yield from _other_lines(facts)


def _attempt_words(a: Mapping[str, Any]) -> str:
    ended = f", ended {iso(a['ended_at'])}" if a["ended_at"] else ""
    error = f": {a['error']}" if a["error"] and a["outcome"] != "lease lost" else ""
    fenced = (
        "; fenced: its lease was taken back, so any write with token "
        f"{a['token']} was refused (docs/design.md, invariant 3)"
        if a["fenced"]
        else ""
    )
    return (
        f"token {a['token']} on {a['node']}, started {iso(a['started_at'])}{ended}: "
        f"{a['outcome']}{error}{fenced}"
    )


def _other_lines(facts: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    skip = facts.get("skip")
    if skip:
        many = skip["occurrences"]
        span = (
            f"one row for {plural(many, 'occurrence')}, {iso(skip['first'])} to {iso(skip['last'])}"
            if many > 1
            else "its own row"
        )
        yield "skipped", f"recorded {iso(skip['recorded_at'])} (run {skip['run_id']}, {span})"
        by = skip.get("superseded_by")
        if by:
            yield (
                "gave way to",
                f"{iso(by['scheduled_for'])}: {by['outcome']} (run {by['run_id']})",
            )
    pause = facts.get("pause")
    if pause:
        yield "paused", pause_words(pause)
        if pause.get("resumed_at"):
            yield (
                "resumed",
                (
                    f"{iso(pause['resumed_at'])} by {pause['resumed_by']} "
                    f"(mode {pause['resume_mode']})"
                ),
            )
    waiting = facts.get("waiting_for")
    if waiting:
        yield "waiting for", ", ".join(f"{k} {_text(v)}" for k, v in waiting.items())
    for key in ("completed", "deleted"):
        if key in facts:
            yield key, ", ".join(f"{k} {_text(v)}" for k, v in facts[key].items())


def _text(value: object) -> str:
    return iso(value) if isinstance(value, datetime) else str(value)
