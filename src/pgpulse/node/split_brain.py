"""Split brain: more than one host of a node's multi-host DSN accepts writes.

Pulse cannot prevent a split brain its HA layer allowed (an old primary left running beside the
promoted one: both take writes, and nodes on each side run the same occurrences), but a node
given several hosts (``host=a,b``, ``postgresql://a:5432,b:5432/pulse``) can notice it. At start
and every ``every`` heartbeats it connects to each host on its own (a short connect timeout)
and asks ``host_role`` (queries.sql): does it accept writes, and on which timeline. No privilege
beyond CONNECT is needed. When more than one host accepts writes (:func:`judge`):

* the node moves every writing session — heartbeat, claims, LISTEN, its pool — to the host on
  the highest timeline (every promotion starts a new one, so that is the newest primary; on a
  tie, the first of them in the DSN, as libpq would pick): it stops claiming on the older hosts;
* it logs ``split_brain`` (a warning, once per split brain) and tells its observer at each check
  while it lasts, and once when it ends (:meth:`NodeObserver.split_brain
  <pgpulse.node.observer.NodeObserver.split_brain>`: the alerts fire the cluster alert
  ``split_brain`` on the newest host, once per split brain — its dedupe key names the writable
  hosts and their timelines — and close it when it ends);
* ``pgpulse status`` probes the hosts the same way and says so in a line.

When one writable host is left, the sessions go back to the DSN as given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg import conninfo

from pgpulse.core.errors import DatabaseUnavailable
from pgpulse.db.database import Session, connect
from pgpulse.node.observer import NodeObserver
from pgpulse.sql import QUERIES

log = logging.getLogger(__name__)

#: Seconds a probe waits for one host to answer (libpq's connect_timeout takes whole seconds).
PROBE_TIMEOUT = 2
#: A node's heartbeats between two checks (NodeConfig's default).
DEFAULT_EVERY = 10


@dataclass(frozen=True, slots=True)
class HostRole:
    """What one host of the DSN answered.

    Attributes:
        host, port: where it is, as the DSN names it.
        writable: whether it accepts writes; ``None`` when it did not answer.
        timeline: the timeline it writes on (``None`` for a standby or no answer).
    """

    host: str
    port: int
    writable: bool | None
    timeline: int | None

    @property
    def place(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class SplitBrain:
    """More than one host accepts writes.

    Attributes:
        newest: the writable host on the highest timeline (on a tie, the first in the DSN):
            where a node claims while it lasts.
        others: the other writable hosts, where no node claims.
    """

    newest: HostRole
    others: tuple[HostRole, ...]

    @property
    def key(self) -> str:
        """The alert's dedupe key: the writable hosts and their timelines, so every node with
        the same DSN fires one event per split brain."""
        hosts = sorted(f"{h.place}@{h.timeline}" for h in (self.newest, *self.others))
        return "cluster/split_brain/" + ",".join(hosts)

    def details(self) -> dict[str, Any]:
        """The alert's details (JSON)."""
        return {
            "writable": [f"{h.place} (timeline {h.timeline})" for h in (self.newest, *self.others)],
            "newest": self.newest.place,
            "timeline": self.newest.timeline,
        }

    def line(self) -> str:
        """One line for people (logs, ``status``)."""
        hosts = " and ".join(
            f"{h.place} (timeline {h.timeline})" for h in (self.newest, *self.others)
        )
        tie = any(h.timeline == self.newest.timeline for h in self.others)
        why = "the first of them in the DSN (same timeline)" if tie else "the newest timeline"
        return (
            f"SPLIT BRAIN: {hosts} accept writes; nodes with this DSN claim on "
            f"{self.newest.place} only ({why})"
        )


def hosts_of(dsn: str) -> list[tuple[str, int]]:
    """The (host, port) pairs a DSN names, in its order (libpq's rules: one port for all, or
    one per host; no port: ``PGPORT`` or 5432). A ``hostaddr`` list stands for hosts it lacks.

    Raises:
        psycopg.ProgrammingError: ``dsn`` is malformed.
    """
    params = conninfo.conninfo_to_dict(dsn)
    hosts = str(params.get("host") or params.get("hostaddr") or "").split(",")
    ports = str(params.get("port") or os.environ.get("PGPORT") or "5432").split(",")
    ports += [ports[-1]] * (len(hosts) - len(ports))
    return [(host, int(port or 5432)) for host, port in zip(hosts, ports, strict=False)]


