"""Crontab files to job definitions: the Vixie/Debian cron and cronie formats, parsed purely.

This module reads the text of a crontab (a user crontab, or a system one such as ``/etc/crontab``
and ``/etc/cron.d/*``) and returns one :class:`CrontabEntry` per command line and one
:class:`~pgpulse.core.errors.CrontabError` per refused line. It does no I/O and reads no clock: the
caller passes the text in, and decides whether to write anything when some lines were refused.

The rules are those of ``man 5 crontab`` (Vixie cron as Debian ships it, and cronie's
``CRON_TZ``), with these deliberate choices:

* ``@reboot`` is refused: Pulse has no reboot event.
* ``CRON_TZ=Zone`` sets the schedule time zone of the entries below it. An unknown zone is an
  error at the ``CRON_TZ`` line, and every entry below it is refused (with a reason naming that
  line) until a valid ``CRON_TZ`` line appears. This is what cronie does, and it never runs a job
  in a zone the author did not ask for. An empty ``CRON_TZ=`` resets to the default zone.
* ``MAILTO`` is recorded (Pulse sends no mail) and ``CRON_TZ`` is consumed; neither is put in the
  command's environment. Every other ``NAME=value`` line (``SHELL``, ``PATH``, ``TZ``...) is.
* ``NAME=`` with nothing after ``=`` sets an empty value (cron would refuse the line).
* Pulse extension: a line starting with ``@pulse6`` is followed by Pulse's 6-field,
  seconds-first schedule (``@pulse6 */5 * * * * * command``), in user and system format alike.
  Crontab files have 5 fields; this is the one way to ask for seconds.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Any, TypeAlias

from pgpulse.core.errors import CrontabError, InvalidInput
from pgpulse.core.jobs import JobSpec
from pgpulse.core.schedule import REBOOT_ADVICE, parse_schedule
from pgpulse.core.wording import plural

__all__ = [
    "CRON_MACROS",
    "PULSE6_MARKER",
    "CrontabEntry",
    "CrontabParse",
    "entry_to_spec",
    "identity_of",
    "is_system_crontab",
    "job_name_for",
    "parse_crontab",
    "split_command",
]

#: Crontab nicknames (``man 5 crontab``, EXTENSIONS) -> Pulse's schedule macro for the same times.
CRON_MACROS: dict[str, str] = {
    "@yearly": "@yearly",
    "@annually": "@yearly",
    "@monthly": "@monthly",
    "@weekly": "@weekly",
    "@daily": "@daily",
    "@midnight": "@daily",
    "@hourly": "@hourly",
}

#: Pulse extension: this marker, then 6 schedule fields (seconds first), then the command.
PULSE6_MARKER = "@pulse6"

#: Longest slug of a file stem in a job name, in characters.
_SLUG_MAX = 40
#: Longest run of command words in a job name, in characters.
_WORDS_MAX = 24
#: A shell operator or redirection, left out of job names (``>``, ``2>&1``, ``|``, ``&&``).
_SHELL_OPERATOR = re.compile(r"^(\d*[<>]|[|&;()]|\$\()")
#: A redirection standing alone (``>``, ``2>>``, ``&>``, ``<``): the next token is its target,
#: left out of job names with it.
_BARE_REDIRECTION = re.compile(r"^(\d*|&)(>>?|<<?|>\||<>|[<>]&)$")
#: A whole word of a command, once quotes, brackets and trailing punctuation are stripped:
#: it starts with a letter or digit and holds no format or shell characters (``+%F``, ``$HOME``
#: and ``*.log`` are not words).
_WHOLE_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:=,@+-]*$")
#: The first words of a guard or preamble before a line's real command, left out of its job
#: name: ``test -x /usr/bin/certbot && certbot renew``, ``[ -d /srv ] && ...``, ``cd /srv &&
#: ...``, ``sleep 30; ...`` (Debian's own cron files are full of them).
_PREAMBLES = frozenset({"test", "[", "[[", "cd", "sleep", "true", ":"})
#: ``NAME=value`` before a command: an environment setting, not the command.
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: An interpreter one-liner that only waits: ``perl -e "sleep int(rand(43200))"`` (certbot's).
_SLEEPER = re.compile(r"""^(perl|python3?|ruby|sh|bash) -[ec] ["']?sleep\b""")

