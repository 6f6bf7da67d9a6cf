"""Pulse: a distributed cron and recurring-job scheduler with PostgreSQL as its only moving part.

Public API:

* :class:`App` — declare handlers and jobs in code, run a node (``App.run_node``);
* :func:`connect` — open a :class:`Store` (create, list, pause, resume, trigger, delete jobs);
* :class:`JobSpec` — a validated job definition; :class:`RunContext` — what a handler receives;
* :func:`parse_schedule` — schedule arithmetic (``Schedule.next_after``);
* the errors of :mod:`pgpulse.errors`.
"""

from pgpulse.app import App, connect
from pgpulse.engine import Node, NodeConfig
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
