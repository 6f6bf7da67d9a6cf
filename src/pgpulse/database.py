"""Connections: turn a DSN (or the embedded default) into checked connections and a pool.

Every connection of a node carries ``application_name = 'pgpulse:<node id>'`` (its dedicated
sessions add a role: ``:beat``, ``:listen``) so ``pgpulse status`` can tell which node holds the
leader lock (its heartbeat session does), and uses dict rows.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg import conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from pgpulse.embedded import start_embedded
from pgpulse.errors import DatabaseUnavailable, InvalidInput
from pgpulse.sql import QUERIES

log = logging.getLogger(__name__)

#: Seconds to wait for a server to answer before calling it unreachable.
CONNECT_TIMEOUT = 5

AsyncConn = psycopg.AsyncConnection[DictRow]


class ConnectionSource(Protocol):
    """Where the store gets a connection: a pool, or one :class:`Session`."""

    def connection(self) -> contextlib.AbstractAsyncContextManager[AsyncConn]:
        """Lend a connection for the duration of an ``async with`` block."""
        ...


def resolve_dsn(database_url: str | None, data_dir: Path | None = None) -> str:
    """Return the DSN to use: ``database_url`` if given, else the embedded server's.

    Args:
        database_url: a libpq URI or key=value DSN, or ``None``/empty for the embedded default.
        data_dir: the embedded server's data folder (ignored when a DSN is given).

    Raises:
        DatabaseUnavailable: the embedded server could not start.
    """
    if database_url:
        return database_url
    return start_embedded(data_dir)


def with_database(dsn: str, database: str | None) -> str:
    """Return ``dsn`` naming database ``database`` of the same server (``dsn`` itself if
    ``database`` is ``None`` or empty): ``pgpulse --database NAME``.

    Raises:
        InvalidInput: ``dsn`` is malformed (``field`` is ``"database_url"``).
    """
    if not database:
        return dsn
    try:
        return conninfo.make_conninfo(dsn, dbname=database)
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(
            f"database_url {redact(dsn)!r} is not a valid DSN: {str(exc).strip()}",
            field="database_url",
            value=redact(dsn),
        ) from None


def primary_dsn(dsn: str) -> str:
    """``dsn`` as Pulse's writing sessions use it: a DSN naming several hosts (``host=a,b,c``,
    libpq's own failover) that sets no ``target_session_attrs`` gets ``read-write``, so each
    connection keeps the first host that accepts writes — the primary — rather than the first
    that answers, a standby perhaps (docs/ha.md). Any other DSN is returned as it is.

    Raises:
        InvalidInput: ``dsn`` is malformed (``field`` is ``"database_url"``).
    """
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(
            f"database_url {redact(dsn)!r} is not a valid DSN: {str(exc).strip()}",
            field="database_url",
            value=redact(dsn),
        ) from None
    several = any("," in str(params.get(key) or "") for key in ("host", "hostaddr"))
    if "target_session_attrs" in params or not several:
        return dsn
    return conninfo.make_conninfo(dsn, target_session_attrs="read-write")


def is_read_only_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the server refuses writes (SQLSTATE 25006: a standby, or a primary
    made read-only): the session must move, since its server will not take this node's writes
    again until a failover moves it back."""
    return isinstance(exc, psycopg.errors.ReadOnlySqlTransaction)


async def session_is_read_only(conn: AsyncConn) -> bool:
    """Whether ``conn``'s server refuses writes now: in recovery (a standby, an old primary
    rejoined) or ``transaction_read_only`` (``default_transaction_read_only`` set). One
    statement, for a session that never writes (LISTEN) and would not otherwise find out.

    Raises:
        psycopg.Error: the statement failed (the connection is probably gone).
    """
    cur = await conn.execute(QUERIES["session_read_only"])
    row = await cur.fetchone()
    return bool(row and row["read_only"])