#: ``NAME =`` at the start of an environment line; a quoted name may hold blanks (env.c).
_ENV_HEAD = re.compile(
    r"""^[ \t]*(?:"(?P<dq>[^"=]+)"|'(?P<sq>[^'=]+)'|(?P<bare>[^\s='"][^\s=]*))[ \t]*=""",
)
#: One blank-separated field; cron separates fields with spaces and tabs only.
_FIELD = re.compile(r"[ \t]*([^ \t]+)")
#: A plausible login name (POSIX portable characters, Samba's trailing ``$``).
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$")
_NON_SLUG = re.compile(r"[^a-z0-9]+")

_USER_FORMAT = "5 time fields, then the command"
_SYSTEM_FORMAT = "5 time fields, a user name, then the command"

#: Builds the error that refuses the line being parsed, from a reason.
_Refuse: TypeAlias = Callable[[str], CrontabError]


@dataclass(frozen=True, slots=True)
class CrontabEntry:
    """One command line of a crontab, with the settings in force at that line.

    Attributes:
        path: the crontab's path as the caller named it (used in errors, sources and names).
        line_no: 1-based line number of the entry in the file.
        line: the raw line, without its line terminator.
        schedule: the schedule in Pulse's syntax: the 5 fields joined by single spaces, a Pulse
            macro (``@annually`` becomes ``@yearly``, ``@midnight`` becomes ``@daily``), or the
            6 seconds-first fields of an ``@pulse6`` line.
        timezone: IANA zone of the schedule: the ``CRON_TZ`` in force, else the default.
        command: the command text before the first unescaped ``%``, with ``\\%`` turned into
            ``%`` (``man 5 crontab``: the "sixth" field).
        stdin: the standard input after the first unescaped ``%``: further unescaped ``%``
            become newlines and a final newline is added as cron does; ``None`` without ``%``.
        user: the user name of a system-format line; ``None`` in user format.
        env: environment settings in force at this line (``SHELL``, ``PATH``, ``TZ``, any
            ``NAME=value``), in the order first set; ``MAILTO`` and ``CRON_TZ`` excluded.
        mailto: the ``MAILTO`` in force, recorded only (Pulse sends no mail); ``""`` means
            mail was switched off, ``None`` that the file never set it.
        occurrence: 1 for the first line of the file with this exact (schedule, timezone,
            user, command, stdin), 2 for the next identical one, ...; keeps job names unique.
    """

    path: str
    line_no: int
    line: str
    schedule: str
    timezone: str
    command: str
    stdin: str | None
    user: str | None
    env: dict[str, str]
    mailto: str | None
    occurrence: int = 1


@dataclass(frozen=True, slots=True)
class CrontabParse:
    """The result of :func:`parse_crontab`: what imported and what was refused, in file order.

    Attributes:
        entries: the lines that are valid entries.
        errors: one :class:`~pgpulse.core.errors.CrontabError` per refused line; ``str()`` of each
            is ``file:line: reason``.
    """

    entries: list[CrontabEntry]
    errors: list[CrontabError]


@dataclass(slots=True)
class _Settings:
    """The environment lines seen so far while reading one file (mutable parse state)."""

    default_timezone: str
    timezone: str
    env: dict[str, str] = field(default_factory=dict)
    mailto: str | None = None
    #: (line_no, value) of an invalid ``CRON_TZ`` in force, else ``None``.
    bad_tz: tuple[int, str] | None = None


