"""``pgpulse demo``: three nodes share a real crontab; one is killed with SIGKILL midway.

The demo works in its own database (``pgpulse_demo``, recreated each run) on the configured
server (the embedded PostgreSQL by default). It imports ``examples/relay.crontab`` into tenant
``relay`` as if the cluster had been down for the last three minutes (so the billing rollup,
imported with catch-up ``backfill``, has missed minutes to make up, and the others, imported with
``skip``, have missed runs to record as skipped), plus any crontab files given (tenant
``local``). Every node runs shell jobs in dry-run mode: a machine's maintenance commands are
recorded, never executed. Each handler execution that completes is also written by the handler
itself to ``pgpulse_demo_log``: that independent witness is what the duplicate count reads.

The three Relay jobs get ids whose shards (``id % 64``) belong to three different nodes on the
ring of ``node-1``..``node-3`` (:func:`pgpulse.core.sharding.shards_for`), so every node has work
before the kill. At the end an occurrence is *missed* when the job has moved past it without a
run (it will never run: must be 0 for the backfill job) and *pending* when the job has not
reached it yet (still due: it runs when a node next starts); duplicates must be 0 everywhere.

The demo's own lines are all it prints: each node logs (at INFO) to ``node-N.log`` in a
folder of its own, which the demo names at the start and at the end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import click
import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from tabulate import tabulate

from pgpulse.app import App
from pgpulse.core.crontab import entry_to_spec, is_system_crontab, parse_crontab
from pgpulse.core.jobs import JobSpec
from pgpulse.core.schedule import parse_schedule
from pgpulse.core.sharding import shards_for
from pgpulse.core.wording import plural
from pgpulse.db.database import open_pool, redact, resolve_dsn
from pgpulse.db.store import Store
from pgpulse.node.builtins import shell_handler
from pgpulse.node.handlers import RunContext
from pgpulse.sql import load_queries

Q = load_queries("demo.sql", __package__)
#: The checkout's examples/relay.crontab (tools/src/pgpulse_tools/demo/run.py is four levels down).
RELAY_CRONTAB = Path(__file__).resolve().parents[4] / "examples" / "relay.crontab"
NODES = ("node-1", "node-2", "node-3")
DOWNTIME = timedelta(minutes=3)
LEASE, HEARTBEAT = 6.0, 1.0

# -- the app every demo node runs ---------------------------------------------------------------

app = App(builtins=False)
_log_conn: psycopg.AsyncConnection[Any] | None = None


#: Seconds each Relay job "works" (by a word of its name), so the kill lands on running work.
WORK_SECONDS = {"billing": 6.0, "cleanup": 3.0, "health": 1.0}


@app.handler("shell")
async def recorded_shell(ctx: RunContext) -> str | None:
    """The built-in shell handler (dry-run on demo nodes), witnessed in ``pgpulse_demo_log``."""
    global _log_conn
    await asyncio.sleep(next((s for w, s in WORK_SECONDS.items() if w in ctx.job_name), 0.0))
    output = await shell_handler(ctx)
    if _log_conn is None or _log_conn.closed:
        _log_conn = await psycopg.AsyncConnection.connect(
            os.environ["PGPULSE_DATABASE_URL"], autocommit=True
        )
    await _log_conn.execute(
        Q["log_execution"],
        {
            "job_id": ctx.job_id,
            "scheduled_for": ctx.scheduled_for,
            "attempt": ctx.attempt,
            "token": ctx.fencing_token,
            "node": ctx.node_id,
        },
    )
    return output


# -- the orchestration --------------------------------------------------------------------------


def _fresh_database(server_dsn: str) -> str:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS pgpulse_demo WITH (FORCE)"))
        conn.execute(sql.SQL("CREATE DATABASE pgpulse_demo"))
    return psycopg.conninfo.make_conninfo(server_dsn, dbname="pgpulse_demo")


def _specs(path: Path, tenant: str, relay: bool, system: bool = False) -> list[JobSpec]:
    parsed = parse_crontab(
        path.read_bytes(), path=str(path), system=system or is_system_crontab(path.resolve())
    )
    for error in parsed.errors:
        click.echo(f"  refused {error}")
    specs = []
    for entry in parsed.entries:
        backfill = relay and "billing" in entry.command
        specs.append(
            entry_to_spec(entry, tenant=tenant, catch_up="backfill" if backfill else "skip")
        )
    # A late run within 30 s still counts (a lease expiry after the kill delays some runs).
    return [dataclasses.replace(spec, misfire_grace=30.0) for spec in specs]


def _spread_ids(count: int) -> list[tuple[int, str]]:
    """Ascending job ids for ``count`` jobs, the Nth on a shard that node N (cyclically) owns
    on the ring of :data:`NODES`: each node has a job of its own from the start."""
    chosen: list[tuple[int, str]] = []
    for index in range(count):
        node_id = NODES[index % len(NODES)]
        owned = set(shards_for(node_id, NODES))
        job_id = (chosen[-1][0] if chosen else 0) + 1
        while job_id % 64 not in owned:
            job_id += 1
        chosen.append((job_id, node_id))
    return chosen


def _start_node(dsn: str, node_id: str, logs: Path) -> subprocess.Popen[bytes]:
    """Start node ``node_id`` on ``dsn``, its output (INFO logs) in ``logs/<node_id>.log``."""
    env = {**os.environ, "PGPULSE_DATABASE_URL": dsn}
    with (logs / f"{node_id}.log").open("ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            _node_command(node_id), env=env, stdout=log, stderr=subprocess.STDOUT
        )


def _node_command(node_id: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pgpulse",
        "--log-level",
        "INFO",
        "node",
        "run",
        "--app",
        "pgpulse_tools.demo.run:app",
        "--node-id",
        node_id,
        "--slots",
        "8",
        "--lease",
        str(LEASE),
        "--heartbeat",
        str(HEARTBEAT),
        "--poll",
        "1",
        "--drain-timeout",
        "10",
        "--allow-shell-jobs",
        "--shell-dry-run",
    ]


async def run_demo(
    database_url: str | None,
    data_dir: Path | None,
    crontabs: list[Path],
    duration: float,
    system: bool = False,
) -> int:
    """Run the demo; return 0 when no occurrence was duplicated or missed, else 1.

    Args:
        database_url: server to use (a database ``pgpulse_demo`` is created there); ``None``
            for the embedded PostgreSQL.
        data_dir: the embedded server's data folder.
        crontabs: extra crontab files to import (tenant ``local``) and show.
        duration: seconds the nodes run; one is killed at 40% of it (at the first moment after
            that when some node is running a job and every node has run one, so the kill
            interrupts real work and the progress lines show each node's share; at 60% at the
            latest).
        system: read the extra crontabs in system format (a user field before the command);
            ``/etc/crontab`` and ``/etc/cron.d/*`` always are.

    Raises:
        DatabaseUnavailable: the server does not answer.
    """
    server = resolve_dsn(database_url, data_dir)
    dsn = await asyncio.to_thread(_fresh_database, server)
    logs = Path(tempfile.mkdtemp(prefix="pgpulse-demo-logs-"))
    pool = await open_pool(dsn, application_name="pgpulse-demo", max_size=2)
    try:
        store = Store(pool)
        await store.migrate()
        await (await psycopg.AsyncConnection.connect(dsn, autocommit=True)).execute(Q["create_log"])
        verdict, killed = await _run_cluster(
            store, dsn, duration, lambda: _import(store, crontabs, system), logs
        )
    finally:
        await pool.close()
    _print_next_steps(database_url, data_dir, logs, killed, local=bool(crontabs))
    return verdict


async def _import(store: Store, crontabs: list[Path], system: bool) -> datetime:
    now = await store.db_now()
    click.echo(
        f"importing {RELAY_CRONTAB} into tenant 'relay' as if the cluster had been down "
        f"since {(now - DOWNTIME):%H:%M:%S} UTC"
    )
    relay = _specs(RELAY_CRONTAB, "relay", relay=True)
    for spec, (job_id, node_id) in zip(relay, _spread_ids(len(relay)), strict=True):
        async with store.pool.connection() as conn:
            await conn.execute(Q["next_job_id"], {"id": job_id})
        await store.upsert_jobs([spec], now=now - DOWNTIME)
        click.echo(f"  {spec.name}: id {job_id}, shard {job_id % 64}, owned by {node_id}")
    for path in crontabs:
        click.echo(f"importing {path} into tenant 'local' (shell jobs run in dry-run mode)")
        specs = _specs(path, "local", relay=False, system=system)
        await store.upsert_jobs(specs, now=now)
        for spec in specs:
            schedule = parse_schedule(spec.schedule, spec.timezone)
            nxt, upcoming = now, []
            for _ in range(3):
                nxt = schedule.next_after(nxt, anchor=now)
                upcoming.append(f"{nxt:%Y-%m-%d %H:%M:%S}")
            click.echo(
                f"  {spec.name}: [{spec.schedule} {spec.timezone}] next (UTC): "
                f"{', '.join(upcoming)}"
            )
    return now


async def _run_cluster(
    store: Store,
    dsn: str,
    duration: float,
    load: Callable[[], Awaitable[datetime]],
    logs: Path,
) -> tuple[int, str | None]:
    """Run the nodes for ``duration`` seconds, SIGKILL one midway, stop the others; return the
    verdict (:func:`_report`) and the killed node's id (``None`` if none was)."""
    procs = {node_id: _start_node(dsn, node_id, logs) for node_id in NODES}
    killed: str | None = None
    async with await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, row_factory=dict_row
    ) as conn:
        # The jobs are loaded once every node owns its shards, so each runs its own job from
        # the start (a node alone polls every shard until the others join).
        waited = await _wait_ready(conn)
        click.echo(
            f"started {', '.join(NODES)} (lease {LEASE:g}s, heartbeat {HEARTBEAT:g}s) in "
            f"{waited:.1f}s; they run for {duration:g}s from the import; their logs: "
            f"{logs}/node-*.log"
        )
        started = await load()
        t0 = time.monotonic()
        next_report = 5.0
        while (elapsed := time.monotonic() - t0) < duration:
            await asyncio.sleep(0.2)
            if killed is None and elapsed >= duration * 0.4:
                holder = await (await conn.execute(Q["holder_of_running"])).fetchone()
                # every node has done work (so the progress lines show it move), unless late
                worked = len(await (await conn.execute(Q["progress"])).fetchall()) == len(NODES)
                if (holder and worked) or elapsed >= duration * 0.6:
                    killed = holder["locked_by"] if holder else NODES[1]
                    procs[killed].send_signal(signal.SIGKILL)
                    click.echo(
                        f"t={elapsed:4.0f}s  SIGKILL {killed}"
                        f"{' while it runs ' + holder['name'] if holder else ''}: its "
                        f"leases expire within {LEASE:g}s, its shards move within a few "
                        "heartbeats"
                    )
            if elapsed >= next_report:
                next_report += 5.0
                click.echo(f"t={elapsed:4.0f}s  executions: {await _progress(conn, killed)}")
        stopped_at = await store.db_now()
        for node_id, proc in procs.items():
            if node_id != killed:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            await asyncio.to_thread(proc.wait, 30)
        click.echo("nodes stopped (SIGTERM: each drained and handed back its claims)")
        return await _report(conn, started, stopped_at), killed


async def _wait_ready(conn: psycopg.AsyncConnection[Any]) -> float:
    """Wait (at most 30 s) until every demo node is alive and the shards are shared out;
    return the seconds waited."""
    begun = time.monotonic()
    for _ in range(150):
        row = await (await conn.execute(Q["nodes_ready"], {"n": len(NODES)})).fetchone()
        if row and row["ready"]:
            break
        await asyncio.sleep(0.2)
    return time.monotonic() - begun


async def _progress(conn: psycopg.AsyncConnection[Any], killed: str | None) -> str:
    """Executions so far per node, every node named (0 included), the killed one marked."""
    rows = await (await conn.execute(Q["progress"])).fetchall()
    runs = {row["node_id"]: row["runs"] for row in rows}
    return ", ".join(
        f"{node_id} {runs.get(node_id, 0)}{' (killed)' if node_id == killed else ''}"
        for node_id in NODES
    )


def _tally(row: dict[str, Any], end: datetime) -> tuple[int, int, int]:
    """(due, missed, pending) of one job's occurrences from its import to ``end``: an
    occurrence before the job's current one with no run recorded is missed (the job moved
    past it: it will never run); the job's current occurrence and later ones are pending. A
    skipped summary row records every occurrence from its first through its last."""
    schedule = parse_schedule(row["schedule"], row["timezone"])
    due = schedule.occurrences_between(
        row["anchor_at"], end, anchor=row["anchor_at"], limit=100_000
    )
    accounted = set(row["accounted"] or [])
    summarised = row["summarised"] or []
    current = row["scheduled_for"]
    missed = sum(
        1
        for t in due
        if t < current
        and t not in accounted
        and not any(first <= t <= last for first, last in summarised)
    )
    pending = sum(1 for t in due if t >= current)
    return len(due), missed, pending


async def _report(conn: psycopg.AsyncConnection[Any], started: datetime, end: datetime) -> int:
    rows = await (await conn.execute(Q["report"], {"cutoff": end})).fetchall()
    table, bad, still_due = [], 0, 0
    for row in rows:
        due, missed, pending = _tally(row, end)
        still_due += pending
        if row["duplicates"] or (missed and row["catch_up"] == "backfill"):
            bad += 1
        table.append(
            [
                f"{row['tenant']}/{row['name']}",
                row["schedule"],
                row["catch_up"],
                due,
                row["succeeded"],
                row["skipped"],
                row["retried"],
                row["duplicates"],
                missed,
                pending,
                row["nodes"] or "-",
            ]
        )
    headers = [
        "job",
        "schedule",
        "catch-up",
        "due",
        "succeeded",
        "skipped",
        "taken over",
        "duplicates",
        "missed",
        "pending",
        "executions by node",
    ]
    click.echo("\n" + tabulate(table, headers=headers))
    takeovers = await (await conn.execute(Q["takeovers"])).fetchall()
    if takeovers:
        click.echo("")
    for row in takeovers:
        click.echo(
            f"taken over: {row['name']} @ {row['scheduled_for']:%H:%M:%S} finished by "
            f"{row['node_id']} as attempt {row['attempts']}"
        )
    click.echo(
        f"\noccurrences counted from {started - DOWNTIME:%H:%M:%S} (the start of the "
        f"simulated outage, {DOWNTIME.seconds // 60} minutes before the import) to "
        f"{end:%H:%M:%S} UTC (the stop). missed: the job moved past it without a run (it "
        "will never run); pending: still due at the stop (it runs when a node next starts)."
    )
    if bad:
        click.echo(f"FAILED: {plural(bad, 'job')} duplicated or missed runs.")
    else:
        click.echo(
            "OK: no duplicate, no missed run"
            + (
                f" ({plural(still_due, 'occurrence')} still pending at the stop)."
                if still_due
                else "."
            )
        )
    return 1 if bad else 0


def _print_next_steps(
    database_url: str | None, data_dir: Path | None, logs: Path, killed: str | None, local: bool
) -> None:
    """The exact commands that inspect the demo's database, which stays until the next demo,
    and where the nodes' logs are."""
    here = Path(sys.executable).with_name("pgpulse")
    found = shutil.which("pgpulse")
    command = "pgpulse" if found and Path(found).resolve() == here.resolve() else str(here)
    if database_url:
        command += f" --database-url '{redact(database_url)}'"
    elif data_dir is not None:
        command += f" --data-dir '{data_dir}'"
    command += " --database pgpulse_demo"
    click.echo("\nThe demo's database pgpulse_demo stays until the next demo. Inspect it:")
    for args, what in next_steps(killed, local=local):
        click.echo(f"  {command} {args:<24} # {what}")
    click.echo(f"\nThe nodes' logs (INFO): {', '.join(str(logs / f'{n}.log') for n in NODES)}")


def next_steps(killed: str | None, *, local: bool) -> list[tuple[str, str]]:
    """The commands (after ``pgpulse --database pgpulse_demo``) that the demo suggests, each
    with what it shows, in order. Pure.

    Args:
        killed: the node the demo SIGKILLed: ``status`` shows it ``lost`` (it never said it
            stopped), the others ``stopped``.
        local: crontab files were imported into tenant ``local`` too: name it as well.
    """
    others = [n for n in NODES if n != killed]
    nodes = (
        f"nodes ({', '.join(others)} stopped, {killed} lost: SIGKILLed, it never said it "
        "stopped), shards, due jobs"
        if killed
        else "nodes (all stopped now), shards, due jobs"
    )
    steps = [
        ("status", nodes),
        ("job list --tenant relay", "the imported Relay jobs"),
        ("runs --tenant relay", "their runs, newest first"),
    ]
    if local:
        steps += [
            ("job list --tenant local", "the jobs of the crontab files given"),
            ("runs --tenant local", "their dry runs, if any fell due"),
        ]
    return [
        *steps,
        ("token create --admin", "a token for the API and dashboard, then:"),
        ("serve", "the API and the dashboard on http://127.0.0.1:8080/ui/"),
    ]
