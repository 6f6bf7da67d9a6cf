"""The ``pgpulse`` command. A thin edge: it parses options and calls the library.

Every option has one environment fallback, named by one rule and shown in ``--help``; a
refused option value is one line (see :mod:`pgpulse.cli.conventions`). Errors print one line
on stderr and exit non-zero: 2 for refused input, 3 for a database that does not answer or fails
a command's statements (:class:`~pgpulse.cli.conventions.DatabaseFailed`, for every command).
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import click

from pgpulse.cli import logs
from pgpulse.cli.conventions import (
    CONTEXT,
    GlobalOptions,
    PulseGroup,
    Refused,
    apply_envvar_rule,
    as_option_refusal,
)
from pgpulse.cli.report import (
    emit,
    print_job,
    print_records,
    print_runs_with_attempts,
    print_schema_missing,
    print_status,
    run_command,
    status_problems,
    to_json,
    tune_collector,
)
from pgpulse.cli.types import HostPort, IsoDateTime, Seconds, valid_name
from pgpulse.cli.types import tenant_option as cli_tenant_option
from pgpulse.core.audit import cli_actor
from pgpulse.core.definition import Field as DefinitionField
from pgpulse.core.definition import job_fields
from pgpulse.core.errors import InvalidInput, JobNotFound, PulseError, SchemaMissing
from pgpulse.core.jobs import CATCH_UP_POLICIES, CatchUp, JobSpec
from pgpulse.core.limits import RESUME_MODES, pause_until, resumed_run
from pgpulse.core.schedule import SCHEDULE_HELP, Schedule, parse_schedule
from pgpulse.core.wording import pending_pause, plural, unchanged_note, withdrawn_note
from pgpulse.core.zones import check_instant_range, is_utc
from pgpulse.db.embedded import default_data_dir, start_embedded, stop_embedded
from pgpulse.db.pausing import pause_note
from pgpulse.web.options import web_options, web_settings

if TYPE_CHECKING:  # the engine loads with `node run` only: other commands start without it;
    # the database driver with the commands that use the database (`schedule next` does not)
    from pgpulse.app import App
    from pgpulse.db.store import Store
    from pgpulse.node.engine import Node

log = logging.getLogger(__name__)
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def with_store(
    migrate: bool | Callable[[dict[str, Any]], bool] = False,
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Any]]:
    """Decorator factory: open the configured database and pass the store first.

    Args:
        migrate: the command creates definitions, so it migrates the schema first (as a node
            does); a callable decides from the command's options (``apply --dry-run`` writes
            nothing, so it does not). Otherwise the command only reads, or changes what
            already exists: a database without the current schema is refused in one line
            (:class:`~pgpulse.core.errors.SchemaMissing`, exit 2) and nothing is written.
    """

    def decorate(func: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        @click.pass_obj
        @wraps(func)
        def command(obj: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            migrating = migrate(kwargs) if callable(migrate) else migrate
            ctx = click.get_current_context()

            async def main() -> Any:
                from pgpulse.app import connect

                try:
                    async with connect(
                        obj["database_url"],
                        data_dir=obj["data_dir"],
                        read_url=obj["read_database_url"],
                        migrate=migrating,
                        require_schema=True,
                    ) as store:
                        try:
                            return await func(store, *args, **kwargs)
                        except JobNotFound as exc:  # in another tenant? say which
                            if exc.tenant is None:
                                raise
                            elsewhere = await store.tenants_with_job_name(exc.value)
                            raise JobNotFound(exc.tenant, exc.value, elsewhere) from None
                except PulseError as exc:  # name the option (and the variable) it came from
                    as_option_refusal(ctx, exc)  # the command's, or --database-url's
                    raise

            return run_command(main())

        return command

    return decorate


def _unless_dry_run(options: dict[str, Any]) -> bool:
    """``with_store``'s ``migrate`` for commands with ``--dry-run``: a dry run writes nothing."""
    return not options["dry_run"]


@click.group(cls=PulseGroup, context_settings=CONTEXT)
@click.version_option(None, "--version", package_name="pgpulse", message="%(prog)s %(version)s")
@click.option(
    "--database-url",
    metavar="DSN",
    help="PostgreSQL DSN (libpq URI or key=value), e.g. postgresql://pulse@db.internal/pulse. "
    "Unset: the embedded PostgreSQL in --data-dir, database 'postgres'. `pgpulse status` "
    "names the database in use.",
)
@click.option(
    "--database",
    metavar="NAME",
    help="Use database NAME of that server (the embedded one, or --database-url's) instead "
    "of the one the DSN names, e.g. --database pgpulse_demo after the demo.",
)
@click.option(
    "--read-database-url",
    metavar="DSN",
    help="A read replica's DSN for what people browse (status counts, jobs list, runs, the "
    "dashboard and the API's lists): a busy dashboard then costs the primary nothing; writes "
    "and every decision stay on --database-url. Unset: everything on --database-url.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_default=str(default_data_dir()),
    help="Embedded PostgreSQL data folder.",
)
@click.option(
    "--tenant",
    metavar="NAME",
    callback=valid_name("tenant"),
    help="The tenant of every tenant-scoped command (a command's own --tenant wins). "
    "Unset: 'default'.",
)
@click.option(
    "--log-level",
    default="warning",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    help="Least severe log records printed (on stderr).",
)
@click.option(
    "--log-format",
    default="text",
    type=click.Choice(["text", "json"]),
    help="text, or json: one JSON object per line, with a stable 'action' field.",
)
@click.pass_context
def main(
    ctx: click.Context,
    database_url: str | None,
    database: str | None,
    read_database_url: str | None,
    data_dir: Path | None,
    tenant: str | None,
    log_level: str,
    log_format: str,
) -> None:
    """Pulse: a distributed cron scheduler with PostgreSQL as its only moving part."""
    logs.configure(log_level, log_format)
    ctx.obj = GlobalOptions(database_url, database, data_dir, read_database_url)
    ctx.obj["tenant"] = tenant


apply_envvar_rule(main, [])


@main.command()
@click.pass_obj
def migrate(obj: dict[str, Any]) -> None:
    """Apply pending schema migrations (nodes also do this at start)."""

    async def apply() -> list[int]:
        from pgpulse.app import connect

        async with connect(obj["database_url"], data_dir=obj["data_dir"], migrate=False) as store:
            return await store.migrate()

    applied = run_command(apply())
    if applied:
        click.echo(f"applied migrations {', '.join(str(v) for v in applied)}; schema is up to date")
    else:
        click.echo("nothing to apply; schema is up to date")


