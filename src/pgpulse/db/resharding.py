"""The shard count of a database, and its online change (``pgpulse shards set COUNT``).

A job's shard is ``id % shard_count``, the count a setting of the database
(``pgpulse_cluster``, migration 0010; 64 until changed). At 64 the claim reads the stored
``shard_id`` column through ``pgpulse_jobs_due``; at another count it reads an expression index
built for that count (``sql/shards.sql``, :func:`pgpulse.sql.at_shard_count`). A change is
online and resumable, and keeps every invariant:

1. **Build** the new count's indexes ``CONCURRENTLY`` (writes go on; no row is rewritten), and
   ``ANALYZE`` the tables, so the planner knows the index's shard expression and reads the
   shard from it rather than from the heap. An invalid index left by an interrupted build is
   dropped and built again.
2. **Publish** the count. Each node places and claims by it from its next heartbeat.
3. **Wait** until every live node reports its shards of the new count.
4. **Drop** the indexes of every other count (never ``pgpulse_jobs_due``, which is also the
   64's), ``CONCURRENTLY``.

While nodes switch (at most a heartbeat interval), a node of the old count and one of the new
may both poll a job, or neither may for that long: SKIP LOCKED and fencing keep the claim
correct, and an unpolled job only waits, due, for the next heartbeat (docs/design.md, "Cluster
behaviour": ownership is never what makes a claim correct). Running the command again after a
failure, or after the wait timed out, resumes where it stopped: every step is idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pgpulse.core.errors import InvalidInput
from pgpulse.core.sharding import DEFAULT_SHARD_COUNT, MAX_SHARD_COUNT
from pgpulse.core.wording import given
from pgpulse.db.database import ConnectionSource
from pgpulse.sql import load_queries

log = logging.getLogger(__name__)

SHARDS_SQL = load_queries("shards.sql")


@dataclass(frozen=True, slots=True)
class ShardState:
    """The database's shard count and what the live nodes report.

    Attributes:
        shard_count: the count published in ``pgpulse_cluster``.
        changed_at: when it was last published (the database's clock).
        nodes: each live node's reported count (``None``: not reported yet, or an older
            release), by node id.
        indexes: the shard-count indexes that exist, each with whether it is valid.
    """

    shard_count: int
    changed_at: datetime
    nodes: dict[str, int | None]
    indexes: dict[str, bool] = field(default_factory=dict)

    @property
    def switched(self) -> bool:
        """Every live node claims by :attr:`shard_count`."""
        return all(count == self.shard_count for count in self.nodes.values())


@dataclass(frozen=True, slots=True)
class Reshard:
    """What :func:`set_shard_count` did. Durations are seconds.

    Attributes:
        old: the count before; new: the count now published.
        built: the indexes built; build_seconds: how long building them (and the
            ``ANALYZE`` after) took.
        switched: every live node reported the new count within the wait.
        switch_seconds: how long that took (``None``: it did not happen within the wait).
        dropped: the old counts' indexes dropped (none unless ``switched``).
    """

    old: int
    new: int
    built: list[str]
    build_seconds: float
    switched: bool
    switch_seconds: float | None
    dropped: list[str]


def check_shard_count(count: object) -> int:
    """Return ``count`` if it is a usable shard count: an ``int`` from 1 to
    :data:`~pgpulse.core.sharding.MAX_SHARD_COUNT` (a shard id is a ``smallint``).

    Raises:
        InvalidInput: it is not (field ``shard_count``).
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SHARD_COUNT:
        raise InvalidInput(
            f"shard_count must be an integer from 1 to {MAX_SHARD_COUNT}, got {given(count)}",
            field="shard_count",
            value=count,
        )
    return count


def _ddl(name: str, count: int) -> str:
    return SHARDS_SQL[name].replace("{count}", str(check_shard_count(count)))


#: The kinds of index the claim reads at a shard count: (name's stem, statement's stem).
_INDEXES = (
    ("pgpulse_jobs_due", "jobs_due"),
    ("pgpulse_jobs_due_priority", "jobs_due_priority"),
    ("pgpulse_occurrences_due", "occurrences_due"),
)


def index_names(count: int) -> tuple[str, ...]:
    """The names of the indexes the claim reads at ``count`` shards (none of its own at 64):
    the due jobs, the due jobs with a priority, the due extra occurrences."""
    return tuple(f"{stem}_{count}" for stem, _ in _INDEXES)


