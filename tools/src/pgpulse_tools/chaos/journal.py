"""The nodes' execution journal: what every handler did, kept outside the database.

Handlers record their executions in the run's database (``chaos_history``), but a failover
that loses the primary's last transactions loses those rows with them — exactly the evidence a
check of that failover needs. So each handler also appends to a journal file of its node
(``<run folder>/<node id>.journal``, one JSON object per line, written with one ``write(2)`` on
an ``O_APPEND`` descriptor: a SIGKILL loses nothing written before it):

* ``{"e": "start", "uid", "job_id", "scheduled_for", "attempt", "token", "run_id", "node",
  "kind", "occurrence", "at"}`` — before the database hears of the execution;
* ``{"e": "end", "uid", "at", "result", "lease_ok_at_start", "lease_ok_at_end",
  "committed_at"}`` — after the database acknowledged its end (the effect's commit, or the
  planned failure's); ``committed_at`` is the database's instant of that end, as the statement
  returned it;
* ``{"e": "abort", "uid", "at"}`` — the handler ended otherwise (an error, a cancellation): it
  no longer holds its token. Only a SIGKILLed node leaves an execution without either.

``at`` is the node's clock (this machine's, which is the database server's too) when it wrote
the record: after the fact, by as long as the node took to get there — under load a second or
more after the database acknowledged an end. So an end also carries ``committed_at``, taken by
the database inside the statement that ended the execution: the instant the checker compares
with a failover's kill (:mod:`~pgpulse_tools.chaos.effects`). The checker reads both records
(:func:`merge`): an execution the journal has and the database lost is marked ``in_db=False``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from pgpulse_tools.chaos.history import Execution

#: The environment variable that names the folder of the journal files (unset: no journal).
JOURNAL_ENV = "PGPULSE_CHAOS_JOURNAL"
SUFFIX = ".journal"


class Journal:
    """This process's journal writer (thread-safe: sync handlers run in threads).

    Args:
        folder: where the node's file goes; ``None``: write nothing.
    """

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._fd: int | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> Journal:
        """The journal the environment names (:data:`JOURNAL_ENV`)."""
        folder = os.environ.get(JOURNAL_ENV)
        return cls(Path(folder) if folder else None)

    def started(self, uid: str, node: str, fields: dict[str, Any]) -> None:
        """Record the start of execution ``uid`` on ``node`` (``fields``: job_id,
        scheduled_for, attempt, token, run_id, kind).

        Raises:
            OSError: the file cannot be written.
        """
        self._write(node, {"e": "start", "uid": uid, "node": node, **fields})

    def ended(
        self,
        uid: str,
        node: str,
        result: str,
        lease_ok_at_start: bool,
        lease_ok_at_end: bool,
        *,
        committed_at: datetime | None,
    ) -> None:
        """Record that the database acknowledged the end of execution ``uid``
        (``committed_at``: the database's instant of that end, as its statement returned it).

        Raises:
            OSError: the file cannot be written.
        """
        self._write(
            node,
            {
                "e": "end",
                "uid": uid,
                "result": result,
                "lease_ok_at_start": lease_ok_at_start,
                "lease_ok_at_end": lease_ok_at_end,
                "committed_at": committed_at,
            },
        )

    def aborted(self, uid: str, node: str) -> None:
        """Record that execution ``uid`` ended without an acknowledged end (it raised, or was
        cancelled).

        Raises:
            OSError: the file cannot be written.
        """
        self._write(node, {"e": "abort", "uid": uid})

    def _write(self, node: str, record: dict[str, Any]) -> None:
        if self.folder is None:
            return
        line = orjson.dumps({**record, "at": datetime.now(UTC)}) + b"\n"
        with self._lock:
            if self._fd is None:
                path = self.folder / f"{node}{SUFFIX}"
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, line)


def read_journals(folder: Path) -> list[dict[str, Any]]:
    """Every record of every journal file in ``folder``, instants parsed; a last line cut short
    by a SIGKILL is skipped.

    Raises:
        OSError: a file cannot be read.
    """
    records: list[dict[str, Any]] = []
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        for line in path.read_bytes().splitlines():
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            for key in ("at", "scheduled_for", "committed_at"):
                if record.get(key) is not None:
                    record[key] = datetime.fromisoformat(record[key])
            records.append(record)
    return records


def merge(rows: Sequence[Execution], records: Iterable[dict[str, Any]]) -> tuple[Execution, ...]:
    """The executions of a run: the database's rows (``rows``, with their database instants),
    plus, from the journal, every execution the database does not have (its instants the
    node's but ``committed_at``, the database's; its end and result only if the journal
    recorded them; ids after the database's). An execution whose record the database lost,
    wholly or its end, has ``in_db=False``.
    """
    by_kind: dict[str, dict[str, dict[str, Any]]] = {"start": {}, "end": {}, "abort": {}}
    for record in records:
        by_kind[record["e"]][record["uid"]] = record
    starts, ends, aborts = by_kind["start"], by_kind["end"], by_kind["abort"]
    merged = [_complete(row, ends.get(row.uid), aborts.get(row.uid)) for row in rows]
    known = {row.uid for row in rows}
    next_id = max((row.id for row in rows), default=0) + 1
    lost: list[Execution] = []
    for uid, start in sorted(starts.items(), key=lambda item: item[1]["at"]):
        if uid in known:
            continue
        end = ends.get(uid)
        stop = end or aborts.get(uid)
        lost.append(
            Execution(
                id=next_id + len(lost),
                job_id=start["job_id"],
                scheduled_for=start["scheduled_for"],
                attempt=start["attempt"],
                token=start["token"],
                node_id=start["node"],
                kind=start["kind"],
                started_at=start["at"],
                ended_at=None if stop is None else stop["at"],
                result=None if end is None else end["result"],
                lease_ok_at_start=True if end is None else end["lease_ok_at_start"],
                lease_ok_at_end=None if end is None else end["lease_ok_at_end"],
                uid=uid,
                run_id=start["run_id"],
                in_db=False,
                committed_at=None if end is None else end.get("committed_at"),
                occurrence=start.get("occurrence", "scheduled"),
            )
        )
    return (*merged, *lost)


def _complete(
    row: Execution, end: dict[str, Any] | None, abort: dict[str, Any] | None
) -> Execution:
    """A database row whose end the database lost (the start was replicated, the effect's
    commit was not) takes its end from the journal, marked ``in_db=False``; one that ended
    without a recorded end (aborted) takes the instant it stopped holding its token."""
    if row.ended_at is not None:
        return row
    if end is None:
        return row if abort is None else replace(row, ended_at=abort["at"])
    return replace(
        row,
        ended_at=end["at"],
        result=end["result"],
        lease_ok_at_end=end["lease_ok_at_end"],
        in_db=False,
        committed_at=end.get("committed_at"),
    )
