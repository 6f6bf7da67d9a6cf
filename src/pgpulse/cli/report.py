"""Output of the command line: readable tables for people, JSON for scripts, one-line errors;
and how a command's process runs (event loop, garbage collection)."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Callable, Collection, Coroutine, Sequence
from datetime import date, datetime, timedelta
from typing import Any, TypeVar

import click

from pgpulse.core.errors import DatabaseUnavailable, PulseError
from pgpulse.core.sharding import DEFAULT_SHARD_COUNT
from pgpulse.core.skips import describe, stored
from pgpulse.core.wording import pending_pause, plural, seconds_text

T = TypeVar("T")


def tune_collector() -> None:
    """Garbage collection for a long-running node process (``node run``, and the benchmark's
    claims measured as a node makes them): what was loaded at start-up is frozen out of every
    collection, and young collections run every 20,000 allocations instead of 700 (a busy node
    allocates a few objects per run; measured −10 % node CPU per run)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


def run_command(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine on uvloop where it is installed (a dependency except on
    Windows; a busy node spends about 7 % less CPU per run on it than on asyncio's own loop),
    else on asyncio's loop. A Pulse error becomes one line on stderr and an exit code: 3 for a
    database that does not answer, 2 for refused input."""
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(coro)
    except DatabaseUnavailable as exc:
        click.echo(f"error: {refusal_line(exc)}", err=True)
        sys.exit(3)
    except PulseError as exc:
        click.echo(f"error: {refusal_line(exc)}", err=True)
        sys.exit(2)


def refusal_line(exc: PulseError) -> str:
    """How the command line reports ``exc``: one line (:func:`one_line`), without ``error:``.
    A data folder the embedded server cannot make (``field`` ``data_dir``: ``/proc/nope``,
    ``/etc/passwd/sub``) is worded as click words any option's refused value, ``invalid value
    for --data-dir: ...``, and names ``PGPULSE_DATA_DIR`` when that variable gave it (the
    user may not know it is set)."""
    message = one_line(str(exc))
    if exc.field != "data_dir" or isinstance(exc, DatabaseUnavailable):
        return message
    if message.startswith("invalid value for "):  # worded by the command (as_option_refusal)
        return message
    from pgpulse.cli.conventions import environment_source  # the CLI's module imports this one

    ctx = click.get_current_context(silent=True)
    variable = environment_source(ctx.find_root(), "data_dir") if ctx is not None else None
    where = f" (from the environment variable {variable})" if variable else ""
    return f"invalid value for --data-dir: {message}{where}"


def one_line(text: str) -> str:
    """``text`` on one line: its non-blank lines joined by ``"; "`` (libpq's messages carry a
    hint on a second line, and an error is one line on stderr)."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor, or ``None`` (asyncio's own loop) where it is not installed."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def to_json(value: Any) -> Any:
    """``json.dumps`` default: instants as ISO 8601 with ``T`` and an offset, written as the
    API writes them (pydantic: ``Z`` for a zero offset, ``2026-12-01T06:32:00Z``), durations
    as seconds, anything else as text."""
    if isinstance(value, datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if value.utcoffset() == timedelta(0) else text
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


def emit(as_json: bool, result: dict[str, Any], *lines: str) -> None:
    """What a command that writes says it did: with ``--json`` one JSON object (``result``,
    instants as :func:`to_json` writes them), otherwise ``lines``, one per line (none: nothing).
    The object holds the facts the lines word, so a script need not parse the words."""
    if as_json:
        click.echo(json.dumps(result, default=to_json, indent=2, ensure_ascii=False))
    else:
        for line in lines:
            click.echo(line)


#: Longest text shown in a table cell of a column that may be shortened (errors, commands).
CELL_MAX = 60


def _is_number(value: Any) -> bool:
    """Whether a table cell reads as a number (right-aligned): an int or float, or text that
    parses as one."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    if isinstance(value, str) and value.strip():
        try:
            float(value)
        except ValueError:
            return False
        return value.strip().lower() not in ("nan", "inf", "-inf", "infinity")
    return False


def _is_int(value: Any) -> bool:
    """Whether a number cell (:func:`_is_number`) is a whole number as written."""
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return False
    try:
        int(str(value).strip())
    except ValueError:
        return False
    return True


def tabulate(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """``rows`` under ``headers`` in aligned columns, as people read them in a terminal: two
    spaces between columns, a rule of dashes under each header (two wider than it), a column
    whose every value is a number right-aligned, ``None`` empty, cells and lines without
    surrounding spaces. The
    layout of the tabulate library's "simple" format, kept without the library (a node
    installs only what it runs, and tables are no reason to depend on it); in a column with a
    fraction, every number is written as Python's ``"g"`` format writes it (``270.000`` is
    ``270``), as that layout did."""
    text = [["" if value is None else str(value).strip() for value in row] for row in rows]
    columns = range(len(headers))
    numeric = [
        any(row[i] not in (None, "") for row in rows)
        and all(_is_number(row[i]) for row in rows if row[i] not in (None, ""))
        for i in columns
    ]
    for i in columns:  # a column with a fraction shows each number as Python's "g" does
        if numeric[i] and not all(_is_int(row[i]) for row in rows if row[i] not in (None, "")):
            for row, cells in zip(rows, text, strict=True):
                if row[i] not in (None, ""):
                    cells[i] = format(float(row[i]), "g")
            # and lines the numbers up on their decimal points
            parts = [cells[i].partition(".") for cells in text]
            whole = max(len(a) for a, _, _ in parts)
            fraction = max(len(dot + b) for _, dot, b in parts)
            for cells, (a, dot, b) in zip(text, parts, strict=True):
                if cells[i]:
                    cells[i] = a.rjust(whole) + (dot + b).ljust(fraction)
    widths = [max([len(headers[i]) + 2, *(len(row[i]) for row in text)]) for i in columns]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(widths[i]) if numeric[i] else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in text)])


def _cell(value: Any, shorten: bool = False) -> Any:
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, str) and shorten:
        text = value.strip()
        first = text.split("\n", 1)[0]
        return first if first == text and len(first) <= CELL_MAX else first[: CELL_MAX - 1] + "…"
    if isinstance(value, list | tuple):
        if len(value) > 8:
            return f"{len(value)} items"
        return ", ".join(str(_cell(item)) for item in value)  # never a Python repr
    if isinstance(value, date):
        return value.isoformat()
    return value


def print_records(
    rows: Sequence[dict[str, Any]],
    as_json: bool,
    columns: Sequence[str],
    *,
    shorten: Collection[str] = (),
) -> None:
    """Print ``rows`` as a table of ``columns`` (or as a JSON list of whole rows).

    Nothing a user types back (names, tenants, ids) is ever cut; only the text of the
    ``shorten`` columns (errors, output) is cut to its first line of at most :data:`CELL_MAX`
    characters, ending in ``…`` where it was cut (the whole text is in ``--json`` and
    ``job show``).
    """
    if as_json:
        click.echo(json.dumps(list(rows), default=to_json, indent=2))
        return
    if not rows:
        click.echo("(none)")
        return
    click.echo(
        tabulate(
            [[_cell(row.get(c), c in shorten) for c in columns] for row in rows],
            headers=list(columns),
        )
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else seconds_text(value)


def _instant(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _attempt_lines(run: dict[str, Any]) -> list[str]:
    """Every attempt of ``run`` (its ``attempt_log``) as table lines, then its whole output."""
    table = [
        [
            a["attempt"],
            a["node_id"] or "-",
            _instant(a["started_at"]),
            _instant(a["ended_at"]),
            a["outcome"],
            _cell(a["error"], shorten=True) or "",
        ]
        for a in run["attempt_log"]
    ]
    lines = (
        tabulate(
            table, headers=["attempt", "node", "started", "ended", "outcome", "error"]
        ).splitlines()
        if table
        else ["(no attempt: skipped)"]
    )
    for attempt in run["attempt_log"][:-1]:
        if attempt["output"]:
            lines += [f"output of attempt {attempt['attempt']}:", *_indented(attempt["output"])]
    if run.get("output"):
        lines += ["output:", *_indented(run["output"])]
    return lines


def _indented(text: str) -> list[str]:
    return [f"  {line}" for line in text.rstrip("\n").split("\n")]


def print_runs_with_attempts(runs: Sequence[dict[str, Any]]) -> None:
    """Print each of ``runs`` (as :meth:`pgpulse.db.store.Store.list_runs` gives them) on a line,
    its attempts in a table under it (node, start, end, outcome, error), then its whole output
    (``pgpulse runs --attempts``)."""
    if not runs:
        click.echo("(none)")
    for index, run in enumerate(runs):
        if index:
            click.echo("")
        lag = "-" if run["lag"] is None else f"{run['lag']:.3f} s"
        click.echo(
            f"run {run['id']}  {run['tenant']}/{run['name']}  {_instant(run['scheduled_for'])}  "
            f"{run['outcome']}  attempts {run['attempts']}  lag {lag} (from the first attempt)"
        )
        for line in _attempt_lines(run):
            click.echo(f"  {line}")


def _status(job: dict[str, Any]) -> str:
    """A job's status with its pause's end and reason: ``paused until T: why``; a pause
    requested while the job runs: ``running; pauses when its run ends until T: why``."""
    status = str(job["status"])
    if job.get("pause_requested") and status != "paused":
        status = pending_pause(status, job.get("paused_until"))
    elif status == "paused" and job.get("paused_until"):
        status += f" until {_instant(job['paused_until'])}"
    if (status.startswith("paused") or job.get("pause_requested")) and job.get("pause_reason"):
        status += f": {job['pause_reason']}"
    return status


def _limits(job: dict[str, Any]) -> list[tuple[str, Any]]:
    """The job's run-control lines that apply (spread, window, max_runs, calendars,
    auto-pause): none for a job that has none."""
    lines: list[tuple[str, Any]] = []
    if job.get("spread"):
        lines.append(("spread", _seconds(job["spread"])))
    if job.get("not_before") or job.get("not_after"):
        window = f"{_instant(job.get('not_before'))} to {_instant(job.get('not_after'))}"
        lines.append(("window", window))
    if job.get("max_runs"):
        lines.append(("max runs", f"{job['max_runs']} ({job['runs_done']} done)"))
    if job.get("calendars"):
        lines.append(("calendars", ", ".join(job["calendars"])))
    if job.get("auto_pause_after"):
        lines.append(("auto-pause", f"after {job['auto_pause_after']} consecutive failed runs"))
    return lines


def _no_upcoming(job: dict[str, Any]) -> str:
    """What the next occurrences read when there are none to list."""
    if job["status"] == "paused" and not job.get("paused_until"):
        return "none while paused: the first comes after a resume (job resume)"
    if job.get("pause_requested") and not job.get("paused_until"):
        return "none: it pauses when its run ends; the first comes after a resume (job resume)"
    return "none"


def _links(job: dict[str, Any]) -> list[tuple[str, Any]]:
    """A job's chain (docs/chains.md): the jobs it follows (with its after_timeout when it
    joins several) and the jobs that follow it; nothing for a job in no chain."""
    lines: list[tuple[str, Any]] = []
    if upstreams := job.get("after"):
        joined = f" (after_timeout {_seconds(job['after_timeout'])})" if len(upstreams) > 1 else ""
        lines.append(("upstreams", ", ".join(upstreams) + joined))
    if downstreams := job.get("downstreams"):
        lines.append(("downstreams", ", ".join(downstreams)))
    return lines


def print_job(
    job: dict[str, Any], runs: Sequence[dict[str, Any]], *, attempts: bool = False
) -> None:
    """Print one job (as :func:`pgpulse.web.service.present_job` gives it) for people, grouped:
    its definition, its state, its current occurrence, its next occurrences in its own zone
    and its last ``runs`` with their lag (from the first attempt) and output's first line;
    with ``attempts``, every attempt of each run and its whole output instead. Instants are ISO
    8601 in UTC, the upcoming ones in the job's zone."""
    completed = job["status"] == "completed"
    catch_up = job["catch_up"]
    if catch_up == "skip":
        catch_up += f", misfire grace {_seconds(job['misfire_grace'])}"
    elif catch_up == "backfill" and job["backfill_limit"]:
        catch_up += f", newest {job['backfill_limit']} only"
    lease = job["lease_expires_at"]
    sections: list[tuple[str, list[tuple[str, Any]]]] = [
        (
            "definition",
            [
                ("schedule", f"{job['schedule']}: {job['schedule_description']}"),
                ("time zone", job["timezone"]),
                *(
                    [("anchored at", _instant(job["anchor_at"]))]
                    if "every" in job["schedule"]
                    else []
                ),
                ("handler", job["handler"]),
                ("payload", json.dumps(job["payload"], ensure_ascii=False)),
                ("catch-up", catch_up),
                (
                    "attempts",
                    f"{job['max_attempts']}, backoff base {_seconds(job['retry_backoff'])}",
                ),
                ("timeout", _seconds(job["timeout"])),
                *_limits(job),
                *([("overlap", _overlap(job))] if job.get("overlap", "forbid") != "forbid" else []),
                *_links(job),
                ("source", job["source"]),
                ("revision", job.get("revision", 1)),
            ],
        ),
        (
            "state",
            [
                ("status", _status(job)),
                *([("waiting", job["waiting"])] if job.get("waiting") else []),
                *([("skips", describe(stored(job["skips"])))] if job.get("skips") else []),
                ("last outcome", job["last_outcome"] or "-"),
                ("last finished", _instant(job["last_finished_at"])),
                ("last error", job["last_error"] or "-"),
                ("late now", "-" if job["due_lag"] is None else f"{job['due_lag']:.1f} s"),
                ("created", _instant(job["created_at"])),
                ("updated", _instant(job["updated_at"])),
            ],
        ),
        (
            "current occurrence",
            [  # a completed job has none to come (it keeps the instant it stopped at)
                ("scheduled for", "-" if completed else _instant(job["scheduled_for"])),
                ("claimable at", "-" if completed else _instant(job["next_run_at"])),
                ("attempt", job["attempt"]),
                (
                    "held by",
                    "-" if lease is None else f"{job['locked_by']} until {_instant(lease)}",
                ),
            ],
        ),
        (
            f"next occurrences ({job['timezone']})",
            [("", _instant(t)) for t in job["upcoming"]] or [("", _no_upcoming(job))],
        ),
    ]
    click.echo(f"job {job['tenant']}/{job['name']} (id {job['id']})")
    for title, lines in sections:
        click.echo(f"\n{title}")
        for label, value in lines:
            click.echo(f"  {label:<16}{value}".rstrip() if label else f"  {value}")
    click.echo(f"\nlast runs ({len(runs)})")
    if runs and attempts:
        for run in runs:
            click.echo(f"  {_instant(run['scheduled_for'])}  {run['outcome']}  run {run['id']}")
            for line in _attempt_lines(run):
                click.echo(f"    {line}")
    elif runs:
        table = [
            [
                _instant(r["scheduled_for"]),
                r["outcome"]
                if r.get("kind", "scheduled") == "scheduled"
                else f"{r['outcome']} ({r['kind']})",
                r["attempts"],
                r["node_id"] or "-",
                _seconds(r["lag"] and round(r["lag"], 3)),
                _seconds(r["duration"] and round(r["duration"], 3)),
                _cell(r["error"], shorten=True) or "",
                _cell(r["output"], shorten=True) or "",
            ]
            for r in runs
        ]
        headers = ["scheduled for", "outcome", "attempts", "node", "lag", "duration", "error"]
        for line in tabulate(table, headers=[*headers, "output"]).splitlines():
            click.echo(f"  {line}")


