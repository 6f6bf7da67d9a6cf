"""Pulse: a distributed cron and recurring-job scheduler with PostgreSQL as its only moving part.

Public API:

* :class:`App` — declare handlers and jobs in code, run a node (``App.run_node``);
* :func:`connect` — a :class:`Client` (:mod:`pgpulse.client`): what a user does with jobs, runs
  and calendars (create, list, pause, resume, trigger, backfill, delete);
* :class:`JobSpec` — a validated job definition; :class:`RunContext` — what a handler receives;
* :func:`parse_schedule` — schedule arithmetic (``Schedule.next_after``);
* the errors of :mod:`pgpulse.core.errors`.

``import pgpulse`` loads no database driver, web stack, SMTP client or holiday tables: the names
that need them (:class:`App`, :func:`connect`, :class:`Client`, :class:`Store`, :class:`Node`,
:class:`NodeConfig`) load their modules on first use (:func:`__getattr__`), as does a
submodule named as an attribute (``pgpulse.db.pausing.Paused``).
"""

import importlib as _importlib
from typing import TYPE_CHECKING, Any

from pgpulse.core.errors import (
    DatabaseUnavailable,
    InvalidInput,
    InvalidPayload,
    InvalidSchedule,
    JobNotFound,
    PulseError,
    UnknownHandler,
    UnknownTimeZone,
)
from pgpulse.core.jobs import JobSpec
from pgpulse.core.schedule import Schedule, parse_schedule
from pgpulse.node.handlers import HandlerFailed, RunContext

if TYPE_CHECKING:
    from pgpulse.app import App
    from pgpulse.client import Client, connect
    from pgpulse.db.store import Store
    from pgpulse.node.engine import Node, NodeConfig

__all__ = [
    "App",
    "Client",
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


#: The names that load their module on first use (PEP 562), with that module: each needs the
#: database driver (the node's engine too, for ``Node`` and ``NodeConfig``).
_LAZY = {
    "App": "pgpulse.app",
    "Client": "pgpulse.client",
    "connect": "pgpulse.client",
    "Node": "pgpulse.node.engine",
    "NodeConfig": "pgpulse.node.engine",
    "Store": "pgpulse.db.store",
}


def __getattr__(name: str) -> Any:
    """The names of :data:`_LAZY` load their module on first use (PEP 562), so ``import
    pgpulse`` and the commands that do not use the database (``pgpulse schedule next``) start
    without the driver; a submodule named as an attribute (``pgpulse.db.pausing``) is imported.

    Raises:
        AttributeError: ``name`` is neither one of the package's names nor a submodule.
    """
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the next access is a plain attribute
        return value
    if not name.startswith("_"):
        try:
            return _importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module 'pgpulse' has no attribute {name!r}")
