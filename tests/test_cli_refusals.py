"""Bad input on the command line, as a user types it: one line on stderr naming the field and
value, exit 2, nothing written, never a traceback. One case of each kind
runs ``pgpulse`` as a real subprocess (bytes on its command line as a shell passes them, the
loop the CLI really uses); their variants run the same command in process (click's runner, each
``pgpulse`` start costs over a second). The same values through the API and the Python API are
refused the same way."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pgpulse.cli.main import main
from pgpulse.core.errors import InvalidInput
from pgpulse.core.jobs import MAX_PAYLOAD_BYTES, JobSpec
from pgpulse.core.policy import WebSettings
from pgpulse.db.store import Store
from web_helpers import api_client, make_token

PGPULSE = str(Path(sys.executable).with_name("pgpulse"))
SHELL = ["--handler", "shell", "--payload", '{"command": "echo hi"}']


def pgpulse(dsn: str | None, *args: str | bytes, env: dict[str, str] | None = None) -> Any:
    """Run ``pgpulse`` with ``args`` (bytes pass through as the shell would give them)."""
    prefix: list[str | bytes] = [PGPULSE, *(["--database-url", dsn] if dsn else [])]
    return subprocess.run([*prefix, *args], capture_output=True, timeout=60, env=env, check=False)


def in_process(dsn: str | None, *args: str) -> Any:
    """``pgpulse`` in this process (click's runner): exit code and stderr as a subprocess's."""
    prefix = ["--database-url", dsn] if dsn else []
    # A thread of its own: the command runs its own event loop, and async tests have one.
    with ThreadPoolExecutor(1) as thread:
        result = thread.submit(CliRunner().invoke, main, [*prefix, *args]).result()
    return subprocess.CompletedProcess(args, result.exit_code, b"", result.stderr.encode())


def refused(result: Any, *words: str) -> str:
    """Assert exit 2 with one line on stderr holding ``words``; return that line."""
    stderr = result.stderr.decode("utf-8", "backslashreplace")
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for word in words:
        assert word in lines[0], lines[0]
    line: str = lines[0]
    return line


def jobs(dsn: str) -> list[Any]:
    with ThreadPoolExecutor(1) as thread:
        listed = thread.submit(
            CliRunner().invoke, main, ["--database-url", dsn, "job", "list", "--json"]
        ).result()
    assert listed.exit_code == 0, listed.output
    return list(json.loads(listed.stdout))


# --- item 10: tracebacks, and one payload limit everywhere ---------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param(
            [b"bad\xffname", "--schedule", "@daily", *SHELL],
            ["argument 5", "'bad\\xffname'", "not valid UTF-8 (byte 0xff)"],
            id="name_not_utf8",
        ),
        pytest.param(
            ["x", "--tenant", b"t\xfe", "--schedule", "@daily", *SHELL],
            ["--tenant", "'t\\xfe'", "byte 0xfe"],
            id="tenant_not_utf8",
        ),
    ],
)
def test_bytes_that_are_not_utf8_are_refused(dsn: str, args: list[Any], words: list[str]) -> None:
    refused(pgpulse(dsn, "job", "create", *args), *words)
    refused(in_process(dsn, "job", "show", "bad\udcffname"), "not valid UTF-8")  # as decoded
    assert jobs(dsn) == []


def test_a_crontab_with_bytes_that_are_not_utf8_imports_nothing(dsn: str, tmp_path: Path) -> None:
    tab = tmp_path / "latin1.crontab"
    tab.write_bytes(b"0 1 * * * echo fine\n0 2 * * * echo caf\xe9\n")
    result = pgpulse(dsn, "crontab", "import", str(tab))
    stderr = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in stderr
    assert f"{tab}:2: not valid UTF-8: byte 0xe9 at column 19" in stderr
    assert jobs(dsn) == []


@pytest.mark.parametrize(
    "order",
    [["--system", "--user-format"], ["--user-format", "--system"]],
    ids=["sys_user", "user_sys"],
)
def test_crontab_import_refuses_both_formats_whatever_their_order(
    dsn: str, tmp_path: Path, order: list[str]
) -> None:
    """The sixth trial saw the last of the two win silently (``echo`` read as the user)."""
    tab = tmp_path / "cron.tab"
    tab.write_text("0 5 * * * echo five\n")
    run = pgpulse if order[0] == "--system" else in_process  # one subprocess
    refused(run(dsn, "crontab", "import", str(tab), *order), "--system and --user-format")
    assert jobs(dsn) == []


def test_schedule_next_past_the_year_9999_is_refused() -> None:
    result = pgpulse(None, "schedule", "next", "@every 3650d", "--after", "9990-01-01")
    refused(result, "schedule '@every 3650d'", "before the year 10000")


def test_payloads_have_one_size_limit_on_every_path(dsn: str, tmp_path: Path) -> None:
    big = json.dumps({"command": "echo " + "x" * MAX_PAYLOAD_BYTES})
    refused(
        pgpulse(dsn, "job", "create", "big", "--schedule", "@daily", "--handler", "shell",
                "--payload", big),
        "invalid value for --payload: is 65,556 bytes of JSON; the limit is 65,536 bytes",
    )  # fmt: skip
    tab = tmp_path / "big.crontab"
    tab.write_text(f"0 1 * * * echo {'x' * MAX_PAYLOAD_BYTES}\n")
    refused(in_process(dsn, "crontab", "import", str(tab)), f"{tab}:1: payload is ",
            "the limit is 65,536 bytes")  # fmt: skip
    with pytest.raises(InvalidInput, match="the limit is 65,536 bytes") as caught:
        JobSpec.create(name="big", schedule="@daily", handler="h", payload={"k": "x" * 2**22})
    assert caught.value.field == "payload"
    assert jobs(dsn) == []
    # within the limit, every path takes it
    fits = json.dumps({"command": "echo " + "x" * (MAX_PAYLOAD_BYTES - 100)})
    made = in_process(dsn, "job", "create", "fits", "--schedule", "@daily", "--handler", "shell",
                      "--payload", fits)  # fmt: skip
    assert made.returncode == 0, made.stderr


async def test_the_api_refuses_a_payload_over_the_limit_with_422(store: Store) -> None:
    admin = await make_token(store, admin=True)
    body: dict[str, Any] = {"name": "big", "schedule": "@daily", "handler": "http"}
    body["payload"] = {"url": "https://93.184.215.14/", "body": "x" * MAX_PAYLOAD_BYTES}
    async with api_client(store, admin, WebSettings(max_body_bytes=2**20)) as client:
        response = await client.post("/api/v1/jobs", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "payload"
    assert "65,536 bytes" in response.json()["error"]["message"]
    assert await store.list_jobs() == []


# --- item 11: a backslash and u0000 is text, not a NUL ---------------------------------------


async def test_a_literal_backslash_u0000_is_accepted_and_a_nul_is_not(
    dsn: str, store: Store
) -> None:
    literal = {"command": "printf \\u0000"}  # a backslash, then "u0000": no NUL character
    made = pgpulse(dsn, "job", "create", "lit", "--schedule", "@daily", "--handler", "shell",
                   "--payload", json.dumps(literal))  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert (await store.get_job("default", "lit"))["payload"] == literal
    nul = in_process(dsn, "job", "create", "nul", "--schedule", "@daily", "--handler", "shell",
                     "--payload", '{"command": "printf \\u0000"}')  # fmt: skip
    refused(nul, "NUL character")
    admin = await make_token(store, admin=True)
    async with api_client(store, admin, WebSettings(allow_shell_jobs=True)) as client:
        body = {"name": "api", "schedule": "@daily", "handler": "shell", "payload": literal}
        assert (await client.post("/api/v1/jobs", json=body)).status_code == 201
    assert (await store.get_job("default", "api"))["payload"] == literal


# --- item 12: zones that mean different things on different hosts ----------------------------


@pytest.mark.parametrize(
    ("zone", "why"),
    [
        ("localtime", "depend on the host"),
        ("posixrules", "depend on the host"),
        # the README's reasons, and the zone to name instead
        (
            "right/UTC",
            "its clock counts leap seconds, which POSIX time (the host's, Python's and "
            "PostgreSQL's) does not; name 'UTC' instead",
        ),
        ("posix/Europe/Berlin", "a copy that only some hosts install; name 'Europe/Berlin'"),
        ("right/Nowhere", "counts leap seconds, which POSIX time"),
        ("Factory", "placeholder"),
    ],
)
async def test_host_dependent_zones_are_refused(
    dsn: str, store: Store, zone: str, why: str
) -> None:
    run = pgpulse if zone == "localtime" else in_process  # one as a real subprocess
    refused(run(dsn, "job", "create", "z", "--schedule", "0 3 * * *", "--tz", zone, *SHELL),
            f"invalid value for --tz: {zone!r} is refused", why)  # fmt: skip
    refused(in_process(None, "schedule", "next", "0 3 * * *", "--tz", zone), why)
    admin = await make_token(store, admin=True)
    body: dict[str, Any] = {
        "name": "z",
        "schedule": "0 3 * * *",
        "handler": "http",
        "timezone": zone,
    }
    body["payload"] = {"url": "https://93.184.215.14/"}
    async with api_client(store, admin) as client:
        response = await client.post("/api/v1/jobs", json=body)
    assert response.status_code == 422 and response.json()["error"]["field"] == "timezone"
    assert jobs(dsn) == []


@pytest.mark.parametrize("zone", ["UTC", "Etc/GMT+5", "US/Eastern", "Europe/Berlin", "EST5EDT"])
def test_database_zones_and_their_aliases_are_accepted(zone: str) -> None:
    assert JobSpec.create(name="z", schedule="0 3 * * *", handler="h", timezone=zone)


# --- item 13: names hold printable characters only ------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("del\x7fete", "U+007F (a control character)"),
        ("next\x85line", "U+0085 (a control character)"),
        ("gnp.\u202eexe", "U+202E (RIGHT-TO-LEFT OVERRIDE, a format character)"),
        ("zero\u200bwidth", "U+200B (ZERO WIDTH SPACE, a format character)"),
        ("line\u2028sep", "U+2028 (LINE SEPARATOR, a line separator)"),
    ],
)
@pytest.mark.parametrize("field", ["name", "tenant"])
async def test_control_format_and_bidi_characters_are_refused_in_names_and_tenants(
    dsn: str, store: Store, text: str, shown: str, field: str
) -> None:
    args = [text, "--schedule", "@daily", *SHELL] if field == "name" else [
        "ok", "--tenant", text, "--schedule", "@daily", *SHELL]  # fmt: skip
    run = pgpulse if "\u202e" in text and field == "name" else in_process  # one subprocess
    option = "--tenant: " if field == "tenant" else f"{field} "  # the option the user typed
    refused(run(dsn, "job", "create", *args), option, "is not a valid name", shown)
    admin = await make_token(store, admin=True)
    body: dict[str, Any] = {"name": "ok", "schedule": "@daily", "handler": "http", field: text}
    body["payload"] = {"url": "https://93.184.215.14/"}
    async with api_client(store, admin) as client:
        response = await client.post("/api/v1/jobs", json=body)
    assert response.status_code == 422 and response.json()["error"]["field"] == field
    assert jobs(dsn) == []


@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param(["job", "list", "--tenant", "a\x01b"], ["--tenant: 'a\\x01b'", "U+0001"],
                     id="job_list_tenant"),
        pytest.param(["job", "show", "weekly", "--tenant", "x\u202e"],
                     ["--tenant: 'x\\u202e'", "RIGHT-TO-LEFT OVERRIDE"], id="job_show_tenant"),
        pytest.param(["job", "show", "we\x07"], ["name 'we\\x07' is not a valid name", "U+0007"],
                     id="job_show_name"),
        pytest.param(["job", "history", " x"], ["name ' x'", "starts or ends with a space"],
                     id="job_history_name"),
        pytest.param(["runs", "--tenant", ""], ["--tenant: ''", "it has 0 characters"],
                     id="runs_tenant"),
        pytest.param(["job", "trigger", "x", "--tenant", "t\x1b"], ["--tenant", "U+001B"],
                     id="trigger_tenant"),
        pytest.param(["alert", "rule", "list", "--job", "j\u200b"], ["--job", "U+200B"],
                     id="alert_rule_job"),
        pytest.param(["token", "create", "--tenant", ""],
                     ["--tenant: '' is not a valid name (1-200 printable", "it has 0 characters"],
                     id="token_create_tenant"),
    ],
)  # fmt: skip
def test_reads_refuse_the_names_and_tenants_writes_refuse(
    dsn: str, args: list[str], words: list[str]
) -> None:
    """The sixth trial's `job list --tenant $'a\\x01b'` answered rc 0 "(none in tenant ...)"."""
    run = pgpulse if args[:2] == ["job", "list"] else in_process  # one subprocess
    refused(run(dsn, *args), "is not a valid name", *words)


@pytest.mark.parametrize("given", ["@nosuch.json", "@."])
def test_notifier_config_from_a_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, given: str
) -> None:
    """``--config @FILE`` with FILE missing or a folder: one line, exit 2, not a traceback."""
    done = subprocess.run(
        [PGPULSE, "notifier", "add", "ops", "--kind", "webhook", "--config", given],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    why = "No such file or directory" if given == "@nosuch.json" else "Is a directory"
    assert (done.returncode, done.stderr) == (
        2,
        f"error: config {given!r}: cannot read {given[1:]!r}: {why}\n",
    )


def test_schedule_next_names_tz_as_job_create_does() -> None:
    """A zone refused by `schedule next` is --tz's, worded as `job create` words it (the
    eighth trial read 'timezone' on one and '--tz' on the other)."""
    done = subprocess.run(
        [PGPULSE, "schedule", "next", "0 3 * * *", "--tz", "Europe/Berln"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (
        2,
        "error: invalid value for --tz: 'Europe/Berln' is refused: it is not an IANA time zone "
        "name (did you mean 'Europe/Berlin'?)\n",
    )


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"schedule": None}, "schedule", "schedule must be text, got None"),
        ({"timezone": None}, "timezone", "timezone must be an IANA zone's name, got None"),
        ({"source": 123}, "source", "source must be text, got 123"),
        ({"source": ""}, "source", "source '' must have 1 to 500 characters, got 0"),
        ({"source": "x\0"}, "source", "source 'x\\x00' is shown wherever the job is"),
    ],
)  # fmt: skip
def test_the_python_api_refuses_wrong_types_naming_the_field(
    fields: dict[str, Any], field: str, message: str
) -> None:
    """The Python API's refusals are InvalidInput naming the field, as the CLI's and the API's
    (an adversarial tester saw AttributeError and TypeError, and a NUL source stored)."""
    with pytest.raises(InvalidInput) as caught:
        JobSpec.create(**{"name": "j", "schedule": "@hourly", "handler": "ok", **fields})
    assert caught.value.field == field
    assert str(caught.value).startswith(message)


def test_the_python_api_takes_a_zone_object_and_calendars_none() -> None:
    from zoneinfo import ZoneInfo

    made = JobSpec.create(name="j", schedule="@hourly", handler="ok",
                          timezone=ZoneInfo("Europe/Berlin"), calendars=None)  # fmt: skip
    assert (made.timezone, made.calendars) == ("Europe/Berlin", ())


async def test_the_store_refuses_a_nul_in_a_name_it_looks_up(store: Store) -> None:
    for call in (store.pause_job, store.resume_job, store.trigger_job, store.delete_job):
        with pytest.raises(InvalidInput) as caught:
            await call("default", "a\0b")
        assert caught.value.field == "name", call