def _overlap(job: dict[str, Any]) -> str:
    """A job's overlap policy in words."""
    if job["overlap"] == "allow":
        return f"allow, up to {job['max_concurrency']} at once"
    return "replace: a new occurrence cancels the running one"


#: How long ``status`` lists a lost or stopped node after its last heartbeat (seconds); older
#: ones are folded into one line (``--all`` lists them), and the leader forgets them after a
#: day (:data:`pgpulse.db.claims.NODE_RETENTION`).
RECENT_NODES = 3600.0


def fold_nodes(
    nodes: Sequence[dict[str, Any]], *, show_all: bool = False
) -> tuple[list[dict[str, Any]], str | None]:
    """The nodes ``status`` lists, and the line that stands for the others: lost and stopped
    nodes silent for more than :data:`RECENT_NODES` seconds (``silent_seconds``), e.g.
    ``3 stopped nodes not shown: silent for over 3,600 s (1 h) (status --all lists them)``. Live and
    draining nodes, and every node with ``show_all``, are always listed (line ``None``)."""
    if show_all:
        return list(nodes), None
    shown: list[dict[str, Any]] = []
    folded: list[dict[str, Any]] = []
    for n in nodes:
        old = n["state"] in ("lost", "stopped") and n.get("silent_seconds", 0) > RECENT_NODES
        (folded if old else shown).append(n)
    if not folded:
        return shown, None
    states = sorted({n["state"] for n in folded}, reverse=True)  # stopped, then lost
    counted = " and ".join(
        plural(len([n for n in folded if n["state"] == state]), f"{state} node") for state in states
    )
    since = seconds_text(RECENT_NODES)
    return shown, f"{counted} not shown: silent for over {since} (status --all lists them)"


