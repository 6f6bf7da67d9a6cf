"""``pgpulse runs --follow``: the attempts of runs as they end, for watching a deploy.

It polls the run history once per :data:`POLL_S` seconds (a reading command holds no LISTEN
session) and prints each attempt that ended since it started, oldest first: a run that retries
prints a ``retrying`` line for each failed attempt, then its outcome.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Sequence
from typing import Any

import click

from pgpulse.report import one_line, to_json
from pgpulse.store import Store

#: Seconds between two reads of the history.
POLL_S = 1.0

#: How many of the newest runs each read looks at: more attempts than end in one poll on a busy
#: cluster would be missed (the line says so).
WINDOW = 500

#: An attempt's identity: (run id, attempt number, outcome).
Key = tuple[int, int, str]


def _key(row: dict[str, Any]) -> Key:
    return (int(row["id"]), int(row["attempts"]), str(row["outcome"]))


def _line(row: dict[str, Any], tenants: bool) -> str:
    """One attempt's line: when it ended, whose, which occurrence, how, where, what it said."""
    name = f"{row['tenant']}/{row['name']}" if tenants else row["name"]
    said = row["error"] or row["output"] or ""
    first = one_line(said)[:120] if said else ""
    log = row["attempt_log"]
    ended = (log[-1]["ended_at"] if log else None) or row["finished_at"]
    return (
        f"{ended.isoformat(timespec='seconds') if ended else '-'}  {name}  "
        f"{row['scheduled_for'].isoformat()}  {row['outcome']}  attempt {row['attempts']}  "
        f"node {row['node_id'] or '-'}" + (f"  {first}" if first else "")
    )


def fresh(rows: Sequence[dict[str, Any]], seen: set[Key]) -> list[dict[str, Any]]:
    """The rows of ``rows`` (newest first, as :meth:`Store.list_runs` returns them) whose
    attempt ended and is not in ``seen``, oldest first; adds them to ``seen``. A row still
    ``running`` has not ended."""
    new = [r for r in reversed(rows) if r["outcome"] != "running" and _key(r) not in seen]
    seen.update(_key(r) for r in new)
    return new


async def follow_runs(store: Store, *, tenant: str | None, name: str | None, as_json: bool) -> None:
    """Print the attempts of runs of ``tenant`` (``None``: every tenant) and job ``name``
    (``None``: every job) as they end, until SIGINT or SIGTERM, then return. The runs already
    ended when it starts are not printed (``pgpulse runs`` lists them)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    seen: set[Key] = set()
    fresh(await store.list_runs(tenant=tenant, name=name, limit=WINDOW), seen)
    scope = f"job {name}" if name else "every job"
    where = "every tenant" if tenant is None else f"tenant {tenant}"
    click.echo(f"following the runs of {scope} in {where} (Ctrl-C stops)", err=True)
    while not stop.is_set():
        try:
            async with asyncio.timeout(POLL_S):
                await stop.wait()
        except TimeoutError:
            pass
        rows = await store.list_runs(tenant=tenant, name=name, limit=WINDOW)
        for row in fresh(rows, seen):
            if as_json:
                click.echo(json.dumps(row, default=to_json, ensure_ascii=False))
            else:
                click.echo(_line(row, tenant is None))
        # what can no longer come back in the window need not be remembered
        oldest = min((int(r["id"]) for r in rows), default=0)
        seen.difference_update({k for k in seen if k[0] < oldest})
