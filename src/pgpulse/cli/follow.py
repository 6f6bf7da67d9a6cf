"""``pgpulse runs --follow``: attempts as they end, for watching a deploy.

It polls the run history once per :data:`POLL_S` seconds (a reading command holds no LISTEN
session) and prints each attempt that ended since it started, in the order they ended: a run
that retries, or whose node died (its lease expired and another node took it over), prints a
line for each attempt that ended without an outcome, then one for its outcome; a skipped row (no
attempt ran) prints one line.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click

from pgpulse.cli.report import one_line, to_json
from pgpulse.db.store import Store

#: Seconds between two reads of the history.
POLL_S = 1.0

#: How many of the newest runs each read looks at: attempts of older runs that end meanwhile
#: (a long run among more than this many newer ones) are not printed.
WINDOW = 500

#: What a line's columns are (printed once, on stderr, so that stdout stays one line an attempt).
HEADER = "ended  job  occurrence  kind  outcome  attempt  node  error or output"

#: An attempt's identity: (run id, attempt number); a skipped row is attempt 0.
Key = tuple[int, int]


def ended_attempts(rows: Sequence[dict[str, Any]], seen: set[Key]) -> list[dict[str, Any]]:
    """The attempts of ``rows`` (runs as :meth:`Store.list_runs` returns them, with their
    ``attempt_log``) that ended and are not in ``seen``, in the order they ended; adds them to
    ``seen``. Each is the attempt's log entry with its run's ``run_id``, ``tenant``, ``name``,
    ``scheduled_for`` and ``kind``. An attempt still running has not ended."""
    found: list[dict[str, Any]] = []
    for row in rows:
        run = {key: row[key] for key in ("tenant", "name", "scheduled_for", "kind")}
        attempts = row["attempt_log"] or (
            [{"attempt": 0, "node_id": None, "ended_at": row["finished_at"],
              "outcome": row["outcome"], "error": row["error"], "output": row["output"]}]
        )  # fmt: skip
        for attempt in attempts:
            key = (int(row["id"]), int(attempt["attempt"]))
            if attempt["outcome"] == "running" or key in seen:
                continue
            seen.add(key)
            found.append({"run_id": row["id"], **run, **attempt})
    found.sort(key=lambda a: (a["ended_at"] is None, a["ended_at"] or _EPOCH))
    return found


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _line(attempt: dict[str, Any], tenants: bool) -> str:
    """One attempt's line: when it ended, whose, which occurrence, how, where, what it said."""
    name = f"{attempt['tenant']}/{attempt['name']}" if tenants else attempt["name"]
    said = attempt["error"] or attempt["output"] or ""
    first = one_line(said)[:120] if said else ""
    ended = attempt["ended_at"]
    return (
        f"{ended.isoformat(timespec='seconds') if ended else '-'}  {name}  "
        f"{attempt['scheduled_for'].isoformat()}  {attempt['kind']}  {attempt['outcome']}  "
        f"attempt {attempt['attempt']}  node {attempt['node_id'] or '-'}"
        + (f"  {first}" if first else "")
    )


async def follow_runs(store: Store, *, tenant: str | None, name: str | None, as_json: bool) -> None:
    """Print the attempts of the runs of ``tenant`` (``None``: every tenant) and job ``name``
    (``None``: every job) as they end, until SIGINT or SIGTERM, then return. What had ended when
    it starts is not printed (``pgpulse runs`` lists it)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    seen: set[Key] = set()
    ended_attempts(await store.list_runs(tenant=tenant, name=name, limit=WINDOW), seen)
    scope = f"job {name}" if name else "every job"
    where = "every tenant" if tenant is None else f"tenant {tenant}"
    click.echo(f"following the attempts of {scope} in {where} (Ctrl-C stops)", err=True)
    if not as_json:
        click.echo(HEADER, err=True)
    while not stop.is_set():
        try:
            async with asyncio.timeout(POLL_S):
                await stop.wait()
        except TimeoutError:
            pass
        rows = await store.list_runs(tenant=tenant, name=name, limit=WINDOW)
        for attempt in ended_attempts(rows, seen):
            if as_json:
                click.echo(json.dumps(attempt, default=to_json, ensure_ascii=False))
            else:
                click.echo(_line(attempt, tenant is None))
        # what can no longer come back in the window need not be remembered
        oldest = min((int(r["id"]) for r in rows), default=0)
        seen.difference_update({k for k in seen if k[0] < oldest})