def describe(info: psycopg.ConnectionInfo) -> str:
    """Where a connection is, for people, never with its password: ``database 'pulse' on
    db.internal:5432`` (a Unix-socket folder stands for host and port: the embedded server's
    is in its data folder). ``info`` is an open connection's ``conn.info``: the values libpq
    really used, defaults and environment included."""
    host = info.host
    where = host if host.startswith("/") else f"{host}:{info.port}"
    return f"database {info.dbname!r} on {where}"


def describe_dsn(dsn: str) -> str:
    """Where a well-formed ``dsn`` points, worded as :func:`describe` words an open connection
    (``database 'pulse' on db.internal:5432``), for a connection that failed: libpq's defaults
    as far as the DSN shows them (port 5432; the database named as the user; no host: the
    local socket, or ``PGHOST``). A multi-host DSN lists its hosts."""
    params = conninfo.conninfo_to_dict(dsn)
    user = params.get("user") or os.environ.get("PGUSER")
    dbname = params.get("dbname") or os.environ.get("PGDATABASE") or user or "?"
    hosts = str(params.get("host") or os.environ.get("PGHOST") or "").split(",")
    ports = str(params.get("port") or os.environ.get("PGPORT") or "5432").split(",")
    ports += [ports[-1]] * (len(hosts) - len(ports))
    places = [
        host if host.startswith("/") else f"{host}:{port}" if host else "the local socket"
        for host, port in zip(hosts, ports, strict=False)
    ]
    return f"database {dbname!r} on {','.join(places)}"


def redact(dsn: str) -> str:
    """Return ``dsn`` with any password replaced by ``***`` (for error messages and logs)."""
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn)


def _kwargs(application_name: str) -> dict[str, Any]:
    return {
        "application_name": application_name[:63],
        "connect_timeout": CONNECT_TIMEOUT,
        "row_factory": dict_row,
    }


async def connect(
    dsn: str,
    *,
    application_name: str = "pgpulse",
    autocommit: bool = True,
    writable: bool = True,
) -> AsyncConn:
    """Open one connection (for LISTEN, the leader lock, migrations, the CLI).

    Args:
        writable: the session writes, or must see what the primary sees (default): a
            multi-host ``dsn`` goes to the primary (:func:`primary_dsn`). ``False``: a
            read-only session (a replica DSN), connected to whichever host answers first.

    Raises:
        InvalidInput: the DSN is malformed (``field`` is ``"database_url"``).
        DatabaseUnavailable: the server does not answer or refuses; the message names the DSN
            (password redacted) and the driver's reason.
    """
    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(
            f"database_url {redact(dsn)!r} is not a valid DSN: {str(exc).strip()}",
            field="database_url",
            value=redact(dsn),
        ) from None
    try:
        return await psycopg.AsyncConnection.connect(
            primary_dsn(dsn) if writable else dsn,
            autocommit=autocommit,
            **_kwargs(application_name),
        )
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        # A server that answered and refused (an unknown role or database, a wrong password,
        # pg_hba) is not a server that does not answer.
        verb = "refused the connection" if "FATAL:" in str(exc) else "does not answer"
        raise DatabaseUnavailable(
            f"{describe_dsn(dsn)} {verb}: {reason} (DSN {redact(dsn)!r})",
            field="database_url",
            value=redact(dsn),
        ) from exc


async def _check_writable(conn: AsyncConn) -> None:
    """A writing pool's check of each connection it lends: alive (one round trip, as psycopg's
    own check) and on a server that takes writes. A connection whose server turned read-only
    (a standby, ``default_transaction_read_only``) is closed, so the pool opens another — with a
    multi-host DSN, on the primary."""
    if await session_is_read_only(conn):
        await conn.close()
        raise psycopg.errors.ReadOnlySqlTransaction("the server is read-only: reconnecting")


