"""The conventions of the ``pgpulse`` command line, over its whole command tree.

* One environment variable per option, named by one rule from what the user types
  (:func:`envvar_for`), shown in ``--help``; no other name reaches an option.
* ``--help`` is click's: each option's text ends ``[env var: PGPULSE_X; default: 30; x>=1]``.
* A refused value names the option as typed and the value, in click's words: ``invalid
  value for --count: 0 is not in the range 1<=x<=1000.`` (the variable is named only when the
  value came from it).
* A value an option's type refuses is one line on stderr and exit 2 (:class:`Refused`), like
  every refusal of input; a malformed command line keeps click's usage hint.
* The web edge's and the tools' commands (:data:`LAZY_COMMANDS`) are imported only when
  invoked, so ``pgpulse schedule next`` loads neither FastAPI nor the demo.
* The global options reach commands as :class:`GlobalOptions` (``ctx.obj``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import click

from pgpulse.cli.report import one_line, refusal_line
from pgpulse.core.errors import DatabaseUnavailable, InvalidInput, PulseError
from pgpulse.core.extras import MissingExtra, extra_for
from pgpulse.db.embedded import start_embedded

if TYPE_CHECKING:  # the driver loads with the commands that use the database only
    import psycopg

#: click's settings for every command of the tree.
CONTEXT = {
    "auto_envvar_prefix": "PGPULSE",
    "show_default": True,
    "help_option_names": ["-h", "--help"],
}


#: Commands imported only when invoked, as ``(module:attribute, short help)``: the web edge
#: (FastAPI, uvicorn) and the tools of the ``pgpulse-tools`` distribution (demo, fault harness,
#: benchmark), which the runtime never imports and a production install need not carry.
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "calendar": ("pgpulse.cli.calendars:calendar", "Create, list and delete exclusion calendars."),
    "shards": ("pgpulse.cli.shards:shards", "Show or change the shard count, online."),
    "celery": ("pgpulse.cli.celery_import:celery", "Import a celery beat schedule as celery jobs."),
    "serve": ("pgpulse.cli.serve:serve", "Serve the JSON API, the dashboard and metrics."),
    "token": ("pgpulse.cli.serve:token", "Create, list and revoke API tokens."),
    "notifier": ("pgpulse.cli.alerts:notifier", "Add, list and remove alert notifiers."),
    "alert": ("pgpulse.cli.alerts:alert", "Alert rules, alerts, silences, acknowledgements."),
    "why": ("pgpulse.cli.why:why", "Why an occurrence of a job ran, or did not: its trace."),
    "demo": ("pgpulse_tools.commands:demo", "Three nodes share a crontab; one is killed midway."),
    "chaos": ("pgpulse_tools.commands:chaos", "Inject faults into a live cluster; check history."),
    "bench": ("pgpulse_tools.commands:bench", "Benchmark Pulse against the floor and its peers."),
}


def _load_lazy(name: str) -> click.Command:
    """Import the command ``name`` of :data:`LAZY_COMMANDS`; a missing ``pgpulse-tools`` is
    reported as one line (exit 2), naming what to install."""
    target, _ = LAZY_COMMANDS[name]
    module_name, _, attr = target.partition(":")
    try:
        command: click.Command = getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as exc:
        if extra_for(exc) is not None:
            raise Refused(MissingExtra(extra_for(exc) or "", f"'pgpulse {name}'").message) from None
        if exc.name is None or not exc.name.startswith("pgpulse_tools"):
            raise
        raise click.UsageError(
            f"'pgpulse {name}' is part of pgpulse-tools, which is not installed: "
            "pip install -e ./tools from a checkout of Pulse (./scripts/setup does)"
        ) from None
    return command


def envvar_for(path: Sequence[str], option: click.Option) -> str:
    """Return the environment variable of ``option``, an option of the command at ``path``.

    The rule, for every option of every command: ``PGPULSE_``, then the command's words, then
    the option's (first) long name, upper-cased, each ``-`` made ``_``. ``job create --tz`` is
    ``PGPULSE_JOB_CREATE_TZ``; a global option such as ``--database-url`` (``path`` empty) is
    ``PGPULSE_DATABASE_URL``. The name comes from what the user types, never from the Python
    parameter behind it.

    Args:
        path: the command's words after ``pgpulse`` (``["node", "run"]``; ``[]`` for ``pgpulse``).
        option: one of its options; it must have a long name (``--x``).

    Raises:
        ValueError: ``option`` has no long name.
    """
    long_names = [name for name in option.opts if name.startswith("--")]
    if not long_names:
        raise ValueError(f"option {option.opts} has no long name")
    words = ["PGPULSE", *path, long_names[0][2:]]
    return "_".join(words).upper().replace("-", "_")


def apply_envvar_rule(command: click.Command, path: Sequence[str]) -> None:
    """Give every option of ``command`` its :func:`envvar_for` variable (click's ``envvar``),
    shown in ``--help`` (``show_envvar``), and no other: click's automatic variable, named from
    the Python parameter (``..._AS_JSON``, ``..._TIMEZONE``), is switched off. Eager options
    that hold no value (``--version``) are actions, not settings: they get none. The
    subcommands of a plain click group (a lazy one, ``token``) get theirs here too."""
    for param in command.params:
        if not isinstance(param, click.Option) or (param.is_eager and not param.expose_value):
            continue
        param.envvar = envvar_for(path, param)
        param.show_envvar = True
        param.allow_from_autoenv = False
    if isinstance(command, click.Group) and not isinstance(command, PulseGroup):
        for name, sub in command.commands.items():
            apply_envvar_rule(sub, [*path, name])


def environment_source(ctx: click.Context, field: str | None) -> str | None:
    """The environment variable that gave ``ctx``'s option for ``field`` (a refused input's
    field: ``timezone``, or ``payload.url`` for ``--payload``), or ``None`` when the option
    came from the command line, a default, or does not exist: a refusal then names the
    variable, which the user may not know is set."""
    name = (field or "").split(".", 1)[0]
    for param in ctx.command.params:
        if (
            param.name == name
            and isinstance(param, click.Option)
            and ctx.get_parameter_source(name) is click.core.ParameterSource.ENVIRONMENT
        ):
            return param.envvar if isinstance(param.envvar, str) else None
    return None


def as_option_refusal(ctx: click.Context, exc: PulseError) -> None:
    """Word ``exc`` (a refusal of the command ``ctx`` runs) as click words a refused option:
    ``timeout must be a number from ...`` becomes ``invalid value for --timeout: must be a
    number from ...`` when the field is one of the command's options (the user typed the
    option, not the API's field name), and the environment variable is named when it gave the
    value (:func:`environment_source`). Other refusals are left as they are."""
    name = (exc.field or "").split(".", 1)[0]
    spelled = f"--{name.replace('_', '-')}"  # a field whose option is named otherwise (--from)
    if exc.message.startswith("invalid value for "):
        return  # worded already (a refusal raised again through an outer command)
    # A refused value of the field itself ("database_url 'x' is not a valid DSN", "shard_count
    # must be ..."): it may name an argument, or a group's option (--database-url), too. Other
    # refusals that carry a field (no such job, a notifier in use, a database that does not
    # answer) name only the command's own options, as they always did.
    of_value = (
        isinstance(exc, InvalidInput) and exc.field == name and exc.message.startswith(f"{name} ")
    )
    option: click.Parameter | None = None
    level: click.Context | None = ctx
    while option is None and level is not None:
        option = next(
            (
                p
                for p in level.command.params
                if (isinstance(p, click.Option) and (p.name == name or spelled in p.opts))
                or (of_value and isinstance(p, click.Argument) and p.name == name)
            ),
            None,
        )
        if option is not None:
            ctx = level
        level = level.parent if of_value else None
    if option is None:
        return
    variable = environment_source(ctx, exc.field)
    longest = (
        max(option.opts, key=len)
        if isinstance(option, click.Option)
        else option.human_readable_name
    )
    if exc.message.startswith(f"{name} ") and exc.field == name:
        exc.message = f"invalid value for {longest}: {exc.message[len(name) + 1 :]}"
    elif not exc.message.startswith("invalid value for "):
        exc.message = f"invalid value for {longest}: {exc.message}"
    if variable is not None:
        exc.message += f" (from the environment variable {variable})"


def _command_path(ctx: click.Context) -> list[str]:
    """The words of ``ctx``'s command after the program name (``[]`` for ``pgpulse`` itself)."""
    words = []
    while ctx.parent is not None:
        words.append(ctx.info_name or "")
        ctx = ctx.parent
    return words[::-1]


