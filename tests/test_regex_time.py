"""Every regular expression Pulse applies to outside input runs in time linear in its input, on
adversarial shapes (the e-mail notifier's host pattern took 8 s for ``"a" * 27 +
"!"``, doubling with each character, and stalled the node's event loop meanwhile).

How the patterns are found: :data:`PATTERNS` lists each module-level compiled pattern with the
method Pulse calls it with, and :data:`INLINE` the patterns written inline in a call;
:func:`test_every_pattern_of_pulse_is_listed_here` imports every module of ``pgpulse`` and
reads every source file, and fails when one holds a pattern these tables do not name, so a new
pattern cannot escape the timing test.

How the time is judged, with no tight wall-clock margin that a loaded machine could break: the
input grows from 10 characters by small steps first (a pattern exponential in its input is
caught while one call still takes well under a second: the test stops at the first call over
:data:`STEP_LIMIT` seconds), then to 5,000 characters. The growth from 50 to 5,000 characters
is then compared with that of a reference pattern that scans the same text once: a linear
pattern grows as the reference does, a quadratic one about 100 times more. The machine's speed
and caches cancel out, and the least of several timings is kept; the wide gap between the two
(:data:`MAX_RELATIVE_GROWTH`) leaves room for the noise of a loaded machine, which was seen to
reach 10 times between two lengths.
"""

from __future__ import annotations

import functools
import importlib
import math
import pkgutil
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import pgpulse
from pgpulse.alerts.notifiers.fields import is_host_name
from pgpulse.db.database import is_permanent_refusal

