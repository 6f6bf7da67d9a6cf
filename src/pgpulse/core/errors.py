"""The one exception hierarchy of Pulse.

Every error that bad input can cause is a :class:`PulseError` subclass that carries the
offending ``field`` and ``value``, so a CLI, an API or a test can say exactly what was refused.
Raising one of these at the boundary guarantees that nothing was written (docs/design.md,
invariant 11).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def describe(exc: BaseException) -> str:
    """``exc`` as a log line says why: its text, or its type's name when the text is empty (a
    timeout's ``TimeoutError()`` has none)."""
    return str(exc) or type(exc).__name__


class PulseError(Exception):
    """Base class of every error Pulse raises on purpose.

    Args:
        message: a one-line, human-readable explanation.
        field: the name of the input field that was refused (``"schedule"``, ``"timezone"``,
            ``"payload"``...), or ``None`` when the error is not about one field.
        value: the refused value, kept as given.

    Attributes:
        job: ``(tenant, name)`` of the definition refused, when a write of several definitions
            (:func:`pgpulse.db.reconcile.reconcile`: ``apply``, ``crontab import --sync``) knows
            which; ``pgpulse apply`` names its file and line from it. ``None`` otherwise.
    """

    job: tuple[str, str] | None = None

    def __init__(self, message: str, *, field: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.value = value

    def __str__(self) -> str:
        return self.message


class InvalidInput(PulseError):
    """An input field has a value Pulse refuses (a generic validation failure)."""


class InvalidSchedule(InvalidInput):
    """A schedule expression is malformed or can never fire (``0 0 30 2 *``)."""


class ScheduleEnded(InvalidSchedule):
    """A finite schedule (a one-off ``@at``) has no occurrence after the instant asked about:
    its job is complete, not broken (:meth:`pgpulse.core.schedule.Schedule.next_after_or_none`
    returns None instead of raising this)."""


class UnknownTimeZone(InvalidInput):
    """A time zone name is not in the IANA database (``Mars/Olympus``)."""


class InvalidPayload(InvalidInput):
    """A payload is not valid JSON, or not a JSON object."""


class DefinitionChanged(InvalidInput):
    """A write that was based on one revision of a job's definition found another stored: a
    concurrent write came first (``field="revision"``, ``value`` the revision it expected). The
    API's partial update reads the job again and retries; answered 409 when it keeps losing."""

    def __init__(self, name: str, expected: int, found: int) -> None:
        super().__init__(
            f"job {name!r} changed meanwhile (revision {found}, this change was based on "
            f"{expected}): read it again and retry",
            field="revision",
            value=expected,
        )


class UnknownHandler(InvalidInput):
    """A job names a handler that is neither built in nor registered by any node."""


class CrontabError(InvalidInput):
    """A crontab line cannot be imported; ``str()`` gives ``file:line: reason``."""

    def __init__(self, path: str, line_no: int, reason: str, *, line: str = "") -> None:
        super().__init__(f"{path}:{line_no}: {reason}", field="crontab", value=line)
        self.path = path
        self.line_no = line_no
        self.reason = reason


class Forbidden(PulseError):
    """The writer may not do this: another tenant's job, or a ``shell`` job without shell
    rights (:mod:`pgpulse.core.access`). Nothing was written."""


class NotFound(PulseError):
    """A named thing (a job, a calendar) does not exist."""


class JobNotFound(NotFound):
    """No job has the given (tenant, name); a ``tenant`` of ``None`` means in any tenant.
    ``elsewhere``: tenants that do have a job of that name, named in the message as a hint."""

    def __init__(self, tenant: str | None, name: str, elsewhere: Sequence[str] = ()) -> None:
        where = "in any tenant" if tenant is None else f"in tenant {tenant!r}"
        hint = ""
        if len(elsewhere) == 1:
            hint = f" (tenant {elsewhere[0]!r} has one: --tenant {elsewhere[0]})"
        elif elsewhere:
            hint = f" (tenants {', '.join(map(repr, elsewhere))} have one: --tenant NAME)"
        super().__init__(f"no job named {name!r} {where}{hint}", field="name", value=name)
        self.tenant = tenant


class DatabaseUnavailable(PulseError):
    """The database named by a DSN (or the embedded server) does not answer."""


class DatabaseRefused(DatabaseUnavailable):
    """The server answered and refused the connection for a reason no retry cures: a wrong
    password, an unknown role or database, no ``pg_hba.conf`` entry (a starting node exits at
    once on it, exit 3, instead of waiting for the database)."""


class SessionStateLost(DatabaseRefused):
    """A session that needs its state kept (the claim session: its settings and prepared
    statements) found its server connection changed between two of its transactions: a pooler
    in transaction mode (PgBouncer ``pool_mode = transaction``) stands between the node and
    PostgreSQL. A node refuses to start on it (exit 3): it needs session mode or a direct
    connection (docs/ha.md, "PgBouncer")."""


class PreReleaseSchema(PulseError):
    """The database holds the schema of the pre-release Pulse 0.1.0, which no migration upgrades
    (release 0.2.0 starts from a new baseline)."""


class SchemaMissing(PulseError):
    """A command that only reads (or changes what exists) met a database without Pulse's
    current schema: it never migrates one itself (``pgpulse migrate``, a node, or a command
    that creates definitions does). ``field`` is ``"database"``, ``value`` the schema version
    found (0: none)."""


class SchemaTooNew(PulseError):
    """The database is at a schema newer than this Pulse's migrations, and one of those newer
    migrations breaks the nodes of older releases (its header says so:
    :data:`pgpulse.db.migrations.BREAKS_OLDER_NODES`): a node refuses to start and a command to
    run, writing nothing. ``field`` is ``"database"``, ``value`` the schema version found. A
    newer schema whose extra migrations are all additive is not refused."""


class InvalidNotifierConfig(InvalidInput):
    """A notifier's configuration (``webhook``, ``email``, ``checkin``) has a missing, unknown or
    refused field; ``field`` is ``"config.<key>"``. A secret field's value is never carried:
    ``value`` is then ``"***"`` (or a URL with its secret parts masked)."""


class NodeIdTaken(PulseError):
    """A node's ``--node-id`` is held by another live process (one node id, one
    process). Carries the id (``value``) and the holder's host and pid."""

    def __init__(self, node_id: str, *, hostname: str, pid: int, silent: float) -> None:
        super().__init__(
            f"--node-id {node_id!r} is held by a live node on host {hostname!r}, pid {pid} "
            f"(last heartbeat {silent:.1f} s ago): stop it, or start this node with another "
            "--node-id",
            field="--node-id",
            value=node_id,
        )
        self.hostname = hostname
        self.pid = pid
