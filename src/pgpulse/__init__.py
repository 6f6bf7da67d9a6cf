"""Pulse: a distributed cron and recurring-job scheduler with PostgreSQL as its only moving part.

Public API:

* :class:`App` — declare handlers and jobs in code, run a node (``App.run_node``);
* :func:`connect` — open a :class:`Store` (create, list, pause, resume, trigger, delete jobs);
* :class:`JobSpec` — a validated job definition; :class:`RunContext` — what a handler receives;
* :func:`parse_schedule` — schedule arithmetic (``Schedule.next_after``);
* the errors of :mod:`pgpulse.errors`.
"""

from typing import TYPE_CHECKING, Any

from pgpulse.app import App, connect
from pgpulse.errors import (
    DatabaseUnavailable,
    InvalidInput,
    InvalidPayload,
    InvalidSchedule,
    JobNotFound,
    PulseError,
    UnknownHandler,
    UnknownTimeZone,
)
from pgpulse.handlers import HandlerFailed, RunContext
from pgpulse.jobs import JobSpec
from pgpulse.schedule import Schedule, parse_schedule
from pgpulse.store import Store

if TYPE_CHECKING:
    from pgpulse.engine import Node, NodeConfig

__all__ = [
    "App",
    "DatabaseUnavailable",
    "HandlerFailed",
    "InvalidInput",
    "InvalidPayload",
    "InvalidSchedule",
    "JobNotFound",
    "JobSpec",
    "Node",
    "NodeConfig",
    "PulseError",
    "RunContext",
    "Schedule",
    "Store",
    "UnknownHandler",
    "UnknownTimeZone",
    "connect",
    "parse_schedule",
]
__version__ = "0.3.0.dev0"  # the release after 0.2.0 (CHANGELOG: Unreleased)


def __getattr__(name: str) -> Any:
    """``Node`` and ``NodeConfig`` load the engine on first use (PEP 562): ``import pgpulse``
    and every command but ``node run`` start without it.

    Raises:
        AttributeError: ``name`` is not one of the package's names.
    """
    if name in ("Node", "NodeConfig"):
        from pgpulse import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'pgpulse' has no attribute {name!r}")
