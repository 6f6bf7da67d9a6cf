"""The command line's conventions over its whole command tree, lazy commands included: one
environment-variable rule derived from each option's name, a help text on every option, and
``--version``; and the rule at work in a real process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from pgpulse.cli.conventions import LAZY_COMMANDS
from pgpulse.cli.main import main
from pgpulse.cli.types import Number, Seconds
from pgpulse.sql import migration_files

PGPULSE = str(Path(sys.executable).with_name("pgpulse"))


def walk(
    command: click.Command, ctx: click.Context, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command, click.Context]]:
    """Every command of the tree under ``command`` with its words and its context, loading lazy
    commands the way ``pgpulse`` does when one is invoked (``get_command``)."""
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            yield from walk(sub, click.Context(sub, info_name=name, parent=ctx), (*path, name))


def tree() -> list[tuple[tuple[str, ...], click.Command, click.Context]]:
    root = click.Context(main, info_name="pgpulse", auto_envvar_prefix="PGPULSE")
    return list(walk(main, root))


#: The whole tree, walked once for the pages' commands.
TREE = tree()


def options(
    command: click.Command,
) -> list[click.Option]:
    return [
        p
        for p in command.params
        if isinstance(p, click.Option) and not (p.is_eager and not p.expose_value)
    ]


def expected_envvar(path: tuple[str, ...], option: click.Option) -> str:
    """The README's rule, written out again independently of the code under test."""
    long_name = next(o for o in option.opts if o.startswith("--"))
    return "PGPULSE_" + "_".join([*path, long_name[2:]]).upper().replace("-", "_")


def test_the_tree_holds_every_command_lazy_ones_included() -> None:
    paths = {path for path, _, _ in tree()}
    assert set(LAZY_COMMANDS) <= {p[0] for p in paths if p}
    assert {("job", "create"), ("token", "create"), ("token", "list"), ("node", "run")} <= paths
    assert sum(len(options(c)) for _, c, _ in tree()) > 60


def test_every_option_reads_one_variable_named_by_the_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for path, command, ctx in tree():
        for option in options(command):
            name = expected_envvar(path, option)
            assert option.envvar == name, (path, option.opts)
            assert option.show_envvar, (path, option.opts)
            monkeypatch.setenv(name, "from-the-rule")
            assert option.resolve_envvar_value(ctx) == "from-the-rule", (path, option.opts)
            monkeypatch.delenv(name)
            # click's own fallback from the Python parameter name is not a second way in
            click_name = f"{ctx.auto_envvar_prefix}_{(option.name or '').upper()}"
            if click_name != name:
                monkeypatch.setenv(click_name, "by-parameter-name")
                assert option.resolve_envvar_value(ctx) is None, (path, click_name)
                monkeypatch.delenv(click_name)


def test_every_option_has_help_and_help_shows_its_variable() -> None:
    missing = []
    for path, command, ctx in tree():
        text = command.get_help(ctx)
        for option in options(command):
            if not (option.help or "").strip():
                missing.append(f"pgpulse {' '.join(path)} {option.opts[0]}")
            assert expected_envvar(path, option) in text.replace("\n", " "), (path, option.opts)
        assert (command.help or command.short_help or "").strip(), path
    assert missing == []