async def shard_state(pool: ConnectionSource, *, ttl: float = 10.0) -> ShardState:
    """Read the database's shard count, each live node's (heartbeat within ``ttl`` seconds),
    and the shard-count indexes."""
    async with pool.connection() as conn:
        cur = await conn.execute(SHARDS_SQL["shard_state"], {"ttl": ttl})
        row: Any = await cur.fetchone()
        cur = await conn.execute(SHARDS_SQL["shard_indexes"])
        indexes = {r["name"]: r["valid"] for r in await cur.fetchall()}
    return ShardState(row["shard_count"], row["changed_at"], dict(row["nodes"]), indexes)


async def build_indexes(pool: ConnectionSource, count: int) -> list[str]:
    """Build the indexes the claim reads at ``count`` shards (``CONCURRENTLY``), those missing
    or invalid; return the names built. Nothing at 64 (``pgpulse_jobs_due`` serves it).

    Raises:
        InvalidInput: ``count`` is not a shard count.
        psycopg.Error: a build failed (an invalid index may be left: the next call rebuilds it).
    """
    check_shard_count(count)
    if count == DEFAULT_SHARD_COUNT:
        return []
    existing = (await shard_state(pool)).indexes
    built = []
    for name, build, drop in zip(
        index_names(count),
        (f"build_{kind}_index" for _, kind in _INDEXES),
        (f"drop_{kind}_index" for _, kind in _INDEXES),
        strict=True,
    ):
        if existing.get(name) is True:
            continue
        async with pool.connection() as conn:  # autocommit: CONCURRENTLY needs no transaction
            if name in existing:
                await conn.execute(_ddl(drop, count))
            await conn.execute(_ddl(build, count))
        built.append(name)
        log.info("built index %s", name, extra={"action": "shard_index_built", "index": name})
    return built


async def drop_other_indexes(pool: ConnectionSource, keep: int) -> list[str]:
    """Drop the shard-count indexes of every count but ``keep`` (``CONCURRENTLY``); return
    their names. Call only once every live node claims by ``keep``."""
    dropped = []
    for name in sorted((await shard_state(pool)).indexes):
        stem, _, number = name.rpartition("_")
        count = int(number)
        if count == keep:
            continue
        kind = dict(_INDEXES)[stem]
        async with pool.connection() as conn:
            await conn.execute(_ddl(f"drop_{kind}_index", count))
        dropped.append(name)
    return dropped


async def set_shard_count(
    pool: ConnectionSource,
    count: int,
    *,
    wait: float = 60.0,
    ttl: float = 10.0,
    drop_old: bool = True,
) -> Reshard:
    """Change the database's shard count online: build, publish, wait, drop (the module's
    procedure). Idempotent: calling it again resumes an interrupted change.

    Args:
        pool: autocommit connections (a store's pool).
        count: the new shard count (1 to ``MAX_SHARD_COUNT``).
        wait: seconds to wait for every live node to report the new count.
        ttl: a node silent this long is not waited for (the nodes' ``node_ttl``).
        drop_old: drop the other counts' indexes once every live node switched.

    Raises:
        InvalidInput: ``count`` is not a shard count (nothing is changed).
        psycopg.Error: a statement failed; what was done stays done, and a new call resumes.
    """
    check_shard_count(count)
    old = (await shard_state(pool, ttl=ttl)).shard_count
    started = time.monotonic()
    built = await build_indexes(pool, count)
    if count != DEFAULT_SHARD_COUNT:
        async with pool.connection() as conn:
            await conn.execute(SHARDS_SQL["analyze_sharded_tables"])
    build_seconds = time.monotonic() - started
    if old != count:
        async with pool.connection() as conn:
            await conn.execute(SHARDS_SQL["publish_shard_count"], {"count": count})
        log.info(
            "shard count %d published (was %d)",
            count,
            old,
            extra={"action": "shard_count_changed", "shard_count": count, "old": old},
        )
    published = time.monotonic()
    switched = await wait_switched(pool, count, wait=wait, ttl=ttl)
    switch_seconds = time.monotonic() - published if switched else None
    dropped = await drop_other_indexes(pool, count) if switched and drop_old else []
    return Reshard(old, count, built, build_seconds, switched, switch_seconds, dropped)


async def wait_switched(pool: ConnectionSource, count: int, *, wait: float, ttl: float) -> bool:
    """Wait up to ``wait`` seconds until every live node reports ``count``; return whether it
    did."""
    until = time.monotonic() + wait
    while True:
        state = await shard_state(pool, ttl=ttl)
        if state.shard_count == count and state.switched:
            return True
        if time.monotonic() >= until:
            return False
        await asyncio.sleep(0.2)
