"""The value types of the ``pgpulse`` command line, worded for people.

* :class:`Number` and :class:`Seconds`: click's float ranges, finite (``SECONDS`` in
  ``--help`` for a duration); whole numbers are click's own ``IntRange``.
* :class:`IsoDateTime`: ISO 8601 as Python reads it.
* :class:`HostPort`: a server's address, checked as the option is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any, BinaryIO, TypeVar

import click

from pgpulse.core.errors import InvalidInput
from pgpulse.web.options import parse_address

F = TypeVar("F", bound=Callable[..., Any])


class Number(click.FloatRange):
    """click's :class:`~click.FloatRange` (``Number(0)``) that also refuses ``nan`` and the
    infinities, which pass its bounds (``nan`` compares false with each) and no field holds."""

    name = "float"  # click's word in a refusal: "'abc' is not a valid float."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number

    def _describe_range(self) -> str:
        # unbounded (a job field, bounded by the definition model's own check): no "x<=None"
        return "" if self.min is None and self.max is None else super()._describe_range()


class Seconds(Number):
    """A duration in seconds (a float), optionally bounded: ``--lease SECONDS  [... x>=1]``."""

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "SECONDS"


class IsoDateTime(click.ParamType[datetime]):
    """A date and time in ISO 8601 as :meth:`datetime.fromisoformat` reads it (Python 3.11+):
    ``2026-12-01T10:00``, ``2026-12-01 10:00``, ``2026-12-01T10:00:00.357+02:00``, ``...Z``,
    ``20261201T1000`` or a bare date (midnight). Naive values are returned naive."""

    name = "datetime"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not a date and time: ISO 8601, e.g. 2026-12-01T10:00", param, ctx
            )


class HostPort(click.ParamType[str]):
    """A listening address, ``HOST:PORT``, ``:PORT``, ``PORT`` or ``[V6]:PORT``
    (:func:`parse_address`), checked when the option is read, so a refusal
    names the option and its environment variable as every other one does (``invalid value
    for --metrics: 'nohost' is not HOST:PORT``; a port past 65535 is said to be out of range).
    The text is returned as given."""

    name = "host:port"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:

        try:
            parse_address(str(value), field="address")
        except InvalidInput as exc:
            # parse_address's words after the quoted address: what is wrong with it
            reason = exc.message.removeprefix(f"address {str(value)!r}")
            if reason.startswith(":"):
                self.fail(f"{str(value)!r}{reason}", param, ctx)
            self.fail(f"{str(value)!r} is not HOST:PORT, e.g. 127.0.0.1:9100", param, ctx)
        return str(value)


def valid_name(field: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that refuses a job or tenant name no write would take
    (:func:`pgpulse.core.jobs.check_name`), on reads too: one line naming the option or the field,
    the value and why (``invalid value for --tenant: 'a\\x01b' is not a valid name (...)``,
    ``name '' is not a valid name (...)`` for an argument). ``None`` passes (an optional one
    not given)."""

    def check(_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from pgpulse.core.jobs import check_name

        if value is None:
            return value
        try:
            return check_name(field, value)
        except InvalidInput as exc:
            if isinstance(param, click.Option):
                raise click.BadParameter(exc.message.removeprefix(f"{field} ")) from None
            from pgpulse.cli.conventions import Refused

            raise Refused(exc.message) from None

    return check


#: The tenant of a command that names none, nor has ``--tenant``/``PGPULSE_TENANT`` given: as
#: kubectl's namespace, one default for every command (lists of every tenant: ``--all-tenants``).
DEFAULT_TENANT = "default"


def tenant_option(help: str = "The job's tenant.") -> Callable[[F], F]:
    """The ``--tenant`` option of a tenant-scoped command. Its value is, first given first: the
    command's own ``--tenant`` (or its variable, ``PGPULSE_<COMMAND>_TENANT``), the global
    ``pgpulse --tenant`` (``PGPULSE_TENANT``), then :data:`DEFAULT_TENANT`; a name no write
    would take is refused in one line (:func:`valid_name`)."""
    name_check = valid_name("tenant")

    def resolve(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            root = ctx.find_root().obj
            value = (root or {}).get("tenant") or DEFAULT_TENANT
        return name_check(ctx, param, value)

    return click.option(
        "--tenant",
        default=None,
        show_default=f"pgpulse --tenant, else {DEFAULT_TENANT!r}",
        callback=resolve,
        help=help,
    )


#: The most bytes read from an input file (``apply``, ``crontab import``, ``notifier add
#: --config @FILE`` or ``-``): far above any real definitions file, and a character device such
#: as ``/dev/zero`` or an endless pipe is refused instead of read until memory runs out.
MAX_INPUT_BYTES = 8 * 1024 * 1024


def read_input(path: str, stream: BinaryIO | None = None) -> bytes:
    """The content of input file ``path`` (or of ``stream``, standard input, named ``path``),
    at most :data:`MAX_INPUT_BYTES` bytes.

    Raises:
        InvalidInput: ``field="file"``, ``value=path``: the input is longer than the limit
            (said with the limit, nothing more read); OSError as :func:`open` raises it.
    """

    if stream is None:
        with open(path, "rb") as opened:
            data = opened.read(MAX_INPUT_BYTES + 1)
    else:
        data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise InvalidInput(
            f"{path} is longer than {MAX_INPUT_BYTES // (1024 * 1024)} MiB "
            f"({MAX_INPUT_BYTES:,} bytes), the most an input file may hold",
            field="file",
            value=path,
        )
    return data
