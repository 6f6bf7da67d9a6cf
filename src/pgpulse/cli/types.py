"""The value types of the ``pgpulse`` command line, worded for people.

* :class:`Integer`, :class:`Number` and :class:`Seconds`: click's number ranges whose bounds
  are words, in ``--help`` (``[... between 1 and 1000]``, ``at least 0.1 seconds``) and in
  refusals (``must be at least 1 second, got 0``; ``'abc' is not a number of seconds``);
  :func:`worded` gives click's own number types the same wording.
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
from pgpulse.core.wording import plural
from pgpulse.web.options import parse_address

F = TypeVar("F", bound=Callable[..., Any])


def _bound(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _words(kind: click.IntRange | click.FloatRange, unit: str) -> str:
    """The bounds of ``kind`` in words, ``unit`` (``"second"``) in the number's plural:
    ``between 1 and 1000``, ``at least 0.1 seconds``, ``more than 0``; empty if unbounded."""
    low, high = kind.min, kind.max

    def with_unit(text: str, last: float) -> str:
        return f"{text} {plural(last, unit).split(' ', 1)[1]}" if unit else text

    if low is not None and high is not None:
        return with_unit(f"between {_bound(low)} and {_bound(high)}", high)
    if low is not None:
        return with_unit(f"{'more than' if kind.min_open else 'at least'} {_bound(low)}", low)
    if high is not None:
        return with_unit(f"{'less than' if kind.max_open else 'at most'} {_bound(high)}", high)
    return ""


def _in_words(
    kind: click.IntRange | click.FloatRange,
    convert: Callable[[], Any],
    value: Any,
    param: click.Parameter | None,
    ctx: click.Context | None,
) -> Any:
    """``convert()`` (click's conversion of ``value`` by ``kind``), its refusals said in words:
    ``'abc' is not a number of seconds``, ``must be at least 1 second, got 0``."""
    what = "an integer" if isinstance(kind, click.IntRange) else getattr(kind, "what", "a number")
    try:
        (int if isinstance(kind, click.IntRange) else float)(value)
    except (TypeError, ValueError):
        kind.fail(f"{value!r} is not {what}", param, ctx)
    try:
        return convert()
    except click.BadParameter:
        kind.fail(f"must be {kind._describe_range()}, got {value}", param, ctx)


class Integer(click.IntRange):
    """An integer, optionally bounded (``Integer(1, 1000)``): bounds in words in ``--help``
    (``between 1 and 1000``) and in refusals."""

    name = "integer"

    def _describe_range(self) -> str:
        return _words(self, "")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _in_words(
            self, lambda: super(Integer, self).convert(value, param, ctx), value, param, ctx
        )


class Number(click.FloatRange):
    """A number (a float), optionally bounded (``Number(0)``): bounds in words."""

    name = "number"
    #: The unit of the value, singular (:class:`Seconds`: ``"second"``), or ``""``.
    unit = ""
    #: What a value that is not a number should have been.
    what = "a number"

    def _describe_range(self) -> str:
        return _words(self, self.unit)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = _in_words(
            self, lambda: super(Number, self).convert(value, param, ctx), value, param, ctx
        )
        if isinstance(number, float) and not math.isfinite(number):  # nan, inf, 1e400
            self.fail(f"must be a finite number, got {value}", param, ctx)
        return number


class Seconds(Number):
    """A duration in seconds (a float), optionally bounded: ``--lease SECONDS  [... at least 1
    second]``."""

    name = "seconds"
    unit = "second"
    what = "a number of seconds"


def worded(kind: click.ParamType[Any]) -> click.ParamType[Any]:
    """``kind`` with Pulse's wording (every parameter of the command tree gets it,
    :func:`pgpulse.cli.conventions.apply_envvar_rule`): click's own number types become
    :class:`Integer` or :class:`Number` with the same bounds; any other type is kept."""
    if isinstance(kind, Integer | Number):
        return kind
    if isinstance(kind, click.IntRange):
        return Integer(kind.min, kind.max, kind.min_open, kind.max_open, kind.clamp)
    if isinstance(kind, click.FloatRange):
        return Number(kind.min, kind.max, kind.min_open, kind.max_open, kind.clamp)
    if isinstance(kind, click.types.IntParamType):
        return Integer()
    if isinstance(kind, click.types.FloatParamType):
        return Number()
    return kind


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
