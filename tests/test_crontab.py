"""Crontab import: the formats of ``man 5 crontab`` (Vixie/Debian cron, cronie), parsed purely."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgpulse.core.crontab import (
    CrontabEntry,
    CrontabParse,
    entry_to_spec,
    job_name_for,
    parse_crontab,
    split_command,
)
from pgpulse.core.errors import CrontabError, InvalidInput, UnknownTimeZone
from pgpulse.core.schedule import parse_schedule

RELAY_CRONTAB = Path(__file__).resolve().parents[1] / "examples" / "relay.crontab"
NAME_RE = re.compile(r"^[a-z0-9-]+\.[a-z0-9-]+-[0-9a-f]{8}(?:-[2-9][0-9]*)?$")


def parse(text: str, *, system: bool = False, default_timezone: str = "UTC") -> CrontabParse:
    return parse_crontab(
        text, path="/etc/cron.d/backup", system=system, default_timezone=default_timezone
    )


def only_entry(text: str, *, system: bool = False) -> CrontabEntry:
    result = parse(text, system=system)
    assert result.errors == []
    assert len(result.entries) == 1
    return result.entries[0]


def only_error(text: str, *, system: bool = False) -> CrontabError:
    result = parse(text, system=system)
    assert len(result.errors) == 1, result.errors
    return result.errors[0]


# --- entry formats ------------------------------------------------------------------------


def test_user_format_entry_has_every_field() -> None:
    entry = only_entry("30 4 1,15 * 5 /usr/local/bin/backup --full\n")
    assert entry == CrontabEntry(
        path="/etc/cron.d/backup",
        line_no=1,
        line="30 4 1,15 * 5 /usr/local/bin/backup --full",
        schedule="30 4 1,15 * 5",
        timezone="UTC",
        command="/usr/local/bin/backup --full",
        stdin=None,
        user=None,
        env={},
        mailto=None,
        occurrence=1,
    )


def test_blanks_between_fields_are_normalised_and_the_command_kept_verbatim() -> None:
    entry = only_entry("  \t*/15   0-6\t* *  mon-fri\t  run  --twice   spaced")
    assert entry.schedule == "*/15 0-6 * * mon-fri"
    assert entry.command == "run  --twice   spaced"
    assert entry.line == "  \t*/15   0-6\t* *  mon-fri\t  run  --twice   spaced"


def test_day_and_month_names_pass_through_to_the_schedule() -> None:
    entry = only_entry("0 9 * jan mon echo new-year-mondays")
    assert entry.schedule == "0 9 * jan mon"


def test_system_format_takes_the_user_from_the_sixth_field() -> None:
    entry = only_entry("17 * * * * root cd / && run-parts --report /etc/cron.hourly", system=True)
    assert entry.schedule == "17 * * * *"
    assert entry.user == "root"
    assert entry.command == "cd / && run-parts --report /etc/cron.hourly"


@pytest.mark.parametrize(
    ("line", "schedule"),
    [
        ("@yearly rotate", "@yearly"),
        ("@annually rotate", "@yearly"),
        ("@monthly rotate", "@monthly"),
        ("@weekly rotate", "@weekly"),
        ("@daily rotate", "@daily"),
        ("@midnight rotate", "@daily"),
        ("@hourly rotate", "@hourly"),
    ],
)
def test_nicknames_become_pulse_macros(line: str, schedule: str) -> None:
    entry = only_entry(line)
    assert (entry.schedule, entry.command) == (schedule, "rotate")


def test_nickname_in_system_format_is_followed_by_the_user() -> None:
    entry = only_entry("@daily   www-data  php /srv/app/artisan schedule:run", system=True)
    assert (entry.schedule, entry.user, entry.command) == (
        "@daily",
        "www-data",
        "php /srv/app/artisan schedule:run",
    )


@pytest.mark.parametrize("system", [False, True])
def test_pulse6_extension_takes_six_seconds_first_fields(system: bool) -> None:
    line = "@pulse6 */5 * * * * * " + ("nobody " if system else "") + "echo tick"
    entry = only_entry(line, system=system)
    assert entry.schedule == "*/5 * * * * *"
    assert entry.command == "echo tick"
    assert entry.user == ("nobody" if system else None)


def test_comments_and_blank_lines_are_ignored_and_line_numbers_kept() -> None:
    text = (
        "# m h dom mon dow command\n\n   \t\n   # indented comment\n"
        "0 1 * * * first\n#0 2 * * * off\n0 3 * * * second\n"
    )
    result = parse(text)
    assert result.errors == []
    assert [(e.line_no, e.command) for e in result.entries] == [(5, "first"), (7, "second")]


def test_crlf_line_endings_are_stripped() -> None:
    result = parse("PATH=/bin\r\n0 1 * * * first\r\n")
    assert result.errors == []
    assert result.entries[0].command == "first"
    assert result.entries[0].line == "0 1 * * * first"
    assert result.entries[0].env == {"PATH": "/bin"}


# --- environment lines --------------------------------------------------------------------


def test_environment_lines_apply_to_later_entries_in_file_order() -> None:
    text = "\n".join(
        [
            "0 0 * * * before",
            "SHELL=/bin/bash",
            "  PATH = /usr/local/bin:/usr/bin:/bin",
            'GREETING = " hello world "',
            "QUOTED='single quoted'",
            "INNER=  keeps  inner  blanks   ",
            'EMPTY=""',
            "BARE=",
            '"ODD NAME" = yes',
            "0 0 * * * after",
            "SHELL=/bin/dash",
            "0 0 * * * later",
        ]
    )
    before, after, later = parse(text).entries
    assert before.env == {}
    assert after.env == {
        "SHELL": "/bin/bash",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "GREETING": " hello world ",
        "QUOTED": "single quoted",
        "INNER": "keeps  inner  blanks",
        "EMPTY": "",
        "BARE": "",
        "ODD NAME": "yes",
    }
    assert list(after.env) == [
        "SHELL",
        "PATH",
        "GREETING",
        "QUOTED",
        "INNER",
        "EMPTY",
        "BARE",
        "ODD NAME",
    ]
    # A redefinition changes the value in place, for the lines below it only.
    assert later.env["SHELL"] == "/bin/dash"
    assert list(later.env) == list(after.env)
    assert after.env["SHELL"] == "/bin/bash"


def test_cron_tz_sets_the_zone_of_later_lines_only() -> None:
    text = "\n".join(
        [
            "0 9 * * * default-zone",
            "CRON_TZ=Europe/Paris",
            "0 9 * * * paris",
            'CRON_TZ = "Asia/Tokyo"',
            "0 9 * * * tokyo",
            "CRON_TZ=",
            "0 9 * * * reset",
        ]
    )
    result = parse(text, default_timezone="America/New_York")
    assert result.errors == []
    assert [(e.command, e.timezone) for e in result.entries] == [
        ("default-zone", "America/New_York"),
        ("paris", "Europe/Paris"),
        ("tokyo", "Asia/Tokyo"),
        ("reset", "America/New_York"),
    ]
    assert all("CRON_TZ" not in e.env for e in result.entries)


def test_invalid_cron_tz_is_refused_and_refuses_entries_until_a_valid_one() -> None:
    text = "\n".join(
        [
            "0 9 * * * before",
            "CRON_TZ=Mars/Olympus",
            "0 9 * * * refused-one",
            "# a comment is still fine",
            "0 9 * * * refused-two",
            "CRON_TZ=Europe/Berlin",
            "0 9 * * * berlin",
        ]
    )
    result = parse(text)
    assert [(e.command, e.timezone) for e in result.entries] == [
        ("before", "UTC"),
        ("berlin", "Europe/Berlin"),
    ]
    assert [e.line_no for e in result.errors] == [2, 3, 5]
    with pytest.raises(UnknownTimeZone) as zone_error:
        parse_schedule("0 0 * * *", "Mars/Olympus")
    assert str(result.errors[0]).startswith("/etc/cron.d/backup:2: CRON_TZ: ")
    assert str(zone_error.value) in result.errors[0].reason
    for error in result.errors[1:]:
        assert "CRON_TZ in force ('Mars/Olympus', line 2) is not a valid time zone" in error.reason


def test_tz_goes_to_the_environment_only() -> None:
    entry = only_entry("TZ=Asia/Kolkata\n0 9 * * * date")
    assert entry.timezone == "UTC"
    assert entry.env == {"TZ": "Asia/Kolkata"}


def test_mailto_is_recorded_and_not_in_the_environment() -> None:
    result = parse(
        '0 1 * * * none-yet\nMAILTO=ops@example.com\n0 2 * * * mailed\nMAILTO=""\n0 3 * * * off'
    )
    assert [(e.command, e.mailto) for e in result.entries] == [
        ("none-yet", None),
        ("mailed", "ops@example.com"),
        ("off", ""),
    ]
    assert all(e.env == {} for e in result.entries)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('NAME="unterminated', 'unterminated " quote in the value of NAME'),
        ("NAME='a' # note", "text after the closing ' quote in the value of NAME"),
    ],
)
def test_malformed_environment_lines_are_refused(line: str, reason: str) -> None:
    assert reason in only_error(line).reason


# --- the % rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "command", "stdin"),
    [
        ("echo a%b%c", "echo a", "b\nc\n"),
        (r"date +\%Y", "date +%Y", None),
        ("cat%", "cat", ""),
        ("cat%%", "cat", "\n"),
        ("cat%done%", "cat", "done\n"),
        (r"cat%100\% sure", "cat", "100% sure\n"),
        (r"printf '\n' %x", r"printf '\n' ", "x\n"),
        (
            'mail -s "It\'s 10pm" joe%Joe,%%Where are your kids?%',
            'mail -s "It\'s 10pm" joe',
            "Joe,\n\nWhere are your kids?\n",
        ),
    ],
)
def test_percent_rule(field: str, command: str, stdin: str | None) -> None:
    assert split_command(field) == (command, stdin)
    entry = only_entry(f"0 22 * * 1-5 {field}")
    assert (entry.command, entry.stdin) == (command, stdin)


# --- refused lines ------------------------------------------------------------------------


def test_reboot_is_refused_with_file_and_line() -> None:
    error = only_error("# boot\n@reboot /usr/local/bin/warm-cache")
    assert (error.path, error.line_no) == ("/etc/cron.d/backup", 2)
    assert error.value == "@reboot /usr/local/bin/warm-cache"  # the raw line
    assert str(error) == (
        "/etc/cron.d/backup:2: @reboot is not supported: Pulse has no reboot event: start the "
        "command from your service manager at boot, or run a job once now with `pgpulse job "
        "trigger`"
    )


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("* * *", "too few fields: expected 5 time fields, then the command, found 3 fields"),
        ("0 4 * * *", "empty command: expected 5 time fields, then the command"),
        ("0 4 * * *    ", "empty command: expected 5 time fields, then the command"),
        ("0 4 * * * %only stdin", "empty command (nothing before the first '%')"),
        (
            "* * * echo short",  # a time field missing: the command was read as two of them
            "empty command: the line was read as minute '*', hour '*', day of month '*', month "
            "'echo', day of week 'short', and those are no schedule (is a time field missing?); "
            "expected 5 time fields, then the command",
        ),
        ("@daily", "empty command: expected 5 time fields, then the command"),
        (
            "@pulse6 * * * * cmd",
            "too few fields: @pulse6 needs 6 time fields (seconds first), found 5",
        ),
        ("@pulse6 * * * * * cmd", "empty command"),
        (
            "@every 5m cmd",
            "unknown nickname '@every' (crontab accepts @yearly, @annually, "
            "@monthly, @weekly, @daily, @midnight, @hourly; Pulse adds @pulse6)",
        ),
        (
            "*/5 * * * * * echo six",
            "a 6th time field '*': expected 5 time fields, then the command",
        ),
        ("0 4 * * * echo \x00", "the line contains a NUL character"),
    ],
)
def test_malformed_lines_are_refused_with_a_reason(line: str, reason: str) -> None:
    error = only_error(line)
    assert error.line_no == 1
    assert error.reason.startswith(reason)
    assert str(error) == f"/etc/cron.d/backup:1: {error.reason}"


def test_refused_lines_do_not_stop_the_other_lines() -> None:
    text = "0 1 * * * first\n* * *\nPATH=/bin\n@reboot x\n0 2 * * * second\n"
    result = parse(text)
    assert [(e.line_no, e.command, e.env) for e in result.entries] == [
        (1, "first", {}),
        (5, "second", {"PATH": "/bin"}),
    ]
    assert [str(e).split(": ")[0] for e in result.errors] == [
        "/etc/cron.d/backup:2",
        "/etc/cron.d/backup:4",
    ]
    assert all(isinstance(e, InvalidInput) and e.field == "crontab" for e in result.errors)


@pytest.mark.parametrize("schedule", ["61 * * * *", "0 0 30 2 *", "0 0 * foo *"])
def test_invalid_schedule_is_refused_with_the_schedule_error(schedule: str) -> None:
    with pytest.raises(InvalidInput) as schedule_error:
        parse_schedule(schedule, "UTC")
    error = only_error(f"# header\n{schedule} /usr/bin/true")
    assert error.line_no == 2
    assert error.reason.startswith("invalid schedule")
    assert str(schedule_error.value) in error.reason


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("0 4 * * *", "missing user name and command"),
        (
            "0 4 * * * /usr/bin/backup --full",
            "missing user name: '/usr/bin/backup' is not a user name",
        ),
        ("0 4 * * * backup.sh", "empty command after user 'backup.sh'"),
        ("@daily", "missing user name and command"),
        ("@daily backup", "empty command after user 'backup'"),
        ("0 4 * * * * root cmd", "a 6th time field '*': expected 5 time fields, a user name"),
    ],
)
def test_system_format_without_a_user_is_refused(line: str, reason: str) -> None:
    error = only_error(line, system=True)
    assert error.reason.startswith(reason)
    assert "a user name, then the command" in error.reason


def test_unknown_default_timezone_is_the_callers_error() -> None:
    with pytest.raises(UnknownTimeZone):
        parse("0 0 * * * x", default_timezone="Mars/Olympus")


# --- job names ----------------------------------------------------------------------------


BACKUP = "PATH=/bin\n0 4 * * * /usr/local/bin/backup --full\n@hourly sync-mirror%now\n"


def names(text: str, path: str = "/etc/cron.d/backup") -> list[str]:
    result = parse_crontab(text, path=path)
    assert result.errors == []
    return [job_name_for(entry) for entry in result.entries]


def test_job_names_are_readable_and_bounded() -> None:
    backup, mirror = names(BACKUP)
    assert re.fullmatch(r"backup\.backup-[0-9a-f]{8}", backup)  # a path's last part, no option
    assert re.fullmatch(r"backup\.sync-mirror-[0-9a-f]{8}", mirror)
    long_name = names("0 0 * * * " + "very-long-command " * 20)[0]
    assert re.fullmatch(r"backup\.very-long-command-[0-9a-f]{8}", long_name)  # whole words
    assert NAME_RE.match(long_name)
    assert names("0 0 * * * ./$$$")[0].startswith("backup.job-")
    assert re.fullmatch(r"backup\.a{24}-[0-9a-f]{8}", names("0 0 * * * " + "a" * 50)[0])


@pytest.mark.parametrize(
    ("command", "words"),
    [
        pytest.param(
            "php /var/www/html/artisan schedule:run >> /dev/null 2>&1",
            "php-artisan-schedule-run",
            id="redirections_left_out",
        ),
        pytest.param(
            "test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )",
            "run-parts-cron-daily",
            id="guard_and_cd_left_out",
        ),
        pytest.param(
            'test -x /usr/bin/certbot && perl -e "sleep int(rand(43200))" && certbot -q renew',
            "certbot-renew",
            id="guard_and_random_sleep_left_out",
        ),
        pytest.param(
            "[ -x /usr/lib/php/sessionclean ] && /usr/lib/php/sessionclean",
            "sessionclean",
            id="bracket_guard_left_out",
        ),
        pytest.param("sleep 30; /usr/bin/backup --full", "backup", id="sleep_left_out"),
        pytest.param(
            "test -e /run/systemd/system || SERVICE_MODE=1 /sbin/e2scrub_all -A -r",
            "e2scrub-all",
            id="environment_setting_left_out",
        ),
        pytest.param("[[ -d /tmp ]] && echo bash-ok", "echo-bash-ok", id="double_bracket"),
        pytest.param("test -x /x", "test-x", id="only_a_guard_is_kept"),
        pytest.param(
            'echo "relay: billing usage rollup (tenant API tokens -> billing metrics)"',
            "echo-relay-billing-usage",
            id="quoted_words",
        ),
        pytest.param(r"date +\%F > /tmp/x", "date", id="redirection_target_and_format_left_out"),
        pytest.param("backup 2>> /var/log/backup.log", "backup", id="stderr_target_left_out"),
        pytest.param("sort < /tmp/in | gzip", "sort-gzip", id="input_target_left_out"),
        pytest.param("echo $HOME ok", "echo-ok", id="variable_left_out"),
    ],
)
def test_job_names_use_the_first_words_of_the_command(command: str, words: str) -> None:
    [name] = names(f"0 0 * * * {command}")
    assert re.fullmatch(rf"backup\.{words}-[0-9a-f]{{8}}", name), name
    assert len(name) <= len("backup.") + 24 + 9


def test_job_names_are_stable_across_reimports_and_line_moves() -> None:
    first = names(BACKUP)
    assert names(BACKUP) == first
    assert names("# added later\n\n" + BACKUP) == first
    moved = "@hourly sync-mirror%now\nPATH=/bin\n0 4 * * * /usr/local/bin/backup --full\n"
    assert names(moved) == first[::-1]
    # The name comes from the file's stem, not its directory.
    assert names(BACKUP, path="/srv/other/dir/backup.crontab") == first


def test_job_names_change_with_what_the_job_does() -> None:
    base = names("0 4 * * * backup")[0]
    changed = [
        names("0 5 * * * backup")[0],
        names("CRON_TZ=Europe/Paris\n0 4 * * * backup")[0],
        names("0 4 * * * backup%input")[0],
        names("0 4 * * * backup --full")[0],
    ]
    assert len({base, *changed}) == 5
    system = parse_crontab("0 4 * * * root backup", path="/etc/cron.d/backup", system=True)
    assert job_name_for(system.entries[0]) != base
    # The environment is not part of the job's identity: a new PATH updates the same job.
    assert names("PATH=/opt/bin\n0 4 * * * backup")[0] == base


def test_identical_lines_get_distinct_names_in_order() -> None:
    text = "0 4 * * * backup\n0 4 * * * other\n0 4 * * * backup\n0 4 *  * * backup\n"
    first, other, second, third = names(text)
    assert second == f"{first}-2"
    assert third == f"{first}-3"
    assert len({first, other, second, third}) == 4
    assert names(text) == [first, other, second, third]


def test_job_name_prefix_can_be_given() -> None:
    entry = only_entry("0 4 * * * backup")
    assert job_name_for(entry, prefix="host1-backup").startswith("host1-backup.backup-")


# --- job specs ----------------------------------------------------------------------------


def test_entry_to_spec_for_a_user_crontab_line() -> None:
    text = (
        "MAILTO=ops@example.com\nCRON_TZ=Europe/Paris\nPATH=/usr/bin:/bin\n"
        "30 2 * * * nightly --fast\n"
    )
    entry = only_entry(text)
    spec = entry_to_spec(entry, tenant="relay")
    assert spec.tenant == "relay"
    assert spec.name == job_name_for(entry)
    assert spec.schedule == "30 2 * * *"
    assert spec.timezone == "Europe/Paris"
    assert spec.handler == "shell"
    assert spec.payload == {"command": "nightly --fast", "env": {"PATH": "/usr/bin:/bin"}}
    assert spec.catch_up == "skip"
    assert spec.source == "crontab:/etc/cron.d/backup"  # one source per file
    assert spec.meta == {
        "crontab_user": None,
        "mailto": "ops@example.com",
        "line": "30 2 * * * nightly --fast",
    }


def test_entry_to_spec_for_a_system_line_with_stdin() -> None:
    entry = only_entry("@hourly backup mysqldump --all%y", system=True)
    spec = entry_to_spec(entry)
    assert spec.tenant == "default"
    assert spec.schedule == "@hourly"
    assert spec.timezone == "UTC"
    assert spec.payload == {
        "command": "mysqldump --all",
        "stdin": "y\n",
        "env": {},
        "user": "backup",
    }
    assert spec.meta == {
        "crontab_user": "backup",
        "mailto": None,
        "line": "@hourly backup mysqldump --all%y",
    }


def test_entry_to_spec_catch_up_can_be_chosen_and_is_validated() -> None:
    entry = only_entry("* * * * * rollup")
    assert entry_to_spec(entry, catch_up="backfill").catch_up == "backfill"
    with pytest.raises(InvalidInput) as error:
        entry_to_spec(entry, catch_up="sometimes")
    assert error.value.field == "catch_up"


# --- the demo crontab ---------------------------------------------------------------------


def test_relay_example_crontab_parses_without_errors() -> None:
    result = parse_crontab(RELAY_CRONTAB.read_text(), path=str(RELAY_CRONTAB))
    assert result.errors == []
    health, cleanup, billing = result.entries
    assert (health.schedule, cleanup.schedule, billing.schedule) == (
        "*/5 * * * * *",
        "*/20 * * * * *",
        "* * * * *",
    )
    assert health.command == 'echo "relay: health check upstream providers at $(date -u +%H:%M:%S)"'
    assert cleanup.stdin == "purge expired API keys from the cache\nreport the purged count\n"
    for entry in result.entries:
        assert entry.timezone == "UTC"
        assert entry.mailto == "oncall@relay.example"
        assert entry.env == {"SHELL": "/bin/sh", "PATH": "/usr/local/bin:/usr/bin:/bin"}
        assert entry.command.startswith(('echo "relay: ', "sed 's/^/relay: "))
    specs = [entry_to_spec(entry) for entry in result.entries]
    assert len({spec.name for spec in specs}) == 3
    assert all(spec.name.startswith("relay.") and NAME_RE.match(spec.name) for spec in specs)


# --- properties ---------------------------------------------------------------------------

#: Lines built from the characters that matter to the parser, plus some well-formed ones.
LINES = st.one_of(
    st.text(alphabet=" \t*/,-@#%\\='\"0123456789abcAZ_", max_size=40),
    st.builds(
        "{} {} * * * {}".format,
        st.integers(0, 59),
        st.integers(0, 23),
        st.text(alphabet="abc %\\-", min_size=1, max_size=12),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(LINES, max_size=12), st.booleans())
def test_any_text_parses_to_entries_and_errors_without_raising(
    lines: list[str], system: bool
) -> None:
    result = parse("\n".join(lines), system=system)
    entry_lines = [entry.line_no for entry in result.entries]
    error_lines = [error.line_no for error in result.errors]
    assert entry_lines == sorted(entry_lines)
    assert error_lines == sorted(error_lines)
    assert not set(entry_lines) & set(error_lines)
    assert all(1 <= n <= max(len(lines), 1) for n in entry_lines + error_lines)
    for entry in result.entries:
        assert entry.line == lines[entry.line_no - 1]
        assert entry.command.strip()
        assert entry.stdin is None or entry.stdin == "" or entry.stdin.endswith(("\n", "\\"))
    # Names are unique within the file and survive a comment inserted at the top.
    shifted = parse("# moved\n" + "\n".join(lines), system=system)
    names = [job_name_for(entry) for entry in result.entries]
    assert len(set(names)) == len(names)
    assert [job_name_for(entry) for entry in shifted.entries] == names


@given(st.text(alphabet=st.characters(blacklist_characters="%\\"), max_size=30))
def test_a_command_without_percent_or_backslash_is_kept_whole(text: str) -> None:
    assert split_command(text) == (text, None)
