"""Output of the command line: readable tables for people, JSON for scripts, one-line errors;
and how a command's process runs (event loop, garbage collection)."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, TypeVar

import click
from tabulate import tabulate

from pgpulse.errors import DatabaseUnavailable, PulseError

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
        click.echo(f"error: {one_line(str(exc))}", err=True)
        sys.exit(3)
    except PulseError as exc:
        click.echo(f"error: {one_line(str(exc))}", err=True)
        sys.exit(2)


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
    """``json.dumps`` default: instants as ISO-8601 with offset, anything else as text."""
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, str) and len(value) > 60:
        return value[:57] + "..."
    if isinstance(value, list | tuple) and len(value) > 8:
        return f"{len(value)} items"
    return value


def print_records(rows: Sequence[dict[str, Any]], as_json: bool, columns: Sequence[str]) -> None:
    """Print ``rows`` as a table of ``columns`` (or as a JSON list of whole rows)."""
    if as_json:
        click.echo(json.dumps(list(rows), default=to_json, indent=2))
        return
    if not rows:
        click.echo("(none)")
        return
    click.echo(
        tabulate([[_cell(row.get(c)) for c in columns] for row in rows], headers=list(columns))
    )


def print_status(nodes: Sequence[dict[str, Any]], counts: dict[str, Any], as_json: bool) -> None:
    """Print the cluster: nodes (alive, heartbeat, shards, running, leader) and job counts."""
    if as_json:
        leader = next((n["node_id"] for n in nodes if n["leader"]), None)
        click.echo(
            json.dumps(
                {"nodes": list(nodes), "leader": leader, "jobs": counts}, default=to_json, indent=2
            )
        )
        return
    table = [
        [
            n["node_id"],
            "yes" if n["alive"] else "no",
            n["state"],
            _cell(n["last_heartbeat"]),
            len(n["shards"]),
            f"{n['running']}/{n['slots']}",
            "*" if n["leader"] else "",
        ]
        for n in nodes
    ]
    click.echo(
        tabulate(
            table,
            headers=["node", "alive", "state", "last heartbeat", "shards", "running", "leader"],
        )
        if table
        else "no nodes"
    )
    lag = counts["max_lag"]
    click.echo(
        f"\njobs: {counts['total']} total, {counts['due']} due, {counts['running']} running, "
        f"{counts['paused']} paused, {counts['failed']} failed; "
        f"lag of the most overdue job: {'none' if lag is None else f'{lag:.3f}s'}"
    )
