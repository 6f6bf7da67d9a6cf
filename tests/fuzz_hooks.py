"""Schemathesis hooks of the API fuzz test (loaded through ``SCHEMATHESIS_HOOKS``).

Adds the check ``no_write_on_4xx``: the jobs and runs tables must be byte-for-byte the same after
any request the API refused with a 4xx. Needs ``PGPULSE_FUZZ_DSN`` (the server's database) and a
single worker, since it compares the database before and after each call. Also steers most
generated job and run ids (except for DELETE) to the rows the test seeded, so updates, pauses
and triggers reach real jobs instead of answering 404.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import schemathesis
from hypothesis import strategies as st

_FINGERPRINT = """
SELECT md5(coalesce((SELECT string_agg(j::text, '|' ORDER BY j.id) FROM pgpulse_jobs j), '')
           || '#' ||
           coalesce((SELECT string_agg(r::text, '|' ORDER BY r.id) FROM pgpulse_runs r), ''))
"""
_conn: psycopg.Connection[Any] | None = None
_before: dict[int, str] = {}


def _fingerprint() -> str:
    global _conn
    if _conn is None or _conn.closed:
        _conn = psycopg.connect(os.environ["PGPULSE_FUZZ_DSN"], autocommit=True)
    row = _conn.execute(_FINGERPRINT).fetchone()
    assert row is not None
    return str(row[0])


#: Ids of the rows test_web_fuzz.py seeds.
SEEDED = {"job_id": [1, 2, 3, 4], "run_id": [1]}


@schemathesis.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
    """Four times in five, point an id at a seeded row (DELETE keeps random ids)."""
    operation = context.operation
    names = [n for n in SEEDED if isinstance((path_parameters or {}).get(n), int)]
    if not names or operation is None or operation.method.upper() == "DELETE":
        return st.just(path_parameters)
    name = names[0]
    seeded = st.sampled_from(SEEDED[name]).map(lambda i: {**(path_parameters or {}), name: i})
    return st.one_of(st.just(path_parameters), seeded, seeded, seeded, seeded)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """Remember the database's state before each call."""
    _before[id(case)] = _fingerprint()


@schemathesis.check
def no_write_on_4xx(ctx: Any, response: Any, case: Any) -> bool | None:
    """A refused request (4xx) must not have changed any job or run."""
    before = _before.pop(id(case), None)
    if before is None or not 400 <= response.status_code < 500:
        return None
    if _fingerprint() != before:
        raise AssertionError(
            f"{case.method} {case.formatted_path} answered "
            f"{response.status_code} but changed the database"
        )
    return True
