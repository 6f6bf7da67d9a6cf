"""Connections: turn a DSN (or the embedded default) into checked connections and a pool.

Every connection of a node carries ``application_name = 'pgpulse:<node id>'`` (its dedicated
sessions add a role: ``:beat``, ``:listen``) so ``pgpulse status`` can tell which node holds the
leader lock (its heartbeat session does), and uses dict rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

import psycopg
from psycopg import conninfo, sql
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from pgpulse.core.errors import DatabaseRefused, DatabaseUnavailable, InvalidInput, SessionStateLost
from pgpulse.core.masking import scrub
from pgpulse.db.embedded import start_embedded
from pgpulse.sql import QUERIES

log = logging.getLogger(__name__)

#: Seconds to wait for a server to answer before calling it unreachable.
CONNECT_TIMEOUT = 5

AsyncConn = psycopg.AsyncConnection[DictRow]

#: What every session of a node sets as it connects (its dedicated sessions and its pool's),
#: whatever the database or the role says (``ALTER DATABASE ... SET statement_timeout = '1ms'``
#: must not starve a node, and a value set while a session was open must not outlive a
#: ``RESET`` in it). The node's own statements are bounded by the node (its asyncio timeouts);
#: these only stop a statement whose client is gone, and keep an idle session open
#: (``idle_session_timeout`` is PostgreSQL 14's and set only there).
NODE_SETTINGS: Mapping[str, str] = {
    "statement_timeout": "2min",
    "lock_timeout": "1min",
    "idle_in_transaction_session_timeout": "2min",
    "idle_session_timeout": "0",
}

#: Tries of the statement that sets a session's settings: it runs under the database's
#: ``statement_timeout`` (1 ms, say), which a few microseconds of ``SET`` nearly always beat.
_SETTING_TRIES = 5

#: SQLSTATEs (or their two-character classes) of errors that a fresh connection can cure: the
#: session's connection is replaced (:class:`Session`). A lost or refused connection (08), an
#: operator's act (57: a statement timeout or cancel, an admin shutdown, a terminated backend,
#: an idle-session timeout), a lock timeout (55P03), an idle-in-transaction timeout (25P03), a
#: server that turned read-only (25006), too many connections or no resources (53), and what a
#: session-level setting that changed under it can cause (a ``search_path``: 3F000, 42P01,
#: 42883).
CURABLE_SQLSTATES = frozenset(
    {"08", "57", "53", "55P03", "25P03", "25006", "3F000", "42P01", "42883"}
)


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
        raise _malformed(dsn, exc) from None


def _malformed(dsn: str, exc: psycopg.Error) -> InvalidInput:
    """The refusal of a DSN libpq cannot read, without its password (:func:`scrub_dsn`)."""
    return InvalidInput(
        f"database_url {redact(dsn)!r} is not a valid DSN: {scrub_dsn(str(exc).strip(), dsn)}",
        field="database_url",
        value=redact(dsn),
    )


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
        raise _malformed(dsn, exc) from None
    several = any("," in str(params.get(key) or "") for key in ("host", "hostaddr"))
    if "target_session_attrs" in params or not several:
        return dsn
    return conninfo.make_conninfo(dsn, target_session_attrs="read-write")


#: What libpq says when the server refuses a connection for good (no retry cures it): its
#: messages carry no SQLSTATE, so their text decides (:func:`is_permanent_refusal`).
_FATAL_REFUSAL = re.compile(
    r"authentication failed|does not exist|no pg_hba\.conf entry|not permitted to log in|"
    r"permission denied for database",
    re.IGNORECASE,
)
_CLIENT_REFUSAL = re.compile(
    r"password is required|server does not support SSL|invalid (sslmode|connection option)",
    re.IGNORECASE,
)


def is_permanent_refusal(message: str) -> bool:
    """Whether a connection failure's ``message`` (libpq's) is a refusal no retry cures: a
    wrong password or authentication method, an unknown role or database, no ``pg_hba.conf``
    entry, a role that may not log in. A server down, starting up, shutting down or full
    (``too many clients``) is not: a node waits for it."""
    # The server's reasons count after its first FATAL only; searched from there in one pass
    # (a pattern "FATAL:.*(...)" backtracks over every FATAL of a long message: quadratic).
    fatal = message.upper().find("FATAL:")
    if fatal >= 0 and _FATAL_REFUSAL.search(message, fatal):
        return True
    return bool(_CLIENT_REFUSAL.search(message))


def is_read_only_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the server refuses writes (SQLSTATE 25006: a standby, or a primary
    made read-only): the session must move, since its server will not take this node's writes
    again until a failover moves it back."""
    return isinstance(exc, psycopg.errors.ReadOnlySqlTransaction)