def status_headline(nodes: Sequence[dict[str, Any]], counts: dict[str, Any], database: str) -> str:
    """The one line a person reads first: live nodes, leader and due jobs (or ``NO LIVE NODE``),
    shards still moving (or the shard count when it is not the default 64), lost nodes,
    unhealthy ones (they beat, their claims fail: not alive), jobs
    no live node can run (beside live nodes: with none,
    every job waits, and the lines below the table say by handler), and the database, e.g.
    ``3 nodes alive, leader node-2, 0 jobs due — database 'pulse' on db.internal:5432``."""
    alive = [n for n in nodes if n["alive"]]
    lost = [n for n in nodes if n["state"] == "lost"]
    leader = next((n["node_id"] for n in nodes if n["leader"]), None)
    due, lag = counts["due"], counts["max_lag"]
    jobs = plural(due, "job") + " due" + (f", oldest {lag:.1f} s late" if due and lag else "")
    if not alive:
        line = f"NO LIVE NODE: {jobs}"
    else:
        line = f"{plural(len(alive), 'node')} alive, leader {leader or 'none yet'}, {jobs}"
        owned = sum(len(n["shards"]) for n in alive)
        total = alive[0].get("shard_count", DEFAULT_SHARD_COUNT)  # the database's count
        if owned != total:
            line += f", shards moving ({owned} of {total} owned)"
        elif total != DEFAULT_SHARD_COUNT:  # a count set with `pgpulse shards set`
            line += f", {total} shards"
    if lost:
        line += f"; {plural(len(lost), 'node')} lost ({', '.join(n['node_id'] for n in lost)})"
    sick = [n for n in nodes if n["state"] == "unhealthy"]
    if sick:
        line += (
            f"; {plural(len(sick), 'node')} unhealthy, claims failing ("
            + ", ".join(n["node_id"] for n in sick)
            + ")"
        )
    waiting = counts.get("unroutable", [])
    if waiting and alive:  # with no live node every job waits: the headline said why
        line += f"; {plural(sum(w['jobs'] for w in waiting), 'job')} waiting: " + ", ".join(
            w["reason"] for w in waiting
        )
    return f"{line} — {database}"


