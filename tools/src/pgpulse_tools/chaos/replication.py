"""A replicated PostgreSQL for the harness: a primary and a streaming standby on 127.0.0.1, and
the faults that move the primary (failover, switchover).

Both servers are the harness's own children (:class:`~pgpulse_tools.chaos.postgres.Postgres`),
made from one set of programs (the embedded server's by default). The standby replicates
through a :class:`~pgpulse_tools.chaos.proxy.Proxy` of the harness (its ``primary_conninfo``
names the proxy's port), so a fault can cut replication at an instant of its choosing: on
localhost an asynchronous standby lags by a millisecond, and without the cut a failover would
lose nothing but by luck. With ``replication="sync"`` the primary waits for the standby to
flush every commit (``synchronous_commit = on`` and the standby named in
``synchronous_standby_names``); with ``"async"`` it does not.

What a fault does (instants go into :class:`Promotion`):

``failover``
    (``window`` > 0) cut the replication proxy and wait until the primary's walsender is gone,
    let the cluster commit on the primary alone for ``window`` seconds (async: those commits are
    acknowledged and will be lost; sync: they wait and are never acknowledged); SIGKILL the
    primary's whole process tree; promote the standby; after ``down`` seconds rebuild the old
    primary as the new standby — ``pg_rewind`` after a ``CHECKPOINT`` on the new primary (before
    PostgreSQL 16 pg_rewind reads the source's timeline from its control file, which only the
    first checkpoint after a promotion updates), or a fresh ``pg_basebackup`` if the rewind fails
    or the rewound standby does not catch up — then (sync) make it the synchronous standby again.
``switchover``
    stop the primary cleanly (fast shutdown), wait until the standby has received its shutdown
    checkpoint, promote the standby, rejoin the old primary as the new standby (pg_rewind finds
    nothing to rewind and writes its standby configuration).

With sync replication the promoted server would inherit a synchronous standby it does not have
and every commit would wait forever, so ``synchronous_standby_names`` is emptied on the standby
before it is promoted (as Patroni's non-strict synchronous mode does) and set again once the
rebuilt standby streams: the cluster is asynchronous from the promotion until then, and the
harness never starts a failover in that window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import psycopg
from psycopg import sql

from pgpulse.core.errors import DatabaseUnavailable
from pgpulse_tools.chaos.postgres import Binaries, Postgres, RunAs, ToolFailed
from pgpulse_tools.chaos.proxy import Proxy, Upstream

log = logging.getLogger(__name__)

Replication = Literal["sync", "async"]
Clock = Callable[[], datetime]
#: Seconds a rebuilt standby may take to stream and replay up to the primary's position.
CATCH_UP_TIMEOUT = 15.0


def settings(max_connections: int) -> dict[str, str]:
    """The settings every server of the cluster shares (written into ``postgresql.conf``, so
    base backups and rewinds carry them)."""
    return {
        "max_connections": str(max_connections),
        "wal_level": "replica",
        "max_wal_senders": "10",
        "wal_keep_size": "256MB",  # no slots (they do not survive a promotion): keep WAL instead
        "wal_log_hints": "on",  # pg_rewind needs it, or data checksums (PG 18's initdb default)
        "hot_standby": "on",
        "fsync": "off",  # a test cluster: survives SIGKILL (the page cache), not a power cut
        "synchronous_commit": "on",
        "synchronous_standby_names": "",  # named once the standby streams (see _follow)
        "wal_receiver_status_interval": "1s",
        # The standby retries its stream this often; a promotion can wait up to this long.
        "wal_retrieve_retry_interval": "200ms",
        "log_line_prefix": "%m [%p] ",
    }


@dataclass(frozen=True, slots=True)
class Promotion:
    """What one failover or switchover did. Instants are on the clock given to the fault.

    Attributes:
        kind: ``failover`` or ``switchover``.
        old, new: the servers' names (the old primary is the new standby afterwards).
        cut_at: when replication was cut (``None``: not cut).
        died_at: when the old primary stopped accepting writes: the instant its last process
            got its SIGKILL (failover), or when its clean stop began (switchover).
        promoted_at: when the new primary accepted writes.
        rebuilt_at: when the old primary streamed again as the new standby (sync: and was the
            synchronous standby again).
        rebuilt_by: ``pg_rewind`` or ``pg_basebackup``.
    """

    kind: str
    old: str
    new: str
    cut_at: datetime | None
    died_at: datetime
    promoted_at: datetime
    rebuilt_at: datetime
    rebuilt_by: str

    def describe(self) -> str:
        """e.g. ``pg1 → pg2, writable 41 ms after the kill, replication cut 0.31s before; pg1
        rebuilt by pg_rewind 1.1s later``."""
        how = "kill" if self.kind == "failover" else "stop"
        if self.rebuilt_by == "patroni":
            how = "demotion"
        ms = (self.promoted_at - self.died_at).total_seconds() * 1000
        cut = ""
        if self.cut_at is not None:
            cut = f", replication cut {(self.died_at - self.cut_at).total_seconds():.2f}s before"
        later = (self.rebuilt_at - self.promoted_at).total_seconds()
        return (
            f"{self.old} → {self.new}, writable {ms:.0f} ms after the {how}{cut}; "
            f"{self.old} rebuilt by {self.rebuilt_by} {later:.1f}s later"
        )


class ReplicatedServer:
    """A primary and a streaming standby of the harness's own, in a temporary folder.

    Args:
        parent: folder to create the temporary folder in (default: the system's temp).
        replication: ``sync`` or ``async``.
        bin_dir: the PostgreSQL programs (default: the embedded server's).
        max_connections: each server's ``max_connections``.
        template: a pristine initdb output of the same programs to copy instead of running
            initdb (the test suite makes one per session).
    """

    restartable = False  # the single-server restart fault; failover and switchover replace it

    def __init__(
        self,
        parent: Path | None = None,
        replication: Replication = "sync",
        bin_dir: Path | None = None,
        max_connections: int = 400,
        template: Path | None = None,
    ) -> None:
        self.parent = parent
        self.replication: Replication = replication
        self.bin_dir = bin_dir
        self.max_connections = max_connections
        self.template = template
        self.folder: Path | None = None
        self.members: list[Postgres] = []
        self.wal_proxy: Proxy | None = None
        self._primary = 0

    # -- what the runner and tests read ----------------------------------------------------

    @property
    def primary(self) -> Postgres:
        """The server that is primary now."""
        return self.members[self._primary]

    @property
    def standby(self) -> Postgres:
        """The other server (a standby, or being rebuilt as one)."""
        return self.members[1 - self._primary]

    @property
    def upstream(self) -> Upstream:
        """The first server's address (for callers that know one address only)."""
        return self.endpoints[0]

    @property
    def endpoints(self) -> list[Upstream]:
        """Every server's address, in a fixed order (which is primary changes; this does not)."""
        return [Upstream("127.0.0.1", member.port) for member in self.members]

    def admin_dsn(self, dbname: str = "postgres") -> str:
        """A DSN of database ``dbname`` that reaches the primary, whichever it is: both
        servers, ``target_session_attrs=read-write`` (libpq skips the standby)."""
        return multi_host_dsn([m.port for m in self.members], dbname)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Create both servers: initdb (or copy the template) and start the primary, make the
        standby by pg_basebackup through the replication proxy, start it, wait until it streams
        (sync: until it is the synchronous standby). A failed start leaves nothing behind.

        Raises:
            DatabaseUnavailable: a program failed or a server did not come up.
        """
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        bins = Binaries.resolve(self.bin_dir)
        runas = await asyncio.to_thread(RunAs.for_postgres)
        if self.parent is not None:
            self.parent.mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="pgpulse-cluster-", dir=self.parent))
        runas.own(self.folder)
        for name in ("pg1", "pg2"):
            (self.folder / name).mkdir()
            runas.own(self.folder / name)
            self.members.append(Postgres(name, self.folder / name, bins, runas))
        primary, standby = self.members
        await primary.initdb(settings(self.max_connections), self.template)
        await primary.start()
        self.wal_proxy = Proxy("replication", Upstream("127.0.0.1", primary.port))
        await self.wal_proxy.start()
        await standby.base_backup(self.wal_proxy.port)
        await standby.start()
        await self._follow()

    async def restart(self, downtime: float, mode: str) -> None:
        """Not offered: a cluster's primary moves by :meth:`fail_over` instead.

        Raises:
            NotImplementedError: always (the fault plan leaves ``pg_restart`` out).
        """
        raise NotImplementedError("a replicated cluster is failed over, not restarted")

    async def close(self) -> None:
        """Stop both servers by their pids (immediate shutdown, then SIGKILL of any that
        lingers), close the proxy, delete the folder. Never raises."""
        for member in self.members:
            await member.stop("immediate", grace=10)
        if self.wal_proxy is not None:
            await self.wal_proxy.close()
            self.wal_proxy = None
        if self.folder is not None:
            await asyncio.to_thread(shutil.rmtree, self.folder, True)
            self.folder = None

    # -- faults ----------------------------------------------------------------------------

    async def fail_over(self, kind: str, *, down: float, window: float, clock: Clock) -> Promotion:
        """Move the primary (``failover`` or ``switchover``, see the module doc) and rebuild the
        old one as the new standby; return what happened when.

        Args:
            kind: ``failover`` or ``switchover``.
            down: seconds the old primary stays down before it is rebuilt.
            window: (failover) seconds replication is cut before the kill; 0: no cut.
            clock: the instants' clock (the harness's estimate of the database's).

        Raises:
            DatabaseUnavailable: a step failed (the cluster may be unusable).
            ValueError: an unknown kind.
        """
        old, new = self.primary, self.standby
        cut_at: datetime | None = None
        if kind == "failover":
            if window > 0:
                cut_at = clock()
                await self.cut_replication()
                await asyncio.sleep(window)
            died_at = await self.crash_primary(clock)
        elif kind == "switchover":
            await self._no_sync_standby(new)  # before the stop: the new primary must not wait
            died_at = clock()
            await old.stop("fast")
            await self._received_shutdown(old, new)
        else:
            raise ValueError(f"unknown cluster fault {kind!r}")
        await self.promote()
        promoted_at = clock()
        await asyncio.sleep(down)
        rebuilt_by = await self.rebuild()
        return Promotion(
            kind, old.name, new.name, cut_at, died_at, promoted_at, clock(), rebuilt_by
        )

    async def cut_replication(self) -> None:
        """Cut the standby off (every replication connection reset, new ones refused) and wait
        until the primary's walsender is gone: from now on nothing the primary commits reaches
        the standby (sync: every commit waits). :meth:`promote` heals the proxy.

        Raises:
            DatabaseUnavailable: the walsender did not go within 5 s.
        """
        assert self.wal_proxy is not None
        self.wal_proxy.cut("drop")
        deadline = time.monotonic() + 5
        while await self.primary.query("SELECT count(*) FROM pg_stat_replication") != [0]:
            if time.monotonic() > deadline:
                raise DatabaseUnavailable("the primary's walsender outlived the cut")
            await asyncio.sleep(0.005)

    async def crash_primary(self, clock: Clock | None = None) -> datetime:
        """SIGKILL the primary's postmaster and every child at once, and reap it; return the
        instant (on ``clock``; the system's UTC clock by default) when the last of them got
        its SIGKILL, from which on the server accepts no write. Not the instant before the
        kill: its backends commit until their own SIGKILL, and listing them takes milliseconds,
        so effects committed in between would look committed after the failover (the checker
        then takes a lost one's repeat for a duplicate)."""
        primary = self.primary
        primary.signal_kill()
        died_at = clock() if clock is not None else datetime.now(UTC)
        await primary.kill()
        return died_at

    async def promote(self) -> None:
        """Promote the standby (the old primary may be dead, stopped, or — for a split-brain
        test — still running) and point the replication proxy at it; roles swap.

        Raises:
            DatabaseUnavailable: it was still in recovery after 30 s.
            psycopg.Error: it does not answer.
        """
        new = self.standby
        await self._no_sync_standby(new)
        # pg_promote(wait => true) polls at 100 ms; asking and polling here takes 15-50 ms.
        await new.query("SELECT pg_promote(wait => false)")
        deadline = time.monotonic() + 30
        while await new.query("SELECT pg_is_in_recovery()") != [False]:
            if time.monotonic() > deadline:
                raise DatabaseUnavailable(f"{new.name} still in recovery 30 s after pg_promote")
            await asyncio.sleep(0.005)
        self._primary = 1 - self._primary
        assert self.wal_proxy is not None
        self.wal_proxy.upstream = Upstream("127.0.0.1", new.port)
        self.wal_proxy.heal()

    async def rebuild(self) -> str:
        """Make the stopped or killed old primary the standby of the new one: pg_rewind after
        a CHECKPOINT, or — if it fails, or the rewound server does not catch up — a fresh
        pg_basebackup; start it; wait until it streams and has replayed up to the primary's
        position (sync: until it is the synchronous standby). Returns how it was rebuilt.

        Raises:
            DatabaseUnavailable: not even a fresh base backup made a working standby.
        """
        old = self.standby
        assert self.wal_proxy is not None and not old.running
        await self.primary.query("CHECKPOINT")
        try:
            await old.rewind(self.wal_proxy.port)
            await old.start()
            await self._follow(CATCH_UP_TIMEOUT)
            return "pg_rewind"
        except (ToolFailed, DatabaseUnavailable, TimeoutError, psycopg.Error) as exc:
            log.warning(
                "pg_rewind of %s did not give a working standby (%s); taking a base backup",
                old.name,
                exc,
                extra={"action": "chaos_rewind_failed"},
            )
        await old.stop("immediate")
        await old.base_backup(self.wal_proxy.port)
        await old.start()
        await self._follow()
        return "pg_basebackup"

    # -- replication state -----------------------------------------------------------------

    async def _follow(self, within: float = 60.0) -> None:
        """Wait until the standby streams from the primary and has replayed up to the
        primary's position now ("streaming" alone proves nothing: a standby on a diverged
        timeline connects, then stops); with sync replication, then name it the synchronous
        standby and wait until the primary reports it ``sync``.

        Raises:
            TimeoutError: not within ``within`` seconds.
        """
        primary, standby = self.primary, self.standby
        [target] = await primary.query("SELECT pg_current_wal_lsn()::text")
        async with asyncio.timeout(within):
            while True:
                if await self._caught_up(target):
                    break
                await asyncio.sleep(0.02)
            if self.replication == "sync":
                await primary.query(
                    sql.SQL("ALTER SYSTEM SET synchronous_standby_names = {}").format(
                        sql.Literal(standby.name)
                    )
                )
                await primary.query("SELECT pg_reload_conf()")
                while True:
                    state = await primary.query(
                        "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                        [standby.name],
                    )
                    if state == ["sync"]:
                        break
                    await asyncio.sleep(0.01)

    async def replayed(self, within: float = 10.0) -> None:
        """Wait until the standby has replayed everything the primary has written so far.

        Raises:
            TimeoutError: not within ``within`` seconds.
        """
        [target] = await self.primary.query("SELECT pg_current_wal_lsn()::text")
        async with asyncio.timeout(within):
            while True:
                if await self._caught_up(target):
                    return
                await asyncio.sleep(0.01)

    async def _caught_up(self, target: str) -> bool:
        with contextlib.suppress(psycopg.OperationalError):
            state = await self.primary.query(
                "SELECT state FROM pg_stat_replication WHERE application_name = %s",
                [self.standby.name],
            )
            replayed = await self.standby.query(
                "SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false)", [target]
            )
            return state == ["streaming"] and replayed == [True]
        return False

    async def _no_sync_standby(self, server: Postgres) -> None:
        """Sync replication: empty ``synchronous_standby_names`` on ``server`` (a standby about
        to be promoted: ALTER SYSTEM works in recovery), so it never waits for a standby it does
        not have."""
        if self.replication == "sync":
            await server.query("ALTER SYSTEM SET synchronous_standby_names = ''")
            await server.query("SELECT pg_reload_conf()")

    async def _received_shutdown(self, old: Postgres, new: Postgres) -> None:
        """Wait until ``new`` has received the cleanly stopped ``old``'s shutdown checkpoint
        (its walsender sends it before exiting): then a promotion loses nothing.

        Raises:
            DatabaseUnavailable: not within 5 s.
        """
        checkpoint = await old.last_checkpoint()
        deadline = time.monotonic() + 5
        while await new.query("SELECT pg_last_wal_receive_lsn() > %s::pg_lsn", [checkpoint]) != [
            True
        ]:
            if time.monotonic() > deadline:
                raise DatabaseUnavailable(
                    f"{new.name} did not receive {old.name}'s shutdown checkpoint {checkpoint}"
                )
            await asyncio.sleep(0.005)


async def initdb_template(folder: Path, bin_dir: Path | None = None) -> Path:
    """Run initdb once into ``folder/template`` (owned by PostgreSQL's user) and return it: a
    :class:`ReplicatedServer` copies it instead of running initdb (four times faster), as the test
    suite does for its clusters.

    Raises:
        ToolFailed: initdb failed.
        InvalidInput: ``bin_dir`` lacks a program.
    """
    runas = await asyncio.to_thread(RunAs.for_postgres)
    runas.own(folder)
    server = Postgres("template", folder, Binaries.resolve(bin_dir), runas)
    await server.tool(
        "initdb", "-D", str(folder / "template"), "--auth=trust", "-U", "postgres", "-E", "utf8",
        "--no-sync",
    )  # fmt: skip
    return folder / "template"


def multi_host_dsn(ports: list[int], dbname: str, user: str = "postgres") -> str:
    """A libpq DSN over several servers on 127.0.0.1 that connects to the one accepting writes
    (``target_session_attrs=read-write``: libpq's own failover, tried in the order given)."""
    hosts = ",".join("127.0.0.1" for _ in ports)
    return (
        f"host={hosts} port={','.join(map(str, ports))} user={user} dbname={dbname} "
        "target_session_attrs=read-write connect_timeout=3"
    )