def test_the_rule_in_a_real_process(dsn: str, db: object) -> None:
    """``--tz`` and ``--json`` once mapped to ..._TIMEZONE and ..._AS_JSON; now their own names."""
    env = {
        **os.environ,
        "PGPULSE_DATABASE_URL": dsn,
        "PGPULSE_JOB_CREATE_TZ": "Europe/Paris",
        "PGPULSE_JOB_CREATE_SCHEDULE": "0 3 * * *",
        "PGPULSE_JOB_CREATE_HANDLER": "shell",
        "PGPULSE_JOB_CREATE_PAYLOAD": '{"command": "true"}',
        "PGPULSE_JOB_LIST_JSON": "1",
    }
    created = subprocess.run(
        [PGPULSE, "job", "create", "nightly"], env=env, capture_output=True, text=True, timeout=60
    )
    assert created.returncode == 0, created.stderr
    listed = subprocess.run(
        [PGPULSE, "job", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert '"timezone": "Europe/Paris"' in listed.stdout  # JSON, by PGPULSE_JOB_LIST_JSON


def test_version() -> None:
    from importlib.metadata import version

    import pgpulse

    shown = subprocess.run([PGPULSE, "--version"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0
    assert shown.stdout == f"pgpulse {version('pgpulse')}\n"
    assert version("pgpulse") == pgpulse.__version__  # one source
    # later than the newest release in CHANGELOG.md (README speaks of "nodes of 0.2.0" as older)
    changelog = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text(encoding="utf-8")
    newest = re.search(r"^## (\d+)\.(\d+)\.(\d+) ", changelog, flags=re.M)
    assert newest is not None
    ours = re.match(r"(\d+)\.(\d+)\.(\d+)", pgpulse.__version__)
    assert ours is not None
    assert tuple(map(int, ours.groups())) > tuple(map(int, newest.groups()))
    assert "## Unreleased" not in changelog or ".dev" in pgpulse.__version__


def test_a_refused_option_value_is_one_line_exit_2() -> None:
    """click's words for the value, the option as typed, one line, no usage block."""
    refused = subprocess.run(
        [PGPULSE, "schedule", "next", "* * * * *", "--count", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr == "error: invalid value for --count: 0 is not in the range 1<=x<=1000.\n"
    from_env = subprocess.run(
        [PGPULSE, "node", "run"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PGPULSE_NODE_RUN_LEASE": "abc"},
    )
    assert (from_env.returncode, from_env.stderr) == (
        2,
        "error: invalid value for --lease: 'abc' is not a valid float. "
        "(from the environment variable PGPULSE_NODE_RUN_LEASE)\n",
    )


def test_help_ends_each_option_with_clicks_bracket() -> None:
    """click's own "[env var: X; default: 30; x>=1]", the variable by the rule, whole-number
    defaults without ".0", and no second, hand-written "[default: ...]" in the text."""
    for path, command, ctx in tree():
        for option in options(command):
            record = option.get_help_record(ctx)
            assert record is not None, (path, option.opts)
            text = record[1]
            assert text.count("[env var: ") == 1 and text.endswith("]"), (path, text)
            assert "[default" not in text, (path, text)
            assert f"[env var: {expected_envvar(path, option)}" in text, (path, text)
            assert not re.search(r"\b\d+\.0\b", text[text.rindex("[env var: ") :]), text
    shown = subprocess.run(
        [PGPULSE, "node", "run", "--help"], capture_output=True, text=True, timeout=60
    )
    help_text = " ".join(shown.stdout.split())
    assert (
        "--lease SECONDS Lease granted per claim and renewal. [env var: PGPULSE_NODE_RUN_LEASE; "
        "default: 30; x>=1]" in help_text
    )
    assert "[env var: PGPULSE_NODE_RUN_HEARTBEAT; default: 2; x>=0.1]" in help_text
    assert "[env var: PGPULSE_NODE_RUN_SLOTS; default: 10; 1<=x<=1000]" in help_text


def test_every_duration_option_is_in_seconds() -> None:
    """A number option is a duration (SECONDS in --help) unless it is a plain ratio, and every
    one refuses nan and the infinities (click's float types take them); the shards commands'
    --wait and --node-ttl as node run's (t16 ROUGH)."""
    plain = {(("bench",), "--scale")}
    for path, command, _ in tree():
        for param in command.params:
            if isinstance(param.type, click.FloatRange | click.types.FloatParamType):
                assert isinstance(param.type, Number), (path, param.opts)
                if (path, param.opts[0]) not in plain:
                    assert isinstance(param.type, Seconds), (path, param.opts)
    shown = subprocess.run(
        [PGPULSE, "shards", "set", "--help"], capture_output=True, text=True, timeout=60
    )
    help_text = " ".join(shown.stdout.split())
    assert "--wait SECONDS" in help_text and "--node-ttl SECONDS" in help_text
    assert "default: 60; x>=0]" in help_text
    assert "default: 10; x>0]" in help_text
    refused = subprocess.run(
        [PGPULSE, "shards", "show", "--node-ttl", "0"], capture_output=True, text=True, timeout=60
    )
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: invalid value for --node-ttl: 0.0 is not in the range x>0.\n",
    )


ROOT = Path(__file__).resolve().parents[1]

#: The command-line reference: the page whose synopses must show every option of every command.
CLI_PAGE = ROOT / "docs" / "cli.md"

#: Every page a user reads: README.md, the doorway, and the manual in docs/.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shell_blocks(page: Path) -> list[str]:
    """The text of each ``sh`` fenced block of ``page``, dedented (a block in a list item is
    indented)."""
    blocks = re.findall(r"```sh\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    return [textwrap.dedent(block) for block in blocks]


def page_commands(page: Path) -> set[tuple[str, ...]]:
    """The command words of every ``pgpulse ...`` line in ``page``'s shell blocks."""
    found = set()
    for block in shell_blocks(page):
        for line in block.splitlines():
            words = line.split("#")[0].split()
            if words[:1] == ["pgpulse"]:
                found |= set(command_paths(words[1:]))
    return found


def command_paths(words: list[str]) -> list[tuple[str, ...]]:
    """The commands the words after ``pgpulse`` name: each lower-case word (``a|b`` for each
    of a and b) after a group's words is a command's word; what follows a command (a job's
    name, an option, a placeholder) is not."""
    groups = {path for path, command, _ in TREE if isinstance(command, click.Group)}
    path: list[str] = []
    for word in words:
        named = [tuple(p) for p in _alternatives(path)]
        if not (re.fullmatch(r"[a-z]+(\|[a-z]+)*", word) and any(p in groups for p in named)):
            break
        path.append(word)
    return [tuple(p) for p in _alternatives(path)]


def _alternatives(path: list[str]) -> list[list[str]]:
    """``job list|show`` -> ``[job, list]``, ``[job, show]``."""
    if not path:
        return [[]]
    return [[head, *rest] for head in path[0].split("|") for rest in _alternatives(path[1:])]


def test_every_command_the_pages_show_exists() -> None:
    """README's and the docs' shell blocks name only commands that exist."""
    known = {path for path, _, _ in tree()}
    missing = sorted(
        (page.name, p) for page in PAGES for p in page_commands(page) if p not in known
    )
    assert missing == []
    shown = page_commands(CLI_PAGE)
    assert {("migrate",), ("job", "create"), ("status",), ("token", "create")} <= shown
    assert {("node", "run"), ("job", "create"), ("runs",)} <= page_commands(ROOT / "README.md")


def test_migrate_in_a_real_process_says_what_it_applied(empty_dsn: str) -> None:
    def migrate() -> tuple[int, str]:
        done = subprocess.run(
            [PGPULSE, "migrate"],
            env={**os.environ, "PGPULSE_DATABASE_URL": empty_dsn},
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.returncode, done.stdout

    versions = ", ".join(str(version) for version, _, _ in migration_files())
    assert migrate() == (0, f"applied migrations {versions}; schema is up to date\n")
    assert migrate() == (0, "nothing to apply; schema is up to date\n")


#: Documented in docs/alerts.md rather than the CLI page's synopsis (kept there by their owners).
SYNOPSIS_ELSEWHERE = {("alert",), ("notifier",)}


def synopsis_entries(page: Path) -> list[tuple[list[tuple[str, ...]], list[str]]]:
    """Each synopsis of ``page``'s shell blocks: the commands a ``pgpulse WORDS...`` line
    names (``a|b`` words stand for each) and the long options it and the indented lines that
    continue it show, in order (comments cut), repeats kept."""
    entries: list[tuple[list[tuple[str, ...]], list[str]]] = []
    for block in shell_blocks(page):
        entries.append(([], []))  # a block's first line continues nothing
        for line in block.splitlines():
            text = line.split(" #")[0]
            if text.startswith("pgpulse "):
                entries.append((command_paths(text.split()[1:]), []))
            elif not (text.startswith(" ") and entries and entries[-1][0]):
                entries.append(([], []))  # the lines after this one continue no synopsis
                continue
            entries[-1][1].extend(re.findall(r"--[a-z][a-z0-9-]*", text))
    return [entry for entry in entries if entry[0]]


def synopses(page: Path) -> dict[tuple[str, ...], set[str]]:
    """The long options each command's synopses in ``page`` show (:func:`synopsis_entries`)."""
    found: dict[tuple[str, ...], set[str]] = {}
    for paths, shown in synopsis_entries(page):
        for path in paths:
            found.setdefault(path, set()).update(shown)
    return found


def long_options(command: click.Command) -> set[str]:
    return {
        o
        for option in options(command)
        for o in [*option.opts, *option.secondary_opts]
        if o.startswith("--")
    }


def test_the_cli_page_shows_each_option_once() -> None:
    """One synopsis (a ``pgpulse`` line and the lines that continue it) shows each option once:
    a repeated ``[--max-body 65536] [--secure-cookies]`` line is a leftover, which the sets of
    :func:`test_the_cli_page_shows_every_option_and_no_other` cannot see. (Examples on other
    pages may repeat a repeatable option: ``--notify ops --notify pager``.)"""
    repeated = [
        f"pgpulse {' '.join(paths[0])} {option}"
        for paths, shown in synopsis_entries(CLI_PAGE)
        for option in sorted(set(shown))
        if shown.count(option) > 1
    ]
    assert repeated == []


def test_the_cli_page_shows_every_option_and_no_other() -> None:
    """docs/cli.md's synopsis agrees with --help: every option of every command (the web's
    and the tools' too), and none that the command does not have."""
    shown = synopses(CLI_PAGE)
    missing, unknown = [], []
    for path, command, _ in tree():
        if isinstance(command, click.Group) or path[:1] in {p[:1] for p in SYNOPSIS_ELSEWHERE}:
            continue
        longs = long_options(command)
        if path not in shown:
            missing.append(f"pgpulse {' '.join(path)} (no synopsis)")
            continue
        missing += [f"pgpulse {' '.join(path)} {o}" for o in sorted(longs - shown[path])]
        unknown += [f"pgpulse {' '.join(path)} {o}" for o in sorted(shown[path] - longs)]
    global_options = {o for option in options(main) for o in option.opts if o.startswith("--")}
    missing += [f"pgpulse {o}" for o in sorted(global_options - shown.get((), set()))]
    assert (missing, unknown) == ([], [])


def test_no_page_shows_an_option_its_command_lacks() -> None:
    """The commands shown on other pages (README's first job, the production guide's shard
    count, the HTTP API's tokens...) use only options their command has: a renamed option
    breaks the example that still shows the old name. A line's options may be the command's or
    the global ones (``pgpulse --database NAME status``)."""
    commands = {path: command for path, command, _ in tree()}
    global_options = long_options(main) | {"--help", "--version"}
    unknown = [
        f"{page.name}: pgpulse {' '.join(path)} {option}"
        for page in PAGES
        for path, shown in synopses(page).items()
        if path in commands
        for option in sorted(shown - long_options(commands[path]) - global_options)
    ]
    assert unknown == []
