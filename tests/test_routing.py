"""Capability routing and one node id per process, with real node
processes: a node claims only the jobs it can run; a job no live node can run waits, shown as
such, and runs when a capable node returns; a live node's id is refused to a second process."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from helpers import add, pgpulse, spec
from pgpulse.core.routing import routes_for, waiting_reason
from pgpulse.core.sharding import DEFAULT_SHARD_COUNT, shards_for
from pgpulse.db.store import Store
from pgpulse.node import metrics
from pgpulse.web.reads import Reads
from pgpulse.web.service import present_job
from test_engine import wait_until
from web_helpers import OWN_PAGE, api_client, make_token

TESTS = Path(__file__).parent
EVERY_SECOND = "* * * * * *"  # 6 fields, seconds first


def _start(dsn: str, node_id: str, app: str, *options: str) -> subprocess.Popen[bytes]:
    """``pgpulse node run --app routing_app:APP`` as its own OS process, with sub-second
    heartbeats (time-to-live 1.6 s); Popen returns at once."""
    env = {
        **os.environ,
        "PGPULSE_DATABASE_URL": dsn,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pgpulse",
            "--log-level",
            "WARNING",
            "node",
            "run",
            "--app",
            f"routing_app:{app}",
            "--node-id",
            node_id,
            "--lease",
            "3",
            "--heartbeat",
            "0.3",
            "--poll",
            "0.3",
            "--drain-timeout",
            "1",
            *options,
        ],
        env=env,
        stderr=subprocess.PIPE,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (SIGCONT first, in case it was stopped) and wait for the exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if proc.stderr is not None:
        proc.stderr.close()


@contextmanager
def _nodes(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    """Stop every process on the way out, whatever happened."""
    try:
        yield
    finally:
        for proc in procs:
            _stop(proc)


async def _announced(proc: subprocess.Popen[bytes]) -> None:
    """Return once the node says on stderr that it started: ``node run`` says so after it set
    its SIGTERM handler (a node registered, even heartbeating, may not have yet: SIGTERM would
    kill it before it drains)."""
    assert proc.stderr is not None
    async with asyncio.timeout(60):
        while b" started with " not in (line := await asyncio.to_thread(proc.stderr.readline)):
            assert line, "the node exited before it started"


def _alive(db: Any, *node_ids: str) -> bool:
    row = db.execute(
        "SELECT count(*) AS n FROM pgpulse_nodes WHERE node_id = ANY(%s) AND state = 'alive' "
        "AND last_heartbeat > now() - interval '1 second'",
        (list(node_ids),),
    ).fetchone()
    return bool(row["n"] == len(node_ids))


def _status(dsn: str) -> dict[str, Any]:
    shown = pgpulse("status", "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    document: dict[str, Any] = json.loads(shown.stdout)
    return document


def _runs_by_node(db: Any, handler: str) -> dict[str, int]:
    rows = db.execute(
        "SELECT r.node_id, count(*) AS n "
        "FROM pgpulse_runs r JOIN pgpulse_jobs j ON j.id = r.job_id "
        "WHERE j.handler = %s AND r.outcome = 'succeeded' GROUP BY r.node_id",
        (handler,),
    ).fetchall()
    return {row["node_id"]: row["n"] for row in rows}


def test_routes_are_per_handler_over_the_nodes_that_have_it() -> None:
    """Pure: with the same handlers everywhere a node's routes are its ring shards for every
    handler; a handler only one node has is all of that node's, in every shard; every
    (handler, shard) pair has exactly one owner among the nodes that have the handler."""
    live = {"a": ("x", "y"), "b": ("y",), "c": ("y", "shell")}
    routes = {n: routes_for(n, live[n], live) for n in live}
    assert routes["a"]["x"] == tuple(range(DEFAULT_SHARD_COUNT))
    assert routes["c"]["shell"] == tuple(range(DEFAULT_SHARD_COUNT))
    assert routes["b"] == {"y": shards_for("b", live)}
    for handler in ("x", "y", "shell"):
        owners = [s for n in live for s in routes[n].get(handler, ())]
        assert sorted(owners) == list(range(DEFAULT_SHARD_COUNT)), handler
    # a node that just registered counts itself, whatever the heartbeat saw
    assert routes_for("d", ["x"], {}) == {"x": tuple(range(DEFAULT_SHARD_COUNT))}
    assert waiting_reason("x") == "no live node can run handler x"
    assert waiting_reason("shell") == "no live node allows shell jobs"


async def test_jobs_of_a_handler_one_node_lacks_run_on_the_other_then_wait_then_catch_up(
    store: Store, dsn: str, db: Any
) -> None:
    """Two nodes, one without handler x: x's jobs all run on the other, none failed, although
    the node without x owns about half the shards. Stop the capable node: x's jobs wait, shown
    as unroutable by `status`, `job show` and the API's job; start it again: the backfill job
    runs every occurrence it missed, the skip job records them skipped past its grace."""
    jobs = [
        spec(f"x{i}", schedule=EVERY_SECOND, handler="x", catch_up="backfill") for i in range(6)
    ]
    jobs.append(spec("x-skip", schedule=EVERY_SECOND, handler="x", misfire_grace=1))
    jobs.append(spec("y0", schedule=EVERY_SECOND, handler="y"))
    ids = dict(zip([j.name for j in jobs], await add(store, *jobs), strict=True))
    capable = _start(dsn, "capable", "app")
    lacking = _start(dsn, "lacking", "plain")
    with _nodes(capable, lacking):
        await wait_until(lambda: _alive(db, "capable", "lacking"))
        lacking_shards = set(shards_for("lacking", ["capable", "lacking"]))
        assert {i % DEFAULT_SHARD_COUNT for n, i in ids.items() if n != "y0"} & lacking_shards
        await wait_until(
            lambda: (
                db.execute(
                    "SELECT count(DISTINCT r.job_id) AS n FROM pgpulse_runs r "
                    "JOIN pgpulse_jobs j ON j.id = r.job_id "
                    "WHERE j.handler = 'x' AND r.outcome = 'succeeded'"
                ).fetchone()["n"]
                == 7
            )
        )
        assert set(_runs_by_node(db, "x")) == {"capable"}
        await wait_until(lambda: _runs_by_node(db, "y"))
        failed = db.execute(
            "SELECT count(*) AS n FROM pgpulse_jobs WHERE status = 'failed'"
        ).fetchone()
        assert failed == {"n": 0}
        assert db.execute(
            "SELECT count(*) AS n FROM pgpulse_runs WHERE outcome = 'failed'"
        ).fetchone() == {"n": 0}

        _stop(capable)
        assert capable.returncode == 0
        stopped_at = db.execute("SELECT now() AS t").fetchone()["t"]
        # x's jobs wait (the skip job past its grace: its catch-up will skip what it missed)
        await wait_until(
            lambda: db.execute(
                "SELECT min(next_run_at) < now() - interval '2 seconds' AS late "
                "FROM pgpulse_jobs WHERE name = 'x-skip' AND status = 'idle'"
            ).fetchone()["late"]
        )
        status = _status(dsn)
        assert status["jobs"]["unroutable"] == [
            {"handler": "x", "jobs": 7, "due": 7, "reason": "no live node can run handler x"}
        ]
        assert "7 jobs waiting: no live node can run handler x" in status["headline"]
        shown = pgpulse("job", "show", "x0", "--json", dsn=dsn)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["waiting"] == "no live node can run handler x"
        text = pgpulse("job", "show", "x0", dsn=dsn)
        assert "waiting         no live node can run handler x" in text.stdout
        # the API's job document says the same; a y job, which the node without x runs, waits not
        x_doc = present_job(await Reads(store.pool).job(ids["x0"], tenant=None) or {})
        y_doc = present_job(await Reads(store.pool).job(ids["y0"], tenant=None) or {})
        assert (x_doc["waiting"], y_doc["waiting"]) == ("no live node can run handler x", None)

        returned = _start(dsn, "capable", "app")  # the stopped row is taken over at once
        with _nodes(returned):
            back_at = await _until_running_again(db)
            await wait_until(
                lambda: (
                    db.execute(
                        "SELECT count(DISTINCT r.job_id) AS n FROM pgpulse_runs r "
                        "JOIN pgpulse_jobs j ON j.id = r.job_id WHERE j.handler = 'x' "
                        "AND j.name <> 'x-skip' AND r.outcome = 'succeeded' "
                        "AND r.scheduled_for > %s",
                        (back_at,),
                    ).fetchone()["n"]
                    == 6
                )
            )
        assert returned.returncode == 0
    # every occurrence of each backfill job from before the stop to after the return has a run
    for i in range(6):
        seconds = [
            row["scheduled_for"]
            for row in db.execute(
                "SELECT scheduled_for FROM pgpulse_runs WHERE job_id = %s "
                "AND outcome = 'succeeded' ORDER BY scheduled_for",
                (ids[f"x{i}"],),
            ).fetchall()
        ]
        gaps = [b - a for a, b in itertools.pairwise(seconds)]
        assert seconds[0] < stopped_at < back_at < seconds[-1]
        assert set(gaps) == {timedelta(seconds=1)}, (f"x{i}", seconds)
    # the skip job: what it missed past its grace is one skipped summary row
    skipped = db.execute(
        "SELECT occurrences, scheduled_for, last_scheduled_for FROM pgpulse_runs "
        "WHERE job_id = %s AND outcome = 'skipped'",
        (ids["x-skip"],),
    ).fetchall()
    assert any(
        row["occurrences"] >= 2 and row["last_scheduled_for"] > stopped_at for row in skipped
    ), skipped
    ran_while_away = db.execute(
        "SELECT count(*) AS n FROM pgpulse_runs WHERE job_id = %s AND outcome = 'succeeded' "
        "AND scheduled_for > %s AND scheduled_for < %s",
        (ids["x-skip"], stopped_at + timedelta(seconds=1), back_at - timedelta(seconds=1.5)),
    ).fetchone()
    assert ran_while_away == {"n": 0}
    assert set(_runs_by_node(db, "x")) == {"capable"}
    assert db.execute(
        "SELECT count(*) AS n FROM pgpulse_jobs WHERE status = 'failed'"
    ).fetchone() == {"n": 0}


async def _until_running_again(db: Any) -> Any:
    """Wait for an x run that started after now; return now (the database's)."""
    since = db.execute("SELECT now() AS t").fetchone()["t"]
    await wait_until(
        lambda: db.execute(
            "SELECT count(*) AS n FROM pgpulse_runs r JOIN pgpulse_jobs j ON j.id = r.job_id "
            "WHERE j.handler = 'x' AND r.started_at > %s",
            (since,),
        ).fetchone()["n"]
    )
    return since


async def test_shell_jobs_run_only_where_allowed_and_wait_where_no_node_allows_them(
    store: Store, dsn: str, db: Any
) -> None:
    """Shell jobs run only on the node started with --allow-shell-jobs; with it stopped, and a
    node without the flag alive, they wait ("no live node allows shell jobs")."""
    jobs = [
        spec(f"sh{i}", schedule=EVERY_SECOND, handler="shell", payload={"command": "true"})
        for i in range(4)
    ]
    await add(store, *jobs)
    allowed = _start(dsn, "allowed", "plain", "--allow-shell-jobs")
    plain = _start(dsn, "no-shell", "plain")
    with _nodes(allowed, plain):
        await wait_until(lambda: _alive(db, "allowed", "no-shell"))
        shell_modes = {
            row["node_id"]: row["shell"]
            for row in db.execute("SELECT node_id, shell FROM pgpulse_nodes").fetchall()
        }
        assert shell_modes == {"allowed": "run", "no-shell": "off"}
        await wait_until(
            lambda: (
                db.execute(
                    "SELECT count(DISTINCT job_id) AS n FROM pgpulse_runs "
                    "WHERE outcome = 'succeeded'"
                ).fetchone()["n"]
                == 4
            )
        )
        _stop(allowed)
        await wait_until(
            lambda: (
                _status(dsn)["jobs"]["unroutable"]
                == [{"handler": "shell", "jobs": 4, "due": 4, "reason": waiting_reason("shell")}]
            )
        )
        shown = pgpulse("status", dsn=dsn)
        assert "4 jobs waiting: no live node allows shell jobs" in shown.stdout
        assert "waiting: 4 jobs (4 due): no live node allows shell jobs" in shown.stdout
    assert set(_runs_by_node(db, "shell")) == {"allowed"}
    assert db.execute(
        "SELECT count(*) AS n FROM pgpulse_jobs WHERE status = 'failed'"
    ).fetchone() == {"n": 0}


async def test_a_live_node_id_is_refused_and_a_stale_one_taken_over(db: Any, dsn: str) -> None:
    """A second process with a live node's --node-id exits 2 with one line naming the id and the
    holder's host and pid, writing nothing. A holder silent past its time-to-live (SIGSTOP) is
    stale: a new process takes the id over; the old one, continued, finds its id taken and
    stops, saying so, without touching the new holder's row. A holder killed with SIGKILL is
    taken over at once, its row still fresh."""
    first = _start(dsn, "dup", "plain")
    with _nodes(first):
        await wait_until(lambda: _alive(db, "dup"))
        before = db.execute("SELECT pid, started_at FROM pgpulse_nodes").fetchone()
        refused = pgpulse(
            "node", "run", "--node-id", "dup", "--heartbeat", "0.3", dsn=dsn, timeout=30
        )
        assert refused.returncode == 2, refused.stderr
        host = socket.gethostname()
        assert refused.stderr == (
            f"error: --node-id 'dup' is held by a live node on host {host!r}, pid {first.pid} "
            f"(last heartbeat {refused.stderr.split('last heartbeat ')[1].split(' s ago')[0]} "
            "s ago): stop it, or start this node with another --node-id\n"
        )
        after = db.execute("SELECT pid, started_at FROM pgpulse_nodes").fetchone()
        assert after == before == {"pid": first.pid, "started_at": before["started_at"]}

        first.send_signal(signal.SIGSTOP)  # silent past its time-to-live (1.6 s): stale
        await wait_until(
            lambda: db.execute(
                "SELECT last_heartbeat < now() - make_interval(secs => ttl) AS stale "
                "FROM pgpulse_nodes"
            ).fetchone()["stale"]
        )
        # The taker-over lives by a 30 s time-to-live (heartbeat 10 s), so the continued first
        # finds it live however long a loaded machine keeps the taker-over's next heartbeat
        # waiting: with the 1.6 s one, a taker-over silent for 1.6 s (starved, or its
        # database) is stale in turn, the first takes the id back, and it never exits. Its
        # first heartbeat (after the row's registration) says its heartbeat session, which
        # makes a holder live, is connected.
        second = _start(dsn, "dup", "plain", "--lease", "60", "--heartbeat", "10")
        with _nodes(second):
            await wait_until(
                lambda: db.execute(
                    "SELECT pid = %s AND state = 'alive' AND ttl = 30 "
                    "AND last_heartbeat > started_at AS held FROM pgpulse_nodes",
                    (second.pid,),
                ).fetchone()["held"]
            )
            first.send_signal(signal.SIGCONT)
            assert first.wait(60) == 2  # the event: it finds its id taken, stops, exits
            assert first.stderr is not None
            said = first.stderr.read().decode()
            assert f"--node-id 'dup' is held by a live node on host {host!r}, pid {second.pid}" in (
                said
            )
            assert second.poll() is None
            row = db.execute("SELECT pid, state FROM pgpulse_nodes").fetchone()
            assert row == {"pid": second.pid, "state": "alive"}
            # killed, its row still fresh: its connections went with it, so a supervisor's
            # immediate restart under the same id takes the row over
            second.kill()
            second.wait(10)
            # the server has seen the killed process's heartbeat session go (its row lives by
            # a 30 s time-to-live: that session is what says it is dead)
            await wait_until(
                lambda: (
                    db.execute(
                        "SELECT count(*) AS n FROM pg_stat_activity "
                        "WHERE datname = current_database() "
                        "AND application_name = 'pgpulse:dup:beat'"
                    ).fetchone()["n"]
                    == 0
                )
            )
            third = _start(dsn, "dup", "plain")
            with _nodes(third):
                await wait_until(
                    lambda: (
                        db.execute("SELECT pid FROM pgpulse_nodes").fetchone()["pid"] == third.pid
                    )
                )
                await wait_until(lambda: _alive(db, "dup"))
                await _announced(third)  # stopped from here on, it drains and exits 0
                assert third.poll() is None
            assert third.returncode == 0
    assert db.execute("SELECT state FROM pgpulse_nodes").fetchone() == {"state": "stopped"}


async def test_the_api_dashboard_and_metrics_show_what_waits(store: Store, db: Any) -> None:
    """A job whose handler no live node advertises is `waiting` in the API's job and cluster
    documents, carries a badge on the dashboard's job and jobs pages, and is counted by
    pgpulse_jobs_unroutable; a live node with the handler clears all of them."""
    [waiting_id, _] = await add(store, spec("report", handler="reports.send"), spec("ok"))
    await store.register_node("n1", hostname="h", pid=1, slots=4, handlers=["noop"], ttl=60)
    token = await make_token(store, admin=True)
    async with api_client(store, token) as client:
        job = (await client.get(f"/api/v1/jobs/{waiting_id}")).json()
        assert job["waiting"] == "no live node can run handler reports.send"
        cluster = (await client.get("/api/v1/cluster")).json()
        assert cluster["jobs"]["unroutable"] == [
            {
                "handler": "reports.send",
                "jobs": 1,
                "due": 0,
                "reason": "no live node can run handler reports.send",
            }
        ]
        signed = await client.post("/ui/login", data={"token": token}, headers=OWN_PAGE)
        assert signed.status_code == 303
        page = (await client.get(f"/ui/jobs/{waiting_id}")).text
        assert "waiting: no live node can run handler reports.send" in page
        jobs_page = (await client.get("/ui/")).text
        assert 'data-testid="waiting-report"' in jobs_page
        assert 'data-testid="waiting-ok"' not in jobs_page
        body, _ = await metrics.exposition(store)
        assert "pgpulse_jobs_unroutable 1.0" in body.decode()

        await store.register_node(
            "n2", hostname="h", pid=2, slots=4, handlers=["reports.send"], ttl=60
        )
        assert (await client.get(f"/api/v1/jobs/{waiting_id}")).json()["waiting"] is None
        assert (await client.get("/api/v1/cluster")).json()["jobs"]["unroutable"] == []
        body, _ = await metrics.exposition(store)
        assert "pgpulse_jobs_unroutable 0.0" in body.decode()