def status_problems(
    nodes: Sequence[dict[str, Any]], counts: dict[str, Any], max_lag: float
) -> list[str]:
    """Why ``status --check`` fails: no live node, a split brain (``counts["split_brain"]``,
    :mod:`pgpulse.node.split_brain`), or a due job later than ``max_lag`` seconds
    (empty when healthy). A lost node beside live ones is not a problem: its jobs move on."""
    problems = []
    if not any(n["alive"] for n in nodes):
        problems.append("no live node")
    if counts.get("split_brain"):
        problems.append(counts["split_brain"])
    lag = counts["max_lag"]
    if lag is not None and lag > max_lag:
        job = counts.get("most_overdue") or {}
        named = f" ({job['tenant']}/{job['name']})" if job else ""
        waits = next(
            (w for w in counts.get("unroutable", []) if w.get("handler") == job.get("handler")),
            None,
        )
        why = f"; it waits: {waits['reason']}" if waits and waits.get("reason") else ""
        problems.append(
            f"the most overdue job{named} is {lag:.1f} s late, over --max-lag "
            f"{seconds_text(max_lag)}{why}"
        )
    return problems


def print_schema_missing(
    reason: str, as_json: bool, *, database: str, checking: bool = False
) -> None:
    """``pgpulse status`` on a database without Pulse's current schema: the headline says so
    (``NO PULSE SCHEMA: run `pgpulse migrate`...``), with ``reason``, the
    :class:`~pgpulse.core.errors.SchemaMissing` text; ``--json`` has the same ``headline`` and
    ``database``, no nodes, ``jobs`` null (and a failed ``check`` with ``checking``)."""
    advice = reason.split(": ", 1)[-1]
    headline = f"NO PULSE SCHEMA: {advice} — {database}"
    if as_json:
        document: dict[str, Any] = {
            "headline": headline,
            "database": database,
            "nodes": [],
            "leader": None,
            "jobs": None,
        }
        if checking:
            document["check"] = {"ok": False, "problems": ["no Pulse schema"]}
        click.echo(json.dumps(document, indent=2))
        return
    click.echo(headline)


