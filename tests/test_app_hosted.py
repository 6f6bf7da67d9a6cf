"""A node hosted in an application's event loop (``App.running``): the FastAPI example served by
a real uvicorn process answers requests while its node runs jobs, and drains a run in progress
when uvicorn shuts down."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from pgpulse import App, InvalidInput, RunContext
from test_engine import wait_until

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow
async def test_the_fastapi_example_runs_jobs_and_drains_on_shutdown(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    port = _free_port()
    env = {**os.environ, "PGPULSE_DATABASE_URL": dsn, "EXAMPLE_TRACE_FILE": str(trace)}
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "uvicorn", "fastapi_app:api", "--port", str(port),
        "--host", "127.0.0.1", cwd=EXAMPLES, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            replies: list[httpx.Response] = []

            async def answered() -> bool:  # the server is up once it answers
                try:
                    replies.append(await client.get("/pulse"))
                except httpx.TransportError:
                    return False
                return True

            await wait_until(answered, 60)
            reply = replies[0]
        assert reply.status_code == 200
        assert reply.json()["shards"] == 64  # the only live node owns every shard
        node_id = reply.json()["node"]
        # A run that started after one has already ended: the shutdown comes in its middle.
        await wait_until(lambda: any(line.startswith("end ") for line in _lines(trace)), 60)
        await wait_until(lambda: _lines(trace)[-1].startswith("start "), 60)
        in_progress = int(_lines(trace)[-1].split()[1])
        server.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            # uvicorn shuts down gracefully, then ends by the signal it caught, as a process
            # that did not catch it would
            assert await server.wait() == -signal.SIGTERM
        assert server.stderr is not None
        assert b"Finished server process" in await server.stderr.read()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
    assert f"end {in_progress}" in _lines(trace)
    run = db.execute(
        "SELECT outcome, attempts, node_id FROM pgpulse_runs WHERE id = %s", [in_progress]
    ).fetchone()
    assert run == {"outcome": "succeeded", "attempts": 1, "node_id": node_id}
    node = db.execute("SELECT state FROM pgpulse_nodes WHERE node_id = %s", [node_id]).fetchone()
    assert node == {"state": "stopped"}


async def test_running_yields_a_started_node_and_stops_it_on_exit(dsn: str, db: Any) -> None:
    app = App(name="hosted")
    seen: list[tuple[RunContext, str]] = []

    @app.job("tick", schedule="@every 1s", catch_up="skip", misfire_grace=5)
    def tick(ctx: RunContext) -> None:
        seen.append((ctx, threading.current_thread().name))

    async with app.running(dsn) as node:
        assert node.started.is_set() and len(node.shards) == 64
        await wait_until(lambda: len(seen) >= 2)
    # A sync handler runs in the node's own threads, not in the host loop's default executor.
    assert all(thread.startswith("pgpulse-handler") for _, thread in seen)
    status = db.execute(
        "SELECT state FROM pgpulse_nodes WHERE node_id = %s", [node.node_id]
    ).fetchone()
    assert status == {"state": "stopped"}
    assert {ctx.job_name for ctx, _ in seen} == {"tick"}


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("tenant", "App(tenant=...)"),
        ("handler", "@app.handler(name)"),
        ("source", "App(name=...)"),
    ],
)
def test_a_declaration_refuses_what_belongs_to_its_app(option: str, says: str) -> None:
    app = App()
    options: dict[str, Any] = {option: "x"}
    with pytest.raises(InvalidInput) as caught:
        app.job("nightly", schedule="@daily", **options)
    assert caught.value.field == option and says in caught.value.message
    assert "\n" not in caught.value.message and app.jobs == []


@pytest.mark.slow
async def test_a_sigterm_while_the_node_starts_stops_it_cleanly(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    """A deploy that stops a node while it starts: the signal is handled from before the node
    registers, so the node stops, deregistered, instead of dying with its row left alive."""
    (tmp_path / "starting_app.py").write_text(
        "import pgpulse\n\napp = pgpulse.App(name='starting')\n\n\n"
        "@app.job('nightly', schedule='@daily')\ndef nightly(ctx): ...\n"
    )
    env = {**os.environ, "PGPULSE_DATABASE_URL": dsn}
    # The node registers, then blocks writing its declared job behind this lock.
    with db.transaction():
        db.execute("LOCK TABLE pgpulse_jobs IN EXCLUSIVE MODE")
        node = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pgpulse", "node", "run", "--app", "starting_app:app",
            "--node-id", "starting", cwd=tmp_path, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            await wait_until(
                lambda: db.execute(
                    "SELECT 1 FROM pgpulse_nodes WHERE node_id = 'starting'"
                ).fetchone(),
                60,
            )
            node.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)  # the signal is delivered while the node is blocked
        except BaseException:
            node.kill()
            raise
    async with asyncio.timeout(60):
        assert await node.wait() == 0
    state = db.execute("SELECT state FROM pgpulse_nodes WHERE node_id = 'starting'").fetchone()
    assert state == {"state": "stopped"}
