"""The statements a node runs for extra occurrences: their claims, outcomes, leases, hand-backs,
and the fork of a job row's occurrence under overlap ``replace``/``allow`` (the heartbeat
statement reaps their expired leases with the job rows':
:meth:`~pgpulse.claims.ClaimStore.heartbeat`).

Extra occurrences (``pgpulse_occurrences``: triggers with a payload, backfills on request,
occurrences of the schedule forked off the job row) each hold a lease and a fencing token of
their own; docs/states.md ("Extra occurrences") is the design. Each method runs one statement of
``sql/occurrences.sql`` and says what it locks and fences (design.md, invariants 2–5, per
occurrence). A node keys an occurrence's claim as (−occurrence id, token)
(:data:`~pgpulse.model.ClaimKey`); these methods take and return such keys. Instants are aware
datetimes; durations are seconds; ``now`` is for tests only (``None``: the database's clock).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from pgpulse.claims import _skips, _storable, parse_step, step_params
from pgpulse.database import ConnectionSource
from pgpulse.model import ClaimKey, Outcome, Step
from pgpulse.routing import Routes
from pgpulse.sharding import DEFAULT_SHARD_COUNT
from pgpulse.sql import QUERIES, claim_statement

#: How many of :class:`~pgpulse.model.ClaimedJob`'s fields a claim of occurrences returns (all).
OCCURRENCE_FIELDS = 32


def _ids(held: Sequence[ClaimKey]) -> tuple[list[int], list[int]]:
    """Occurrence ids and tokens of occurrence claim keys (−id, token)."""
    return [-key for key, _ in held], [token for _, token in held]


class OccurrenceClaims:
    """Intent-named access to the extra occurrences a node claims, finishes, renews, hands back
    and reaps, and to the forks of its job rows.

    Args:
        pool: an open pool of autocommit connections with dict rows, or a node's dedicated
            :class:`~pgpulse.database.Session` (its claim or heartbeat session).

    Attributes:
        shard_count: the shard count the routes of its claims are of, as
            :attr:`pgpulse.claims.ClaimStore.shard_count`.
    """

    shard_count: int = DEFAULT_SHARD_COUNT

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def _rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(QUERIES[name], params)
            return list(await cur.fetchall()) if cur.description else []

    async def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        node: str,
        routes: Routes,
        limit: int,
        *,
        lease: float,
        now: datetime | None = None,
    ) -> Step:
        """Write the fenced outcomes of extra occurrences, then claim up to ``limit`` due ones
        along ``routes`` (handler → shards, as :meth:`pgpulse.claims.ClaimStore.finish_and_claim`:
        an occurrence of a job whose handler has no route is never claimed, issue 18) within
        their batches' bounds — one statement (``finish_and_claim_occurrences``).

        Concurrency: an outcome is written only if its occurrence still runs under its token; a
        final one deletes the occurrence, ``retrying`` makes it pending after ``retry_in``.
        Pending occurrences are locked ``FOR UPDATE SKIP LOCKED``, then their batch rows (``SKIP
        LOCKED``), whose newest count of leases bounds how many of each are claimed; the counts
        change in the same statement. Each claimed occurrence gets a new lease and token.

        Returns:
            The step: written claim keys (−occurrence id, token), the claimed occurrences as
            :class:`~pgpulse.model.ClaimedJob` (``occurrence`` set), the next due instant of a
            pending one (when fewer than ``limit`` were claimed) and the clock.

        Raises:
            psycopg.Error: the statement failed (nothing was written or claimed).
            DatabaseUnavailable: the session could not connect.
        """
        batch = [
            {
                "id": o.job.occurrence,
                "token": o.job.fencing_token,
                "outcome": o.outcome,
                "retry_in": o.retry_in or 0.0,
                "error": o.error and _storable(o.error),
                "output": o.output and _storable(o.output),
            }
            for o in sorted(outcomes, key=lambda o: o.job.occurrence or 0)
        ]
        params = step_params(batch, now=now, node=node, routes=routes, limit=limit, lease=lease)
        async with self.pool.connection() as conn:
            cur = psycopg.AsyncRawCursor(conn, row_factory=tuple_row)
            step, names = claim_statement("finish_and_claim_occurrences", self.shard_count)
            await cur.execute(step, [params[name] for name in names], binary=True)
            rows = await cur.fetchall()
        written, jobs, next_due, db_now = parse_step(rows, OCCURRENCE_FIELDS)
        keys = {(-occurrence, token) for occurrence, token in written}
        if not (limit > 0 and routes):
            return Step(keys, jobs, None, None)
        return Step(keys, jobs, next_due, db_now)

    async def fork(self, outcome: Outcome, *, now: datetime | None = None) -> bool:
        """Write a ``forked`` outcome (``fork_occurrence``): the job row moves to
        ``outcome.advance`` and its claimed occurrence becomes a pending extra occurrence of the
        job's overlap batch; under ``replace`` the job's other scheduled occurrences are
        cancelled (history ``cancelled``) in the same statement.

        Fenced by the job row's token: a lost claim changes nothing.

        Returns:
            Whether it was written.
        """
        job = outcome.job
        assert outcome.advance is not None
        rows = await self._rows(
            "fork_occurrence",
            {
                "job_id": job.id,
                "token": job.fencing_token,
                "scheduled_for": outcome.advance.scheduled_for,
                "replace": job.overlap == "replace",
                **_skips(outcome.advance),
                "skip_reason": outcome.skip_reason,
                "now": now,
            },
        )
        return bool(rows)

    async def renew(
        self, held: Sequence[ClaimKey], *, lease: float, now: datetime | None = None
    ) -> set[ClaimKey]:
        """Extend the lease of each occurrence claim (−id, token) still held; return those
        renewed. Fenced: a stale token, an occurrence that no longer runs (replaced, deleted
        with its job) or an expired lease is not renewed — its holder must cancel the attempt."""
        if not held:
            return set()
        ids, tokens = _ids(sorted(held, reverse=True))  # occurrence id order
        rows = await self._rows(
            "renew_occurrences", {"ids": ids, "tokens": tokens, "lease": lease, "now": now}
        )
        return {(-row["id"], row["fencing_token"]) for row in rows}

    async def hand_back(
        self,
        held: Sequence[ClaimKey],
        *,
        started: Collection[ClaimKey],
        reason: str,
        now: datetime | None = None,
    ) -> tuple[int, int]:
        """Hand occurrence claims (−id, token) back (a node that stops): each is pending and due
        at once, fenced per claim; one in ``started`` counts as an attempt (history row
        ``retrying`` with ``reason``).

        Returns:
            (claims handed back, of which counted as attempts).
        """
        if not held:
            return 0, 0
        ids, tokens = _ids(held)
        rows = await self._rows(
            "hand_back_occurrences",
            {
                "ids": ids,
                "tokens": tokens,
                "started": [key in started for key in held],
                "reason": reason,
                "now": now,
            },
        )
        return len(rows), sum(1 for row in rows if row["started"])
