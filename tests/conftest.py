"""Test fixtures: a real PostgreSQL, a migrated template database, one fresh clone per test.

The server is the one named by ``PGPULSE_TEST_DATABASE_URL`` (e.g. the local PostgreSQL 15), or,
by default, an embedded PostgreSQL started in a temporary folder for this session. Each test gets
its own database cloned from a template migrated once (``CREATE DATABASE ... TEMPLATE``).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo, sql

from pgpulse.db.database import open_pool
from pgpulse.db.embedded import start_embedded
from pgpulse.db.migrations import migrate
from pgpulse.db.store import Store


def _with_db(dsn: str, dbname: str) -> str:
    return conninfo.make_conninfo(dsn, dbname=dbname)


#: The modules that take longest (seconds of waiting on real processes and minute boundaries,
#: measured with ``--durations``), longest first: collected first, so that ``--dist loadscope``
#: starts them first and no worker is left with one of them at the end while the other idles.
LONG_MODULES = (
    "test_bench.py",
    "test_web_fuzz.py",
    "test_web_forms.py",
    "test_chaos_run.py",
    "test_light_install.py",
    "test_cli_refusals.py",
    "test_chaos_cluster.py",
    "test_bench_pgcron.py",
    "test_regex_time.py",
    "test_web_api.py",
    "test_claim.py",
    "test_readme.py",
    "test_demo.py",
    "test_crash.py",
    "test_engine.py",
    "test_replication.py",
    "test_patroni.py",
)


def _long_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: :data:`LONG_MODULES` first, in that order, then the rest in
    collection order (each module's tests stay together and in their order)."""
    rank = {name: index for index, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort


#: The modules whose SQL is the engine's and the store's (claims, occurrences, catch-up, the
#: sweeper, migrations and domains, shards, run control, alerts' state, the API's reads) and
#: the replication harness, which starts servers with the programs of the server under test:
#: ``PGPULSE_TEST_SERVER_ONLY=sql`` (CI's second run, on the machine's PostgreSQL 15) runs
#: their tests that use the server. About a quarter of the suite's time; ``=1`` runs every
#: test that uses it (about three quarters).
SQL_MODULES = frozenset(
    {
        "test_access.py",
        "test_alert_delivery.py",
        "test_alert_states.py",
        "test_catch_up.py",
        "test_claim.py",
        "test_database_restart.py",
        "test_definition_domains.py",
        "test_engine.py",
        "test_history_delete.py",
        "test_job_names.py",
        "test_migrations.py",
        "test_newer_schema.py",
        "test_occurrences.py",
        "test_occurrences_audit.py",
        "test_occurrences_limits.py",
        "test_pause_resume.py",
        "test_pause_running.py",
        "test_replication.py",
        "test_run_control.py",
        "test_shard_count.py",
        "test_spread.py",
        "test_sweeper.py",
        "test_upgrade.py",
        "test_web_api.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long modules first (:func:`_long_first`). With ``PGPULSE_TEST_SERVER_ONLY=1``, run
    only the tests whose outcome can depend on the server under test: those that use it
    (``server_dsn``, directly or through ``dsn``, ``store``...) and those that start servers
    of their own with its programs (``server_programs``). The rest — pure tests, and harnesses
    that start the embedded server's own binaries — ran on the embedded server, unchanged.
    With ``PGPULSE_TEST_SERVER_ONLY=sql`` (CI's second run), only those of
    :data:`SQL_MODULES`."""
    _long_first(items)
    mode = os.environ.get("PGPULSE_TEST_SERVER_ONLY")
    if mode not in ("1", "sql"):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        uses = "server_dsn" in getattr(item, "fixturenames", ())
        wanted = uses or item.get_closest_marker("server_programs") is not None
        if mode == "sql":
            wanted = wanted and item.path.name in SQL_MODULES
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """DSN of the server under test (maintenance database)."""
    url = os.environ.get("PGPULSE_TEST_DATABASE_URL")
    if url:
        yield url
        return
    folder = Path(tempfile.mkdtemp(prefix="pgpulse-test-"))
    yield start_embedded(folder)


@pytest.fixture(scope="session")
def template_db(server_dsn: str) -> Iterator[str]:
    """Name of a database migrated once for the whole session."""
    name = f"pgpulse_tpl_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    async def _migrate() -> None:
        async with await psycopg.AsyncConnection.connect(
            _with_db(server_dsn, name), autocommit=True
        ) as aconn:
            await migrate(aconn)

    asyncio.run(_migrate())
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def dsn(server_dsn: str, template_db: str) -> Iterator[str]:
    """DSN of a fresh, migrated database for one test."""
    name = f"pgpulse_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)
            )
        )
    yield _with_db(server_dsn, name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    """DSN of a fresh database with no Pulse schema (for migration tests)."""
    name = f"pgpulse_e_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield _with_db(server_dsn, name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[Store]:
    """A Store over a fresh database."""
    pool = await open_pool(dsn, application_name="pgpulse-test", max_size=12)
    try:
        yield Store(pool)
    finally:
        await pool.close()


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[dict[str, object]]]:
    """A plain sync connection to the test database, for arranging and asserting."""
    from psycopg.rows import dict_row

    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        yield conn
