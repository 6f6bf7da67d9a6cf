"""The built-in handlers: ``shell`` (run a command) and ``http`` (call a URL), and the
task-queue ones of their own modules, ``celery`` (:mod:`pgpulse.node.celery_handler`) and ``rq``
(:mod:`pgpulse.node.rq_handler`).

Both are async handlers (see :mod:`pgpulse.node.handlers`): they return the captured output on
success and raise :class:`~pgpulse.node.handlers.HandlerFailed` with the captured output on failure.
Neither enforces the job's timeout: the engine does, by cancelling the handler's task (as it does
on a lost lease or at shutdown). Both handlers are written so that a cancellation leaves nothing
behind: the shell handler kills and reaps the command's whole process group, and the HTTP handler
closes its client.

Payloads are checked by :data:`pgpulse.core.payloads.PAYLOAD_VALIDATORS`, which job creation calls
up front (docs/design.md, invariant 11: refuse bad input at the boundary). The handlers call them
again, because a payload may have been stored by an older version.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import pwd
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pgpulse.core.egress import HttpAllowList
from pgpulse.core.errors import InvalidInput, InvalidPayload
from pgpulse.core.masking import mask_url, scrub, url_credentials
from pgpulse.core.payloads import (
    validate_http_payload,
    validate_shell_payload,
)
from pgpulse.core.placeholders import fill_payload
from pgpulse.core.wording import seconds_text
from pgpulse.node import shell_guard, tracing
from pgpulse.node.celery_handler import celery_handler
from pgpulse.node.handlers import MAX_OUTPUT_CHARS, Handler, HandlerFailed, RunContext
from pgpulse.node.rq_handler import rq_handler

if TYPE_CHECKING:  # httpx loads with the first http request, not with ``import pgpulse``
    import httpx

logger = logging.getLogger(__name__)

#: Seconds between SIGTERM and SIGKILL when a cancelled command's process group is stopped.
KILL_GRACE_SECONDS = 2.0
#: Seconds to wait for the killed command to be reaped before giving up on it.
_REAP_SECONDS = 5.0
#: Interval, in seconds, of the check that every process of a terminated group is gone.
_GROUP_POLL_SECONDS = 0.05
_READ_CHUNK_BYTES = 64 * 1024
#: How a shell job's command is started: under :mod:`pgpulse.node.shell_guard`, so that it dies with
#: its node (isolated from the environment's Python settings, without site packages).
_GUARD = (sys.executable, "-I", "-S", shell_guard.__file__)

#: Methods the ``http`` handler accepts (compared case-insensitively, sent upper-case).
#: Default and ceiling of the ``http`` handler's request timeout, in seconds.
DEFAULT_HTTP_TIMEOUT = 30.0


def _validated(validate: Callable[[Mapping[str, Any]], None], payload: Mapping[str, Any]) -> None:
    """Run ``validate`` and turn its refusal into a failed attempt."""
    try:
        validate(payload)
    except InvalidPayload as exc:
        raise HandlerFailed(f"invalid payload: {exc}") from exc


# --- output capture -----------------------------------------------------------------------


class _CappedText:
    """Keeps the first ``limit`` characters of a stream of text and counts the rest.

    Memory stays bounded however much the command or server sends; :meth:`text` gives the same
    result as :func:`pgpulse.node.handlers.truncate_output` would on the whole stream.
    """

    def __init__(self, limit: int = MAX_OUTPUT_CHARS) -> None:
        self._limit = limit
        self._parts: list[str] = []
        self._kept = 0
        self._total = 0

    def add(self, chunk: str) -> None:
        self._total += len(chunk)
        room = self._limit - self._kept
        if room > 0:
            piece = chunk[:room]
            self._parts.append(piece)
            self._kept += len(piece)

    def text(self) -> str:
        kept = "".join(self._parts)
        if self._total <= self._limit:
            return kept
        # Same cut and marker as truncate_output (tests hold the two to the same text).
        keep = max(self._limit - 64, 0)
        return kept[:keep] + f"\n[... {self._total - keep} more characters truncated]"


def _iso_utc(instant: datetime) -> str:
    """ISO-8601 text of ``instant`` in UTC (a naive instant is taken to be UTC already)."""
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC).isoformat()


# --- shell --------------------------------------------------------------------------------


def _run_as(user: str | None, cwd: str | None) -> tuple[str | None, str, dict[str, str]]:
    """Return (working directory, the guard's credentials argument, env additions) for running
    as ``user`` (:mod:`pgpulse.node.shell_guard`: ``uid:gid:groups``, or ``-`` for the node's own).

    Policy (documented for crontab import): the crontab's user is recorded; commands run as the
    current user unless Pulse runs as root and the user exists. Like cron, a switched-to user gets
    its own ``HOME``, ``USER`` and ``LOGNAME``, and starts in its home directory (or ``/``) unless
    ``cwd`` is given.
    """
    if user is None or os.geteuid() != 0:
        return cwd, "-", {}
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise HandlerFailed(f"user {user!r} does not exist on this node") from None
    if cwd is None:
        cwd = entry.pw_dir if os.path.isdir(entry.pw_dir) else "/"
    groups = ",".join(str(g) for g in os.getgrouplist(entry.pw_name, entry.pw_gid))
    env = {"HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name}
    return cwd, f"{entry.pw_uid}:{entry.pw_gid}:{groups}", env


#: The node's variables every shell command gets (those the node has): the documented base.
#: Nothing else of the node's environment reaches a command unless the operator names it
#: (``node run --shell-env NAME``): the node's own settings hold the database's password.
SHELL_BASE_ENV = ("PATH", "HOME", "LANG", "TZ")


def shell_env_refusal(name: object) -> str | None:
    """Why ``name`` may not be passed from the node's environment to a child process, or
    ``None`` if it may: it is not a variable name; it is one of Pulse's settings
    (``PGPULSE_*``: ``PGPULSE_DATABASE_URL`` holds the database's password); or libpq reads it
    (``PG*``: ``PGPASSWORD``, ``PGSERVICEFILE``, ``PGHOST``..., the database's credentials and
    where they are). The rule of :func:`check_shell_env` and of :func:`child_env`."""
    if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
        return "is not an environment variable name"
    if name.upper().startswith("PGPULSE_"):
        return "is a Pulse setting (PGPULSE_*), never passed to commands"
    if name.upper().startswith("PG"):
        return "is a libpq variable (PG*: the database's credentials), never passed to commands"
    return None


def check_shell_env(names: Iterable[object]) -> tuple[str, ...]:
    """The operator's allow-list of node variables passed on to shell commands
    (``node run --shell-env NAME``), checked.

    Raises:
        InvalidInput: ``field="shell_env"``: a name refused by :func:`shell_env_refusal`, named
            with the reason; nothing is started.
    """
    for name in names:
        why = shell_env_refusal(name)
        if why is not None:
            raise InvalidInput(f"shell_env {name!r} {why}", field="shell_env", value=name)
    return tuple(str(name) for name in names)


def child_env(allowed: Iterable[str] = ()) -> dict[str, str]:
    """The environment a child process of Pulse starts with, taken from the node's own: the
    variables of :data:`SHELL_BASE_ENV` and those named in ``allowed``, each if the node has it,
    never one that :func:`shell_env_refusal` refuses (even if named).

    Args:
        allowed: the operator's extra names (``node run --shell-env``).
    """
    names = [*SHELL_BASE_ENV, *allowed]
    return {
        name: os.environ[name]
        for name in names
        if name in os.environ and shell_env_refusal(name) is None
    }


def context_values(ctx: RunContext) -> dict[str, str]:
    """The occurrence's context as text (docs/chains.md): the data interval, the last success
    and, for a run that follows others, its upstream runs; an instant ISO 8601 in UTC, empty
    when there is none. The shell handler's ``PGPULSE_<NAME>`` variables, and (with the run's
    identity) the ``http`` handler's placeholders."""
    values = {
        "data_interval_start": _iso_or_empty(ctx.previous_scheduled_for),
        "data_interval_end": _iso_utc(ctx.scheduled_for),
        "last_success_at": _iso_or_empty(ctx.last_success_at),
        "last_success_scheduled_for": _iso_or_empty(ctx.last_success_scheduled_for),
    }
    if ctx.upstream_run_ids:
        values["upstream_run_ids"] = ",".join(map(str, ctx.upstream_run_ids))
    return values


def _iso_or_empty(instant: datetime | None) -> str:
    return "" if instant is None else _iso_utc(instant)


def _placeholder_values(ctx: RunContext) -> dict[str, str]:
    """What the placeholders of an ``http`` payload stand for
    (:data:`~pgpulse.core.placeholders.PLACEHOLDERS`)."""
    return {
        **context_values(ctx),
        "scheduled_for": _iso_utc(ctx.scheduled_for),
        "run_id": str(ctx.run_id),
        "attempt": str(ctx.attempt),
        "job": ctx.job_name,
        "tenant": ctx.tenant,
    }


def _shell_env(ctx: RunContext, extra: Mapping[str, str]) -> dict[str, str]:
    env = child_env(ctx.options.get("shell_env") or ())
    env.update(extra)
    env.update(ctx.payload.get("env") or {})
    # Set last: a payload cannot disguise which run (or which fencing token) this is.
    env.update(
        {
            "PGPULSE_JOB": ctx.job_name,
            "PGPULSE_TENANT": ctx.tenant,
            "PGPULSE_SCHEDULED_FOR": _iso_utc(ctx.scheduled_for),
            "PGPULSE_ATTEMPT": str(ctx.attempt),
            "PGPULSE_RUN_ID": str(ctx.run_id),
            "PGPULSE_FENCING_TOKEN": str(ctx.fencing_token),
            **{f"PGPULSE_{name.upper()}": value for name, value in context_values(ctx).items()},
        }
    )
    traceparent = tracing.current_traceparent()  # None unless tracing is on
    if traceparent is not None:
        env["TRACEPARENT"] = traceparent
    return env


async def _feed_stdin(stream: asyncio.StreamWriter, data: bytes) -> None:
    try:
        stream.write(data)
        await stream.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command exited or closed stdin without reading it all: not an error
    finally:
        stream.close()


async def _read_capped(stream: asyncio.StreamReader) -> str:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = _CappedText()
    while chunk := await stream.read(_READ_CHUNK_BYTES):
        text.add(decoder.decode(chunk))
    text.add(decoder.decode(b"", final=True))
    return text.text()


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; return ``False`` if the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed its uid (setuid program); nothing more to do
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` is still running.

    A killed background process whose parent (the shell) died is reparented to PID 1 and stays a
    zombie until PID 1 reaps it, which a container's PID 1 may do late or never; zombies are
    dead, so where ``/proc`` exists they are not counted. Elsewhere any member counts.
    """
    if not _signal_group(pgid, 0):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
                state, _, pgrp = stat_file.read().rsplit(b")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile, or not a process entry
        if int(pgrp) == pgid and state != b"Z":
            return True
    return False


async def _terminate_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the command's process group, SIGKILL it after the grace period, reap the leader.

    The command was started with ``start_new_session=True``, so its process group id is its pid.
    That id cannot be reused while any member of the group is alive, so signalling it cannot hit
    an unrelated process group.
    """
    pgid = proc.pid
    if _signal_group(pgid, signal.SIGTERM):
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(KILL_GRACE_SECONDS):
                await proc.wait()
                # Members other than the leader are not our children: no event tells when they
                # are gone, so poll (bounded by the grace period).
                while _group_alive(pgid):  # noqa: ASYNC110 - see above
                    await asyncio.sleep(_GROUP_POLL_SECONDS)
        if _group_alive(pgid) and _signal_group(pgid, signal.SIGKILL):
            logger.warning(
                "process group %d outlived SIGTERM by %.1f s, sent SIGKILL",
                pgid,
                KILL_GRACE_SECONDS,
                extra={"action": "shell_killed"},
            )
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_REAP_SECONDS):
            await proc.wait()


async def _stop_after_cancel(proc: asyncio.subprocess.Process) -> None:
    """Run :func:`_terminate_group` to the end, even if this task is cancelled again meanwhile.

    A second cancellation (a timeout followed by shutdown) must not leave the group running;
    the cleanup is bounded by the grace period plus the reap wait, and the caller re-raises the
    original cancellation afterwards.
    """
    cleanup = asyncio.create_task(_terminate_group(proc))
    while not cleanup.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(cleanup)
    cleanup.result()


async def _start(*args: str, **options: Any) -> asyncio.subprocess.Process:
    """Start the command (:func:`asyncio.create_subprocess_exec` with ``options``).

    The command runs before the start returns: the shell is forked first, its pipes connected
    after. A cancellation meanwhile would leave its process group running (asyncio kills only
    the shell), so the start is shielded: a cancelled start is let finish, the group is then
    stopped and reaped as after any other cancellation, and the cancellation goes on.

    Raises:
        OSError: the command could not be started.
        asyncio.CancelledError: cancelled (the command, if it started, is stopped).
    """
    starting = asyncio.ensure_future(asyncio.create_subprocess_exec(*args, **options))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        while not starting.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(starting)
        if not starting.cancelled() and starting.exception() is None:
            await _stop_after_cancel(starting.result())
        raise


def _exit_failure(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"command was killed by {name}"
    return f"command exited with status {code}"


async def shell_handler(ctx: RunContext) -> str | None:
    """Run ``payload.command`` with ``SHELL -c`` and return its output.

    The shell is ``payload.shell``, else the ``SHELL`` of ``payload.env`` (a crontab's
    ``SHELL=`` line), else ``/bin/sh``: Vixie cron runs each command with the crontab's
    ``$SHELL`` (``do_command.c``), so ``SHELL=/bin/bash`` makes ``[[ ... ]]`` work.

    The command runs in its own session and process group (led by its guard), with stdin from
    ``payload.stdin`` (UTF-8) or ``/dev/null``, and stdout and stderr captured together (decoded
    as UTF-8 with replacement characters, the first
    :data:`~pgpulse.node.handlers.MAX_OUTPUT_CHARS` characters kept). Output is read until every
    process holding the pipe has closed it, as cron does.

    Environment: explicit, never the node's whole one (it holds ``PGPULSE_DATABASE_URL``):
    the node's ``PATH``, ``HOME``, ``LANG`` and ``TZ`` (:data:`SHELL_BASE_ENV`) and the variables
    the operator names in ``ctx.options["shell_env"]`` (``node run --shell-env``; never a
    ``PGPULSE_*`` or libpq ``PG*`` one, :func:`child_env`), overlaid with ``payload.env``, plus
    ``PGPULSE_JOB``, ``PGPULSE_TENANT``, ``PGPULSE_SCHEDULED_FOR`` (ISO-8601, UTC),
    ``PGPULSE_ATTEMPT``, ``PGPULSE_RUN_ID``, ``PGPULSE_FENCING_TOKEN`` and the occurrence's
    context (:func:`context_values`: ``PGPULSE_DATA_INTERVAL_START``, ``..._END``,
    ``PGPULSE_LAST_SUCCESS_AT``, ``PGPULSE_LAST_SUCCESS_SCHEDULED_FOR``, and for a run that
    follows others ``PGPULSE_UPSTREAM_RUN_IDS``) (these cannot be overridden by the payload);
    with tracing on (``node run --otel``), ``TRACEPARENT``: the
    attempt span's W3C traceparent.

    User: the crontab's user is recorded; commands run as the current user unless Pulse runs as
    root and the user exists (then with that user's groups, ``HOME``, ``USER``, ``LOGNAME``, and,
    without ``payload.cwd``, that user's home directory as working directory, or ``/``).

    Dry run: with node option ``shell_dry_run`` true, nothing runs and the text
    ``dry-run: would run '<command>'[ as user <user>]`` is returned.

    Cancellation (timeout, lost lease, shutdown; the engine enforces the timeout) sends SIGTERM to
    the whole process group, SIGKILL after :data:`KILL_GRACE_SECONDS` if any member is left, and
    reaps the command before the cancellation propagates. A node that dies without cancelling
    (SIGKILL, out of memory) takes its commands with it: each runs under
    :mod:`pgpulse.node.shell_guard`, which SIGKILLs the command's process group when the node's
    process ends, so the sweeper's retry on another node never runs beside it.

    Args:
        ctx: the attempt; ``ctx.payload`` as described in :func:`validate_shell_payload`.

    Returns:
        The captured output (exit status 0).

    Raises:
        HandlerFailed: invalid payload; the user does not exist (as root); the command cannot be
            started (e.g. ``cwd`` missing); it exited non-zero (``"command exited with status
            N"``) or was killed by a signal (``"command was killed by SIGKILL"``). The captured
            output, if any, is attached.
    """
    payload = ctx.payload
    _validated(validate_shell_payload, payload)
    command: str = payload["command"]
    user: str | None = payload.get("user")
    if ctx.options.get("shell_dry_run"):
        return f"dry-run: would run {command!r}" + (f" as user {user}" if user else "")
    cwd, credentials, user_env = _run_as(user, payload.get("cwd"))
    stdin_data = payload.get("stdin")
    shell = payload.get("shell") or payload.get("env", {}).get("SHELL") or "/bin/sh"
    # The guard's end of this pipe reads end-of-file when this process ends, however it ends.
    guard_end, node_end = os.pipe()
    try:
        try:
            proc = await _start(
                *_GUARD,
                str(guard_end),
                credentials,
                shell,
                "-c",
                command,
                stdin=asyncio.subprocess.DEVNULL if stdin_data is None else asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=_shell_env(ctx, user_env),
                start_new_session=True,
                pass_fds=(guard_end,),
                cwd=cwd,
            )
        except OSError as exc:
            raise HandlerFailed(f"cannot start command: {exc}") from exc
        finally:
            os.close(guard_end)
        # From here on, any way out (cancellation included) must stop and reap the process group.
        try:
            assert proc.stdout is not None
            async with asyncio.TaskGroup() as tasks:
                if stdin_data is not None:
                    assert proc.stdin is not None
                    tasks.create_task(_feed_stdin(proc.stdin, stdin_data.encode("utf-8")))
                reading = tasks.create_task(_read_capped(proc.stdout))
                code = await proc.wait()
        except BaseException:
            await _stop_after_cancel(proc)
            raise
    finally:
        os.close(node_end)
    output = reading.result()
    if code == shell_guard.EXIT_START_FAILED and output.startswith(shell_guard.START_FAILED):
        raise HandlerFailed(output.strip())
    if code != 0:
        raise HandlerFailed(_exit_failure(code), output=output)
    return output


# --- http ---------------------------------------------------------------------------------


def _http_headers(ctx: RunContext, given: Mapping[str, str] | None) -> httpx.Headers:
    import httpx

    headers = httpx.Headers(dict(given or {}))
    scheduled_for = _iso_utc(ctx.scheduled_for)
    # Set last (headers are case-insensitive): the payload cannot forge the run's identity.
    headers["X-Pulse-Job"] = ctx.job_name
    headers["X-Pulse-Scheduled-For"] = scheduled_for
    headers["X-Pulse-Attempt"] = str(ctx.attempt)
    headers["X-Pulse-Fencing-Token"] = str(ctx.fencing_token)
    headers["Idempotency-Key"] = f"{ctx.tenant}/{ctx.job_name}/{scheduled_for}"
    headers.update(tracing.trace_headers())  # W3C traceparent of the attempt, with tracing on
    return headers


async def http_handler(ctx: RunContext) -> str | None:
    """Send one HTTP request described by ``ctx.payload`` and return the response.

    Headers added to ``payload.headers`` (they override payload headers of the same name):
    ``X-Pulse-Job``, ``X-Pulse-Scheduled-For`` (ISO-8601, UTC), ``X-Pulse-Attempt``,
    ``X-Pulse-Fencing-Token`` and ``Idempotency-Key: <tenant>/<job>/<scheduled_for>``, which is
    the same for every attempt of one occurrence so the receiver can drop duplicates; with
    tracing on (``node run --otel``), the attempt span's W3C ``traceparent``.

    The body is ``payload.json`` (sent as JSON) or ``payload.body`` (sent as UTF-8 text), if
    either. Placeholders in the URL (percent-encoded), the header values and the body
    (``{scheduled_for}``, ``{data_interval_start}``...:
    :data:`~pgpulse.core.placeholders.PLACEHOLDERS`) are filled from the attempt's context.
    Redirects are followed only with ``payload.follow_redirects: true``. The whole request is
    bounded by ``payload.timeout`` seconds, by default ``min(ctx.timeout or 30, 30)``;
    the job's own timeout is enforced by the engine cancelling the task, which closes the
    connection.

    Every connection (redirects included) goes through
    :class:`pgpulse.node.egress_transport.GuardedTransport`
    with the node's allow-list, ``ctx.options["http_allow"]`` (an
    :class:`~pgpulse.core.egress.HttpAllowList`; none: public addresses only): the address actually
    connected to is checked when the connection is made, so a name that resolves elsewhere
    since the job was written (DNS rebinding) cannot reach a refused address. No proxy from the
    environment is used: a proxy would connect to addresses the node cannot check.

    Args:
        ctx: the attempt; ``ctx.payload`` as described in :func:`validate_http_payload`.

    Returns:
        ``"<status> <reason>\\n<body>"``, the body truncated to
        :data:`~pgpulse.node.handlers.MAX_OUTPUT_CHARS` characters.

    Raises:
        HandlerFailed: invalid payload; the status is not 2xx (or not in
            ``payload.expect_status`` when given), with the body attached as output; a network
            error or timeout, named by its class (``ConnectError: ...``), a refused address
            among them (``ConnectError: connection to 'x' refused: it resolves to 127.0.0.1``).
    """
    import httpx

    from pgpulse.node.egress_transport import GuardedTransport

    _validated(validate_http_payload, ctx.payload)
    payload = fill_payload(ctx.payload, _placeholder_values(ctx))
    url: str = payload["url"]
    method = str(payload.get("method", "GET")).upper()
    timeout = float(
        payload.get("timeout") or min(ctx.timeout or DEFAULT_HTTP_TIMEOUT, DEFAULT_HTTP_TIMEOUT)
    )
    body = payload.get("body")
    # Run errors are stored, logged and quoted by alerts: the URL's credentials (its password,
    # its query values) are masked there, and scrubbed from the errors of the client library.
    where = f"{method} {mask_url(url)}"
    try:
        async with (
            asyncio.timeout(timeout),
            # No httpx timeouts: the one deadline above bounds connect, send and read together.
            httpx.AsyncClient(
                transport=GuardedTransport(ctx.options.get("http_allow") or HttpAllowList()),
                timeout=None,
                follow_redirects=payload.get("follow_redirects", False),
            ) as client,
            client.stream(
                method,
                url,
                headers=_http_headers(ctx, payload.get("headers")),
                json=payload.get("json"),
                content=None if body is None else body.encode("utf-8"),
            ) as response,
        ):
            text = _CappedText()
            async for chunk in response.aiter_text():
                text.add(chunk)
    except TimeoutError:
        raise HandlerFailed(f"{where} timed out after {seconds_text(timeout)}") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        said = scrub(str(exc).replace(url, mask_url(url)), url_credentials(url))
        raise HandlerFailed(f"{where} failed: {type(exc).__name__}: {said}") from exc
    status, reason, output = response.status_code, response.reason_phrase, text.text()
    expected = payload.get("expect_status")
    ok = status in expected if expected is not None else 200 <= status < 300
    if not ok:
        raise HandlerFailed(f"{where} answered {status} {reason}", output=output)
    return f"{status} {reason}\n{output}"


#: Handlers every node registers under these names (a node advertises ``shell`` only when it
#: allows shell jobs, and a task-queue handler only when it has that queue's broker:
#: :data:`pgpulse.core.routing.NEEDS_OPTION`).
BUILTIN_HANDLERS: dict[str, Handler] = {
    "shell": shell_handler,
    "http": http_handler,
    "celery": celery_handler,
    "rq": rq_handler,
}
