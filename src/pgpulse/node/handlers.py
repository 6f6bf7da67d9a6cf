"""Handlers: the named Python callables that do a job's work, and the context they receive.

A handler is ``def handler(ctx: RunContext) -> str | None`` or the ``async def`` equivalent.
Sync handlers run in a worker thread; async ones on the node's event loop. Returning normally is
success (the returned text, if any, is kept as the run's captured output, truncated); raising is
a failed attempt. :class:`HandlerFailed` lets a handler fail with captured output attached.
:class:`NodeHandlers` is how a node runs one for a claimed job (the ``perform`` step of an
attempt, :mod:`pgpulse.node.attempts`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias, cast

from pgpulse.core.chains import previous_scheduled_for
from pgpulse.core.errors import InvalidInput, UnknownHandler
from pgpulse.core.model import AttemptResult, ClaimedJob
from pgpulse.node import tracing

#: Longest captured output kept per run, in characters (the tail is cut, a marker is appended).
MAX_OUTPUT_CHARS = 16_384


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a handler knows about the attempt it is running.

    Attributes:
        job_id: the job's numeric id.
        job_name: the job's name within its tenant.
        tenant: the job's tenant.
        payload: the job's JSON payload (a dict; treat it as read-only).
        scheduled_for: the occurrence's logical instant (aware, UTC), never a wall-clock reading.
        attempt: 1 for the first attempt of this occurrence, 2 for the first retry, ...
        run_id: id of the ``pgpulse_runs`` row shared by every attempt of this occurrence (the
            row is written when an attempt ends; while one runs, ``pgpulse_runs_live`` shows it).
        fencing_token: grows on every claim of the job; guard external side effects with it
            (an effect written with a smaller token than one already seen must be refused).
            An extra occurrence (``kind`` ``trigger`` or ``backfill``, or any occurrence of a
            job under overlap ``replace``/``allow``) has a token of its own, growing over the
            claims of that occurrence: key such a guard by ``run_id``.
        timeout: the attempt's time limit in seconds, or ``None``.
        node_id: the node running the attempt.
        options: node-level settings for handlers (e.g. ``{"shell_dry_run": True}``).
        kind: ``scheduled`` (an occurrence of the schedule), ``trigger`` (run now, maybe with a
            payload of its own), ``backfill`` (a backfill on request re-runs this occurrence) or
            ``after`` (it follows a succeeded run of its upstream: docs/chains.md).
        previous_scheduled_for: the occurrence before this one by the job's schedule (aware,
            UTC), so ``[previous_scheduled_for, scheduled_for)`` is the data interval; in a chain,
            the upstream's; ``None`` when there is none (a one-off).
        last_success_at: when the job's scheduled occurrence (for an ``after`` run, also its
            earlier ``after`` runs) last succeeded, before this attempt, by the database's
            clock; or ``None``.
        last_success_scheduled_for: that occurrence's ``scheduled_for``, or ``None``.
        upstream_run_ids: for an ``after`` run, the run ids of the upstream runs it follows.
    """

    job_id: int
    job_name: str
    tenant: str
    payload: Mapping[str, Any]
    scheduled_for: datetime
    attempt: int
    run_id: int
    fencing_token: int
    timeout: float | None
    node_id: str
    options: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "scheduled"
    previous_scheduled_for: datetime | None = None
    last_success_at: datetime | None = None
    last_success_scheduled_for: datetime | None = None
    upstream_run_ids: tuple[int, ...] = ()


HandlerResult: TypeAlias = str | None
Handler: TypeAlias = Callable[[RunContext], HandlerResult | Awaitable[HandlerResult]]


class HandlerFailed(Exception):  # named as "the handler failed", by design
    """Raised by a handler to fail an attempt and keep its captured output.

    Args:
        message: why the attempt failed (stored as the run's error).
        output: captured output to store with the run (truncated to ``MAX_OUTPUT_CHARS``).
    """

    def __init__(self, message: str, *, output: str | None = None) -> None:
        super().__init__(message)
        self.output = output


def truncate_output(text: str | None, limit: int = MAX_OUTPUT_CHARS) -> str | None:
    """Return ``text`` cut to at most ``limit`` characters, ending with a marker that says how
    many characters were dropped. Idempotent: a result is never cut again."""
    if text is None or len(text) <= limit:
        return text
    keep = max(limit - 64, 0)
    return text[:keep] + f"\n[... {len(text) - keep} more characters truncated]"


class HandlerRegistry(Mapping[str, Handler]):
    """Name -> handler map of one node (or one :class:`~pgpulse.app.App`).

    Raises:
        InvalidInput: on :meth:`register` with a name already taken, or a non-callable.
        UnknownHandler: on item lookup of a name never registered; ``field`` is ``"handler"``.
    """

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, name: str, handler: Handler) -> None:
        """Register ``handler`` under ``name``; a name can be registered once."""
        if not callable(handler):
            raise InvalidInput(f"handler {name!r} is not callable", field="handler", value=name)
        if name in self._handlers and self._handlers[name] is not handler:
            raise InvalidInput(
                f"handler {name!r} is already registered", field="handler", value=name
            )
        self._handlers[name] = handler

    def __getitem__(self, name: str) -> Handler:
        try:
            return self._handlers[name]
        except KeyError:
            raise UnknownHandler(
                f"handler {name!r} is not registered on this node "
                f"(known: {', '.join(sorted(self._handlers)) or 'none'})",
                field="handler",
                value=name,
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)


