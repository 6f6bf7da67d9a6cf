"""Declaring jobs in code, and running a node for them.

    app = pgpulse.App()

    @app.job("billing.rollup", schedule="0 * * * *", catch_up="backfill")
    async def rollup(ctx: pgpulse.RunContext) -> None:
        ...

    @app.handler("reports.send")          # a handler only; jobs created from the CLI use it
    def send(ctx: pgpulse.RunContext) -> str: ...

    asyncio.run(app.run_node())           # or: pgpulse node run --app mymodule:app

Jobs declared with :meth:`App.job` are upserted when a node starts (idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgpulse.core.access import code_writer
from pgpulse.core.audit import Actor
from pgpulse.core.errors import DatabaseRefused, DatabaseUnavailable, InvalidInput, describe
from pgpulse.core.jobs import JobSpec
from pgpulse.core.plan import Plan, plan_source
from pgpulse.core.wording import seconds_text
from pgpulse.db.database import NODE_SETTINGS, AsyncConn, open_pool, resolve_dsn
from pgpulse.db.database import describe as describe_connection
from pgpulse.db.store import Store
from pgpulse.node.builtins import BUILTIN_HANDLERS
from pgpulse.node.handlers import Handler, HandlerRegistry

if TYPE_CHECKING:  # the engine and the alert rules load with the first node or declaration:
    # a command that only opens a store (every `pgpulse` command but `node run`) starts
    # without them
    from pgpulse.alerts.rules import RuleSpec
    from pgpulse.node.engine import Node, NodeConfig

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def connect(
    database_url: str | None = None,
    *,
    data_dir: Path | None = None,
    application_name: str = "pgpulse",
    max_size: int = 4,
    migrate: bool = True,
    read_url: str | None = None,
    require_schema: bool = False,
    heal: bool = False,
) -> AsyncIterator[Store]:
    """Open a :class:`~pgpulse.db.store.Store` on a database, migrating it first (or not).

    Args:
        database_url: a DSN; ``None`` starts (or joins) the embedded PostgreSQL.
        read_url: a read replica's DSN for the lists people browse (``Store``'s ``reads``);
            ``None``: everything on ``database_url``.
        data_dir: the embedded server's data folder (default: see :mod:`pgpulse.db.embedded`).
        application_name: shown in ``pg_stat_activity``.
        max_size: connections in the pool.
        migrate: apply pending migrations before yielding.
        require_schema: without ``migrate``, refuse a database that lacks the current schema
            (what the CLI's reading commands do: they never create the schema).
        heal: the pools drop a connection that met an error a fresh one could cure (a
            long-lived server's: :class:`~pgpulse.db.database.HealingPool`).

    Raises:
        DatabaseUnavailable: the database does not answer.
        SchemaMissing: ``require_schema`` and the schema is absent or older; nothing written.
    """
    dsn = resolve_dsn(database_url, data_dir)
    pool = await open_pool(dsn, application_name=application_name, max_size=max_size, heal=heal)
    try:
        reads = None
        if read_url:
            reads = await open_pool(
                read_url,
                application_name=application_name,
                max_size=max_size,
                writable=False,
                heal=heal,
            )
        try:
            store = Store(pool, reads)
            if migrate:
                await store.migrate()
            elif require_schema:
                await store.require_schema()
            yield store
        finally:
            if reads is not None:
                await reads.close()
    finally:
        await pool.close()


class App:
    """A set of handlers and code-declared jobs.

    Args:
        tenant: tenant of the jobs declared with :meth:`job`.
        builtins: include the ``shell`` and ``http`` handlers.
        name: the app's name: its jobs' source is ``code:<name>``. Give each app of a
            database its own name, or their jobs count as one app's.
        prune: at each node's start, delete the jobs of ``code:<name>`` that this code no
            longer declares (each one logged, action ``code_job_pruned``); without it they are
            kept and shown as "declared by code no longer running" (``pgpulse status``, ``job
            show``). ``pgpulse node run --prune-code-jobs`` sets it.

    Raises:
        InvalidInput: ``name`` is not a valid name.
    """

    def __init__(
        self,
        *,
        tenant: str = "default",
        builtins: bool = True,
        name: str = "default",
        prune: bool = False,
    ) -> None:
        if not name or any(c.isspace() or not c.isprintable() for c in name) or len(name) > 100:
            raise InvalidInput(
                f"app name {name!r} must be 1-100 printable characters without blanks",
                field="name",
                value=name,
            )
        self.name = name
        self.prune = prune
        self.tenant = tenant
        self.handlers = HandlerRegistry()
        self.jobs: list[JobSpec] = []
        #: Alert rules of the declared jobs: (job name, rule), set when a node starts.
        self.alert_rules: list[tuple[str, RuleSpec]] = []
        if builtins:
            for name, handler in BUILTIN_HANDLERS.items():
                self.handlers.register(name, handler)

    @property
    def source(self) -> str:
        """The source of this app's jobs: ``code:<name>``."""
        return f"code:{self.name}"

    def handler(self, name: str | None = None) -> Callable[[Handler], Handler]:
        """Decorator: register a handler under ``name`` (default: the function's name).

        Raises:
            InvalidInput: the name is taken by another handler.
        """

        def register(func: Handler) -> Handler:
            self.handlers.register(name or func.__name__, func)
            return func

        return register

    def job(
        self,
        name: str,
        *,
        schedule: str,
        alerts: Mapping[str, Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> Callable[[Handler], Handler]:
        """Decorator: register a handler named ``name`` and a job of the same name running it.

        Args:
            name: the job's and the handler's name.
            schedule: the schedule expression.
            alerts: the job's alert rules by kind, each ``{"notify": [names], "threshold": n}``
                (docs/alerts.md, "Rules"): ``{"failures": {"threshold": 3, "notify": ["ops"]}}``.
                Set when a node starts, after the job (a ``silence`` window is checked against
                the schedule then; the notifiers must exist by then).
            **options: any other :meth:`JobSpec.create` field (``timezone``, ``catch_up``,
                ``payload``, ``max_attempts``, ``timeout``, ``spread``, ``not_before``,
                ``not_after``, ``max_runs``, ``calendars``, ``auto_pause_after``...).

        Raises:
            InvalidSchedule, UnknownTimeZone, InvalidPayload, InvalidInput: at declaration
                time, so a bad job (or a malformed rule: ``field="alerts.<rule>"``...) never
                reaches the database; ``tenant``, ``handler`` or ``source`` among ``options``
                (they are the app's: :data:`_SET_ELSEWHERE`).
        """
        for key, where in _SET_ELSEWHERE.items():
            if key in options:
                raise InvalidInput(
                    f"@app.job({name!r}): {key} is not an option of a declared job: {where}",
                    field=key,
                    value=options[key],
                )
        spec = JobSpec.create(
            name=name,
            schedule=schedule,
            handler=name,
            tenant=self.tenant,
            source=self.source,
            **options,
        )
        try:
            from pgpulse.alerts.rules import declared_rule

            rules = [(name, declared_rule(kind, given)) for kind, given in (alerts or {}).items()]
        except InvalidInput as exc:  # say whose rule: the app may declare many jobs
            exc.message = f"job {name!r} of app {self.source}: alerts: {exc.message}"
            exc.job = (self.tenant, name)
            raise

        def register(func: Handler) -> Handler:
            self.handlers.register(name, func)
            self.jobs.append(spec)
            self.alert_rules.extend(rules)
            return func

        return register

    async def declare(self, store: Store, node_id: str) -> Plan:
        """Write this app's jobs as node ``node_id`` starts, in one transaction under the
        source's lock (two nodes starting at once write one after the other), as
        :func:`pgpulse.core.access.code_writer`; record what the code declares; with ``prune``,
        delete the source's jobs the code no longer declares, logging each.

        Returns:
            The plan written.

        The declared jobs' alert rules (``alerts=``) are written in the same transaction: each
        such job's own rules become exactly these, and a rule the database refuses (a notifier
        that does not exist) writes nothing at all.

        Raises:
            Forbidden: a declared job would replace a ``shell`` job; nothing is written.
            RuleRefused: a declared rule is refused (named with its job and this app);
                nothing is written.
        """
        from pgpulse.alerts.declared import DeclaredRules, RuleRefused

        rules: dict[tuple[str, str], list[RuleSpec]] = {}
        for job, rule in self.alert_rules:
            rules.setdefault((self.tenant, job), []).append(rule)
        try:
            [plan] = await store.reconcile(
                [(self.source, self.jobs)],
                partial(plan_source, prune=self.prune),
                writer=code_writer(self.tenant, f"the code of node {node_id}"),
                actor=Actor(self.source, f"{self.source}@{node_id}"),
                extra_handlers=list(self.handlers),
                rules=DeclaredRules({k: tuple(specs) for k, specs in rules.items()})
                if rules
                else None,
            )
        except RuleRefused as exc:  # say whose rule: the app may declare many jobs
            exc.message = f"job {exc.job[1]!r} of app {self.source}: alerts: {exc.message}"
            raise
        await store.declare_code(self.source, self.tenant, [s.name for s in self.jobs], node_id)
        for step in plan.steps:
            if step.action == "delete":
                log.warning(
                    "deleted job %s/%s: the code of %s no longer declares it",
                    step.tenant,
                    step.name,
                    self.source,
                    extra={"action": "code_job_pruned", "tenant": step.tenant, "job": step.name},
                )
            elif step.action == "orphan":
                log.warning(
                    "job %s/%s is declared by code no longer running (%s); "
                    "--prune-code-jobs deletes it",
                    step.tenant,
                    step.name,
                    self.source,
                    extra={"action": "code_job_stale", "tenant": step.tenant, "job": step.name},
                )
        return plan

    async def run_node(
        self,
        database_url: str | None = None,
        *,
        data_dir: Path | None = None,
        config: NodeConfig | None = None,
        install_signal_handlers: bool = True,
        on_started: Callable[[Node, str], None] | None = None,
        pool_database_url: str | None = None,
    ) -> None:
        """Run one scheduler node for this app until SIGTERM/SIGINT (then drain and exit).

        Migrates the database and writes the code-declared jobs before claiming
        (:meth:`declare`: never over a ``shell`` job of the same name; with ``prune``, the
        jobs the code no longer declares are deleted).

        Args:
            on_started: called once the node has started (registered, with its first shards),
                with the node and where its database is (``database 'pulse' on
                db.internal:5432``, as :func:`pgpulse.db.database.describe` words it).
            pool_database_url: a DSN for the node's connection pool only, through PgBouncer in
                transaction mode (or any pooler); ``None``: the pool uses ``database_url``.
                The three dedicated sessions (heartbeat and leader lock, claims, LISTEN) stay
                on ``database_url``, which must be direct or a pooler in session mode. The
                pool's connections then prepare no statements and set no session settings
                (``statement_timeout``...: the role's or database's apply).

        Raises:
            DatabaseUnavailable: the database does not answer.
            Forbidden: a declared job would replace a ``shell`` job; nothing is written and no
                node starts.
            NodeIdTaken: the node id is held by another live process; nothing is written and
                no node starts.
            InvalidInput: a declared alert rule names a notifier that does not exist, or its
                ``silence`` window is shorter than its job's schedule's period; no node starts.
        """
        # The handlers go in before the node registers: a SIGTERM while it starts (a deploy
        # that stops it at once) stops it as soon as it has started, drained and deregistered,
        # instead of killing a registered node whose row then looks alive until it is stale.
        started: list[Node] = []
        asked = asyncio.Event()

        def stop() -> None:
            asked.set()
            if started:
                started[0].stop()

        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT) if install_signal_handlers else ()
        for sig in signals:
            loop.add_signal_handler(sig, stop)
        try:
            async with self._node_task(database_url, data_dir, config, pool_database_url) as (
                node,
                task,
                pool,
            ):
                started.append(node)
                if asked.is_set():
                    node.stop()
                if on_started is not None:
                    async with pool.connection() as conn:
                        on_started(node, describe_connection(conn.info))
                await asyncio.shield(task)  # a cancelled caller still drains (the block's exit)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    @contextlib.asynccontextmanager
    async def running(
        self,
        database_url: str | None = None,
        *,
        data_dir: Path | None = None,
        config: NodeConfig | None = None,
        pool_database_url: str | None = None,
    ) -> AsyncIterator[Node]:
        """Run a node for this app inside the running event loop, for as long as the block
        lasts: the way a web application (a FastAPI or Starlette lifespan, an aiohttp
        ``cleanup_ctx``, a Django ASGI lifespan) hosts a node without a second process.

            @contextlib.asynccontextmanager
            async def lifespan(api):
                async with app.running(os.environ["PGPULSE_DATABASE_URL"]):
                    yield

        On entry it migrates, registers the node and writes the code's jobs, as
        :meth:`run_node` does, and yields once the node has its first shards. On exit (also when
        the host cancels the block) the node stops claiming and drains: running attempts get
        ``config.drain_timeout`` seconds to finish, then are handed back. Signals stay the
        host's: no handler is installed. Sync handlers run in threads of the node's own.

        Args:
            database_url, data_dir, config, pool_database_url: as :meth:`run_node`.

        Yields:
            The running :class:`~pgpulse.node.engine.Node` (``node.node_id``, ``node.shards``).

        Raises:
            DatabaseUnavailable, Forbidden, NodeIdTaken, InvalidInput: on entry, as
                :meth:`run_node`; nothing keeps running.
            Exception: on exit, whatever stopped the node's loops while the block ran (a node
                whose id another process took over raises :class:`NodeIdTaken`).
        """
        async with self._node_task(database_url, data_dir, config, pool_database_url) as (
            node,
            _task,
            _pool,
        ):
            yield node

    @contextlib.asynccontextmanager
    async def _node_task(
        self,
        database_url: str | None,
        data_dir: Path | None,
        config: NodeConfig | None,
        pool_database_url: str | None = None,
    ) -> AsyncIterator[tuple[Node, asyncio.Task[None], AsyncConnectionPool[Any]]]:
        """Open the node's pool, start the node (:meth:`_started`) and run it as a task; yield
        once it has started; on exit stop it and wait for its drain, then close the pool."""
        from pgpulse.node.engine import NodeConfig

        config = config or NodeConfig()
        dsn = resolve_dsn(database_url, data_dir)
        pool, node = await self._started(dsn, config, pool_database_url or None)
        try:
            task = asyncio.create_task(node.run(), name=f"pgpulse node {config.node_id}")
            started = asyncio.ensure_future(node.started.wait())
            try:
                await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                started.cancel()
            if task.done():  # it stopped before it started: say why
                await task
            try:
                yield node, task, pool
            finally:
                node.stop()
                # The drain runs to its end even if the block was cancelled: the task is
                # awaited again, uncancelled, until it is done.
                while not task.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(task)
                await task
        finally:
            await pool.close()

    async def _started(
        self, dsn: str, config: NodeConfig, pool_dsn: str | None = None
    ) -> tuple[AsyncConnectionPool[AsyncConn], Node]:
        """Open the node's pool, migrate, register the node and write the code's jobs and rules
        (:meth:`run_node`), again while the database is down, restarting, not yet up or full
        (too many clients): a node started then (a supervisor restarting it at once, a whole
        machine booting) waits for it, with a backoff (0.25 s doubling to 5 s) and a log line
        per try, for at most :data:`START_WAIT_S` seconds, instead of crashing. A refusal no
        retry cures (a wrong password, an unknown role or database) ends it at once.

        ``pool_dsn`` (``--pool-database-url``): the pool goes there, through a pooler in
        transaction mode, with no prepared statements and no session settings (PgBouncer's
        server sessions are shared: a ``SET`` would outlive the transaction on a session
        another client gets next); the node's dedicated sessions stay on ``dsn``.

        Raises:
            DatabaseRefused: the server refused the connection for good (not retried).
            DatabaseUnavailable: the database did not answer within :data:`START_WAIT_S`.
            Forbidden, NodeIdTaken, InvalidInput: as :meth:`run_node` (not retried).
        """
        deadline = asyncio.get_running_loop().time() + START_WAIT_S
        delay = 0.25
        pool: AsyncConnectionPool[AsyncConn] | None = None
        try:
            while True:
                try:
                    if pool is None:
                        pool = await open_pool(
                            pool_dsn or dsn,
                            application_name=f"pgpulse:{config.node_id}",
                            max_size=min(config.slots, 8) + 2,
                            min_size=2,
                            settings=None if pool_dsn else NODE_SETTINGS,
                            heal=True,
                            transaction_pooler=pool_dsn is not None,
                        )
                    return pool, await self._start(Store(pool), dsn, config, pool_dsn)
                except DatabaseRefused:
                    raise
                except (psycopg.OperationalError, PoolTimeout, DatabaseUnavailable) as exc:
                    if asyncio.get_running_loop().time() + delay > deadline:
                        raise DatabaseUnavailable(
                            f"node {config.node_id} could not start: the database did not "
                            f"answer within {seconds_text(START_WAIT_S)} ({describe(exc)})"
                        ) from exc
                    log.warning(
                        "database not ready at node start (%s); retrying in %.2fs",
                        describe(exc),
                        delay,
                        extra={"action": "start_retry"},
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
        except BaseException:
            if pool is not None:
                await pool.close()
            raise

    async def _start(
        self, store: Store, dsn: str, config: NodeConfig, pool_dsn: str | None = None
    ) -> Node:
        """One try of :meth:`_started`; a registered node whose declarations fail is
        deregistered (its id free again at once) when the database still answers."""
        await store.migrate()
        from pgpulse.alerts import services as alert_services
        from pgpulse.node.engine import Node

        node = Node(store, dsn, self.handlers, config, pool_apart=pool_dsn is not None)
        alert_services.register(node)
        await node.open_claim_session()  # refused behind a pooler in transaction mode
        await node.register()  # a node id held by a live process: refused, nothing written
        try:
            if self.jobs or self.prune:  # an app without jobs (no --app) declares nothing
                await self.declare(store, config.node_id)
        except BaseException:
            with contextlib.suppress(psycopg.OperationalError, PoolTimeout, DatabaseUnavailable):
                await node.deregister()
            raise
        return node


#: The fields of a job that a declaration takes from its app, not from ``@app.job``'s options,
#: with where each is set.
_SET_ELSEWHERE = {
    "tenant": "every job of an app has the app's tenant: App(tenant=...)",
    "handler": "a declared job runs the function it decorates; for a job of another handler "
    "register it with @app.handler(name) and create the job with `pgpulse job create`",
    "source": "a declared job's source is its app's, code:<name>: App(name=...)",
}

#: Seconds a starting node waits for a database that is restarting or not yet up.
START_WAIT_S = 60.0