class Refused(click.ClickException):
    """A value refused while the command line was parsed: one line on stderr, exit 2, as every
    refusal of input is (a malformed command line, such as a missing argument or an unknown
    option, keeps click's usage hint)."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        message = self.format_message()
        click.echo(f"error: {message[:1].lower()}{message[1:]}", err=True)


@contextmanager
def _one_line_refusals() -> Iterator[None]:
    """A value click refuses, as one line naming the option as typed (click's own hint quotes
    it, and names the option's variable even when the value came from the command line), and
    the variable only when the value came from it. A malformed command line (a missing
    parameter, an unknown option) keeps click's usage hint."""
    try:
        yield
    except click.MissingParameter:
        raise
    except click.BadParameter as exc:
        param, ctx = exc.param, exc.ctx
        if not isinstance(param, click.Option):
            raise Refused(exc.format_message()) from None
        hint = exc.param_hint if isinstance(exc.param_hint, str) else " / ".join(param.opts)
        message = f"invalid value for {hint}: {exc.message}"
        if (
            ctx is not None
            and param.name
            and ctx.get_parameter_source(param.name) is click.core.ParameterSource.ENVIRONMENT
        ):
            message += f" (from the environment variable {param.envvar})"
        raise Refused(message) from None


class DatabaseFailed(click.ClickException):
    """A database error met while a command ran (a statement timeout, a lock timeout, a lost
    connection...): one line on stderr naming it, exit 3, as a database that does not answer
    (README, "Errors"). Never a traceback."""

    exit_code = 3

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def database_failure_line(exc: BaseException) -> str | None:
    """How the command line words a database error ``exc`` (without ``error:``), or ``None``
    if ``exc`` is not one: a driver error (with its SQLSTATE), :class:`DatabaseUnavailable`,
    or an exception group (a command's task group) whose every error is one of those (the
    first is named)."""
    if isinstance(exc, BaseExceptionGroup):
        lines = [database_failure_line(inner) for inner in exc.exceptions]
        return lines[0] if lines and all(lines) else None
    if isinstance(exc, DatabaseUnavailable):
        return refusal_line(exc)
    if not _is_driver_error(exc):
        return None
    text = one_line(str(exc)) or type(exc).__name__
    if exc.sqlstate:
        return f"the database failed the command: {text} (SQLSTATE {exc.sqlstate})"
    return f"the database connection failed: {text}"


def _is_driver_error(exc: BaseException) -> TypeGuard[psycopg.Error]:
    """Whether ``exc`` is the database driver's error: never in a command that did not load
    the driver (``schedule next``), which this check does not load either."""
    driver = sys.modules.get("psycopg")
    return driver is not None and isinstance(exc, driver.Error)


@contextmanager
def _one_line_database_errors() -> Iterator[None]:
    """Every command's database errors, in one place: a line and exit 3
    (:class:`DatabaseFailed`), whichever command met them."""
    try:
        yield
    except BaseException as exc:  # database_failure_line: None for any other error
        line = database_failure_line(exc)
        if line is None:
            raise
        raise DatabaseFailed(line) from None


@contextmanager
def _one_line_missing_extras(ctx: click.Context) -> Iterator[None]:
    """A command that needs one of Pulse's extras where it is not installed, whichever command
    and wherever it imports it: one line naming the extra (exit 2), not a traceback."""
    try:
        yield
    except MissingExtra as exc:
        raise Refused(exc.message) from None
    except ModuleNotFoundError as exc:
        extra = extra_for(exc)
        if extra is None:
            raise
        words = " ".join([*_command_path(ctx), ctx.invoked_subcommand or ""]).strip()
        raise Refused(MissingExtra(extra, f"'pgpulse {words}'").message) from None


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
    """Refuse, before parsing, a command line or ``PGPULSE_*`` variable that is not UTF-8
    (Python hands such bytes over as lone surrogates, which no field may hold): one line naming
    the option (or argument, or variable) and its value; exit 2."""
    found = [
        (f"environment variable {name}", why)
        for name, value in os.environ.items()
        if name.startswith("PGPULSE_") and (why := _not_utf8(value))
    ]
    for index, arg in enumerate(args):
        why = _not_utf8(arg)
        if why is not None:
            before = args[index - 1] if index else ""
            # an argument is named by its place and the words before it: `job show NAME` has
            # not been parsed yet, so its parameter is not known
            after = " ".join(args[max(0, index - 2) : index]) or "pgpulse"
            found.append(
                (
                    before if before.startswith("-") else f"argument {index + 1} (after {after!r})",
                    why,
                )
            )
    if found:
        where, why = found[0]
        click.echo(f"error: {where}: {why}; nothing was done", err=True)
        ctx.exit(2)


class PulseGroup(click.Group):
    """A command group whose every option has its :func:`envvar_for` variable (shown in
    ``--help``), whose :data:`LAZY_COMMANDS` are imported only when invoked, and whose refused
    option values are one line (:class:`Refused`)."""

    group_class = type  # subgroups are PulseGroup too

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:
            _refuse_undecodable(ctx, args)
        with _one_line_refusals():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        # A subcommand's options are parsed in here, and every command runs in here.
        with _one_line_missing_extras(ctx), _one_line_database_errors(), _one_line_refusals():
            return super().invoke(ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        lazy = LAZY_COMMANDS if ctx.parent is None else {}
        return sorted({*super().list_commands(ctx), *lazy})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List subcommands with their short help, without importing the lazy ones."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                rows.append((name, self.commands[name].get_short_help_str(formatter.width)))
            else:
                rows.append((name, LAZY_COMMANDS[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and ctx.parent is None and cmd_name in LAZY_COMMANDS:
            command = _load_lazy(cmd_name)
            self.add_command(command, cmd_name)
        if command is not None:
            apply_envvar_rule(command, [*_command_path(ctx), cmd_name])
        return command


class GlobalOptions(dict[str, Any]):
    """``ctx.obj`` of every command: ``database_url`` (a DSN, or ``None`` for the embedded
    server), ``read_database_url`` (a read replica's DSN, or ``None``), ``data_dir``,
    ``database`` and ``embedded`` (no DSN was given).

    With ``--database`` the DSN names that database: a given DSN is rewritten at once; the
    embedded server's DSN is looked up (which starts the server) only when a command first reads
    ``database_url``, so commands that need no database never start it. Errors on the way are
    one line on stderr: exit 2 for a malformed DSN, 3 for an embedded server that cannot start.

    Args:
        database_url: ``--database-url``, or ``None``.
        database: ``--database``, or ``None``.
        data_dir: ``--data-dir``, or ``None`` for the default.
        read_database_url: ``--read-database-url``, or ``None`` (``--database`` renames its
            database too).
    """

    def __init__(
        self,
        database_url: str | None,
        database: str | None,
        data_dir: Path | None,
        read_database_url: str | None = None,
    ) -> None:
        super().__init__(database=database, data_dir=data_dir, embedded=not database_url)
        if database_url or not database:
            self["database_url"] = self.resolved(lambda: database_url) if database_url else None
        self["read_database_url"] = (
            self.resolved(lambda: read_database_url) if read_database_url else None
        )

    def __missing__(self, key: str) -> Any:
        if key != "database_url":
            raise KeyError(key)
        self[key] = self.resolved(lambda: start_embedded(self["data_dir"]))
        return self[key]

    def resolved(self, server: Callable[[], str]) -> str:
        """``server()``'s DSN (a given one, or the embedded server's, which it starts) with
        ``--database`` applied. A refusal exits: one line on stderr, exit 3 for a server that
        cannot start, 2 for refused input (:func:`~pgpulse.cli.report.refusal_line`)."""
        from pgpulse.db.database import with_database

        try:
            return with_database(server(), self["database"])
        except PulseError as exc:
            click.echo(f"error: {refusal_line(exc)}", err=True)
            sys.exit(3 if isinstance(exc, DatabaseUnavailable) else 2)