def print_status(
    nodes: Sequence[dict[str, Any]],
    counts: dict[str, Any],
    as_json: bool,
    *,
    database: str,
    problems: Sequence[str] | None = None,
    show_all: bool = False,
) -> None:
    """Print the cluster: the headline, the nodes (state, heartbeat, shards, running, leader,
    start) and job counts; with ``problems`` (``status --check``), the check's verdict too.
    Lost and stopped nodes long silent are one line, not rows (:func:`fold_nodes`; the JSON
    lists them under ``not_shown``), unless ``show_all``. A split brain
    (``counts["split_brain"]``, :func:`pgpulse.node.split_brain.status_line`) is the first line
    (JSON: ``split_brain``, else ``null``)."""
    nodes, folded = fold_nodes(nodes, show_all=show_all)
    headline = status_headline(nodes, counts, database)
    if as_json:
        document: dict[str, Any] = {
            "headline": headline,
            "database": database,
            "nodes": list(nodes),
            "not_shown": folded,
            "leader": next((n["node_id"] for n in nodes if n["leader"]), None),
            "jobs": {k: v for k, v in counts.items() if k != "split_brain"},
            "split_brain": counts.get("split_brain"),
        }
        if problems is not None:
            document["check"] = {"ok": not problems, "problems": list(problems)}
        click.echo(json.dumps(document, default=to_json, indent=2))
        return
    if counts.get("split_brain"):  # above all: two primaries make every other figure suspect
        click.echo(counts["split_brain"])
    click.echo(headline + "\n")
    table = [
        [
            n["node_id"],
            n["state"],
            _cell(n["last_heartbeat"]),
            len(n["shards"]),
            f"{n['running']}/{n['slots']}",
            "*" if n["leader"] else "",
            _cell(n["started_at"]),
        ]
        for n in nodes
    ]
    headers = ["node", "state", "last heartbeat", "shards", "running", "leader", "started"]
    click.echo(tabulate(table, headers=headers) if table else "no nodes")
    if folded:
        click.echo(folded)
    for n in nodes:
        if n["state"] == "unhealthy":
            since = _cell(n["last_claim_at"]) if n.get("last_claim_at") else "never"
            click.echo(
                f"unhealthy: node {n['node_id']}'s claims fail (last success {since}): "
                f"{one_line(n['claim_error'] or '')}"
            )
    lag = counts["max_lag"]
    on_lost = counts.get("running_on_lost") or 0
    running = f"{counts['running']} running" + (
        f" ({on_lost} on nodes no longer alive, returned when their leases end by "
        f"{_cell(counts['lost_leases_until'])})"
        if on_lost
        else ""
    )
    pausing = counts.get("pausing") or 0
    if pausing:  # a pause requested while the job ran
        running += (
            f" ({pausing} to pause when {'its run ends' if pausing == 1 else 'their runs end'})"
        )
    click.echo(
        f"\njobs: {counts['total']} total, {counts['due']} due, {running}, "
        f"{counts['paused']} paused, {counts['failing']} whose last run failed, "
        f"{counts['failed']} that cannot be scheduled, {counts['completed']} completed; "
        f"lag of the most overdue job: {'none' if lag is None else f'{lag:.1f} s'}"
    )
    for w in counts.get("unroutable", []):
        click.echo(f"waiting: {plural(w['jobs'], 'job')} ({w['due']} due): {w['reason']}")
    stale = counts.get("stale_code_jobs") or []
    if stale:
        names = ", ".join(
            j["name"] if j["tenant"] == "default" else f"{j['tenant']}/{j['name']}" for j in stale
        )
        click.echo(
            f"declared by code no longer running: {plural(len(stale), 'job')}: {names} "
            "(node run --prune-code-jobs deletes them)"
        )