async def open_pool(
    dsn: str,
    *,
    application_name: str,
    max_size: int,
    min_size: int = 1,
    writable: bool = True,
) -> AsyncConnectionPool[AsyncConn]:
    """Open a checked connection pool (autocommit connections, dict rows).

    Each connection is checked as it is lent (one statement: one round trip): after a
    database restart the idle connections are dead, and without the check the first statements
    after it — a stopping node's hand-back among them — would fail on them instead of on a
    fresh connection. A writing pool's check also refuses a server that turned read-only
    (:func:`_check_writable`).

    Args:
        writable: the pool writes (default; a multi-host ``dsn`` goes to the primary,
            :func:`primary_dsn`); ``False`` for a read replica's pool (any host, any state).

    Raises:
        DatabaseUnavailable: the first connection could not be made.
    """
    probe = await connect(dsn, application_name=application_name, writable=writable)
    await probe.close()
    pool: AsyncConnectionPool[AsyncConn] = AsyncConnectionPool(
        primary_dsn(dsn) if writable else dsn,
        min_size=min_size,
        max_size=max(max_size, min_size),
        kwargs={"autocommit": True, **_kwargs(application_name)},
        connection_class=psycopg.AsyncConnection[DictRow],
        check=_check_writable if writable else AsyncConnectionPool.check_connection,
        open=False,
        name=application_name,
    )
    await pool.open(wait=True, timeout=CONNECT_TIMEOUT * 2)
    return pool


class Session:
    """One dedicated connection that is opened again on the next use after it broke.

    A pool reconnects with its own exponential backoff (1 s, 2 s, 4 s...), so after a short
    database restart it can stay away for twice the outage. A node's heartbeats and lease
    renewals go through a session instead: each heartbeat tries a fresh connection at once,
    so a lease survives an outage shorter than itself. Use from one task at a time.

    Session state (a session-level advisory lock, such as the leader's) lives as long as one
    connection: :attr:`generation` counts the connections opened, so a holder can tell that
    its session, and the lock with it, was lost.

    Args:
        dsn: the database.
        application_name: shown in ``pg_stat_activity``.
        settings: run-time parameters set on each connection the session opens (``set_config``,
            one statement per connection, not per use; nothing in the DSN's startup packet, so
            it also works through a pooler that refuses startup options).
    """

    def __init__(
        self, dsn: str, application_name: str, settings: Mapping[str, str] | None = None
    ) -> None:
        self.dsn = dsn
        self.application_name = application_name
        self.settings = dict(settings or {})
        self.generation = 0
        self._conn: AsyncConn | None = None
        self._conn_dsn = dsn  # the DSN the open connection answers to

    def move(self, dsn: str, where: tuple[str, int] | None = None) -> None:
        """Use ``dsn`` from now on: the next use reconnects through it, unless the open
        connection is at ``where`` (host, port) already, where ``dsn`` leads too. Never closes
        a connection itself (another task may be using it): a split brain moves a node's
        sessions to the newest primary this way (:mod:`pgpulse.split_brain`)."""
        self.dsn = dsn
        conn = self._conn
        if conn is not None and not conn.closed and where is not None:
            with contextlib.suppress(psycopg.Error, ValueError):
                if (conn.info.host, conn.info.port) == where:
                    self._conn_dsn = dsn

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConn]:
        """Lend the session's connection, connecting first if there is none (or if
        :meth:`move` gave it another DSN).

        Raises:
            DatabaseUnavailable: the connection could not be opened.
        """
        if (
            self._conn is None
            or self._conn.closed
            or self._conn.broken
            or self._conn_dsn != self.dsn
        ):
            await self.close()
            self._conn_dsn = self.dsn
            self._conn = await connect(self.dsn, application_name=self.application_name)
            self.generation += 1
            for name, value in self.settings.items():
                await self._conn.execute("SELECT set_config(%s, %s, false)", (name, value))
        conn = self._conn
        try:
            yield conn
        except BaseException as exc:
            # A failed or cancelled statement may leave the connection mid-query: start afresh.
            # A server that refuses writes will go on refusing them: the next connection goes
            # to the primary (a multi-host DSN), wherever a failover put it.
            if is_read_only_error(exc):
                log.warning(
                    "session %s: the server is read-only, reconnecting",
                    self.application_name,
                    extra={"action": "session_read_only"},
                )
                await self.close()
            elif conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await self.close()
            raise

    async def close(self) -> None:
        """Close the connection, if any."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
