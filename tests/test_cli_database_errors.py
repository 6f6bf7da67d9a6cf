"""CLI commands as real processes on a database that fails their statements (a 1 ms
``statement_timeout``, a table locked past ``lock_timeout``): one line on stderr naming the
error, exit 3, never a traceback — whichever command met it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers import pgpulse

SHELL = ("--payload", '{"command": "true"}')
ONE_MS = {"PGOPTIONS": "-c statement_timeout=1ms"}


def assert_one_line(done: Any, *words: str) -> None:
    """Exit 3, and stderr one ``error:`` line naming the error (``words``), no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert done.returncode == 3, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("status", "--json"),
        ("runs",),
        ("job", "list"),
    ],
    ids=lambda args: " ".join(args),
)
def test_a_statement_timeout_is_one_line_and_exit_3(dsn: str, args: tuple[str, ...]) -> None:
    done = pgpulse(*args, dsn=dsn, env=ONE_MS)
    assert_one_line(done, "canceling statement due to statement timeout", "SQLSTATE 57014")


def test_a_database_wide_statement_timeout_is_one_line_and_exit_3(dsn: str, db: Any) -> None:
    name = sql.Identifier(db.info.dbname)
    db.execute(sql.SQL("ALTER DATABASE {} SET statement_timeout = '1ms'").format(name))
    try:
        for args in (("status",), ("runs",), ("job", "list")):
            assert_one_line(pgpulse(*args, dsn=dsn), "statement timeout", "SQLSTATE 57014")
    finally:
        db.execute(sql.SQL("ALTER DATABASE {} RESET statement_timeout").format(name))
    assert pgpulse("job", "list", dsn=dsn).returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        ("job", "list"),
        ("job", "show", "nightly"),
        ("job", "pause", "nightly"),
        ("job", "create", "nightly", "--schedule", "@daily", "--handler", "shell", *SHELL),
        ("status",),
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_table_locked_past_lock_timeout_is_one_line_and_exit_3(
    dsn: str, args: tuple[str, ...]
) -> None:
    with psycopg.connect(dsn) as holder:  # one transaction, held while the command runs
        holder.execute("LOCK TABLE pgpulse_jobs IN ACCESS EXCLUSIVE MODE")
        done = pgpulse(*args, dsn=dsn, env={"PGOPTIONS": "-c lock_timeout=200ms"})
    assert_one_line(done, "lock timeout", "SQLSTATE 55P03")