def host_dsn(dsn: str, index: int, *, timeout: int | None = None) -> str:
    """``dsn`` narrowed to its ``index``-th host (and ``hostaddr``, port), keeping the rest
    (user, database, TLS...); ``timeout`` replaces its ``connect_timeout`` when given."""
    params = conninfo.conninfo_to_dict(dsn)
    narrowed: dict[str, Any] = {}
    for name in ("host", "hostaddr", "port"):
        values = str(params.get(name) or "").split(",")
        if params.get(name):
            narrowed[name] = values[min(index, len(values) - 1)]
    if timeout is not None:
        narrowed["connect_timeout"] = timeout
    return conninfo.make_conninfo(dsn, **narrowed)


def judge(roles: Sequence[HostRole]) -> SplitBrain | None:
    """Whether ``roles`` (in the DSN's order) show a split brain (pure): ``None`` unless two or
    more hosts accept writes. A host that did not answer counts as not writable: what cannot be
    reached cannot be claimed on either."""
    writable = [r for r in roles if r.writable]
    if len(writable) < 2:
        return None
    # sorted() is stable: on a tie the DSN's order decides, as libpq's read-write choice would
    ordered = sorted(writable, key=lambda r: -(r.timeline or 0))
    return SplitBrain(ordered[0], tuple(ordered[1:]))


async def probe(
    dsn: str, *, application_name: str, connect_timeout: int = PROBE_TIMEOUT
) -> list[HostRole]:
    """Ask every host of ``dsn`` at once, each on a connection of its own, whether it accepts
    writes and on which timeline (``host_role``). Never raises for a host that does not answer
    (its ``writable`` is ``None``).

    Args:
        dsn: a multi-host DSN.
        application_name: shown in ``pg_stat_activity`` for the probe's connections.
        connect_timeout: seconds each host may take to answer.
    """
    places = hosts_of(dsn)

    async def ask(index: int) -> HostRole:
        host, port = places[index]
        try:
            async with asyncio.timeout(connect_timeout + 1):
                # target_session_attrs=any: a standby answers (not writable) rather than fails
                one = host_dsn(dsn, index, timeout=connect_timeout)
                conn = await connect(
                    conninfo.make_conninfo(one, target_session_attrs="any"),
                    application_name=application_name,
                    writable=False,
                )
                async with conn:
                    row = await (await conn.execute(QUERIES["host_role"])).fetchone()
        except (psycopg.Error, OSError, TimeoutError, DatabaseUnavailable):
            return HostRole(host, port, None, None)
        assert row is not None
        timeline = row["timeline"]
        return HostRole(host, port, bool(row["writable"]), None if timeline is None else timeline)

    return list(await asyncio.gather(*(ask(i) for i in range(len(places)))))


def several_hosts(dsn: str) -> bool:
    """Whether ``dsn`` names more than one host (a malformed DSN: no)."""
    try:
        return len(hosts_of(dsn)) > 1
    except (psycopg.ProgrammingError, ValueError):
        return False


class Movable(Protocol):
    """A listener whose next connection goes through its ``dsn``."""

    dsn: str


class Pool(Protocol):
    """The part of a connection pool a split brain moves: its DSN, and its idle connections
    (``psycopg_pool.AsyncConnectionPool``)."""

    conninfo: Any

    async def drain(self) -> None:
        """Close the idle connections (those lent out close when returned)."""
        ...