async def call_handler(
    handler: Handler,
    ctx: RunContext,
    is_async: bool | None = None,
    executor: concurrent.futures.Executor | None = None,
) -> HandlerResult:
    """Run ``handler`` for one attempt: async handlers are awaited, sync ones run in a thread.

    Cancellation (timeout, lost lease, shutdown) cancels an async handler at its next await; a
    sync handler's thread cannot be interrupted, so its result is discarded instead.

    Args:
        handler: the handler.
        ctx: the attempt's context.
        is_async: whether ``handler`` is a coroutine function, when the caller has it at hand
            (a node checks each handler once, not once per run).
        executor: the threads a sync handler runs in (a node's own, one per slot); ``None``:
            the event loop's default executor.

    Raises:
        Whatever the handler raises.
    """
    if inspect.iscoroutinefunction(handler) if is_async is None else is_async:
        result = await cast(Awaitable[HandlerResult], handler(ctx))
    else:
        call = functools.partial(
            contextvars.copy_context().run, cast(Callable[[RunContext], Any], handler), ctx
        )
        result = await asyncio.get_running_loop().run_in_executor(executor, call)
        if inspect.isawaitable(result):
            result = await result
    if result is None or isinstance(result, str):
        return result
    return repr(result)


#: The result of every attempt that succeeded without output.
_OK = AttemptResult(True)


async def run_attempt(
    handler: Handler,
    ctx: RunContext,
    is_async: bool | None = None,
    executor: concurrent.futures.Executor | None = None,
) -> AttemptResult:
    """Run the handler once and classify how it ended (:func:`call_handler`; ``is_async`` and
    ``executor`` as there): its return is success, any exception a failed attempt.

    The job's timeout is not enforced here: the attempt's owner cancels the task when it passes
    (:mod:`pgpulse.node.attempts`, one watchdog per node), as it does on a lost lease or a stop.

    Raises:
        asyncio.CancelledError: the attempt was cancelled.
    """
    try:
        output = await call_handler(handler, ctx, is_async, executor)
    except HandlerFailed as exc:
        return AttemptResult(False, str(exc), truncate_output(exc.output))
    except Exception as exc:  # any handler error is a failed attempt, by design
        return AttemptResult(False, f"{type(exc).__name__}: {exc}")
    return _OK if output is None else AttemptResult(True, None, truncate_output(output))


class NodeHandlers:
    """The handlers of one node, and how it runs one for a claimed job.

    Args:
        handlers: the node's handlers by name.
        node_id: this node's id (goes into each :class:`RunContext`).
        options: node-level handler options (e.g. ``shell_dry_run``).
        executor: the threads sync handlers run in (``None``: the event loop's default).
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        node_id: str,
        options: Mapping[str, Any],
        executor: concurrent.futures.Executor | None = None,
    ):
        self.handlers = handlers
        self.node_id = node_id
        self.options = options
        self.executor = executor
        self._is_async = {
            name: inspect.iscoroutinefunction(handler) for name, handler in handlers.items()
        }

    def __contains__(self, name: object) -> bool:
        return name in self.handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self.handlers)

    def __len__(self) -> int:
        return len(self.handlers)

    async def run(self, job: ClaimedJob) -> AttemptResult:
        """Run ``job``'s handler once (after :func:`pgpulse.node.dispatch.decide` said to run it),
        inside an attempt span when tracing is on.

        Raises:
            asyncio.CancelledError: the attempt was cancelled.
        """
        handler = self.handlers[job.handler]
        ctx = RunContext(
            job_id=job.id,
            job_name=job.name,
            tenant=job.tenant,
            payload=job.payload,
            scheduled_for=job.scheduled_for,
            attempt=job.attempt,
            run_id=job.run_id,
            fencing_token=job.fencing_token,
            timeout=job.timeout,
            node_id=self.node_id,
            options=self.options,
            kind=job.kind,
            previous_scheduled_for=previous_scheduled_for(job),
            last_success_at=job.last_success_at,
            last_success_scheduled_for=job.last_success_scheduled_for,
            upstream_run_ids=tuple(job.upstream_runs or ()),
        )
        if not tracing.is_enabled():
            return await run_attempt(handler, ctx, self._is_async.get(job.handler), self.executor)
        first = job.attempt == 1
        with tracing.attempt_span(
            job_id=job.id,
            job_name=job.name,
            tenant=job.tenant,
            handler=job.handler,
            scheduled_for=job.scheduled_for,
            attempt=job.attempt,
            run_id=job.run_id,
            fencing_token=job.fencing_token,
            node_id=self.node_id,
            lag=(job.db_now - job.scheduled_for).total_seconds() if first else None,
            claim=tracing.CURRENT_CLAIM.get(),
        ) as span:
            result = await run_attempt(handler, ctx, self._is_async.get(job.handler), self.executor)
            outcome = "succeeded" if result.ok else "failed"
            span.set_outcome(outcome, error=None if result.ok else result.error)
            return result
