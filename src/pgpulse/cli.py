"""The ``pgpulse`` command. A thin edge: it parses options and calls the library.

Every option has a ``PGPULSE_*`` environment fallback (shown in ``--help``). Errors print one
line on stderr and exit non-zero: 2 for refused input, 3 for a database that does not answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from pgpulse import logs
from pgpulse.app import App, connect
from pgpulse.crontab import entry_to_spec, parse_crontab
from pgpulse.embedded import default_data_dir, start_embedded, stop_embedded
from pgpulse.engine import NodeConfig
from pgpulse.errors import JobNotFound, PulseError
from pgpulse.jobs import CATCH_UP_POLICIES, CatchUp, JobSpec
from pgpulse.report import print_records, print_status, run_command, to_json, tune_collector
from pgpulse.schedule import SCHEDULE_HELP, parse_schedule
from pgpulse.store import Store
from pgpulse.web.commands import run_node_with_web, web_options, web_settings

T = TypeVar("T")
CONTEXT = {
    "auto_envvar_prefix": "PGPULSE",
    "show_default": True,
    "help_option_names": ["-h", "--help"],
}


def with_store(func: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """Decorator: open the configured database (migrated) and pass the store first."""

    @click.pass_obj
    @wraps(func)
    def command(obj: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        async def main() -> Any:
            async with connect(obj["database_url"], data_dir=obj["data_dir"]) as store:
                return await func(store, *args, **kwargs)

        return run_command(main())

    return command


class _EnvGroup(click.Group):
    """A command group whose every option shows its ``PGPULSE_*`` variable in ``--help``."""

    group_class = type  # subgroups are _EnvGroup too

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Refuse, before parsing, a command line or ``PGPULSE_*`` variable that is not UTF-8
        (Python hands such bytes over as lone surrogates, which no field may hold)."""
        if ctx.parent is None:
            _refuse_undecodable(ctx, args)
        return super().parse_args(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        for param in command.params if command is not None else ():
            if isinstance(param, click.Option):
                param.show_envvar = True
        return command


def _not_utf8(text: str) -> str | None:
    """How ``text`` (decoded with ``surrogateescape``) fails to be UTF-8, or ``None``."""
    data = text.encode("utf-8", "surrogateescape")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        shown = data.decode("utf-8", "backslashreplace")
        return f"'{shown}' is not valid UTF-8 (byte 0x{data[exc.start]:02x})"
    return None


def _refuse_undecodable(ctx: click.Context, args: list[str]) -> None:
    """One line naming the option (or argument, or variable) and its value; exit 2."""
    found = [
        (f"environment variable {name}", why)
        for name, value in os.environ.items()
        if name.startswith("PGPULSE_") and (why := _not_utf8(value))
    ]
    for index, arg in enumerate(args):
        why = _not_utf8(arg)
        if why is not None:
            before = args[index - 1] if index else ""
            found.append((before if before.startswith("-") else f"argument {index + 1}", why))
    if found:
        where, why = found[0]
        click.echo(f"error: {where}: {why}; nothing was done", err=True)
        ctx.exit(2)


@click.group(cls=_EnvGroup, context_settings=CONTEXT)
@click.option(
    "--database-url",
    envvar="PGPULSE_DATABASE_URL",
    show_envvar=True,
    help="PostgreSQL DSN. Unset: use the embedded PostgreSQL in --data-dir.",
)
@click.option(
    "--data-dir",
    envvar="PGPULSE_DATA_DIR",
    show_envvar=True,
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=f"Embedded PostgreSQL data folder [default: {default_data_dir()}].",
)
@click.option(
    "--log-level",
    envvar="PGPULSE_LOG_LEVEL",
    show_envvar=True,
    default="WARNING",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--log-format",
    envvar="PGPULSE_LOG_FORMAT",
    show_envvar=True,
    default="text",
    type=click.Choice(["text", "json"]),
    help="json: one JSON object per line.",
)
@click.pass_context
def main(
    ctx: click.Context,
    database_url: str | None,
    data_dir: Path | None,
    log_level: str,
    log_format: str,
) -> None:
    """Pulse: a distributed cron scheduler with PostgreSQL as its only moving part."""
    logs.configure(log_level, log_format)
    ctx.obj = {"database_url": database_url, "data_dir": data_dir}


@main.command()
@with_store
async def migrate(store: Store) -> None:
    """Apply pending schema migrations (nodes also do this at start)."""
    click.echo("schema is up to date")


# -- node --------------------------------------------------------------------------------------


@main.group()
def node() -> None:
    """Run a scheduler node."""


def load_app(spec: str | None) -> App:
    """Import ``module:attribute`` and return the :class:`App` it names (built-ins only if
    ``None``). Raises :class:`click.BadParameter` naming the value."""
    if not spec:
        return App()
    module_name, _, attr = spec.partition(":")
    try:
        app = getattr(importlib.import_module(module_name), attr or "app")
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot load {spec!r}: {exc}", param_hint="--app") from exc
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a pgpulse.App", param_hint="--app")
    return app


@node.command("run")
@click.option("--app", show_envvar=True, help="module:attribute of your pgpulse.App.")
@click.option("--node-id", show_envvar=True, help="Unique node id [default: host-pid-random].")
@click.option(
    "--slots",
    type=click.IntRange(1, 1000),
    default=10,
    show_envvar=True,
    help="Worker slots: attempts run at once.",
)
@click.option(
    "--lease",
    type=click.FloatRange(1),
    default=30.0,
    show_envvar=True,
    help="Lease seconds granted per claim and renewal.",
)
@click.option(
    "--heartbeat",
    type=click.FloatRange(0.1),
    default=2.0,
    show_envvar=True,
    help="Seconds between heartbeats / lease renewals.",
)
@click.option(
    "--poll",
    type=click.FloatRange(0.05),
    default=5.0,
    show_envvar=True,
    help="Longest sleep between claims when nothing is known to be due.",
)
@click.option(
    "--drain-timeout",
    type=click.FloatRange(0),
    default=10.0,
    show_envvar=True,
    help="On SIGTERM, seconds running attempts may take to finish.",
)
@click.option(
    "--shell-dry-run",
    is_flag=True,
    show_envvar=True,
    help="shell jobs record their command instead of running it (implies --allow-shell-jobs).",
)
@click.option(
    "--metrics",
    "metrics_addr",
    show_envvar=True,
    metavar="HOST:PORT",
    help="Serve /metrics and /healthz here.",
)
@click.option(
    "--http",
    "http_addr",
    show_envvar=True,
    metavar="HOST:PORT",
    help="Also serve the API and dashboard here.",
)
@web_options
@click.pass_obj
def node_run(
    obj: dict[str, Any],
    /,
    app: str | None,
    node_id: str | None,
    slots: int,
    lease: float,
    heartbeat: float,
    poll: float,
    drain_timeout: float,
    shell_dry_run: bool,
    metrics_addr: str | None,
    http_addr: str | None,
    **web: Any,
) -> None:
    """Run one scheduler node until SIGTERM or Ctrl-C (then drain and exit).

    --allow-shell-jobs is each node's explicit opt-in to run shell jobs (they run commands on
    this machine); without it the node fails the shell jobs it claims, naming the flag.
    """
    pulse_app = load_app(app)
    options: dict[str, Any] = {
        "lease": lease,
        "heartbeat_interval": heartbeat,
        "node_ttl": max(3 * heartbeat, 2 * heartbeat + 1),
        "poll_interval": poll,
        "slots": slots,
        "drain_timeout": drain_timeout,
        "handler_options": {
            "shell_dry_run": shell_dry_run,
            "http_allow": web_settings(**web).http_allow,  # checked at each connection
        },
        "allow_shell": web["allow_shell_jobs"] or shell_dry_run,
    }
    if node_id:
        options["node_id"] = node_id
    try:
        config = NodeConfig(**options)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--lease") from exc
    tune_collector()
    if metrics_addr or http_addr:
        run_node_with_web(
            pulse_app,
            obj,
            config,
            metrics=metrics_addr,
            http=http_addr,
            settings=web_settings(**web),
        )
    else:
        run_command(
            pulse_app.run_node(obj["database_url"], data_dir=obj["data_dir"], config=config)
        )


# -- jobs --------------------------------------------------------------------------------------


@main.group()
def job() -> None:
    """Create, list, show, pause, resume, trigger and delete jobs."""


tenant_option = click.option(
    "--tenant", default="default", show_envvar=True, help="The job's tenant."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@job.command("create")
@click.argument("name")
@click.option("--schedule", required=True, help="Cron expression, @macro or @every duration.")
@click.option("--handler", required=True, help="Handler name (shell, http, or your own).")
@tenant_option
@click.option("--tz", "timezone", default="UTC", help="IANA time zone of the schedule.")
@click.option("--payload", default="{}", help="JSON object handed to the handler.")
@click.option("--catch-up", type=click.Choice(CATCH_UP_POLICIES), default="skip")
@click.option(
    "--backfill-limit",
    type=int,
    default=None,
    help="With backfill: run only the newest N missed occurrences.",
)
@click.option(
    "--misfire-grace", type=float, default=60.0, help="Seconds late that still run (at least 1)."
)
@click.option("--max-attempts", type=int, default=3)
@click.option("--retry-backoff", type=float, default=1.0, help="Base retry delay, seconds.")
@click.option("--timeout", type=float, default=3600.0, help="Per-attempt limit, seconds.")
@with_store
async def job_create(store: Store, name: str, **fields: Any) -> None:
    """Create or update (upsert) job NAME."""
    spec = JobSpec.create(name=name, source="cli", **fields)
    [(job_id, created)] = await store.upsert_jobs([spec])
    row = await store.get_job(spec.tenant, name)
    click.echo(
        f"{'created' if created else 'updated'} job {name} (id {job_id}); "
        f"next occurrence {row['scheduled_for'].isoformat()}"
    )


@job.command("list")
@tenant_option
@json_option
@with_store
async def job_list(store: Store, tenant: str, as_json: bool) -> None:
    """List jobs of a tenant."""
    rows = await store.list_jobs(tenant)
    print_records(
        rows,
        as_json,
        [
            "name",
            "schedule",
            "timezone",
            "handler",
            "catch_up",
            "status",
            "scheduled_for",
            "last_outcome",
            "last_error",
        ],
    )


@job.command("show")
@click.argument("name")
@tenant_option
@json_option
@with_store
async def job_show(store: Store, name: str, tenant: str, as_json: bool) -> None:
    """Show one job, with its next five occurrences in its own time zone."""
    row = await store.get_job(tenant, name)
    schedule = parse_schedule(row["schedule"], row["timezone"])
    upcoming, cursor = [], row["scheduled_for"]
    for _ in range(5):
        upcoming.append(cursor)
        cursor = schedule.next_after(cursor, anchor=row["anchor_at"])
    row["description"] = schedule.describe()
    row["upcoming"] = [_local(t, row["timezone"]) for t in upcoming]
    if as_json:
        click.echo(json.dumps(row, default=to_json, indent=2))
        return
    for key, value in row.items():
        text = json.dumps(value) if isinstance(value, dict | list) else value
        click.echo(f"{key:>18}: {text}")


def _local(instant: datetime, timezone: str) -> str:
    from zoneinfo import ZoneInfo

    return instant.astimezone(ZoneInfo(timezone)).isoformat()


def _state_command(verb: str, doc: str) -> None:
    @job.command(verb, help=doc)
    @click.argument("name")
    @tenant_option
    @with_store
    async def command(store: Store, name: str, tenant: str) -> None:
        method = getattr(store, f"{verb}_job")
        result = await method(tenant, name)
        if verb != "trigger":
            click.echo(f"{verb}d {name}")
        elif result < await store.db_now() - timedelta(seconds=1):
            click.echo(f"{name} was already due (occurrence {result.isoformat()}); it runs now")
        else:
            click.echo(f"triggered {name}: extra occurrence {result.isoformat()}")


_state_command("pause", "Pause job NAME (an idle or failed job; not claimed until resumed).")
_state_command("resume", "Resume job NAME at its next occurrence after now.")
_state_command("trigger", "Run job NAME now, once, as an extra occurrence.")
_state_command("delete", "Delete job NAME and its run history.")


# -- schedules and crontabs ------------------------------------------------------------------


@main.group()
def schedule() -> None:
    """Check schedule arithmetic."""


#: ``--after`` formats: ISO-8601 with ``T`` or a space, optional fraction (1 to 6 digits) and
#: offset (``+02:00``, ``+0200`` or ``Z``), or a bare date.
AFTER_FORMATS = [
    f"%Y-%m-%d{sep}%H:%M:%S{frac}{zone}"
    for sep in ("T", " ")
    for frac in ("", ".%f")
    for zone in ("%z", "")
] + ["%Y-%m-%d"]


@schedule.command("next", epilog="\b\n" + SCHEDULE_HELP)
@click.argument("expression")
@click.option("--tz", "timezone", default="UTC", help="IANA time zone.")
@click.option("--count", type=click.IntRange(1, 1000), default=5)
@click.option(
    "--after",
    type=click.DateTime(AFTER_FORMATS),
    metavar="DATETIME",
    help="Start instant, ISO-8601: YYYY-MM-DD[THH:MM:SS[.ffffff][+HH:MM|Z]] ('T' or "
    "a space), UTC if no offset. An @every schedule is anchored there, to the "
    "microsecond: give a job's anchor_at to see its grid. "
    "[default: now, to the whole second]",
)
def schedule_next(expression: str, timezone: str, count: int, after: datetime | None) -> None:
    """Print the next occurrences of EXPRESSION, in UTC and in its time zone."""
    try:
        parsed = parse_schedule(expression, timezone)
    except PulseError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    # whole-second default: an @every grid is anchored at the cursor, to the microsecond
    cursor = after or datetime.now(UTC).replace(microsecond=0)
    if cursor.tzinfo is None:
        cursor = cursor.replace(tzinfo=UTC)
    anchor = cursor
    click.echo(f"{parsed.describe()}")
    try:
        for _ in range(count):
            cursor = parsed.next_after(cursor, anchor=anchor)
            click.echo(f"{cursor.isoformat()}  {_local(cursor, timezone)}")
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


@main.group()
def crontab() -> None:
    """Import crontab files."""


@crontab.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@tenant_option
@click.option("--system", is_flag=True, help="System format: a user field before the command.")
@click.option(
    "--catch-up",
    type=click.Choice(CATCH_UP_POLICIES),
    default="skip",
    help="Catch-up policy of the imported jobs.",
)
@with_store
async def crontab_import(
    store: Store, path: Path, tenant: str, system: bool, catch_up: CatchUp
) -> None:
    """Turn the lines of a crontab file into shell jobs (idempotent).

    Every line is imported or refused with file:line and the reason. If any line is refused,
    nothing is written and the command exits 2.
    """
    data = await asyncio.to_thread(path.read_bytes)  # lines that are not UTF-8 are refused
    parsed = parse_crontab(data, path=str(path), system=system)
    for error in parsed.errors:
        click.echo(f"refused {error}", err=True)
    if parsed.errors:
        click.echo(f"error: {len(parsed.errors)} line(s) refused; nothing imported", err=True)
        sys.exit(2)
    specs = [
        dataclasses.replace(entry_to_spec(e, tenant=tenant), catch_up=catch_up)
        for e in parsed.entries
    ]
    results = await store.upsert_jobs(specs)
    for spec, (_, created) in zip(specs, results, strict=True):
        click.echo(
            f"{'created' if created else 'kept   '} {spec.name}  [{spec.schedule}] "
            f"{spec.payload.get('command', '')}"
        )
    click.echo(f"imported {len(specs)} job(s) from {path}")


# -- status ------------------------------------------------------------------------------------


@main.command()
@json_option
@with_store
async def status(store: Store, as_json: bool) -> None:
    """Nodes, shards, the leader, job counts and the current lag."""
    nodes = await store.cluster_nodes(ttl=10.0)
    counts = await store.cluster_counts()
    print_status(nodes, counts, as_json)


@main.command()
@click.argument("job_name", required=False)
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--limit", type=click.IntRange(1, 10000), default=30)
@json_option
@with_store
async def runs(
    store: Store, job_name: str | None, tenant: str | None, limit: int, as_json: bool
) -> None:
    """Recent runs (of JOB_NAME, if given), newest first.

    A skipped row may stand for many consecutive occurrences (column occurrences): from its
    scheduled_for through last_scheduled_for (shown with --json).
    """
    if job_name is not None and not any(
        j["name"] == job_name for j in await store.list_jobs(tenant)
    ):
        raise JobNotFound(tenant or "any", job_name)
    rows = await store.list_runs(tenant=tenant, name=job_name, limit=limit)
    print_records(
        rows,
        as_json,
        [
            "name",
            "scheduled_for",
            "outcome",
            "occurrences",
            "attempts",
            "node_id",
            "duration",
            "error",
        ],
    )


# -- embedded database -------------------------------------------------------------------------


@main.group()
def db() -> None:
    """Manage the embedded PostgreSQL."""


@db.command("url")
@click.pass_obj
def db_url(obj: dict[str, Any]) -> None:
    """Start the embedded server (it keeps running until `pgpulse db stop`); print its DSN."""
    try:
        click.echo(start_embedded(obj["data_dir"], keep_running=True))
    except PulseError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(3)


@db.command("stop")
@click.pass_obj
def db_stop(obj: dict[str, Any]) -> None:
    """Stop the embedded server now."""
    stopped = stop_embedded(obj["data_dir"])
    click.echo("stopped" if stopped else "not running")


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("crontabs", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--duration", type=click.FloatRange(20, 170), default=75.0, help="Seconds the three nodes run."
)
@click.option(
    "--system",
    is_flag=True,
    help="CRONTABS are in system format (/etc/crontab and /etc/cron.d/* always are).",
)
@click.pass_obj
def demo(obj: dict[str, Any], crontabs: tuple[Path, ...], duration: float, system: bool) -> None:
    """Three nodes share the Relay crontab (plus CRONTABS); one is killed midway."""
    from pgpulse.demo import run_demo

    sys.exit(
        run_command(
            run_demo(obj["database_url"], obj["data_dir"], list(crontabs), duration, system)
        )
    )


# -- web: API, dashboard, metrics, tokens (commands in pgpulse.web.commands) ------------------


def _add_web_commands() -> None:
    from pgpulse.web.commands import serve, token

    main.add_command(serve)
    main.add_command(token)


_add_web_commands()


# -- chaos: the fault-injection harness (pgpulse.chaos) -----------------------------------------


@main.command("chaos")
@click.option(
    "--duration",
    type=click.FloatRange(5),
    default=60.0,
    show_envvar=True,
    help="Seconds during which faults are injected.",
)
@click.option(
    "--nodes",
    type=click.IntRange(2, 16),
    default=4,
    show_envvar=True,
    help="Scheduler nodes (one more joins and leaves).",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    show_envvar=True,
    help="Seed of the fault plan and workload [default: random, printed].",
)
@click.option(
    "--jobs", type=click.IntRange(7), default=300, show_envvar=True, help="Jobs in the workload."
)
@click.option(
    "--guard",
    type=click.Choice(["token", "lease"]),
    default="lease",
    show_envvar=True,
    help="Effect guard: lease (the token must hold a live lease: exactly once) or "
    "token (newest token wins: orders writes, but a zombie can still write).",
)
@click.pass_obj
def chaos(
    obj: dict[str, Any], duration: float, nodes: int, seed: int | None, jobs: int, guard: str
) -> None:
    """Kill, pause, partition and restart a live cluster; check the history; exit 1 on a
    duplicate, overlap, lost or stuck run. Starts its own PostgreSQL unless --database-url."""
    from pgpulse.chaos.cluster import NodeSettings
    from pgpulse.chaos.runner import ChaosConfig, run_chaos

    config = ChaosConfig(
        duration=duration,
        nodes=nodes,
        seed=seed,
        jobs=jobs,
        node=NodeSettings(guard=guard),
        database_url=obj["database_url"],
        data_dir=obj["data_dir"],
    )
    sys.exit(0 if run_command(run_chaos(config, click.echo)).ok else 1)


# -- bench: Pulse against the raw SQL ceiling and peer schedulers (pgpulse.bench) ---------------


@main.command("bench")
@click.option(
    "--scale",
    type=click.FloatRange(0.001, 1.0),
    default=0.1,
    show_envvar=True,
    help="Fraction of the issue's sizes (1 = 1,000,000 jobs stored).",
)
@click.option(
    "--only",
    default="1,2,3,4,5,6,7",
    show_envvar=True,
    help="Scenarios, comma-separated: 1 claim latency, 2 drain, 3 raw SQL ceiling, "
    "4 steady state, 5 thundering herd, 6 idle cost, 7 peers.",
)
@click.option(
    "--slots",
    type=click.IntRange(1, 1000),
    default=50,
    show_envvar=True,
    help="--slots of every benchmark node (and the ceiling's claim batch).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("docs"),
    show_envvar=True,
    help="Docs folder for benchmarks.md, plots and results.json.",
)
@click.option(
    "--report-only",
    is_flag=True,
    help="Only rewrite benchmarks.md and the plots from the last results.json.",
)
@click.pass_obj
def bench(
    obj: dict[str, Any], scale: float, only: str, slots: int, out: Path, report_only: bool
) -> None:
    """Benchmark Pulse against the raw SQL ceiling and peer schedulers (figures, not tests);
    write docs/benchmarks.md. Run it through ./scripts/bench (peers live in .venv-bench)."""
    from pgpulse.bench.run import ALL, run_bench
    from pgpulse.bench.run import report_only as rewrite_report
    from pgpulse.database import resolve_dsn

    if report_only:
        click.echo(f"wrote {rewrite_report(out)}")
        return
    chosen = tuple(part.strip() for part in only.split(",") if part.strip())
    if not chosen or any(part not in ALL for part in chosen):
        raise click.BadParameter(f"{only!r}: scenarios are {','.join(ALL)}", param_hint="--only")

    async def bench_main() -> None:
        dsn = resolve_dsn(obj["database_url"], obj["data_dir"])
        await run_bench(dsn, scale=scale, only=chosen, slots=slots, out=out, echo=click.echo)

    run_command(bench_main())
