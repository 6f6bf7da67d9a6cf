"""Tests of the built-in ``shell`` and ``http`` handlers: real processes, a real loopback server.

No database. Nothing sleeps "to let things start": tests wait on files, events or process state
with a bounded deadline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pgpulse.core.egress import HttpAllowList
from pgpulse.core.errors import InvalidInput, InvalidPayload
from pgpulse.core.payloads import (
    PAYLOAD_VALIDATORS,
    validate_celery_payload,
    validate_http_payload,
    validate_rq_payload,
    validate_shell_payload,
)
from pgpulse.node import builtins
from pgpulse.node.builtins import BUILTIN_HANDLERS, http_handler, shell_handler
from pgpulse.node.handlers import MAX_OUTPUT_CHARS, HandlerFailed, RunContext, truncate_output

LOOPBACK = HttpAllowList.parse(["127.0.0.1"])
SCHEDULED_FOR = datetime(2024, 3, 10, 2, 30, tzinfo=UTC)
SCHEDULED_ISO = "2024-03-10T02:30:00+00:00"
IS_ROOT = os.geteuid() == 0


def make_ctx(payload: dict[str, Any], **overrides: Any) -> RunContext:
    """A RunContext for one attempt of job ``acme/nightly-report``; override any field."""
    values: dict[str, Any] = {
        "job_id": 42,
        "job_name": "nightly-report",
        "tenant": "acme",
        "payload": payload,
        "scheduled_for": SCHEDULED_FOR,
        "attempt": 2,
        "run_id": 1001,
        "fencing_token": 17,
        "timeout": None,
        "node_id": "node-a",
        "options": {"http_allow": LOOPBACK},  # the loopback server below is allow-listed
    }
    values.update(overrides)
    return RunContext(**values)


async def wait_until(predicate: Callable[[], bool], *, within: float = 5.0) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - waits on external process state, no event
            await asyncio.sleep(0.01)


def is_alive(pid: int) -> bool:
    """True if ``pid`` is a running process (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_registries_name_every_builtin() -> None:
    from pgpulse.node.celery_handler import celery_handler
    from pgpulse.node.rq_handler import rq_handler

    assert dict(BUILTIN_HANDLERS) == {
        "shell": shell_handler,
        "http": http_handler,
        "celery": celery_handler,
        "rq": rq_handler,
    }
    assert dict(PAYLOAD_VALIDATORS) == {
        "shell": validate_shell_payload,
        "http": validate_http_payload,
        "celery": validate_celery_payload,
        "rq": validate_rq_payload,
    }


# --- shell --------------------------------------------------------------------------------


async def test_shell_returns_stdout_and_stderr_together() -> None:
    out = await shell_handler(make_ctx({"command": "echo hello; echo oops >&2; echo bye"}))
    assert out == "hello\noops\nbye\n"


async def test_shell_delivers_stdin() -> None:
    out = await shell_handler(make_ctx({"command": "cat; echo .", "stdin": "line 1\nlíne 2\n"}))
    assert out == "line 1\nlíne 2\n.\n"


async def test_shell_stdin_defaults_to_dev_null() -> None:
    assert await shell_handler(make_ctx({"command": "cat; echo end"})) == "end\n"


async def test_shell_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's environment is explicit: the base (PATH, HOME, LANG, TZ), the names the
    operator passes (``shell_env``), the payload's env, Pulse's PGPULSE_JOB...; nothing else of
    the node's, its database URL and libpq's variables least of all (even if named)."""
    monkeypatch.setenv("PULSE_TEST_NODE_VAR", "from-node")
    monkeypatch.setenv("PULSE_TEST_OVERRIDDEN", "from-node")
    monkeypatch.setenv("PULSE_TEST_NOT_PASSED", "from-node")
    monkeypatch.setenv("PGPULSE_DATABASE_URL", "postgresql://svc:Hunter2@db/pulse")
    monkeypatch.setenv("PGPASSWORD", "Hunter2")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    payload = {
        "command": "env",
        "env": {
            "PULSE_TEST_OVERRIDDEN": "from-payload",
            "GREETING": "hi there",
            "PGPULSE_JOB": "forged",
        },
    }
    options = {"shell_env": ("PULSE_TEST_NODE_VAR", "PULSE_TEST_OVERRIDDEN", "PGPASSWORD")}
    out = await shell_handler(make_ctx(payload, options=options))
    assert out is not None
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert env.pop("PULSE_TEST_NODE_VAR") == "from-node"
    assert env.pop("PULSE_TEST_OVERRIDDEN") == "from-payload"
    assert env.pop("GREETING") == "hi there"
    assert env.pop("PGPULSE_JOB") == "nightly-report"
    assert env.pop("PGPULSE_TENANT") == "acme"
    assert env.pop("PGPULSE_SCHEDULED_FOR") == SCHEDULED_ISO
    assert env.pop("PGPULSE_ATTEMPT") == "2"
    assert env.pop("PGPULSE_RUN_ID") == "1001"
    assert env.pop("PGPULSE_FENCING_TOKEN") == "17"
    # the occurrence's context: none known to this hand-made one but its interval's end
    assert env.pop("PGPULSE_DATA_INTERVAL_START") == ""
    assert env.pop("PGPULSE_DATA_INTERVAL_END") == SCHEDULED_ISO
    assert env.pop("PGPULSE_LAST_SUCCESS_AT") == ""
    assert env.pop("PGPULSE_LAST_SUCCESS_SCHEDULED_FOR") == ""
    assert env.pop("PATH") == os.environ["PATH"]
    assert env.pop("HOME") == os.environ["HOME"]
    assert env.pop("LANG") == "C.UTF-8"
    assert env.pop("TZ") == "Europe/Berlin"
    # What the shell itself sets (dash: PWD; bash: also SHLVL and _), nothing of the node's.
    assert set(env) <= {"PWD", "SHLVL", "_", "OLDPWD"}, env


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("PGPULSE_DATABASE_URL", "is a Pulse setting"),
        ("PGPASSWORD", "is a libpq variable"),
        ("PGSERVICEFILE", "is a libpq variable"),
        ("pghost", "is a libpq variable"),
        ("A=B", "is not an environment variable name"),
        ("", "is not an environment variable name"),
    ],
)
def test_shell_env_refuses_pulse_and_libpq_names(name: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=f"shell_env {name!r} {why}") as caught:
        builtins.check_shell_env(["LC_ALL", name])
    assert (caught.value.field, caught.value.value) == ("shell_env", name)
    assert builtins.check_shell_env(["LC_ALL", "AWS_PROFILE"]) == ("LC_ALL", "AWS_PROFILE")


async def test_shell_runs_the_command_with_the_crontabs_shell() -> None:
    """Vixie cron runs the command with the crontab's SHELL: ``[[`` is bash, not sh."""
    command = '[[ 1 == 1 ]] && echo "$0"'
    with pytest.raises(HandlerFailed, match="status 127"):  # /bin/sh (dash) has no [[
        await shell_handler(make_ctx({"command": command}))
    bash = {"command": command, "env": {"SHELL": "/bin/bash"}}
    assert await shell_handler(make_ctx(bash)) == "/bin/bash\n"
    explicit = {"command": command, "shell": "/bin/bash", "env": {"SHELL": "/bin/sh"}}
    assert await shell_handler(make_ctx(explicit)) == "/bin/bash\n"


async def test_shell_nonzero_exit_fails_with_status_and_output() -> None:
    with pytest.raises(HandlerFailed, match=r"^command exited with status 3$") as caught:
        await shell_handler(make_ctx({"command": "echo partial work; exit 3"}))
    assert caught.value.output == "partial work\n"


async def test_shell_killed_by_signal_names_the_signal() -> None:
    with pytest.raises(HandlerFailed, match="killed by SIGKILL"):
        await shell_handler(make_ctx({"command": "echo before; kill -KILL $$"}))


async def test_shell_output_is_truncated_like_truncate_output() -> None:
    out = await shell_handler(make_ctx({"command": "head -c 100000 /dev/zero | tr '\\0' x"}))
    assert out == truncate_output("x" * 100_000)
    assert out is not None
    assert len(out) <= MAX_OUTPUT_CHARS
    assert out.startswith("x" * (MAX_OUTPUT_CHARS - 64) + "\n[... ")
    assert out.endswith(f"[... {100_000 - MAX_OUTPUT_CHARS + 64} more characters truncated]")


async def test_shell_decodes_multibyte_characters_split_across_reads() -> None:
    # 3-byte characters: the 64 KiB read boundaries fall inside characters.
    out = await shell_handler(make_ctx({"command": "yes € | head -n 50000 | tr -d '\\n'"}))
    assert out == truncate_output("€" * 50_000)


async def test_shell_replaces_invalid_utf8() -> None:
    assert await shell_handler(make_ctx({"command": "printf '\\377ok'"})) == "\ufffdok"


async def test_shell_missing_cwd_fails_without_running(tmp_path: Path) -> None:
    with pytest.raises(HandlerFailed, match="cannot start command"):
        await shell_handler(make_ctx({"command": "true", "cwd": str(tmp_path / "missing")}))


async def test_shell_cwd(tmp_path: Path) -> None:
    assert await shell_handler(make_ctx({"command": "pwd", "cwd": str(tmp_path)})) == (
        f"{tmp_path}\n"
    )


async def _start_tree(
    tmp_path: Path, command_prefix: str = ""
) -> tuple[asyncio.Task[Any], list[int]]:
    """Start a shell job with two background sleeps; return its task and the three pids."""
    pids_file = tmp_path / "pids"
    command = (
        f"{command_prefix}"
        f"sleep 30 & echo $! >> {pids_file}; sleep 30 & echo $! >> {pids_file}; "
        f"echo $$ >> {pids_file}; wait"
    )
    task = asyncio.create_task(shell_handler(make_ctx({"command": command})))
    await wait_until(lambda: pids_file.exists() and len(pids_file.read_text().split()) == 3)
    pids = [int(pid) for pid in pids_file.read_text().split()]
    group = os.getpgid(pids[-1])  # led by the command's guard (pgpulse.node.shell_guard)
    assert group != os.getpgid(0) and os.getsid(pids[-1]) == group  # a session of its own
    assert all(os.getpgid(pid) == group for pid in pids)
    return task, pids


async def test_shell_cancel_kills_the_whole_process_group(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    task, pids = await _start_tree(tmp_path)
    with caplog.at_level(logging.WARNING, logger="pgpulse.node.builtins"):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await wait_until(lambda: not any(is_alive(pid) for pid in pids))
    assert caplog.records == []  # SIGTERM was enough: no escalation to SIGKILL


async def test_shell_cancel_escalates_to_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(builtins, "KILL_GRACE_SECONDS", 0.2)
    # The shell and its children ignore SIGTERM (an ignored signal stays ignored across exec).
    task, pids = await _start_tree(tmp_path, command_prefix="trap '' TERM; ")
    with caplog.at_level(logging.WARNING, logger="pgpulse.node.builtins"):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not is_alive(pids[-1])  # the shell was killed and reaped before the task ended
    await wait_until(lambda: not any(is_alive(pid) for pid in pids))
    assert [r.action for r in caplog.records] == ["shell_killed"]  # type: ignore[attr-defined]


async def test_shell_second_cancel_does_not_interrupt_cleanup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builtins, "KILL_GRACE_SECONDS", 0.2)
    cleanup_started = asyncio.Event()
    terminate = builtins._terminate_group

    async def observed(proc: asyncio.subprocess.Process) -> None:
        cleanup_started.set()
        await terminate(proc)

    monkeypatch.setattr(builtins, "_terminate_group", observed)
    task, pids = await _start_tree(tmp_path, command_prefix="trap '' TERM; ")
    task.cancel()
    async with asyncio.timeout(5):
        await cleanup_started.wait()
    task.cancel()  # e.g. shutdown right after a timeout
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not is_alive(pids[-1])  # cleanup ran to the end despite the second cancellation
    await wait_until(lambda: not any(is_alive(pid) for pid in pids))


async def test_shell_cancelled_while_starting_still_stops_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel that lands while the command starts (the shell forked, its pipes not yet
    connected) stops and reaps the whole process group before it goes on: asyncio alone kills
    only the shell, and what the shell had started ran on. (This was the race behind the two
    cancellation tests above failing now and then on a loaded machine.)"""
    monkeypatch.setattr(builtins, "KILL_GRACE_SECONDS", 0.2)
    stopped: list[int] = []
    terminate = builtins._terminate_group

    async def observed(proc: asyncio.subprocess.Process) -> None:
        stopped.append(proc.pid)
        await terminate(proc)

    monkeypatch.setattr(builtins, "_terminate_group", observed)
    pids_file = tmp_path / "pids"
    command = f"trap '' TERM; sleep 30 & echo $! >> {pids_file}; echo $$ >> {pids_file}; wait"
    task = asyncio.create_task(shell_handler(make_ctx({"command": command})))
    await asyncio.sleep(0)  # one loop step: the handler is starting the command
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(stopped) == 1 and not is_alive(stopped[0])  # stopped and reaped, then raised
    pids = [int(pid) for pid in pids_file.read_text().split()] if pids_file.exists() else []
    await wait_until(lambda: not any(is_alive(pid) for pid in pids))


async def test_shell_dry_run_runs_nothing(tmp_path: Path) -> None:
    target = tmp_path / "FILE"
    ctx = make_ctx({"command": f"touch {target}"}, options={"shell_dry_run": True})
    assert await shell_handler(ctx) == f"dry-run: would run 'touch {target}'"
    ctx = make_ctx(
        {"command": f"touch {target}", "user": "backup"}, options={"shell_dry_run": True}
    )
    assert await shell_handler(ctx) == f"dry-run: would run 'touch {target}' as user backup"
    assert not target.exists()


@pytest.mark.skipif(not IS_ROOT, reason="only root can switch users")
async def test_shell_missing_user_as_root_fails_naming_the_user() -> None:
    with pytest.raises(HandlerFailed, match="'no-such-pulse-user'"):
        await shell_handler(make_ctx({"command": "true", "user": "no-such-pulse-user"}))


def _dir_or_root(path: str) -> str:
    return path if Path(path).is_dir() else "/"


@pytest.mark.skipif(not IS_ROOT, reason="only root can switch users")
async def test_shell_runs_as_existing_user_as_root() -> None:
    nobody = pwd.getpwnam("nobody")  # KeyError fails loudly on a system without it
    home_cwd = _dir_or_root(nobody.pw_dir)
    out = await shell_handler(
        make_ctx({"command": 'id -u; id -g; echo "$HOME $USER"; pwd', "user": "nobody"})
    )
    assert out == f"{nobody.pw_uid}\n{nobody.pw_gid}\n{nobody.pw_dir} nobody\n{home_cwd}\n"


async def test_shell_user_is_ignored_when_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    real_uid = os.getuid()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    out = await shell_handler(make_ctx({"command": "id -u", "user": "no-such-pulse-user"}))
    assert out == f"{real_uid}\n"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "payload.command"),
        ({"command": 42}, "payload.command"),
        ({"command": "   "}, "payload.command"),
        ({"command": "echo \x00"}, "payload.command"),
        ({"command": "true", "stdin": b"bytes"}, "payload.stdin"),
        ({"command": "true", "env": ["A=1"]}, "payload.env"),
        ({"command": "true", "env": {"A=B": "1"}}, "payload.env"),
        ({"command": "true", "env": {"A": 1}}, "payload.env.A"),
        ({"command": "true", "user": ""}, "payload.user"),
        ({"command": "true", "cwd": 7}, "payload.cwd"),
    ],
)
async def test_shell_validation_names_the_field(payload: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidPayload) as caught:
        validate_shell_payload(payload)
    assert caught.value.field == field
    assert field in str(caught.value)
    with pytest.raises(HandlerFailed, match=field.replace(".", r"\.")):
        await shell_handler(make_ctx(payload))


# --- http ---------------------------------------------------------------------------------


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LoopbackServer:
    """A tiny HTTP/1.1 server on 127.0.0.1 that records every request it reads."""

    port: int = 0
    requests: list[Recorded] = field(default_factory=list)
    slow_request_seen: asyncio.Event = field(default_factory=asyncio.Event)
    slow_client_gone: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            request_line, *lines = head.split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {
                name.strip().lower(): value.strip()
                for name, value in (line.split(":", 1) for line in lines if ":" in line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append(Recorded(method, path, headers, body))
            path = path.split("?", 1)[0]
            if path == "/slow":
                self.slow_request_seen.set()
                await reader.read()  # returns b"" once the client closes the connection
                self.slow_client_gone.set()
                return
            status, extra, payload = {
                "/ok": ("200 OK", "", b"hello"),
                "/created": ("201 Created", "", b"made"),
                "/fail": ("500 Internal Server Error", "", b"boom"),
                "/redirect": ("302 Found", "Location: /ok\r\n", b""),
            }[path]
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Length: {len(payload)}\r\n{extra}"
                "Connection: close\r\n\r\n".encode()
                + (b"" if method == "HEAD" else payload)
            )
            await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LoopbackServer]:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)  # loopback requests must not go to a proxy
    state = LoopbackServer()
    srv = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield state
        srv.close()


async def test_http_get_success_and_pulse_headers(server: LoopbackServer) -> None:
    payload = {"url": server.url("/ok"), "headers": {"X-Custom": "yes", "x-pulse-job": "forged"}}
    assert await http_handler(make_ctx(payload)) == "200 OK\nhello"
    [request] = server.requests
    assert (request.method, request.path, request.body) == ("GET", "/ok", b"")
    assert request.headers["x-custom"] == "yes"
    assert request.headers["x-pulse-job"] == "nightly-report"
    assert request.headers["x-pulse-scheduled-for"] == SCHEDULED_ISO
    assert request.headers["x-pulse-attempt"] == "2"
    assert request.headers["x-pulse-fencing-token"] == "17"
    assert request.headers["idempotency-key"] == f"acme/nightly-report/{SCHEDULED_ISO}"


async def test_http_idempotency_key_is_stable_across_attempts(server: LoopbackServer) -> None:
    payload = {"url": server.url("/ok")}
    await http_handler(make_ctx(payload, attempt=1, fencing_token=5))
    await http_handler(make_ctx(payload, attempt=2, fencing_token=6))
    first, second = server.requests
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert (first.headers["x-pulse-attempt"], second.headers["x-pulse-attempt"]) == ("1", "2")
    assert second.headers["x-pulse-fencing-token"] == "6"


async def test_http_post_json(server: LoopbackServer) -> None:
    document = {"report": "daily", "rows": [1, 2, 3]}
    out = await http_handler(
        make_ctx({"url": server.url("/created"), "method": "post", "json": document})
    )
    assert out == "201 Created\nmade"
    [request] = server.requests
    assert request.method == "POST"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.body) == document


async def test_http_put_text_body(server: LoopbackServer) -> None:
    await http_handler(make_ctx({"url": server.url("/ok"), "method": "PUT", "body": "naïve"}))
    [request] = server.requests
    assert (request.method, request.body) == ("PUT", "naïve".encode())


async def test_http_head(server: LoopbackServer) -> None:
    assert await http_handler(make_ctx({"url": server.url("/ok"), "method": "HEAD"})) == "200 OK\n"


async def test_http_server_error_fails_with_status_and_body(server: LoopbackServer) -> None:
    with pytest.raises(HandlerFailed, match="500 Internal Server Error") as caught:
        await http_handler(make_ctx({"url": server.url("/fail")}))
    assert caught.value.output == "boom"


async def test_http_expect_status(server: LoopbackServer) -> None:
    expected_failure = {"url": server.url("/fail"), "expect_status": [500]}
    assert await http_handler(make_ctx(expected_failure)) == "500 Internal Server Error\nboom"
    with pytest.raises(HandlerFailed, match="201 Created"):
        await http_handler(make_ctx({"url": server.url("/created"), "expect_status": [200]}))


async def test_http_redirects_followed_only_on_request(server: LoopbackServer) -> None:
    with pytest.raises(HandlerFailed, match="302 Found"):
        await http_handler(make_ctx({"url": server.url("/redirect")}))
    payload = {"url": server.url("/redirect"), "follow_redirects": True}
    assert await http_handler(make_ctx(payload)) == "200 OK\nhello"


async def test_http_connection_refused_fails() -> None:
    with socket.socket() as sock:  # bind an ephemeral port, then close it: nobody listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(HandlerFailed, match="ConnectError"):
        await http_handler(make_ctx({"url": f"http://127.0.0.1:{port}/"}))


async def test_http_timeout_fails(server: LoopbackServer) -> None:
    expected = r"^GET http://127\.0\.0\.1:\d+/slow timed out after 0\.2 s$"
    with pytest.raises(HandlerFailed, match=expected):
        await http_handler(make_ctx({"url": server.url("/slow"), "timeout": 0.2}))


async def test_http_cancel_closes_the_connection(server: LoopbackServer) -> None:
    task = asyncio.create_task(http_handler(make_ctx({"url": server.url("/slow")})))
    async with asyncio.timeout(5):
        await server.slow_request_seen.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(5):
        await server.slow_client_gone.wait()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "payload.url"),
        ({"url": 5}, "payload.url"),
        ({"url": "ftp://127.0.0.1/x"}, "payload.url"),
        ({"url": "http:///no-host"}, "payload.url"),
        ({"url": "http://127.0.0.1/", "method": "TRACE"}, "payload.method"),
        ({"url": "http://127.0.0.1/", "headers": {"Bad Name": "x"}}, "payload.headers"),
        ({"url": "http://127.0.0.1/", "headers": {"X-A": "a\r\nX-B: b"}}, "payload.headers.X-A"),
        ({"url": "http://127.0.0.1/", "headers": ["X-A: a"]}, "payload.headers"),
        ({"url": "http://127.0.0.1/", "json": {}, "body": "x"}, "payload.body"),
        ({"url": "http://127.0.0.1/", "body": {"a": 1}}, "payload.body"),
        ({"url": "http://127.0.0.1/", "timeout": 0}, "payload.timeout"),
        ({"url": "http://127.0.0.1/", "timeout": True}, "payload.timeout"),
        ({"url": "http://127.0.0.1/", "expect_status": []}, "payload.expect_status"),
        ({"url": "http://127.0.0.1/", "expect_status": [200, 999]}, "payload.expect_status"),
        ({"url": "http://127.0.0.1/", "follow_redirects": "yes"}, "payload.follow_redirects"),
    ],
)
async def test_http_validation_names_the_field(payload: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidPayload) as caught:
        validate_http_payload(payload)
    assert caught.value.field == field
    assert field in str(caught.value)
    with pytest.raises(HandlerFailed, match=field.replace(".", r"\.")):
        await http_handler(make_ctx(payload))


def test_validators_accept_full_payloads() -> None:
    validate_shell_payload(
        {"command": "backup.sh", "stdin": "", "env": {"A": "1"}, "user": "backup", "cwd": "/srv"}
    )
    validate_http_payload(
        {
            "url": "https://example.test/hook?x=1",
            "method": "patch",
            "headers": {"Authorization": "Bearer t"},
            "json": None,
            "timeout": 2.5,
            "expect_status": [200, 204],
            "follow_redirects": True,
        }
    )


async def test_http_run_errors_mask_the_password_and_query_values(
    server: LoopbackServer,
) -> None:
    """Run errors are stored and quoted by alerts, logs, e-mails and webhooks: the URL's
    password and query values never appear there (the path and the rest do)."""
    base = server.url("/fail").replace("http://", "http://svc:Pa55word@")
    url = f"{base}?api_key=sk_live_4eC39Hq&format=csv"
    with pytest.raises(HandlerFailed) as caught:
        await http_handler(make_ctx({"url": url}))
    shown = f"http://svc:***@127.0.0.1:{server.port}/fail?api_key=***&format=***"
    assert str(caught.value) == f"GET {shown} answered 500 Internal Server Error"
    slow = f"{server.url('/slow')}?token=sk_live_4eC39Hq"
    with pytest.raises(HandlerFailed) as caught:
        await http_handler(make_ctx({"url": slow, "timeout": 0.2}))
    assert str(caught.value) == (
        f"GET http://127.0.0.1:{server.port}/slow?token=*** timed out after 0.2 s"
    )


async def test_a_stored_invalid_url_is_quoted_masked_in_the_run_error() -> None:
    """A payload stored by an older version and refused when it runs: the run error (stored,
    alerted) shows the URL with its password and query values masked."""
    url = "ftp://svc:Pa55word@127.0.0.1/x?token=sk_live_4eC39Hq"
    with pytest.raises(HandlerFailed) as caught:
        await http_handler(make_ctx({"url": url}))
    assert str(caught.value) == (
        "invalid payload: payload.url must be an http:// or https:// URL with a host, got "
        '"ftp://svc:***@127.0.0.1/x?token=***"'
    )
