"""Who may write which job definitions: the one rule every write path applies (docs/design.md,
invariant 10).

Every path that creates or changes a job definition — create-as-upsert and ``PATCH`` in the API,
``pgpulse job create``, ``pgpulse crontab import``, :meth:`Store.upsert_jobs` in the Python API,
and the jobs an :class:`~pgpulse.app.App` declares in code when its node starts — ends in
:meth:`Store.upsert_jobs`, which calls :func:`check_write` for each definition against the job it
replaces, read and locked in the same transaction. The rule (pure):

* A writer limited to some tenants writes only their jobs.
* A ``shell`` job runs commands on every node: creating one, turning a job into one, or changing
  an existing one's definition in any way, or deleting it, needs a writer with shell rights.
  Pausing, resuming and triggering are not definition writes.

The writers: :data:`OPERATOR` (anyone holding the database's credentials: the CLI and the Python
API by default) may write everything; an API token writes as :func:`token_writer` says; code
declarations as :func:`code_writer`.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from pgpulse.core.errors import Forbidden
from pgpulse.core.jobs import JobSpec

__all__ = [
    "OPERATOR",
    "Writer",
    "check_alert_write",
    "check_calendar_write",
    "check_delete",
    "check_limit_write",
    "check_run_payload",
    "check_write",
    "code_writer",
    "token_writer",
]


@dataclass(frozen=True, slots=True)
class Writer:
    """Who writes job definitions, and what they may change.

    Attributes:
        name: who it is, as refusals name it (``"token 7"``, ``"the operator"``).
        tenants: the tenants whose jobs it may write; ``None``: every tenant.
        shell: whether it may create ``shell`` jobs and change their definitions.
        no_shell_reason: why it may not, when it may not (ends the refusal's message).
    """

    name: str
    tenants: frozenset[str] | None = None
    shell: bool = False
    no_shell_reason: str = "it has no right to"


#: Anyone holding the database's credentials: the CLI and the Python API (Store.upsert_jobs'
#: default writer). They could change any row by SQL, so the rule lets them write everything.
OPERATOR = Writer("the operator", None, True)


def token_writer(token_id: int, tenant: str | None, *, admin: bool, shell_allowed: bool) -> Writer:
    """The writer an API token acts as.

    Args:
        token_id: the token's id (named in refusals).
        tenant: a tenant token's tenant (ignored for admin tokens).
        admin: admin tokens write every tenant.
        shell_allowed: the server was started with ``--allow-shell-jobs``.

    Returns:
        A writer with shell rights only for an admin token on a server that allows shell jobs.
    """
    if not shell_allowed:
        reason = "this server was not started with --allow-shell-jobs"
    else:
        reason = "it is a tenant token: only an admin token may"
    return Writer(
        f"token {token_id}",
        None if admin else frozenset({tenant or "default"}),
        admin and shell_allowed,
        reason,
    )


def code_writer(tenant: str, where: str) -> Writer:
    """The writer of the jobs an :class:`~pgpulse.app.App` declares in code (their handlers are
    the app's functions): its own tenant, and no shell rights — a declaration never replaces a
    ``shell`` job of the same name.

    Args:
        tenant: the app's tenant.
        where: what declares them, for refusals (``"the code of node web-1"``).
    """
    return Writer(
        where,
        frozenset({tenant}),
        False,
        "a job declared in code may not replace one: rename the declared job, or delete the "
        "shell job first",
    )


def check_write(writer: Writer, spec: JobSpec, current_handler: str | None) -> None:
    """Refuse ``spec`` unless ``writer`` may write it over the job it replaces.

    Args:
        writer: who writes.
        spec: the new definition.
        current_handler: the handler of the job ``spec`` replaces (same tenant and name), read
            in the writing transaction; ``None`` for a new job.

    Raises:
        Forbidden: another tenant's job (``field="tenant"``), or a ``shell`` job created,
            changed or replaced without shell rights (``field="handler"``, ``value="shell"``).
    """
    if writer.tenants is not None and spec.tenant not in writer.tenants:
        raise Forbidden(
            f"{writer.name} may not manage jobs of tenant {spec.tenant!r}",
            field="tenant",
            value=spec.tenant,
        )
    if writer.shell or "shell" not in (spec.handler, current_handler):
        return
    if current_handler == "shell":
        what = f"job {spec.name!r} of tenant {spec.tenant!r} is a shell job"
    else:
        what = f"job {spec.name!r} would be a shell job"
    raise Forbidden(
        f"{what}, and shell jobs run commands on every node: {writer.name} may not create or "
        f"change them ({writer.no_shell_reason})",
        field="handler",
        value="shell",
    )


def check_run_payload(writer: Writer, *, tenant: str, name: str, handler: str) -> None:
    """Refuse a run of job (``tenant``, ``name``) with a payload of the caller's (``job trigger
    --payload``) unless ``writer`` may write that job's definition: the payload is what the
    handler runs (a ``shell`` job's payload is its command), so the rule of :func:`check_write`
    applies, as if the payload were written into the definition.

    Raises:
        Forbidden: as :func:`check_write` (another tenant's job; a ``shell`` job without shell
            rights).
    """
    _check_job_rights(
        writer,
        tenant,
        name,
        handler,
        f"a payload of its own is a command run on a node: {writer.name} may not give one",
    )


def check_delete(writer: Writer, *, tenant: str, name: str, handler: str | None) -> None:
    """Refuse deleting job (``tenant``, ``name``) unless ``writer`` may write its definition:
    removing a ``shell`` job is a change of it (a tenant token may pause, resume and trigger an
    admin's shell job, not remove it, which it could not create again).

    Args:
        handler: the job's handler, or ``None`` when only the tenant is checked (before the
            row is read).

    Raises:
        Forbidden: another tenant's job (``field="tenant"``), or a ``shell`` job without shell
            rights (``field="handler"``, ``value="shell"``).
    """
    _check_job_rights(
        writer,
        tenant,
        name,
        handler,
        f"shell jobs run commands on every node: {writer.name} may not delete them",
    )


def _check_job_rights(
    writer: Writer, tenant: str, name: str, handler: str | None, refusal: str
) -> None:
    """Refuse unless ``writer`` manages ``tenant`` and, for a ``shell`` job, has shell rights;
    ``refusal`` says why the shell job's act is refused (after "is a shell job, and ").

    Raises:
        Forbidden: ``field="tenant"``, or ``field="handler"`` with ``value="shell"``.
    """
    if writer.tenants is not None and tenant not in writer.tenants:
        raise Forbidden(
            f"{writer.name} may not manage jobs of tenant {tenant!r}", field="tenant", value=tenant
        )
    if handler == "shell" and not writer.shell:
        raise Forbidden(
            f"job {name!r} of tenant {tenant!r} is a shell job, and {refusal} "
            f"({writer.no_shell_reason})",
            field="handler",
            value="shell",
        )


def check_alert_write(writer: Writer, tenant: str | None) -> None:
    """Refuse an alert setting (a rule, a silence, an acknowledgement) unless ``writer`` may
    manage the jobs of ``tenant`` (``None``: the cluster's own rules and defaults, silences of
    every job, notifiers — only a writer of every tenant may change those).

    Raises:
        Forbidden: ``field="tenant"``.
    """
    if writer.tenants is None or (tenant is not None and tenant in writer.tenants):
        return
    what = f"alerts of tenant {tenant!r}" if tenant is not None else "the cluster's alerts"
    raise Forbidden(f"{writer.name} may not manage {what}", field="tenant", value=tenant)


def check_notifier_use(
    writer: Writer,
    tenant: str | None,
    notifier: str,
    owner: str | None,
    shared_with: Sequence[str],
) -> None:
    """Refuse a rule of a job of ``tenant`` that names notifier ``notifier`` unless ``writer``
    may route that tenant's alerts there: a writer of every tenant (an admin token, the
    operator) may name any notifier; a writer of some tenants only (a tenant's token, an app's
    code) the tenant's own notifiers (``owner``) and those an admin shared with it
    (``shared_with``). Cluster rules (``tenant`` ``None``) are an admin's already
    (:func:`check_alert_write`).

    Raises:
        Forbidden: ``field="notifiers"``, the notifier's name as ``value``.
    """
    if writer.tenants is None or tenant is None or owner == tenant or tenant in shared_with:
        return
    whose = f"tenant {owner!r}'s" if owner is not None else "the cluster's"
    raise Forbidden(
        f"{writer.name} may not send alerts of tenant {tenant!r} to notifier {notifier!r}: it "
        f"is {whose} and not shared with {tenant!r} (an admin shares it: pgpulse notifier "
        f"share {shlex.quote(notifier)} {shlex.quote(tenant)})",
        field="notifiers",
        value=notifier,
    )


def check_calendar_write(writer: Writer, tenant: str) -> None:
    """Refuse unless ``writer`` may create, replace or delete exclusion calendars of ``tenant``:
    the same tenant rule as for jobs (a calendar changes when the tenant's jobs run).

    Raises:
        Forbidden: ``field="tenant"``.
    """
    _check_tenant_manage(writer, tenant, "calendars")


def check_limit_write(writer: Writer, tenant: str) -> None:
    """Refuse unless ``writer`` may set or delete limits of concurrency keys of ``tenant``: the
    same tenant rule as for jobs (a limit changes how many of the tenant's jobs run at once).

    Raises:
        Forbidden: ``field="tenant"``.
    """
    _check_tenant_manage(writer, tenant, "limits")


def _check_tenant_manage(writer: Writer, tenant: str, what: str) -> None:
    """The tenant rule of jobs, for the tenant-wide settings ``what`` (calendars, limits):
    ``writer`` is scoped to tenants that do not include ``tenant``: Forbidden."""
    if writer.tenants is not None and tenant not in writer.tenants:
        raise Forbidden(
            f"{writer.name} may not manage {what} of tenant {tenant!r}",
            field="tenant",
            value=tenant,
        )