class SplitBrainWatch:
    """A node's watch for a split brain among its DSN's hosts (see the module doc).

    Args:
        dsn: the node's multi-host DSN.
        node_id: this node (its probe connections say ``pgpulse:<id>:probe``).
        sessions: the node's writing sessions, moved to the newest host while it lasts.
        pool: the node's pool (moved too: its DSN, and its idle connections closed), or
            ``None``.
        listener: the LISTEN loop, whose next connection follows, or ``None``.
        observer: told of each split brain found and of its end (the node's observers), or
            ``None``.
        timeout: seconds each host may take to answer a probe.
        every: seconds between two checks of :meth:`run_once`.
    """

    def __init__(
        self,
        dsn: str,
        node_id: str,
        *,
        sessions: Sequence[Session],
        pool: Pool | None = None,
        listener: Movable | None = None,
        observer: NodeObserver | None = None,
        timeout: int = PROBE_TIMEOUT,
        every: float = 20.0,
    ) -> None:
        self.dsn = dsn
        self.node_id = node_id
        self.sessions = tuple(sessions)
        self.pool = pool
        self.listener = listener
        self.observer = observer
        self.timeout = timeout
        self.every = every
        self.name = "split_brain"
        self._pool_dsn = pool.conninfo if pool is not None else None
        #: The split brain the last check found, or ``None``.
        self.current: SplitBrain | None = None
        self._checked_at = -float("inf")  # monotonic: the last check's start

    async def check_once(self) -> SplitBrain | None:
        """Probe every host; on a split brain, move the sessions to the newest host, log and
        alert (once per split brain); when it ended, move them back and close the alert.
        Returns what it found.

        Raises:
            psycopg.Error, DatabaseUnavailable: the alert could not be written (the sessions
                were moved already; the next check writes it).
        """
        self._checked_at = time.monotonic()
        roles = await probe(
            self.dsn,
            application_name=f"pgpulse:{self.node_id}:probe",
            connect_timeout=self.timeout,
        )
        found = judge(roles)
        before, self.current = self.current, found
        if found is not None:
            if before is None or before.newest != found.newest:
                await self._move(found.newest)
                log.warning(
                    "%s",
                    found.line(),
                    extra={
                        "action": "split_brain",
                        "writable": [h.place for h in (found.newest, *found.others)],
                        "newest": found.newest.place,
                    },
                )
            if self.observer is not None:
                await self.observer.split_brain(found)
        elif before is not None:
            await self._move(None)
            log.warning(
                "split brain over: one host accepts writes",
                extra={"action": "split_brain_over"},
            )
            if self.observer is not None:
                await self.observer.split_brain(None)
        return found

    async def run_once(self) -> SplitBrain | None:
        """Check (:meth:`check_once`) if the last check is ``every`` seconds old (the one at
        start counts); return what it found, or :attr:`current` without a check."""
        if time.monotonic() - self._checked_at < self.every:
            return self.current
        return await self.check_once()

    async def run(self, stopping: asyncio.Event) -> None:
        """The ``split_brain`` service: a check every ``every`` seconds until ``stopping`` is
        set; a failed check is logged and tried again at the next."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(
                    max(self._checked_at + self.every - time.monotonic(), 0)
                ):
                    await stopping.wait()
            if stopping.is_set():
                return
            try:
                await self.run_once()
            except (psycopg.Error, OSError, DatabaseUnavailable) as exc:
                log.warning(
                    "split brain check failed: %s",
                    exc,
                    extra={"action": "split_brain_check_failed"},
                )

    async def drain(self, within: float) -> None:
        """Nothing to finish."""

    async def _move(self, newest: HostRole | None) -> None:
        """Point the sessions, the pool and the listener at ``newest`` only (``None``: back
        at the DSN as given)."""
        index = None
        if newest is not None:
            index = hosts_of(self.dsn).index((newest.host, newest.port))
        dsn = self.dsn if index is None else host_dsn(self.dsn, index)
        where = None if newest is None else (newest.host, newest.port)
        for session in self.sessions:
            session.move(dsn, where)
        if self.listener is not None:
            self.listener.dsn = dsn
        if self.pool is not None:
            self.pool.conninfo = self._pool_dsn if newest is None else dsn
            await self.pool.drain()


async def status_line(dsn: str, *, connect_timeout: int = PROBE_TIMEOUT) -> str | None:
    """For ``pgpulse status``: the split brain line (:meth:`SplitBrain.line`) when ``dsn``
    names several hosts and more than one accepts writes; else ``None``."""
    if not several_hosts(dsn):
        return None
    found = judge(
        await probe(dsn, application_name="pgpulse:status:probe", connect_timeout=connect_timeout)
    )
    return None if found is None else found.line()