# -- node --------------------------------------------------------------------------------------


@main.group()
def node() -> None:
    """Run a scheduler node."""


def load_app(spec: str | None, app_dir: Path | None = None) -> App:
    """Import ``module:attribute`` and return the :class:`App` it names (built-ins only if
    ``None``). ``app_dir`` (``--app-dir``, the current folder by default) is put first on the
    import path, as uvicorn, gunicorn and celery do. Raises :class:`click.BadParameter`
    naming the value. A module alone (``--app myapp``) means its attribute ``app``
    (``myapp:app``), as celery's ``-A`` finds an ``app``; uvicorn requires the name."""
    from pgpulse.app import App

    if not spec:
        return App()
    folder = str((app_dir or Path()).resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module_name, _, attr = spec.partition(":")
    try:
        app = getattr(importlib.import_module(module_name), attr or "app")
    except (ImportError, AttributeError) as exc:
        # a module alone means module:app (as celery -A finds "app"; uvicorn requires the name)
        hint = "" if attr else f" (--app {module_name} means {module_name}:app)"
        raise click.BadParameter(f"cannot load {spec!r}: {exc}{hint}", param_hint="--app") from exc
    except PulseError as exc:  # a job the module declares is refused (its schedule, zone...)
        raise click.BadParameter(
            f"cannot load {spec!r}: a job it declares is refused: {exc}", param_hint="--app"
        ) from exc
    except SystemExit as exc:  # the module exits while it is imported: say so, exit 2
        raise click.BadParameter(
            f"cannot load {spec!r}: it called sys.exit({exc.code!r}) while imported{_where(exc)} "
            "(--log-level debug shows the traceback)",
            param_hint="--app",
        ) from exc
    except Exception as exc:  # the module's own code raised (or does not compile): where
        raise click.BadParameter(
            f"cannot load {spec!r}: {type(exc).__name__}: "
            f"{exc.msg if isinstance(exc, SyntaxError) else exc}{_where(exc)} "
            "(--log-level debug shows the traceback)",
            param_hint="--app",
        ) from exc
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a pgpulse.App", param_hint="--app")
    return app


def _where(exc: BaseException) -> str:
    """`` (file:line)`` of the user's code that raised ``exc`` (a syntax error's own place, or
    the innermost frame outside Pulse and the standard library), or ``""``."""
    import traceback

    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}:{exc.lineno})"
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "importlib" not in f.filename and "/pgpulse/" not in f.filename
    ]
    log.debug("loading the app failed", exc_info=exc)
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _web_address(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--dashboard-url``: an http or https address with a host (alerts link to it), or
    ``None``. Raises :class:`click.BadParameter` naming the value."""
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(
            f"{value!r} is not an http or https address such as https://pulse.example.com"
        )
    return value


def _pool_dsn(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--pool-database-url``: a DSN libpq can read, or ``None`` (also for an empty one).
    Raises :class:`click.BadParameter` naming the value, its password redacted."""
    if not value:
        return None
    from pgpulse.db.database import primary_dsn

    try:
        primary_dsn(value)
    except InvalidInput as exc:
        raise click.BadParameter(exc.message.removeprefix("database_url ")) from None
    return value


def _shell_env_names(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """``--shell-env``: names :func:`pgpulse.node.builtins.check_shell_env` takes; a refused one is
    :class:`click.BadParameter` naming it and why (exit 2)."""
    from pgpulse.node.builtins import check_shell_env

    try:
        return check_shell_env(value)
    except InvalidInput as exc:
        raise click.BadParameter(exc.message.removeprefix("shell_env ")) from None


@node.command("run")
@click.option(
    "--app",
    help="module:attribute of your pgpulse.App (module alone: its attribute app).",
)
@click.option(
    "--app-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path(),
    show_default="the current folder",
    help="Folder put first on the import path before --app is imported.",
)
@click.option(
    "--pool-database-url",
    metavar="DSN",
    callback=_pool_dsn,
    help="A DSN for the node's connection pool only, through PgBouncer in transaction mode; "
    "its heartbeat, claim and LISTEN sessions stay on --database-url (direct, or a pooler in "
    "session mode). Unset: the pool uses --database-url.",
)
@click.option(
    "--node-id",
    show_default="host-pid-random",
    callback=valid_name("node_id"),  # as a job's name: status, logs and alerts show it
    help="Unique node id; one held by a live node is refused.",
)
@click.option(
    "--slots",
    type=click.IntRange(1, 1000),
    default=10,
    help="Worker slots: attempts run at once.",
)
@click.option(
    "--lease",
    type=Seconds(1),
    default=30,
    help="Lease granted per claim and renewal.",
)
@click.option(
    "--heartbeat",
    type=Seconds(0.1),
    default=2,
    help="Time between heartbeats / lease renewals.",
)
@click.option(
    "--poll",
    type=Seconds(0.05),
    default=5,
    help="Longest sleep between claims when nothing is known to be due.",
)
@click.option(
    "--drain-timeout",
    type=Seconds(0),
    default=10,
    help="On SIGTERM, how long running attempts may take to finish.",
)
@click.option(
    "--shell-dry-run",
    is_flag=True,
    help="shell jobs record their command instead of running it (implies --allow-shell-jobs).",
)
@click.option(
    "--shell-env",
    multiple=True,
    metavar="NAME",
    callback=_shell_env_names,
    help="A variable of this node's environment that shell commands also get (repeatable; "
    "in the variable, names separated by spaces). They get PATH, HOME, LANG, TZ, the job's env "
    "and PGPULSE_JOB... alone otherwise; PGPULSE_* and libpq's PG* variables are refused.",
)
@click.option(
    "--prune-code-jobs",
    is_flag=True,
    help="At start, delete the jobs of the --app's source (code:<app name>) that its code no "
    "longer declares, logging each; without it they are shown as declared by code no longer "
    "running.",
)
@click.option(
    "--metrics",
    "metrics_addr",
    type=HostPort(),
    metavar="HOST:PORT",
    help="Serve /metrics and /healthz here.",
)
@click.option(
    "--http",
    "http_addr",
    type=HostPort(),
    metavar="HOST:PORT",
    help="Also serve the API and dashboard here.",
)
@click.option(
    "--alert-interval",
    type=Seconds(0),
    default=10,
    help="Time between the leader's evaluations of alert rules (late, silence, cluster); "
    "0 turns alerting off on this node.",
)
@click.option(
    "--dashboard-url",
    default=None,
    callback=_web_address,
    help="The dashboard's address (https://pulse.example.com), for the links alerts carry.",
)
@click.option(
    "--split-brain-every",
    type=click.IntRange(0, 1_000_000),
    default=10,
    metavar="HEARTBEATS",
    help="With a DSN of several hosts: heartbeats between two checks for more than one host "
    "accepting writes (a split brain: the node then claims on the newest timeline's host only "
    "and fires the split_brain alert); also checked at start. 0: never.",
)
@click.option(
    "--clock-step",
    type=Seconds(1),
    default=5,
    help="How far the database's clock may move apart from the leader's monotonic clock "
    "between two heartbeats before the leader reports a step (log db_clock_step, alert "
    "db_clock).",
)
@click.option(
    "--otel",
    is_flag=True,
    help="OpenTelemetry spans per claim and attempt, with OpenTelemetry's global tracer "
    "provider (needs the otel extra: pip install 'pgpulse[otel]').",
)
@click.option(
    "--celery-broker",
    default=None,
    metavar="URL",
    help="The broker celery jobs are sent to (redis://..., amqp://user:pass@host//); with it "
    "this node runs celery jobs. Kept on the node: never stored in a job or shown in a run "
    "(needs the celery extra: pip install 'pgpulse[celery]').",
)
@click.option(
    "--celery-app",
    default=None,
    metavar="MODULE:ATTR",
    help="Instead of --celery-broker, the team's Celery app (proj.celery:app), imported at "
    "start: celery jobs are sent with its broker, routes, serializer and transport options.",
)
@click.option(
    "--rq-redis",
    default=None,
    metavar="URL",
    help="The Redis rq jobs are enqueued into (redis://host:6379/0); with it this node runs "
    "rq jobs (needs the rq extra: pip install 'pgpulse[rq]').",
)
@web_options
@click.pass_obj
def node_run(
    obj: dict[str, Any],
    /,
    app: str | None,
    app_dir: Path,
    pool_database_url: str | None,
    node_id: str | None,
    slots: int,
    lease: float,
    heartbeat: float,
    poll: float,
    drain_timeout: float,
    shell_dry_run: bool,
    shell_env: tuple[str, ...],
    prune_code_jobs: bool,
    metrics_addr: str | None,
    http_addr: str | None,
    alert_interval: float,
    dashboard_url: str | None,
    split_brain_every: int,
    clock_step: float,
    otel: bool,
    celery_broker: str | None,
    celery_app: str | None,
    rq_redis: str | None,
    **web: Any,
) -> None:
    """Run one scheduler node until SIGTERM or Ctrl-C (then drain and exit).

    --allow-shell-jobs is each node's explicit opt-in to run shell jobs (they run commands on
    this machine); without it the node claims none: they wait for a node that allows them. A
    node claims only jobs whose handler it has; a --node-id held by a live node is refused.
    """
    if prune_code_jobs and not app:
        raise click.BadParameter(
            "needs --app: it deletes the jobs of that app that its code no longer declares",
            param_hint="--prune-code-jobs",
        )
    pulse_app = load_app(app, app_dir)
    pulse_app.prune = pulse_app.prune or prune_code_jobs
    if otel:
        from pgpulse.node import tracing

        if not tracing.enable():
            raise click.BadParameter(
                "OpenTelemetry is not installed: pip install 'pgpulse[otel]'", param_hint="--otel"
            )
    options: dict[str, Any] = {
        "lease": lease,
        "heartbeat_interval": heartbeat,
        "node_ttl": max(3 * heartbeat, 2 * heartbeat + 1),
        "poll_interval": poll,
        "slots": slots,
        "drain_timeout": drain_timeout,
        "handler_options": {
            "shell_dry_run": shell_dry_run,
            "shell_env": shell_env,
            "http_allow": web_settings(**web).http_allow,  # checked at each connection
            **_queue_senders(celery_broker, celery_app, rq_redis),
        },
        "allow_shell": web["allow_shell_jobs"] or shell_dry_run,
        "alert_interval": alert_interval,
        "dashboard_url": dashboard_url,
        "split_brain_every": split_brain_every,
        "clock_step": clock_step,
    }
    if node_id:
        options["node_id"] = node_id
    from pgpulse.node.engine import NodeConfig

    try:
        config = NodeConfig(**options)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--lease") from exc
    tune_collector()
    if metrics_addr or http_addr:
        from pgpulse.cli.serve import run_node_with_web  # FastAPI, uvicorn: only when serving

        run_node_with_web(
            pulse_app,
            obj,
            config,
            metrics=metrics_addr,
            http=http_addr,
            settings=web_settings(**web),
            on_started=_announcer(embedded=obj["embedded"]),
            pool_database_url=pool_database_url,
        )
    else:
        run_command(
            pulse_app.run_node(
                obj["database_url"],
                data_dir=obj["data_dir"],
                config=config,
                on_started=_announcer(embedded=obj["embedded"]),
                pool_database_url=pool_database_url,
            )
        )


def _queue_senders(
    celery_broker: str | None, celery_app: str | None, rq_redis: str | None
) -> dict[str, Any]:
    """The task-queue clients of ``node run``'s options, checked now (a URL that does not
    parse, an app that does not import: one line, exit 2, before the node starts)."""
    senders: dict[str, Any] = {}
    if celery_broker and celery_app:
        raise Refused("--celery-broker and --celery-app cannot be given together: give one")
    try:
        if celery_broker:
            from pgpulse.node.celery_handler import CelerySender

            senders["celery"] = CelerySender.for_broker(celery_broker)
        elif celery_app:
            from pgpulse.node.celery_handler import CelerySender

            senders["celery"] = CelerySender.for_app(celery_app)
        if rq_redis:
            from pgpulse.node.rq_handler import RqSender

            senders["rq"] = RqSender(rq_redis)
    except InvalidInput as exc:
        hint = {"celery_broker": "--celery-broker", "celery_app": "--celery-app"}
        raise click.BadParameter(
            str(exc), param_hint=hint.get(exc.field or "", "--rq-redis")
        ) from None
    return senders


def _announcer(*, embedded: bool) -> Callable[[Node, str], None]:
    """What ``node run`` prints once its node has started, at every log level: one line on
    stderr (node id, slots, the database as ``status`` names it), so that a silent node is
    seen to work. Not in ``--log-format json``, whose stderr holds JSON alone (its INFO record
    ``node_started`` says the same)."""

    def announce(node: Node, where: str) -> None:
        if not logs.prints_text():
            return
        database = f"{where} (embedded)" if embedded else where
        quiet = not logging.getLogger().isEnabledFor(logging.INFO)
        click.echo(
            f"node {node.node_id} started with {plural(node.config.slots, 'slot')} on "
            f"{database}{'; --log-level info shows more' if quiet else ''}",
            err=True,
        )

    return announce


# -- jobs --------------------------------------------------------------------------------------


@main.group()
def job() -> None:
    """Create, list, show, pause, resume, trigger, backfill and delete jobs."""


tenant_option = cli_tenant_option()
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


#: Where ``job create`` allows a private http-job target: its own flag (the refusal names it).
JOB_CREATE_ALLOW = "this command's --allow-private-target"


def _option(entry: DefinitionField) -> Callable[[F], F]:
    """``pgpulse job create``'s option for a field of the job definition model: its flag, its
    help, its default, and a type by its kind (the values are checked by
    :meth:`JobSpec.create`, as every path's)."""
    kwargs: dict[str, Any] = {"help": entry.doc}
    if entry.required:
        kwargs["required"] = True
    elif entry.kind == "json":
        kwargs["default"] = json.dumps(entry.default)
    elif entry.kind == "names":
        kwargs["multiple"] = True
        kwargs["help"] = f"{entry.doc} Repeat for several."
    else:
        kwargs["default"] = entry.default
    if entry.kind == "choice":
        kwargs["type"] = click.Choice(entry.choices)
    elif entry.kind == "int":
        kwargs["type"] = int
    elif entry.kind == "seconds":
        kwargs["type"] = Seconds()
        if isinstance(entry.default, float) and entry.default.is_integer():
            kwargs["default"] = int(entry.default)  # --help: "default: 60"; the type makes 60.0
    assert entry.flag is not None
    return click.option(entry.flag, entry.name, **kwargs)


def definition_options(command: F) -> F:
    """The options of the job definition model's fields that have a flag
    (:mod:`pgpulse.core.definition`), in the model's order."""
    for entry in reversed([e for e in job_fields(JobSpec) if e.flag is not None]):
        command = _option(entry)(command)
    return command


@job.command("create")
@click.argument("name", callback=valid_name("name"))
@tenant_option
@definition_options
@click.option(
    "--allow-private-target",
    is_flag=True,
    help="Store an http job whose host is loopback, private, link-local or unresolvable, or "
    "that follows redirects (the API refuses those unless its --http-allow list names the "
    "host). Its runs reach that host only from nodes whose --http-allow list names it.",
)
@json_option
@with_store(migrate=True)
async def job_create(
    store: Store, name: str, allow_private_target: bool, as_json: bool, **fields: Any
) -> None:
    """Create or update (upsert) job NAME: the whole definition, so an option left out takes
    its default again (the line says which fields an update changed).

    An http job's URL is checked as the API checks it (public addresses only, every address
    its host resolves to); --allow-private-target is the operator's explicit exception.
    """
    spec = JobSpec.create(name=name, source="cli", **fields)
    private = None
    if spec.handler == "http":
        from pgpulse.core.policy import WebSettings, check_http_target  # no web framework

        try:
            await check_http_target(spec.payload, WebSettings(), allowed_flag=JOB_CREATE_ALLOW)
        except InvalidInput as exc:
            if not allow_private_target:
                raise
            private = urlsplit(str(spec.payload.get("url", ""))).hostname or exc.value
    try:
        before: int | None = (await store.get_job(spec.tenant, name))["revision"]
    except JobNotFound:
        before = None
    [(job_id, created)] = await store.upsert_jobs([spec], actor=cli_actor())
    row = await store.get_job(spec.tenant, name)
    changed: list[str] = []
    if created:
        action, what = "created", f"created job {name} (id {job_id})"
    elif row["revision"] == before:  # the same definition: nothing was written
        action = "unchanged"
        what = f"job {name} unchanged (id {job_id}): its definition is the one given"
    else:  # an upsert of the whole definition: say what it changed (omitted options too)
        [latest] = await store.job_history(spec.tenant, name, limit=1)
        changed = sorted(latest["changes"] or {})
        action = "updated"
        what = f"updated job {name} (id {job_id}; changed: {', '.join(changed) or 'its source'})"
    lines = [f"{what}; " + await _next_to_run(store, row)]
    if private is not None:
        lines.append(
            f"note: its runs reach {private} only from nodes started with an --http-allow "
            "list that names it (pgpulse node run --http-allow HOST)"
        )
    if spec.handler == "shell":
        from pgpulse.cli.sources import shell_wait_note

        note = await shell_wait_note(store, 1)
        if note is not None:
            lines.append(note)
    result = {
        "id": job_id,
        "tenant": spec.tenant,
        "name": name,
        "action": action,
        "changed": changed,
        "revision": row["revision"],
        "status": row["status"],
        "scheduled_for": None if row["status"] == "completed" else row["scheduled_for"],
        "notes": lines[1:],
    }
    emit(as_json, result, *lines)


async def _next_to_run(store: Store, row: dict[str, Any]) -> str:
    """``next occurrence T`` for job ``row``: the occurrence that will run, after its exclusion
    calendars (:func:`pgpulse.core.limits.first_to_run`), saying which calendar skips the one
    before it (its ``scheduled_for``, which a claim records as skipped)."""
    current = row["scheduled_for"]
    if row["status"] == "completed":
        return "completed: no occurrence to come"
    if not row["calendars"]:
        return f"next occurrence {current.isoformat()}"
    from pgpulse.core.calendars import from_definitions
    from pgpulse.core.limits import first_to_run

    calendars = from_definitions(
        c for c in await store.list_calendars(row["tenant"]) if c["name"] in row["calendars"]
    )
    schedule = parse_schedule(row["schedule"], row["timezone"])
    run, reason = first_to_run(schedule, calendars, current, anchor=row["anchor_at"])
    if reason is None:
        return f"next occurrence {current.isoformat()}"
    if run is None:
        return f"no occurrence will run: {reason} skips every one from {current.isoformat()}"
    if row["not_after"] is not None and run > row["not_after"]:
        return (
            f"no occurrence will run: {reason} skips every one from {current.isoformat()} "
            f"to its not_after {row['not_after'].astimezone(UTC).isoformat()}"
        )
    return (
        f"next occurrence {run.isoformat()} ({reason} skips the ones from {current.isoformat()} "
        "until then)"
    )


@job.command("list")
@tenant_option
@click.option(
    "--all-tenants", is_flag=True, help="Every tenant's jobs (a tenant column when several)."
)
@json_option
@with_store()
async def job_list(store: Store, tenant: str, all_tenants: bool, as_json: bool) -> None:
    """List jobs of a tenant (when it has none, says which tenants do), or of every tenant. A
    completed job has no next occurrence: its scheduled_for is '-' (its last one in --json)."""
    rows = await store.list_jobs(None if all_tenants else tenant)
    if not rows and not as_json and not all_tenants:
        others = sorted({row["tenant"] for row in await store.list_jobs(None)})
        if others:
            click.echo(
                f"(none in tenant {tenant!r}; tenants with jobs: {', '.join(others)}: "
                "use --tenant NAME or --all-tenants)"
            )
            return
    if not as_json:  # a completed job's row keeps its last occurrence; none is to come
        rows = [{**r, "scheduled_for": "-"} if r["status"] == "completed" else r for r in rows]
        # a pause's end, wherever its status shows (as `job show` and the API do)
        rows = [
            {**r, "status": f"paused until {r['paused_until'].isoformat()}"}
            if r["status"] == "paused" and r.get("paused_until") is not None
            else r
            for r in rows
        ]
        # a pause requested while the job ran: it pauses when its run ends
        rows = [
            {**r, "status": pending_pause(r["status"], r["paused_until"])}
            if r.get("pause_requested")
            else r
            for r in rows
        ]
    several = all_tenants and len({row["tenant"] for row in rows}) > 1
    print_records(
        rows,
        as_json,
        [
            *(["tenant"] if several else []),
            "name",
            "schedule",
            "timezone",
            "handler",
            "catch_up",
            "status",
            "pause_reason",
            "scheduled_for",
            "last_outcome",
            "last_error",
        ],
        shorten={"last_error"},
    )


attempts_option = click.option(
    "--attempts",
    "with_attempts",
    is_flag=True,
    help="Under each run, every attempt: node, start, end, outcome, error.",
)


@job.command("show")
@click.argument("name", callback=valid_name("name"))
@tenant_option
@attempts_option
@json_option
@with_store()
async def job_show(
    store: Store, name: str, tenant: str, with_attempts: bool, as_json: bool
) -> None:
    """Show job NAME: definition, state, current occurrence, next five occurrences in its own
    time zone, last five runs with their output (--attempts: and every attempt). --json prints
    the job as the API's GET /api/v1/jobs/{id} does."""
    # The API's own reading, presentation and schema of a job (pydantic; no web framework).
    from pgpulse.web.reads import Reads
    from pgpulse.web.service import present_job

    row = await Reads(store.reads).job((await store.get_job(tenant, name))["id"], tenant=tenant)
    if row is None:  # deleted in between
        raise JobNotFound(tenant, name)
    job = present_job(row)
    if as_json:
        try:
            from pgpulse.web.schemas import Job  # pydantic: the web extra
        except ModuleNotFoundError:  # a light install: the same fields, written as the API would
            click.echo(json.dumps(job, default=to_json, indent=2))
            return
        click.echo(json.dumps(Job.model_validate(job).model_dump(mode="json"), indent=2))
        return
    stale = {(j["tenant"], j["name"]) for j in await store.stale_code_jobs(tenant)}
    if (tenant, name) in stale:
        job["source"] += " (declared by code no longer running)"
    print_job(job, await store.list_runs(tenant=tenant, name=name, limit=5), attempts=with_attempts)


@job.command("history")
@click.argument("name", callback=valid_name("name"))
@tenant_option
@click.option(
    "--limit", type=click.IntRange(1, 10000), default=50, help="At most this many changes."
)
@json_option
@with_store()
async def job_history(store: Store, name: str, tenant: str, limit: int, as_json: bool) -> None:
    """The audit trail of job NAME, newest first: when (the database's clock), what (create,
    update, pause, resume, trigger, backfill, skip, unskip, delete), the revision, source, actor
    and changed fields. A deleted job's trail is kept until pruned with the runs' retention."""
    from pgpulse.cli.sources import print_history

    await print_history(store, name, tenant=tenant, limit=limit, as_json=as_json)


def _local(instant: datetime, timezone: str) -> str:
    from pgpulse.core.zones import load_zone

    return instant.astimezone(load_zone(timezone)).isoformat()


def _followers_note(name: str, followers: list[str]) -> str:
    """What ``job delete`` says of the jobs whose ``after`` named the deleted job ``name``: they
    are not changed with it (docs/chains.md), so they wait for its runs from now on."""
    one = len(followers) == 1
    return (
        f"note: {', '.join(followers)} {'follows' if one else 'follow'} {name} (after) and "
        f"{'waits' if one else 'wait'} for its runs from now on (pgpulse lint reports it as an "
        "upstream error)"
    )


def _state_command(verb: str, doc: str) -> None:
    @job.command(verb, help=doc)
    @click.argument("name", callback=valid_name("name"))
    @tenant_option
    @json_option
    @with_store()
    async def command(store: Store, name: str, tenant: str, as_json: bool) -> None:
        actor = cli_actor()
        if verb == "delete":
            row = await store.get_job(tenant, name)
            await store.delete_job(tenant, name, actor=actor)
            ran = row["locked_by"] if row["status"] == "running" else None
            # after names jobs by name: a follower is not changed with its upstream
            followers = await store.followers(tenant, name)
            emit(
                as_json,
                {
                    "id": row["id"],
                    "tenant": tenant,
                    "name": name,
                    "action": "deleted",
                    "cancelled_on_node": ran,
                    "followers": followers,
                },
                f"deleted {name}"
                + (
                    f" while it ran on node {ran}: that node cancels the attempt "
                    "(its writes change nothing)"
                    if ran
                    else ""
                ),
                *([_followers_note(name, followers)] if followers else []),
            )
        else:
            raise AssertionError(verb)  # pragma: no cover


@job.command("pause")
@click.argument("name", callback=valid_name("name"))
@tenant_option
@click.option(
    "--until",
    default=None,
    help="Resume by itself then: a duration from now (2h, 90m, 1d) or an instant (ISO 8601; "
    "without an offset, in the job's zone); the occurrences inside the pause are then "
    "recorded as skipped.",
)
@click.option(
    "--reason",
    default=None,
    help="Why: shown wherever the status is (a paused job keeps its reason when none is "
    "given; '' clears it).",
)
@click.option(
    "--cancel",
    is_flag=True,
    help="Stop what the job runs now: its run (and any trigger or backfill of it running) is "
    "cancelled, recorded as cancelled, and the job paused past that occurrence. Without it a "
    "running job pauses when its run ends.",
)
@json_option
@with_store()
async def job_pause(
    store: Store,
    name: str,
    tenant: str,
    until: str | None,
    reason: str | None,
    cancel: bool,
    as_json: bool,
) -> None:
    """Pause job NAME: it is not claimed until resumed. Idempotent: pausing a paused job sets the
    --until or --reason given and keeps the other. A running job finishes its run (a retry
    included), which is recorded, and then pauses; no new occurrence starts. --cancel stops the
    run now instead."""
    at = None
    if until is not None:
        zone = (await store.get_job(tenant, name))["timezone"]
        at = pause_until(until, zone, await store.db_now())
    done = await store.pause_job(
        tenant, name, until=at, reason=reason, cancel=cancel, actor=cli_actor()
    )
    row = await store.get_job(tenant, name)
    # the pause as it now is: a re-pause keeps the until or the reason it was not given
    until_now, reason_now = row["paused_until"], row["pause_reason"]
    why = f" ({reason_now})" if reason_now else " (no reason)" if reason == "" else ""
    what = f"{name}{f' until {until_now.isoformat()}' if until_now else ''}{why}"
    line = pause_note(name, done)  # a requested pause, or runs cancelled
    if line is None and done.changed:
        line = f"paused {what}"
    elif line is None and done.written:
        line = f"{name} was paused already; now paused {what}"
    elif line is None:
        line = unchanged_note("pause", name, "paused")
    result = {
        "id": row["id"],
        "tenant": tenant,
        "name": name,
        # whether this command wrote anything (a new pause, or a paused job's new until/reason)
        "changed": done.written,
        "status": row["status"],
        "pause_requested": row["pause_requested"],
        "paused_until": row["paused_until"],
        "pause_reason": row["pause_reason"],
        # a requested pause: the run it waits for
        "run_id": done.run_id,
        "node_id": done.node_id,
        "cancelled_runs": [
            {
                "run_id": run.run_id,
                "kind": run.kind,
                "scheduled_for": run.scheduled_for,
                "node_id": run.node_id,
            }
            for run in done.cancelled
        ],
        "scheduled_for": None if row["status"] == "completed" else row["scheduled_for"],
        "message": line,
    }
    emit(as_json, result, line)


@job.command("resume")
@click.argument("name", callback=valid_name("name"))
@tenant_option
@click.option(
    "--catch-up",
    type=click.Choice(RESUME_MODES),
    default="skip",
    help="The occurrences inside the pause: skip (not these), once (run once, as the newest), "
    "backfill (run each, oldest first).",
)
@json_option
@with_store()
async def job_resume(store: Store, name: str, tenant: str, catch_up: str, as_json: bool) -> None:
    """Resume job NAME. Idempotent: a job that is not paused is left as it is. A running job
    whose pause is requested (job pause) is not paused: the request is withdrawn."""
    before = await store.get_job(tenant, name)
    changed = await store.resume_job(tenant, name, catch_up=catch_up, actor=cli_actor())
    row = await store.get_job(tenant, name)
    # the store withdrew a pause requested while the job ran: the job was never paused
    withdrawn = changed and before["pause_requested"] and before["status"] != "paused"
    if withdrawn:
        emit(
            as_json,
            {
                "id": row["id"],
                "tenant": tenant,
                "name": name,
                "changed": True,
                "status": row["status"],
                "catch_up": catch_up,
                "scheduled_for": row["scheduled_for"],
                "due_now": False,
                "runs_now": None,
                "pause_withdrawn": True,
            },
            withdrawn_note(name),
        )
        return
    held = row["scheduled_for"]
    # once and backfill hold a missed occurrence: it is due, and runs now, not "next"; which
    # one runs is the claim's decision (once: the newest inside the pause)
    due = held <= await store.db_now()
    runs: datetime | None = held
    if changed and due and row["resume_mode"] and row["resumed_at"]:
        runs = resumed_run(
            parse_schedule(row["schedule"], row["timezone"]),
            held,
            mode=row["resume_mode"],
            resumed_at=row["resumed_at"],
            not_after=row["not_after"],
            anchor=row["anchor_at"],
        )
    result = {
        "id": row["id"],
        "tenant": tenant,
        "name": name,
        "changed": bool(changed),
        "status": row["status"],
        "catch_up": catch_up,
        "scheduled_for": held,
        "due_now": bool(changed) and due,
        # the missed occurrence that runs now (once: the newest inside the pause)
        "runs_now": runs if changed and due else None,
        "pause_withdrawn": False,
    }
    if not changed:
        emit(as_json, result, unchanged_note("resume", name, row["status"]))
        return
    mode = "" if catch_up == "skip" else f" ({catch_up})"
    if runs is None:
        line = f"resumed {name}{mode}; no occurrence inside its window runs"
    elif due:
        line = f"resumed {name}{mode}; missed occurrence {runs.isoformat()} runs now"
    else:
        line = f"resumed {name}{mode}; next occurrence {held.isoformat()}"
    emit(as_json, result, line)


_state_command(
    "delete", "Delete job NAME and its run history (its audit trail stays: job history)."
)

from pgpulse.cli import limits as cli_limits  # noqa: E402, F401 - registers pgpulse limit
from pgpulse.cli import run_control as cli_run_control  # noqa: E402, F401 - registers job trigger and job backfill

# -- schedules and crontabs ------------------------------------------------------------------


@main.group()
def schedule() -> None:
    """Check schedule arithmetic."""


@schedule.command("next", epilog="\b\n" + SCHEDULE_HELP)
@click.argument("expression")
@click.option("--tz", "timezone", default="UTC", help="IANA time zone.")
@click.option(
    "--count", type=click.IntRange(1, 1000), default=5, help="How many occurrences to print."
)
@click.option(
    "--after",
    type=IsoDateTime(),
    metavar="DATETIME",
    help="Start instant, ISO 8601 (2026-12-01T10:00, 2026-12-01 10:00:30.357+02:00, "
    "...Z, or a date), UTC if no offset. An @every schedule is anchored there, to the "
    "microsecond: give a job's anchor_at to see its grid.",
    show_default="now, to the whole second",
)
@json_option
def schedule_next(
    expression: str, timezone: str, count: int, after: datetime | None, as_json: bool
) -> None:
    """Print the next occurrences of EXPRESSION, in UTC and in its time zone (one column when
    the zone is UTC under any of its names)."""
    # whole-second default: an @every grid is anchored at the cursor, to the microsecond
    cursor = after or datetime.now(UTC).replace(microsecond=0)
    if cursor.tzinfo is None:
        cursor = cursor.replace(tzinfo=UTC)
    try:  # a zone refused is --tz's (as job create words it)
        parsed = parse_schedule(expression, timezone)
        check_instant_range("after", cursor)
    except PulseError as exc:
        as_option_refusal(click.get_current_context(), exc)
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    one_column = is_utc(timezone)  # Europe/London keeps its column in winter too
    found: list[datetime] = []
    if not as_json:
        click.echo(f"{parsed.describe()}")
    try:
        for following in _occurrences(parsed, cursor, count):
            cursor = following
            found.append(following)
            if as_json:
                continue
            shown = following.isoformat()
            if len(found) == 1:  # the columns' header, over the first occurrence
                click.echo("UTC" if one_column else f"{'UTC':<{len(shown)}}  {timezone}")
            click.echo(shown if one_column else f"{shown}  {_local(following, timezone)}")
    except PulseError as exc:  # e.g. no occurrence before the year 10000
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except OverflowError:  # an occurrence whose local time in the zone is past 9999-12-31
        click.echo(
            f"error: schedule {expression!r}: the occurrence after {cursor.isoformat()} is past "
            f"the year 9999 in time zone {timezone}",
            err=True,
        )
        sys.exit(2)
    # a one-off schedule: nothing after its instant; an @after one: the rest follow the runs
    ended = len(found) < count and parsed.delay is None
    if as_json:
        occurrences = [{"utc": to_json(t), "local": _local(t, timezone)} for t in found]
        emit(
            True,
            {
                "schedule": expression,
                "timezone": timezone,
                "description": parsed.describe(),
                "occurrences": occurrences,
                "ended": ended,
            },
        )
    elif ended:
        click.echo(f"no occurrence after {cursor.isoformat()}: the schedule has ended")
    elif parsed.delay is not None:
        click.echo(
            "the first for a job created then; each later one follows the previous run's end"
        )


def _occurrences(parsed: Schedule, after: datetime, count: int) -> Iterator[datetime]:
    """The first ``count`` occurrences of ``parsed`` after ``after`` (UTC instants), fewer when
    the schedule ends; an ``@every`` grid anchored at ``after``; an ``@after`` schedule's first
    only (the others follow the runs' ends).

    Raises:
        PulseError: no occurrence before the year 10000.
        OverflowError: an occurrence's local time is past 9999-12-31.
    """
    cursor = after
    for _ in range(1 if parsed.delay is not None else count):
        following = parsed.next_after_or_none(cursor, anchor=after)
        if following is None:
            return
        yield following
        cursor = following


@main.group()
def crontab() -> None:
    """Import crontab files."""


def _one_format(
    _ctx: click.Context, _param: click.Parameter, given: tuple[bool, ...]
) -> bool | None:
    """The crontab format asked for (``None``: from the file's path); both asked for are
    refused, whatever their order."""
    if len(set(given)) > 1:
        raise Refused("--system and --user-format cannot be given together: give one of them")
    return given[0] if given else None


@crontab.command("import")
@click.argument(
    "path", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE"
)
@tenant_option
@click.option(
    "--system/--user-format",
    # multiple, so that both given are seen (and refused) rather than the last one winning
    multiple=True,
    callback=_one_format,
    show_default="system for /etc/crontab and /etc/cron.d/*, user for any other file",
    help="System format (a user field before the command) or user format.",
)
@click.option(
    "--catch-up",
    type=click.Choice(CATCH_UP_POLICIES),
    default="skip",
    help="Catch-up policy of the imported jobs.",
)
@click.option(
    "--sync",
    is_flag=True,
    help="Make the database match the file: an edited line updates its job in place (history "
    "kept), a deleted line deletes its job, untouched lines change nothing.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan of the same command (with --sync: the sync's); write nothing.",
)
@json_option
@with_store(migrate=_unless_dry_run)
async def crontab_import(
    store: Store,
    path: Path,
    tenant: str,
    system: bool | None,
    catch_up: CatchUp,
    sync: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Turn the lines of a crontab file into shell jobs (idempotent).

    Every line is imported or refused with file:line and the reason. If any line is refused,
    nothing is written and the command exits 2. The file's jobs are one source,
    crontab:<absolute path>; --sync reconciles that source with the file.
    """
    from pgpulse.cli.sources import import_crontab

    await import_crontab(
        store,
        path,
        tenant=tenant,
        system=system,
        catch_up=catch_up,
        sync=sync,
        dry_run=dry_run,
        as_json=as_json,
    )


@main.command("apply")
@click.argument(
    "paths",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE...",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option(
    "--prune",
    is_flag=True,
    help="Delete the jobs of each file's source that the file no longer defines (never jobs "
    "of other sources).",
)
@click.option(
    "--exit-code",
    is_flag=True,
    help="Exit 1 when the plan is not empty (something to create, update or delete): for CI, "
    "with --dry-run.",
)
@json_option
@with_store(migrate=_unless_dry_run)
async def apply(
    store: Store,
    paths: tuple[Path, ...],
    dry_run: bool,
    prune: bool,
    exit_code: bool,
    as_json: bool,
) -> None:
    """Make the jobs defined in TOML files FILE... exist as defined, in one transaction.

    Each file is a source (apply:<its stem>, or its `source = "name"`); the plan shows per
    job create, update (field by field), unchanged, or (--prune) delete. A refused file or
    field writes nothing (exit 2, file:line and field). Concurrent applies of one source run
    one after the other.
    """
    from pgpulse.cli.sources import apply_files

    await apply_files(
        store, paths, dry_run=dry_run, prune=prune, exit_code=exit_code, as_json=as_json
    )


# -- status ------------------------------------------------------------------------------------


#: ``status --check``'s default --max-lag, seconds.
DEFAULT_MAX_LAG = 60.0


@main.command()
@json_option
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 (saying why on stderr) when no node is alive or a due job is later than "
    "--max-lag: for monitoring scripts and container health checks.",
)
@click.option(
    "--max-lag",
    type=Seconds(0),
    default=None,
    show_default=f"{DEFAULT_MAX_LAG:g}",
    help="How late a due job may be for --check to pass (implies --check).",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="List every node, also those lost or stopped for over an hour (else one line).",
)
@click.pass_obj
def status(
    obj: dict[str, Any], as_json: bool, check: bool, max_lag: float | None, show_all: bool
) -> None:
    """The headline (live nodes, leader, due jobs, database), then nodes, shards, job counts
    and the current lag. A node silent for longer than its time-to-live is 'lost'. A lost or
    stopped node is listed for an hour after its last heartbeat, then counted in one line
    (--all lists it); the leader forgets it after a day, unless a lease still names it."""

    async def read() -> tuple[str, list[dict[str, Any]], dict[str, Any]] | tuple[str, str]:
        from pgpulse.app import connect
        from pgpulse.db.database import describe
        from pgpulse.db.registry import DEFAULT_NODE_TTL

        async with connect(
            obj["database_url"],
            data_dir=obj["data_dir"],
            read_url=obj["read_database_url"],
            migrate=False,  # status reads; a database without the schema is its headline
        ) as store:
            async with store.pool.connection() as conn:
                where = describe(conn.info)
            try:
                await store.require_schema()
            except SchemaMissing as exc:
                return where, str(exc)
            nodes = await store.cluster_nodes(ttl=DEFAULT_NODE_TTL)
            counts = await store.cluster_counts(ttl=DEFAULT_NODE_TTL)
            counts["stale_code_jobs"] = await store.stale_code_jobs()
            if obj["database_url"]:  # several hosts: each is asked whether it takes writes
                from pgpulse.node.split_brain import status_line

                counts["split_brain"] = await status_line(obj["database_url"])
            return where, nodes, counts

    found = run_command(read())
    database = f"{found[0]} (embedded)" if obj["embedded"] else found[0]
    checking = check or max_lag is not None
    if len(found) == 2:
        print_schema_missing(found[1], as_json, database=database, checking=checking)
        if checking:
            click.echo("check failed: no Pulse schema", err=True)
            sys.exit(1)
        return
    _, nodes, counts = found
    problems = None
    if checking:
        problems = status_problems(nodes, counts, DEFAULT_MAX_LAG if max_lag is None else max_lag)
    print_status(nodes, counts, as_json, database=database, problems=problems, show_all=show_all)
    if problems:
        click.echo(f"check failed: {'; '.join(problems)}", err=True)
        sys.exit(1)


@main.command()
@click.argument("job_name", required=False, callback=valid_name("name"))
@cli_tenant_option("Only this tenant's runs.")
@click.option(
    "--all-tenants", is_flag=True, help="Every tenant's runs (a tenant column when several)."
)
@click.option("--limit", type=click.IntRange(1, 10000), default=30, help="At most this many runs.")
@attempts_option
@click.option(
    "--follow",
    is_flag=True,
    help="Keep printing attempts as they end, one line each (with --json one object a line), "
    "until Ctrl-C or SIGTERM: for watching a deploy.",
)
@json_option
@with_store()
async def runs(
    store: Store,
    job_name: str | None,
    tenant: str,
    all_tenants: bool,
    limit: int,
    with_attempts: bool,
    follow: bool,
    as_json: bool,
) -> None:
    """Recent runs (of JOB_NAME, if given), the most recently claimed first (run id order: an
    occurrence claimed late, after a take-over or a catch-up, comes before earlier claims of
    later occurrences), with their output's first line (the whole of it in --json) and lag from
    the first attempt; --attempts lists every attempt under its run (--json always has them, as
    attempt_log).

    A skipped row may stand for many consecutive occurrences (column occurrences): from its
    scheduled_for through last_scheduled_for (shown with --json). --all-tenants lists the runs
    of every tenant, with a tenant column when more than one has runs here.
    """
    tenants: str | None = None if all_tenants else tenant
    if job_name is not None and not any(
        j["name"] == job_name for j in await store.list_jobs(tenants)
    ):
        raise JobNotFound(tenants, job_name)
    if follow:
        from pgpulse.cli.follow import follow_runs

        await follow_runs(store, tenant=tenants, name=job_name, as_json=as_json)
        return
    rows = await store.list_runs(tenant=tenants, name=job_name, limit=limit)
    if with_attempts and not as_json:
        print_runs_with_attempts(rows)
        return
    # Runs of several tenants name their tenant: the same job name may be in each.
    several = all_tenants and len({row["tenant"] for row in rows}) > 1
    print_records(
        rows,
        as_json,
        [
            *(["tenant"] if several else []),
            "name",
            "scheduled_for",
            "outcome",
            "kind",
            "occurrences",
            "attempts",
            "node_id",
            "lag",
            "duration",
            "error",
            "output",
        ],
        shorten={"error", "output"},
    )


# -- embedded database -------------------------------------------------------------------------


@main.group()
def db() -> None:
    """Manage the embedded PostgreSQL."""


@db.command("url")
@click.pass_obj
def db_url(obj: GlobalOptions) -> None:
    """Start the embedded server (it keeps running until `pgpulse db stop`); print its DSN."""
    click.echo(obj.resolved(lambda: start_embedded(obj["data_dir"], keep_running=True)))


@db.command("stop")
@click.pass_obj
def db_stop(obj: dict[str, Any]) -> None:
    """Stop the embedded server now."""
    stopped = stop_embedded(obj["data_dir"])
    click.echo("stopped" if stopped else "not running")


from pgpulse.cli import lint as cli_lint  # noqa: E402, F401 - registers pgpulse lint
