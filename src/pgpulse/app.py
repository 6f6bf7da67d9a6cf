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
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from pgpulse.access import code_writer
from pgpulse.builtins import BUILTIN_HANDLERS
from pgpulse.database import open_pool, resolve_dsn
from pgpulse.engine import Node, NodeConfig
from pgpulse.handlers import Handler, HandlerRegistry
from pgpulse.jobs import JobSpec
from pgpulse.store import Store

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def connect(
    database_url: str | None = None,
    *,
    data_dir: Path | None = None,
    application_name: str = "pgpulse",
    max_size: int = 4,
    migrate: bool = True,
) -> AsyncIterator[Store]:
    """Open a :class:`~pgpulse.store.Store` on a database, migrating it first.

    Args:
        database_url: a DSN; ``None`` starts (or joins) the embedded PostgreSQL.
        data_dir: the embedded server's data folder (default: see :mod:`pgpulse.embedded`).
        application_name: shown in ``pg_stat_activity``.
        max_size: connections in the pool.
        migrate: apply pending migrations before yielding.

    Raises:
        DatabaseUnavailable: the database does not answer.
    """
    dsn = resolve_dsn(database_url, data_dir)
    pool = await open_pool(dsn, application_name=application_name, max_size=max_size)
    try:
        store = Store(pool)
        if migrate:
            await store.migrate()
        yield store
    finally:
        await pool.close()


class App:
    """A set of handlers and code-declared jobs.

    Args:
        tenant: tenant of the jobs declared with :meth:`job`.
        builtins: include the ``shell`` and ``http`` handlers.
    """

    def __init__(self, *, tenant: str = "default", builtins: bool = True) -> None:
        self.tenant = tenant
        self.handlers = HandlerRegistry()
        self.jobs: list[JobSpec] = []
        if builtins:
            for name, handler in BUILTIN_HANDLERS.items():
                self.handlers.register(name, handler)

    def handler(self, name: str | None = None) -> Callable[[Handler], Handler]:
        """Decorator: register a handler under ``name`` (default: the function's name).

        Raises:
            InvalidInput: the name is taken by another handler.
        """

        def register(func: Handler) -> Handler:
            self.handlers.register(name or func.__name__, func)
            return func

        return register

    def job(self, name: str, *, schedule: str, **options: Any) -> Callable[[Handler], Handler]:
        """Decorator: register a handler named ``name`` and a job of the same name running it.

        Args:
            name: the job's and the handler's name.
            schedule: the schedule expression.
            **options: any other :meth:`JobSpec.create` field (``timezone``, ``catch_up``,
                ``payload``, ``max_attempts``, ``timeout``, ``spread``, ``not_before``,
                ``not_after``, ``max_runs``, ``calendars``, ``auto_pause_after``...).

        Raises:
            InvalidSchedule, UnknownTimeZone, InvalidPayload, InvalidInput: at declaration
                time, so a bad job never reaches the database.
        """
        spec = JobSpec.create(
            name=name, schedule=schedule, handler=name, tenant=self.tenant, source="code", **options
        )

        def register(func: Handler) -> Handler:
            self.handlers.register(name, func)
            self.jobs.append(spec)
            return func

        return register

    async def run_node(
        self,
        database_url: str | None = None,
        *,
        data_dir: Path | None = None,
        config: NodeConfig | None = None,
        install_signal_handlers: bool = True,
    ) -> None:
        """Run one scheduler node for this app until SIGTERM/SIGINT (then drain and exit).

        Migrates the database and upserts the code-declared jobs before claiming (as
        :func:`pgpulse.access.code_writer`: never over a ``shell`` job of the same name).

        Raises:
            DatabaseUnavailable: the database does not answer.
            Forbidden: a declared job would replace a ``shell`` job; nothing is written and no
                node starts.
        """
        config = config or NodeConfig()
        dsn = resolve_dsn(database_url, data_dir)
        pool = await open_pool(
            dsn,
            application_name=f"pgpulse:{config.node_id}",
            max_size=min(config.slots, 8) + 2,
            min_size=2,
        )
        try:
            store = Store(pool)
            await store.migrate()
            if self.jobs:
                await store.upsert_jobs(
                    self.jobs,
                    writer=code_writer(self.tenant, f"the code of node {config.node_id}"),
                    extra_handlers=list(self.handlers),
                )
            node = Node(store, dsn, self.handlers, config)
            if install_signal_handlers:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, node.stop)
            await node.run()
        finally:
            await pool.close()
