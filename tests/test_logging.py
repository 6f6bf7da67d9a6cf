"""Logging: no log call may pass a reserved LogRecord attribute as an ``extra`` key (logging
raises KeyError for it, at the levels where the record is made), and the API answers at every
level and in both formats."""

from __future__ import annotations

import ast
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pgpulse.cli import logs
from pgpulse.db.store import Store
from web_helpers import api_client, make_token

SOURCE = Path(__file__).resolve().parents[1] / "src" / "pgpulse"
LOG_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "critical", "log"})
#: What logging.Logger.makeRecord refuses in ``extra``: the record's own attributes.
RESERVED = frozenset(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None).__dict__) | {
    "message",
    "asctime",
}


def _extra_keys(tree: ast.AST) -> Iterator[tuple[int, ast.expr, str | None]]:
    """(line, extra's value, key) for every key of every log call's ``extra`` (key ``None``:
    not a string literal, or ``extra`` is not a dict literal)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in LOG_METHODS:
            continue
        for keyword in node.keywords:
            if keyword.arg != "extra":
                continue
            if not isinstance(keyword.value, ast.Dict):
                yield node.lineno, keyword.value, None
                continue
            for key in keyword.value.keys:
                text = key.value if isinstance(key, ast.Constant) else None
                yield node.lineno, keyword.value, text if isinstance(text, str) else None


def test_no_log_call_uses_a_reserved_record_attribute_as_an_extra_key() -> None:
    found, checked = [], 0
    for path in sorted(SOURCE.rglob("*.py")):
        for line, _, key in _extra_keys(ast.parse(path.read_text("utf-8"))):
            checked += 1
            where = f"{path.relative_to(SOURCE)}:{line}"
            if key is None:
                found.append(f"{where}: extra is not a dict of literal keys (cannot be checked)")
            elif key in RESERVED:
                found.append(f"{where}: extra key {key!r} is a LogRecord attribute")
    assert checked > 50  # the scan sees the package's log calls
    assert found == []


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("level", ["DEBUG", "INFO", "WARNING", "ERROR"])
async def test_the_api_writes_at_every_log_level_and_format(
    store: Store, level: str, fmt: str, restore_logging: None
) -> None:
    logs.configure(level, fmt)
    admin = await make_token(store, admin=True)
    job: dict[str, Any] = {"name": "hook", "schedule": "@hourly", "handler": "http"}
    job["payload"] = {"url": "https://93.184.215.14/"}
    async with api_client(store, admin) as client:
        created = await client.post("/api/v1/jobs", json=job)
        assert created.status_code == 201, created.text
        updated = await client.post("/api/v1/jobs", json={**job, "schedule": "@daily"})
        assert updated.status_code == 200, updated.text
        patched = await client.patch(
            f"/api/v1/jobs/{created.json()['id']}", json={"schedule": "@weekly"}
        )
        assert patched.status_code == 200, patched.text
        for verb in ("pause", "resume", "trigger"):
            acted = await client.post(f"/api/v1/jobs/{created.json()['id']}/{verb}")
            assert acted.status_code == 200, acted.text
        assert (await client.delete(f"/api/v1/jobs/{created.json()['id']}")).status_code == 204