def _decoded(raw: str | bytes, line_no: int, path: str) -> str:
    """One line as text, or a :class:`CrontabError` naming its first byte that is not UTF-8
    (a str line decoded with ``surrogateescape`` carries such bytes as lone surrogates)."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        shown = data.decode("utf-8", "backslashreplace")
        raise CrontabError(
            path,
            line_no,
            f"not valid UTF-8: byte 0x{data[exc.start]:02x} at column {exc.start + 1}",
            line=shown,
        ) from None


def parse_crontab(
    text: str | bytes, *, path: str, system: bool = False, default_timezone: str = "UTC"
) -> CrontabParse:
    """Parse the text of a crontab file (pure: no I/O, no clock).

    Follows ``man 5 crontab`` (Vixie/Debian cron, cronie): blank lines and lines whose first
    non-blank character is ``#`` are ignored; ``NAME = value`` lines set the environment of the
    entries below them; every other line is an entry: 5 time fields (or an ``@`` nickname),
    in system format a user name, then the command. See the module docstring for ``CRON_TZ``,
    ``@reboot`` and the ``@pulse6`` extension.

    Args:
        text: the file's content (lines end with ``\\n`` or ``\\r\\n``), as read (bytes: each
            line must be UTF-8) or decoded; a line that is not valid UTF-8 is refused, naming
            the first bad byte.
        path: the file's name, as it should appear in errors, job sources and job names.
        system: ``True`` for the system format (``/etc/crontab``, ``/etc/cron.d/*``), where a
            user name follows the time fields.
        default_timezone: IANA zone of the entries above any ``CRON_TZ`` line.

    Returns:
        A :class:`CrontabParse`; a refused line never stops the lines after it from importing.

    Raises:
        UnknownTimeZone: ``default_timezone`` is not an IANA zone (a caller error, not a line's).
    """
    _check_zone(default_timezone)
    settings = _Settings(default_timezone=default_timezone, timezone=default_timezone)
    entries: list[CrontabEntry] = []
    errors: list[CrontabError] = []
    seen: dict[str, int] = {}
    lines: list[str | bytes] = [
        *(text.split(b"\n") if isinstance(text, bytes) else text.split("\n"))
    ]
    for line_no, raw in enumerate(lines, start=1):
        try:
            line = _decoded(raw, line_no, path).removesuffix("\r")
            entry = _parse_line(line, line_no, path=path, system=system, settings=settings)
        except CrontabError as exc:
            errors.append(exc)
            continue
        if entry is not None:
            digest = _identity_digest(entry)
            seen[digest] = seen.get(digest, 0) + 1
            entries.append(replace(entry, occurrence=seen[digest]))
    return CrontabParse(entries=entries, errors=errors)


def split_command(text: str) -> tuple[str, str | None]:
    """Split a crontab command field at its first unescaped ``%`` (``man 5 crontab``).

    The rule is cron's (``do_command.c``): before the first unescaped ``%`` is the command,
    where ``\\%`` becomes ``%`` and any other backslash is kept; after it is the standard
    input, where each unescaped ``%`` becomes a newline, ``\\%`` becomes ``%``, and a newline
    is appended if the input is not empty and does not already end with one.

    Args:
        text: the command field of an entry, as written in the file.

    Returns:
        ``(command, stdin)``; ``stdin`` is ``None`` when the text has no unescaped ``%``.
    """
    out: list[str] = []
    escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
            if char == "%":
                out[-1] = "%"  # the backslash written before it gives way to the percent sign
                continue
        elif char == "\\":
            escaped = True
        elif char == "%":
            return "".join(out), _stdin_text(text[index + 1 :])
        out.append(char)
    return "".join(out), None


def percent_note(entry: CrontabEntry) -> str | None:
    """What Pulse does with an entry's unescaped ``%``, said plainly for the importer, or
    ``None`` for a line without one. The rule is cron's (``man 5 crontab``): the first
    unescaped ``%`` ends the command and starts its standard input, each further one starts a
    new line of it; ``file:line: % starts standard input, as in cron: the job runs 'date +'
    with input 'Y-\\nm-\\nd\\n' (3 lines); write \\% for a literal percent sign``."""
    if entry.stdin is None:
        return None
    shown = repr(entry.stdin if len(entry.stdin) <= 60 else entry.stdin[:59] + "…")
    return (
        f"{entry.path}:{entry.line_no}: % starts standard input, as in cron: the job runs "
        f"{entry.command.strip()!r} with input {shown} "
        f"({plural(entry.stdin.count(chr(10)), 'line')}); write \\% for a literal percent sign"
    )


def job_name_for(entry: CrontabEntry, *, prefix: str | None = None) -> str:
    """Return the stable job name of a crontab entry: short, readable, unique in its file.

    The name is ``{prefix}.{words}-{hash}``, plus ``-N`` for the Nth identical line of a file
    (N >= 2), e.g. ``relay.echo-relay-billing-usage-3b1ea88b``:

    * ``words``: the command's first words, at most 24 characters of whole words joined by
      ``-`` (a first word longer than that is cut). Guards and preambles before the real
      command are left out (``test -x /usr/bin/certbot && perl -e "sleep ..." && certbot -q
      renew`` is named ``certbot-renew``; also ``[ ... ] &&``, ``cd DIR &&``, ``sleep N;``,
      and ``NAME=value`` settings before a command),
      and so are options (``-x``, ``--full``), shell operators and redirections (``>``,
      ``2>&1``, ``|``, ``&&``) with a redirection's target (``> /tmp/x``), and arguments that
      are not whole words (``+%F``, ``$HOME``); a path stands for its last part
      (``/usr/local/bin/backup`` is ``backup``), and each word is lower-cased with runs of
      other characters made ``-``.
      ``job`` if nothing is left.
    * ``hash``: the first 8 hex digits of SHA-256 over (schedule, timezone, user, command,
      stdin): what makes the line the same job. The environment (``PATH=``...) is not part of
      it, so a new ``PATH`` updates the same job; an edited schedule or command is a new one.
    * The line number is not part of the name: re-importing the same file gives the same
      names, and moving a line, or adding comments, renames nothing.

    Args:
        entry: an entry from :func:`parse_crontab`.
        prefix: the name's first part; defaults to the slug of the file's stem (``relay`` for
            ``examples/relay.crontab``, ``crontab`` for ``/etc/crontab``). Pass one when two
            imported files share a stem, so that their identical lines do not share a name.

    Returns:
        The job name (no blanks; about 35 characters plus the prefix).
    """
    if prefix is None:
        prefix = _slug(PurePath(entry.path).stem) or "crontab"
    name = f"{prefix}.{_command_words(entry.command) or 'job'}-{_identity_digest(entry)[:8]}"
    return name if entry.occurrence == 1 else f"{name}-{entry.occurrence}"


def entry_to_spec(
    entry: CrontabEntry,
    *,
    tenant: str = "default",
    catch_up: str = "skip",
    source: str | None = None,
) -> JobSpec:
    """Build the :class:`~pgpulse.core.jobs.JobSpec` of a crontab entry, run by the ``shell``
    handler.

    The payload holds ``command``, ``stdin``, ``env`` and ``user`` (keys whose value is
    ``None`` are left out); ``meta`` records ``crontab_user``, ``mailto`` and the raw ``line``;
    the source is ``crontab:{path}`` (every line of a file is one source, which
    ``crontab import --sync`` reconciles); the name is :func:`job_name_for`.

    Args:
        entry: an entry from :func:`parse_crontab`.
        tenant: the tenant that owns the job.
        catch_up: the job's catch-up policy (``skip``, like cron, unless asked otherwise).
        source: the job's source; default ``crontab:{entry.path}`` (the CLI passes the file's
            absolute path, so one file is one source from any working directory).

    Returns:
        The validated job definition.

    Raises:
        InvalidInput: a field is refused by :meth:`JobSpec.create` (``tenant``, ``catch_up``,
            a payload over its limit; the schedule and zone were already checked by
            :func:`parse_crontab`), its message starting with the entry's ``FILE:LINE:``.
    """
    payload: dict[str, Any] = {
        "command": entry.command,
        "stdin": entry.stdin,
        "env": dict(entry.env),
        "user": entry.user,
    }
    try:
        return JobSpec.create(
            tenant=tenant,
            name=job_name_for(entry),
            schedule=entry.schedule,
            timezone=entry.timezone,
            handler="shell",
            payload={key: value for key, value in payload.items() if value is not None},
            catch_up=catch_up,
            source=source or f"crontab:{entry.path}",
            meta={"crontab_user": entry.user, "mailto": entry.mailto, "line": entry.line},
        )
    except InvalidInput as exc:  # e.g. a command over the payload limit: say which line
        # (the tenant and catch-up policy are the command's options, not the line's)
        if exc.field not in ("tenant", "catch_up") and not exc.message.startswith(entry.path):
            exc.message = f"{entry.path}:{entry.line_no}: {exc.message}"
        raise


def _parse_line(
    line: str, line_no: int, *, path: str, system: bool, settings: _Settings
) -> CrontabEntry | None:
    """Apply one line: ``None`` for a comment, blank or environment line, else its entry.

    Raises:
        CrontabError: the line is refused.
    """

    def refuse(reason: str) -> CrontabError:
        return CrontabError(path, line_no, reason, line=line)

    body = line.strip()
    if not body or body.startswith("#"):
        return None
    if "\x00" in line:
        raise refuse("the line contains a NUL character")
    head = _ENV_HEAD.match(line)
    if head is not None:
        name = head.group("dq") or head.group("sq") or head.group("bare")
        _apply_setting(name, _env_value(name, line[head.end() :], refuse), settings, refuse)
        return None
    schedule, user, command_field = _split_entry(body, system, refuse)
    command, stdin = split_command(command_field)
    if not command.strip():
        raise refuse("empty command (nothing before the first '%')")
    if settings.bad_tz is not None:
        bad_line, bad_zone = settings.bad_tz
        raise refuse(
            f"refused because the CRON_TZ in force ({bad_zone!r}, line {bad_line}) is not a "
            "valid time zone"
        )
    try:
        parse_schedule(schedule, settings.timezone)
    except InvalidInput as exc:
        # The schedule's own message is kept whole; name the expression only if it does not.
        shown = "" if schedule in str(exc) else f" {schedule!r}"
        raise refuse(f"invalid schedule{shown}: {exc}") from None
    return CrontabEntry(
        path=path,
        line_no=line_no,
        line=line,
        schedule=schedule,
        timezone=settings.timezone,
        command=command,
        stdin=stdin,
        user=user,
        env=dict(settings.env),
        mailto=settings.mailto,
    )


def _split_entry(body: str, system: bool, refuse: _Refuse) -> tuple[str, str | None, str]:
    """Split an entry line into (schedule, user, command field); raise on a missing part."""
    layout = _SYSTEM_FORMAT if system else _USER_FORMAT
    if body.startswith("@"):
        marker, rest = _take_fields(body, 1)
        nickname = marker[0]
        if nickname == "@reboot":
            raise refuse(f"@reboot is not supported: {REBOOT_ADVICE}")
        if nickname == PULSE6_MARKER:
            fields, rest = _take_fields(rest, 6)
            if len(fields) < 6:
                raise refuse(
                    f"too few fields: {PULSE6_MARKER} needs 6 time fields (seconds first), "
                    f"found {len(fields)}"
                )
            schedule = " ".join(fields)
        elif nickname in CRON_MACROS:
            schedule = CRON_MACROS[nickname]
        else:
            raise refuse(
                f"unknown nickname {nickname!r} (crontab accepts "
                f"{', '.join(CRON_MACROS)}; Pulse adds {PULSE6_MARKER})"
            )
    else:
        fields, rest = _take_fields(body, 5)
        if len(fields) < 5:
            raise refuse(f"too few fields: expected {layout}, found {plural(len(fields), 'field')}")
        schedule = " ".join(fields)
    if rest.startswith("*"):
        # cron's "catch a common typo" (entry.c): a 6th time field where the user or the
        # command should start.
        raise refuse(
            f"a 6th time field {rest.split()[0]!r}: expected {layout} (for seconds, use "
            f"the Pulse extension '{PULSE6_MARKER} S M H DoM Mon DoW ...')"
        )
    user: str | None = None
    if system:
        user, rest = _take_user(rest, refuse)
    if not rest:
        raise refuse(f"empty command: {_read_as(schedule, body)}expected {layout}")
    return schedule, user, rest


#: The five time fields, in order, as a refusal names them.
_TIME_FIELDS = ("minute", "hour", "day of month", "month", "day of week")


def _read_as(schedule: str, body: str) -> str:
    """How a line with no command was read, when its five time fields are no schedule (``* * *
    echo short``: month ``'echo'``, day of week ``'short'``): a time field is missing, and the
    command was taken for it. Empty when they are a schedule (the command is simply missing)."""
    fields = schedule.split()
    if body.startswith("@") or len(fields) != len(_TIME_FIELDS):
        return ""
    try:
        parse_schedule(schedule, "UTC")
    except InvalidInput:
        read = ", ".join(
            f"{name} {value!r}" for name, value in zip(_TIME_FIELDS, fields, strict=True)
        )
        return (
            f"the line was read as {read}, and those are no schedule (is a time field missing?); "
        )
    return ""


def _take_user(rest: str, refuse: _Refuse) -> tuple[str, str]:
    """Take the user name of a system-format line; raise if it is missing or not a name."""
    taken, rest = _take_fields(rest, 1)
    if not taken:
        raise refuse(f"missing user name and command: expected {_SYSTEM_FORMAT}")
    user = taken[0]
    if not _USER.match(user):
        raise refuse(f"missing user name: {user!r} is not a user name (expected {_SYSTEM_FORMAT})")
    if not rest:
        raise refuse(
            f"empty command after user {user!r}: expected {_SYSTEM_FORMAT} "
            "(is the user name missing?)"
        )
    return user, rest


def _take_fields(text: str, count: int) -> tuple[list[str], str]:
    """Take up to ``count`` blank-separated fields; return them and the rest, blanks skipped."""
    fields: list[str] = []
    pos = 0
    while len(fields) < count:
        match = _FIELD.match(text, pos)
        if match is None:
            break
        fields.append(match.group(1))
        pos = match.end()
    return fields, text[pos:].lstrip(" \t")


def _env_value(name: str, text: str, refuse: _Refuse) -> str:
    """Return the value of ``name = text`` (env.c: blanks trimmed unless quoted)."""
    value = text.lstrip()
    if value[:1] not in ("'", '"'):
        return value.rstrip()
    quote = value[0]
    end = value.find(quote, 1)
    if end == -1:
        raise refuse(f"unterminated {quote} quote in the value of {name}")
    if value[end + 1 :].strip():
        raise refuse(
            f"text after the closing {quote} quote in the value of {name} "
            "(comments are not allowed on environment lines)"
        )
    return value[1:end]


def _apply_setting(name: str, value: str, settings: _Settings, refuse: _Refuse) -> None:
    """Record one environment line in ``settings``; raise on an invalid ``CRON_TZ``."""
    if name == "MAILTO":
        settings.mailto = value
    elif name == "CRON_TZ":
        zone = value.strip() or settings.default_timezone  # an empty CRON_TZ resets
        try:
            _check_zone(zone)
        except InvalidInput as exc:
            error = refuse(
                f"CRON_TZ: {exc}; the entries below are refused until a valid CRON_TZ line"
            )
            settings.bad_tz = (error.line_no, zone)
            raise error from None
        settings.timezone, settings.bad_tz = zone, None
    else:
        settings.env[name] = value


def _check_zone(zone: str) -> None:
    """Raise :class:`UnknownTimeZone` unless ``zone`` is a zone Pulse's schedules accept."""
    parse_schedule("0 0 * * *", zone)


def _stdin_text(data: str) -> str:
    """Translate the text after the first ``%`` into standard input, as ``do_command.c`` does."""
    out: list[str] = []
    escaped = False
    need_newline = False
    for char in data:
        if escaped:
            if char != "%":
                out.append("\\")
        elif char == "%":
            char = "\n"
        escaped = char == "\\"
        if not escaped:
            out.append(char)
            need_newline = char != "\n"
    if escaped:
        out.append("\\")
    if need_newline:
        out.append("\n")
    return "".join(out)


def _identity_digest(entry: CrontabEntry) -> str:
    """SHA-256 (hex) of what makes an entry the same job: schedule, zone, user, command, stdin."""
    identity = [entry.schedule, entry.timezone, entry.user, entry.command, entry.stdin]
    return hashlib.sha256(json.dumps(identity).encode("ascii")).hexdigest()


def identity_of(schedule: str, timezone: str, payload: dict[str, Any]) -> tuple[Any, ...]:
    """What makes a crontab job the same line, from its definition: (schedule, zone, user,
    command, stdin) — as :func:`job_name_for`'s hash covers it."""
    return (
        schedule,
        timezone,
        payload.get("user"),
        payload.get("command"),
        payload.get("stdin"),
    )


def is_system_crontab(path: PurePath) -> bool:
    """Whether ``path`` is read in system format (a user field before the command) unless told
    otherwise: ``/etc/crontab`` and the files of ``/etc/cron.d/``, as cron itself reads them.
    Pure: the caller resolves ``path`` (``Path.resolve()``) so links and relative names count."""
    return str(path) == "/etc/crontab" or PurePath(path).parent == PurePath("/etc/cron.d")


def _slug(text: str) -> str:
    """Lower-case ``text``, turn runs of other characters into ``-``, cut to 40 characters."""
    return _NON_SLUG.sub("-", text.lower()).strip("-")[:_SLUG_MAX].rstrip("-")


def _after_preambles(command: str) -> list[str]:
    """The words of ``command`` from its real command on: leading guards and preambles
    (:data:`_PREAMBLES`, :data:`_SLEEPER`), each ended by ``&&``, ``||`` or ``;``, are left
    out, with the ``(`` or ``{`` that groups what follows. All of ``command`` if nothing else
    is left."""
    segments: list[list[str]] = [[]]
    for token in command.split():
        if token in ("&&", "||", ";"):
            segments.append([])
        elif token.endswith(";"):
            segments[-1].append(token[:-1])
            segments.append([])
        else:
            segments[-1].append(token)
    for index, segment in enumerate(segments):
        while segment and (segment[0] in ("(", "{") or _ASSIGNMENT.match(segment[0])):
            segment = segment[1:]  # a group's opening, or an environment setting (X=1 cmd)
        if not segment:
            continue
        if segment[0] in _PREAMBLES or _SLEEPER.match(" ".join(segment)):
            continue
        return [token for later in [segment, *segments[index + 1 :]] for token in later]
    return command.split()


def _command_words(command: str) -> str:
    """The first words of ``command``'s real command (after guards such as ``test -x ... &&``)
    as a slug of at most :data:`_WORDS_MAX` characters (see :func:`job_name_for`)."""
    words: list[str] = []
    target_next = False
    for token in _after_preambles(command):
        if target_next:  # the target of a redirection standing alone: ``> /tmp/x``
            target_next = False
            continue
        if _BARE_REDIRECTION.match(token):
            target_next = True
            continue
        if token.startswith("-") or _SHELL_OPERATOR.match(token):
            continue
        part = token.rstrip("/").rsplit("/", 1)[-1] if "/" in token else token
        part = part.lstrip("\"'({").rstrip("\"')};:,.")
        if not _WHOLE_WORD.match(part):
            continue
        word = _slug(part)
        if word:
            words.append(word)
    slug = ""
    for word in words:
        longer = f"{slug}-{word}" if slug else word
        if len(longer) > _WORDS_MAX:
            return slug or word[:_WORDS_MAX].rstrip("-")
        slug = longer
    return slug