#: Module-level patterns: (module, name) -> how Pulse applies them to outside input.
PATTERNS: dict[tuple[str, str], str] = {
    ("pgpulse.cli.applyfile", "_SOURCE_NAME"): "match",
    ("pgpulse.cli.applyfile", "_HEADER"): "match",
    ("pgpulse.cli.applyfile", "_DOTTED"): "match",
    ("pgpulse.cli.applyfile", "_ASSIGN"): "match",
    ("pgpulse.cli.applyfile", "_AT_LINE"): "search",
    ("pgpulse.alerts.notifiers.fields", "_CONTROL"): "search",
    ("pgpulse.alerts.notifiers.fields", "HEADER_NAME"): "match",
    ("pgpulse.alerts.notifiers.redaction", "_WORD_SEGMENT"): "match",
    ("pgpulse.core.jobs", "_HANDLER_RE"): "match",
    ("pgpulse.core.jobs", "_NUL_ESCAPE"): "search",
    ("pgpulse.core.payloads", "_HEADER_NAME_RE"): "match",
    ("pgpulse.core.cron_syntax", "_LAST_RE"): "fullmatch",
    ("pgpulse.core.cron_syntax", "_NEAREST_RE"): "fullmatch",
    ("pgpulse.core.cron_syntax", "_NTH_RE"): "fullmatch",
    ("pgpulse.core.cron_syntax", "_LAST_DOW_RE"): "fullmatch",
    ("pgpulse.core.cron_syntax", "_EXTENSION_CHARS"): "fullmatch",
    ("pgpulse.web.errors", "_UNION_MEMBER"): "fullmatch",
    ("pgpulse.db.tokens", "_TOKEN_RE"): "match",
    ("pgpulse.web.api", "_ISO_DATE"): "match",
    ("pgpulse.web.why", "_ISO"): "match",
    ("pgpulse.core.placeholders", "_PLACEHOLDER"): "finditer",
    ("pgpulse.core.retention", "_KEEP_RE"): "fullmatch",
    ("pgpulse.core.keys", "_KEY_RE"): "match",
    ("pgpulse.core.schedule", "_EVERY_RE"): "fullmatch",
    ("pgpulse.core.schedule", "_AT_RE"): "fullmatch",
    ("pgpulse.core.crontab", "_SHELL_OPERATOR"): "match",
    ("pgpulse.core.crontab", "_BARE_REDIRECTION"): "match",
    ("pgpulse.core.crontab", "_WHOLE_WORD"): "match",
    ("pgpulse.core.crontab", "_ASSIGNMENT"): "match",
    ("pgpulse.core.crontab", "_SLEEPER"): "match",
    ("pgpulse.core.crontab", "_ENV_HEAD"): "match",
    ("pgpulse.core.crontab", "_FIELD"): "match",
    ("pgpulse.core.crontab", "_USER"): "match",
    ("pgpulse.core.crontab", "_NON_SLUG"): "sub",
    ("pgpulse.db.database", "_FATAL_REFUSAL"): "search",
    ("pgpulse.db.database", "_CLIENT_REFUSAL"): "search",
    ("pgpulse.db.database", "_DSN_PASSWORDS[0]"): "search",
    ("pgpulse.db.database", "_DSN_PASSWORDS[1]"): "search",
    ("pgpulse.db.database", "_DSN_PASSWORDS[2]"): "search",
    ("pgpulse.db.database", "_DSN_PASSWORDS[3]"): "search",
    ("pgpulse.core.calendars", "_NAME_RE"): "fullmatch",
    ("pgpulse.core.limits", "_DURATION"): "fullmatch",
    # Pulse's own SQL files and help texts, not outside input; timed all the same.
    ("pgpulse.sql", "_NAME"): "split",
    ("pgpulse.sql", "_FRAGMENT"): "split",
    ("pgpulse.sql", "_MARKER"): "findall",
}
#: Patterns written inline in a call: (file, pattern, method). ``sql/__init__.py`` applies its
#: own to Pulse's SQL files.
INLINE: list[tuple[str, str, str]] = [
    ("db/database.py", r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", "sub"),
    ("cli/applyfile.py", "[0-9_]+", "findall"),
    # One per secret, escaped: timed with a secret of the shapes' own characters.
    ("core/masking.py", r"(?<![^\W_])a0 \\(?![^\W_])", "sub"),
    ("core/calendars.py", r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "fullmatch"),
]
#: Checks written without a regular expression where one backtracked.
FUNCTIONS: dict[str, Callable[[str], object]] = {
    "notify.fields.is_host_name": is_host_name,
    "database.is_permanent_refusal": is_permanent_refusal,
}

#: Adversarial shapes: a repeated unit between a prefix that lets an anchored pattern start and
#: a suffix that makes the match fail at the very end (the worst case of a backtracking engine).
UNITS = ("a", "0", "a-", "a.", "-", ".", " ", "\t", "\\", "\\\\u", '"', "'", "[", "a=", "l",
         "1w", "#", "{a", "%(", "=?", ":", "/", "é", "a@", "FATAL: ")  # fmt: skip
SHAPES = [
    *[("", unit, "!") for unit in UNITS],
    *[("", unit, "\x00") for unit in ("a", "0", " ")],
    *[
        (prefix, unit, "!")
        for prefix in ("2026-01-01T00:00", "[", "pgp_", '"', "://a:", "password=", "perl -e ")
        for unit in ("0", "a", " ")
    ],
]
#: Input lengths: small steps first (see the module's docstring), then to 5,000.
LENGTHS = (10, 13, 16, 19, 22, 25, 28, 32, 40, 50, 75, 100, 200, 400, 625, 1200, 2500, 5000)
#: Seconds one call may take at any length before the pattern is judged to backtrack.
STEP_LIMIT = 0.05
#: The two lengths whose times are compared.
SHORT, LONG = 50, 5000
#: Largest accepted growth from :data:`SHORT` to :data:`LONG` characters, relative to the
#: reference's (a linear pattern: about 1; a quadratic one: about 100).
MAX_RELATIVE_GROWTH = 25.0
#: A linear scan of the whole text that fails at its end, as a backtracking engine runs it.
_REFERENCE = re.compile(r"[^\x01]*\x01")


def _text(prefix: str, unit: str, end: str, length: int) -> str:
    return prefix + unit * max(1, (length - len(prefix) - len(end)) // len(unit)) + end


def _seconds(
    call: Callable[[str], object], text: str, *, batch: float = 0.001, rounds: int = 5
) -> float:
    """The least time of one call over ``rounds`` batches of at least ``batch`` seconds each
    (a loaded machine only ever makes a batch slower)."""
    best = math.inf
    for _ in range(rounds):
        calls, started = 0, time.perf_counter()
        while True:
            call(text)
            calls += 1
            elapsed = time.perf_counter() - started
            if elapsed >= batch:
                break
        best = min(best, elapsed / calls)
    return best


@functools.cache
def _reference_seconds(text: str) -> float:
    return _seconds(_REFERENCE.match, text)


def _apply(pattern: re.Pattern[str], method: str) -> Callable[[str], object]:
    if method == "sub":
        return lambda text: pattern.sub("-", text)
    bound: Callable[[str], object] = getattr(pattern, method)
    return bound


def check_linear(call: Callable[[str], object], what: str) -> None:
    """Fail when ``call`` takes more than :data:`STEP_LIMIT` at any length, or grows faster
    than the reference scan between :data:`SHORT` and :data:`LONG` characters, on any shape of
    :data:`SHAPES`."""
    for prefix, unit, end in SHAPES:
        shape = f"{prefix!r} + {unit!r} * n + {end!r}"
        times: dict[int, float] = {}
        for length in LENGTHS:
            text = _text(prefix, unit, end, length)
            started = time.perf_counter()
            call(text)
            took = time.perf_counter() - started
            if took > STEP_LIMIT:  # once more: a loaded machine may have paused this one
                took = _seconds(call, text, batch=0, rounds=3)
            assert took <= STEP_LIMIT, f"{what} took {took:.3f} s on {shape}, n={length}"
            if length in (SHORT, LONG):
                times[length] = _seconds(call, text) / _reference_seconds(text)
        growth = times[LONG] / times[SHORT]
        assert growth < MAX_RELATIVE_GROWTH, (
            f"{what} grows {growth:.1f} times more than a linear scan from n={SHORT} to {LONG} "
            f"on {shape}"
        )


def _pattern(module: str, name: str) -> re.Pattern[str]:
    """``module.name``, or ``module.name[i]`` for one of a tuple of patterns."""
    attribute, _, index = name.partition("[")
    value = getattr(importlib.import_module(module), attribute)
    found: re.Pattern[str] = value[int(index.rstrip("]"))] if index else value
    return found


@pytest.mark.parametrize(("module", "name"), sorted(PATTERNS), ids=lambda v: str(v))
def test_module_patterns_take_linear_time(module: str, name: str) -> None:
    check_linear(_apply(_pattern(module, name), PATTERNS[module, name]), f"{module}.{name}")


@pytest.mark.parametrize(("file", "source", "method"), INLINE, ids=lambda v: str(v))
def test_inline_patterns_take_linear_time(file: str, source: str, method: str) -> None:
    check_linear(_apply(re.compile(source), method), f"{file}: {source}")


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_checks_that_replaced_patterns_take_linear_time(name: str) -> None:
    check_linear(FUNCTIONS[name], name)


def test_the_host_check_is_quick_where_the_pattern_took_seconds() -> None:
    """The issue's input, and the same at 5,000 characters (the pattern's time doubled with
    each character: 8 s at 28)."""
    assert not is_host_name("a" * 27 + "!")
    assert not is_host_name("a" * 5000 + "!")
    assert [is_host_name(h) for h in ("smtp.example.com", "smtp.example.com.", "localhost",
                                      "127.0.0.1", "::1", "[::1]", "xn--bcher-kva.example")]\
        == [True] * 7  # fmt: skip
    assert [is_host_name(h) for h in ("", ".", "a..b", "-a.example", "a-.example", "a_b",
                                      "a" * 64 + ".example", "[1.2.3.4]", "[::1", "a b")]\
        == [False] * 10  # fmt: skip


def _pulse_modules() -> list[str]:
    walked = pkgutil.walk_packages(pgpulse.__path__, "pgpulse.")
    # Importing __main__ runs the CLI.
    return ["pgpulse", *(i.name for i in walked if not i.name.endswith(".__main__"))]


def test_every_pattern_of_pulse_is_listed_here() -> None:
    """A new module-level pattern, or a new inline ``re.<call>(`` in a source file, must be
    added to the tables above (and so be timed)."""
    found: set[tuple[str, str]] = set()
    for module_name in _pulse_modules():
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # an optional extra that is not installed
            continue
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and not name.startswith("__"):
                found.add((module_name, name))
            elif isinstance(value, tuple | list):  # a table of patterns
                found |= {
                    (module_name, f"{name}[{i}]")
                    for i, item in enumerate(value)
                    if isinstance(item, re.Pattern)
                }
    assert found == set(PATTERNS)
    root = Path(pgpulse.__file__).parent
    calls = re.compile(r"\bre\.(?:match|fullmatch|search|sub|subn|split|findall|finditer)\(")
    inline: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        count = len(calls.findall(path.read_text()))
        if count:
            inline[path.relative_to(root).as_posix()] = count
    # sql/__init__.py: one call over Pulse's own migration file names, not timed (no statement
    # text is rewritten by a regular expression any more).
    expected: dict[str, Any] = {"sql/__init__.py": 1}
    for file, _, _ in INLINE:
        expected[file] = expected.get(file, 0) + 1
    assert inline == expected