def is_curable_error(exc: BaseException) -> bool:
    """Whether a fresh connection could cure ``exc`` (:data:`CURABLE_SQLSTATES`, or a connection
    that broke without a SQLSTATE): the session that met it opens another."""
    if not isinstance(exc, psycopg.Error):
        return isinstance(exc, OSError)
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return state in CURABLE_SQLSTATES or state[:2] in CURABLE_SQLSTATES


def one_line_error(exc: BaseException) -> str:
    """The first line of ``exc``'s text (libpq adds details below it), or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


async def apply_settings(conn: AsyncConn, settings: Mapping[str, str]) -> None:
    """Set ``settings`` (run-time parameters, session-wide) on ``conn`` in one statement (``SET``
    commands, nothing in the startup packet: it also works through a pooler that refuses
    startup options). ``idle_session_timeout`` is left out before PostgreSQL 14. Tried again
    if the database's own ``statement_timeout`` cancels it (:data:`_SETTING_TRIES`).

    Raises:
        psycopg.Error: the statement failed (every try, for a cancel).
    """
    names = [
        name
        for name in settings
        if name != "idle_session_timeout" or conn.info.server_version >= 140000
    ]
    if not names:
        return
    statement = sql.SQL("; ").join(
        sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(settings[name]))
        for name in names
    )
    for tries_left in range(_SETTING_TRIES - 1, -1, -1):
        try:
            await conn.execute(statement)
            return
        except psycopg.errors.QueryCanceled:
            if not tries_left:
                raise


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


#: Where a DSN holds its password: a URI's userinfo (up to the first and to the last ``@``),
#: a ``password=`` of a URI's query, a ``password=`` keyword (quoted or not).
_DSN_PASSWORDS = (
    re.compile(r"://[^:/?#@\s]*:([^@\s]*)@"),
    re.compile(r"://[^:/?#@\s]*:(\S*)@"),
    re.compile(r"[?&]password=([^&\s]*)"),
    re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)"),
)


def dsn_secrets(dsn: str) -> list[str]:
    """The passwords ``dsn`` holds, as text may quote them (as written, unquoted and
    percent-decoded), found in its text even when the DSN is malformed (a driver's refusal of
    it quotes the token it could not read).

    Args:
        dsn: a libpq URI or key=value DSN, well-formed or not.
    """
    found: list[str] = []
    for pattern in _DSN_PASSWORDS:
        found += [match.group(1) for match in pattern.finditer(dsn)]
    # libpq ends a URI's userinfo at its first "@": the rest of such a password is read as the
    # host, and quoted as such.
    found += [piece for text in found if text.count("@") for piece in text.split("@")]
    with contextlib.suppress(psycopg.Error):
        found.append(str(conninfo.conninfo_to_dict(dsn).get("password") or ""))
    found += [text.strip("'") for text in found]
    found += [unquote(text) for text in found]
    return [text for text in found if text]


def redact(dsn: str) -> str:
    """Return ``dsn`` with any password replaced by ``***`` (for error messages and logs)."""
    dsn = _DSN_PASSWORDS[1].sub(lambda m: m.group(0).replace(m.group(1), "***"), dsn)
    dsn = re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", r"\1***", dsn)
    return scrub(dsn, dsn_secrets(dsn))


def scrub_dsn(text: str, dsn: str) -> str:
    """``text`` (a driver's message about ``dsn``) without ``dsn``'s password, however it is
    quoted: libpq's refusal of a malformed DSN quotes the token it could not read
    (``invalid percent-encoded token: "Hunter%2Hunter2"``)."""
    return scrub(text.replace(dsn, redact(dsn)), dsn_secrets(dsn))


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
        raise _malformed(dsn, exc) from None
    try:
        return await psycopg.AsyncConnection.connect(
            primary_dsn(dsn) if writable else dsn,
            autocommit=autocommit,
            **_kwargs(application_name),
        )
    except psycopg.Error as exc:
        said = scrub_dsn(str(exc).strip(), dsn)
        reason = said.splitlines()[0] if said else type(exc).__name__
        # A server that answered and refused (an unknown role or database, a wrong password,
        # pg_hba) is not a server that does not answer.
        verb = "refused the connection" if "FATAL:" in str(exc) else "does not answer"
        kind = DatabaseRefused if is_permanent_refusal(str(exc)) else DatabaseUnavailable
        raise kind(
            f"{scrub_dsn(describe_dsn(dsn), dsn)} {verb}: {reason} (DSN {redact(dsn)!r})",
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


class HealingPool(AsyncConnectionPool[AsyncConn]):
    """A pool that drops a connection on which a statement failed with an error a fresh
    connection could cure (:func:`is_curable_error`: a statement timeout, a ``search_path``
    changed under it...), so it opens another (with its own backoff) instead of lending the
    sick one again: every store method that borrows from it heals the same way."""

    @contextlib.asynccontextmanager
    async def connection(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 -- the overridden method's signature
    ) -> AsyncIterator[AsyncConn]:
        """Lend a connection as :meth:`AsyncConnectionPool.connection` does; one that met a
        curable error is closed before it goes back (the pool discards a closed one)."""
        async with super().connection(timeout) as conn:
            try:
                yield conn
            except BaseException as exc:
                if is_curable_error(exc) and not conn.closed:
                    log.warning(
                        "pool %s: %s; replacing the connection",
                        self.name,
                        one_line_error(exc),
                        extra={"action": "pool_connection_replaced"},
                    )
                    with contextlib.suppress(psycopg.Error, OSError):
                        await conn.close()
                raise


async def open_pool(
    dsn: str,
    *,
    application_name: str,
    max_size: int,
    min_size: int = 1,
    writable: bool = True,
    settings: Mapping[str, str] | None = None,
    heal: bool = False,
    transaction_pooler: bool = False,
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
        settings: run-time parameters each new connection sets (:func:`apply_settings`; a
            node's pool: :data:`NODE_SETTINGS`); ``None``: the database's and role's own.
        heal: drop a connection that met an error a fresh one could cure (a node's pool,
            which lives for days: :class:`HealingPool`); a command's pool lives for one
            command and keeps psycopg's own rules.
        transaction_pooler: ``dsn`` goes through a pooler in transaction mode (PgBouncer
            ``pool_mode = transaction``), where a client's next transaction may run in another
            server session: the connections prepare no statements (``prepare_threshold=None``:
            PgBouncer before 1.21 does not carry prepared statements across server sessions) and
            ``settings`` must be ``None`` (a ``SET`` would stay on a shared server session).

    Raises:
        DatabaseUnavailable: the first connection could not be made.
    """
    chosen = dict(settings or {})
    if transaction_pooler and chosen:
        raise ValueError("a pool through a pooler in transaction mode sets no settings")
    kwargs: dict[str, Any] = {"autocommit": True, **_kwargs(application_name)}
    if transaction_pooler:
        kwargs["prepare_threshold"] = None

    async def configure(conn: AsyncConn) -> None:
        await apply_settings(conn, chosen)

    probe = await connect(dsn, application_name=application_name, writable=writable)
    await probe.close()
    kind = HealingPool if heal else AsyncConnectionPool
    pool: AsyncConnectionPool[AsyncConn] = kind(
        primary_dsn(dsn) if writable else dsn,
        min_size=min_size,
        max_size=max(max_size, min_size),
        kwargs=kwargs,
        connection_class=psycopg.AsyncConnection[DictRow],
        check=_check_writable if writable else AsyncConnectionPool.check_connection,
        configure=configure if chosen else None,
        open=False,
        name=application_name,
    )
    await pool.open(wait=True, timeout=CONNECT_TIMEOUT * 2)
    return pool


async def check_session_kept(conn: AsyncConn, dsn: str, application_name: str) -> None:
    """Check that ``conn`` keeps its server session from one transaction to the next, as a
    direct connection or a pooler in session mode does. A pooler in transaction mode hands a
    client's next transaction to whichever server connection is idle: while a second client
    holds a transaction open (on the server connection ``conn`` just released, which PgBouncer
    lends first), ``conn``'s next transaction runs in another backend (its
    ``pg_backend_pid()`` changes).

    Raises:
        SessionStateLost: the backend changed (the message says why the node cannot use it).
        DatabaseUnavailable, psycopg.Error: the check could not run.
    """
    query = "SELECT pg_backend_pid() AS pid"
    first = await (await conn.execute(query)).fetchone()
    other = await connect(dsn, application_name=f"{application_name}:probe"[:63])
    try:
        async with other.transaction():
            await other.execute("SELECT 1")
            second = await (await conn.execute(query)).fetchone()
    finally:
        await other.close()
    if first is None or second is None or first["pid"] == second["pid"]:
        return
    raise SessionStateLost(
        f"session {application_name} runs its transactions in different server sessions "
        f"(backend {first['pid']}, then {second['pid']}): a pooler in transaction mode "
        "(PgBouncer pool_mode = transaction) is in between, and the claim session needs its "
        "settings and prepared statements kept; connect the node directly or through session "
        "mode (docs/ha.md, PgBouncer)",
        field="database_url",
        value=redact(dsn),
    )


class Session:
    """One dedicated connection of a node, opened again on the next use after it broke, or after
    an error a fresh connection could cure.

    A pool reconnects with its own exponential backoff (1 s, 2 s, 4 s...), so after a short
    database restart it can stay away for twice the outage. A node's heartbeats and lease
    renewals go through a session instead: each heartbeat tries a fresh connection at once,
    so a lease survives an outage shorter than itself. Use from one task at a time.

    Each connection sets :data:`NODE_SETTINGS` and then ``settings`` as it opens
    (:func:`apply_settings`), so a database or role setting (a 1 ms ``statement_timeout``) never
    reaches it. A statement that fails with an error a fresh connection could cure
    (:func:`is_curable_error`: a statement or lock timeout, a terminated backend, a server
    turned read-only, a ``search_path`` changed under it...) closes the connection; the next
    use opens another, after a backoff that doubles with each such failure in a row
    (:data:`RECONNECT_BACKOFF` up to :data:`RECONNECT_BACKOFF_MAX` seconds) and starts again
    after a use that succeeded.

    Session state (a session-level advisory lock, such as the leader's) lives as long as one
    connection: :attr:`generation` counts the connections opened, so a holder can tell that
    its session, and the lock with it, was lost.

    Args:
        dsn: the database.
        application_name: shown in ``pg_stat_activity``.
        settings: run-time parameters set on each connection the session opens, after
            :data:`NODE_SETTINGS` (one statement per connection, not per use).
        keeps_state: the session relies on its state lasting from one transaction to the next
            (settings, prepared statements): each connection it opens is checked for a pooler
            in transaction mode first (:func:`check_session_kept`).
    """

    def __init__(
        self,
        dsn: str,
        application_name: str,
        settings: Mapping[str, str] | None = None,
        *,
        keeps_state: bool = False,
    ) -> None:
        self.dsn = dsn
        self.application_name = application_name
        self.settings = {**NODE_SETTINGS, **(settings or {})}
        self.keeps_state = keeps_state
        self.generation = 0
        self._conn: AsyncConn | None = None
        #: Curable failures in a row, and when the last one closed the connection (monotonic).
        self._failures = 0
        self._failed_at = 0.0
        self._conn_dsn = dsn  # the DSN the open connection answers to

    def move(self, dsn: str, where: tuple[str, int] | None = None) -> None:
        """Use ``dsn`` from now on: the next use reconnects through it, unless the open
        connection is at ``where`` (host, port) already, where ``dsn`` leads too. Never closes
        a connection itself (another task may be using it): a split brain moves a node's
        sessions to the newest primary this way (:mod:`pgpulse.node.split_brain`)."""
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
            psycopg.Error: its settings could not be set.
        """
        if (
            self._conn is None
            or self._conn.closed
            or self._conn.broken
            or self._conn_dsn != self.dsn
        ):
            await self._reconnect()
        conn = self._conn
        assert conn is not None
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
                await self._replace()
            elif is_curable_error(exc):
                log.warning(
                    "session %s: %s; reconnecting",
                    self.application_name,
                    one_line_error(exc),
                    extra={"action": "session_replaced"},
                )
                await self._replace()
            elif conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await self.close()
            raise
        self._failures = 0

    async def _reconnect(self) -> None:
        """Open the session's next connection (after the backoff its failures in a row call
        for) and set its settings; a connection whose settings fail is closed again."""
        await self.close()
        if self._failures:
            backoff = min(RECONNECT_BACKOFF * 2 ** (self._failures - 1), RECONNECT_BACKOFF_MAX)
            await asyncio.sleep(max(0.0, self._failed_at + backoff - time.monotonic()))
        self._conn_dsn = self.dsn
        conn = await connect(self.dsn, application_name=self.application_name)
        try:
            if self.keeps_state:
                await check_session_kept(conn, self.dsn, self.application_name)
            await apply_settings(conn, self.settings)
        except BaseException:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
            self._failures += 1
            self._failed_at = time.monotonic()
            raise
        self._conn = conn
        self.generation += 1

    async def _replace(self) -> None:
        """Close the connection after a curable failure: the next use opens another, after a
        backoff."""
        self._failures += 1
        self._failed_at = time.monotonic()
        await self.close()

    async def close(self) -> None:
        """Close the connection, if any."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()


#: Seconds a :class:`Session` waits before it reconnects after its first curable failure in a
#: row; each further one doubles it, up to :data:`RECONNECT_BACKOFF_MAX`.
RECONNECT_BACKOFF = 0.1
RECONNECT_BACKOFF_MAX = 2.0
