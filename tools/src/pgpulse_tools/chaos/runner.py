"""``pgpulse chaos``: run the cluster, inject the seeded faults, settle, check, print the verdict.

A run: start (or use) a PostgreSQL — or, with ``replication``, a primary and a streaming standby
(:mod:`~pgpulse_tools.chaos.replication`); create a fresh database, migrate it, create the
history tables; load the workload; start one proxy per node and server and the nodes (on a
cluster each node's DSN lists both servers, ``target_session_attrs=read-write``); wait until every
node is alive; carry out the fault plan, and meanwhile request triggers and backfills (seeded:
:func:`_request_extras`); when the last fault has ended (the *settle point*), let
the cluster settle; snapshot the history (the database's tables and the nodes' journals); stop
the nodes with SIGTERM; check; print the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row

from pgpulse.app import connect
from pgpulse.core.errors import DatabaseUnavailable, InvalidInput, PulseError
from pgpulse.db.claims import LEADER_LOCK_KEY
from pgpulse.db.run_control import RunControl
from pgpulse.sql import load_queries
from pgpulse_tools.chaos import keys
from pgpulse_tools.chaos.chains import chain_jobs
from pgpulse_tools.chaos.checker import Verdict, check
from pgpulse_tools.chaos.cluster import Cluster, NodeSettings
from pgpulse_tools.chaos.faults import (
    CLUSTER_RUN_KINDS,
    FAULT_KINDS,
    OPT_IN_KINDS,
    Injector,
    PlannedFault,
    plan_faults,
)
from pgpulse_tools.chaos.history import (
    Execution,
    Fault,
    History,
    Job,
    Request,
    Run,
    RunEvent,
    dump_history,
)
from pgpulse_tools.chaos.journal import merge, read_journals
from pgpulse_tools.chaos.patroni import PatroniServer
from pgpulse_tools.chaos.proxy import ProxyGroup
from pgpulse_tools.chaos.replication import ReplicatedServer, Replication
from pgpulse_tools.chaos.server import (
    ExternalServer,
    ManagedServer,
    Server,
    create_database,
    drop_database,
)
from pgpulse_tools.chaos.workload import app as workload_app
from pgpulse_tools.chaos.workload import build_jobs, kinds

Q = load_queries("chaos.sql", __package__)
log = logging.getLogger(__name__)
Echo = Callable[[str], None]

#: Seconds of faults of a soak's long run when no duration is asked for (``pgpulse chaos
#: --soak``): 20 minutes, the length of the issue-37 soak.
SOAK_DURATION = 1200.0
#: A soak's long run lasts longer than this (seconds): ten minutes, past which the backlogs
#: and slow leaks a one-minute run never meets show up.
SOAK_LONGER_THAN = 600.0
#: The fault kinds of a soak's second run: resharding while the primary moves.
SOAK_CLUSTER_KINDS: tuple[str, ...] = (*CLUSTER_RUN_KINDS, "reshard")
#: Readings of the database's clock its offset is measured over (the tightest one counts).
OFFSET_SAMPLES = 5
#: Seconds between two run-control requests of the fault phase (uniform in this range).
REQUEST_EVERY = (1.0, 3.0)
#: Seconds a request may take (the database may be down) before it is given up as unanswered.
REQUEST_TIMEOUT = 10.0
#: Handler kinds whose jobs a backfill is requested of: short handlers, so that a backfill's
#: backlog drains within the settle period.
BACKFILL_KINDS = (
    "quick",
    "steady",
    "cron",
    "flaky",
    "overlap",
    "replace",
    "blocking",
    "chain",  # chain: its head
)


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    """Settings of a run. Durations are seconds.

    Attributes:
        duration: the fault phase: faults start within it (each then lasts its hold).
        nodes: regular nodes (one more joins and leaves with ``join_leave``).
        seed: seeds the fault plan, the workload and handler behaviour; random if ``None``.
        jobs: how many jobs the workload loads.
        node: the nodes' lease, heartbeat, poll, slots, drain timeout.
        settle: how long the cluster runs after the last fault before the check; ``None``:
            long enough for any lease to expire and any handler to finish.
        database_url: use this server (a fresh database on it) instead of starting one; the
            ``pg_restart`` fault is then left out.
        data_dir: where the harness's own server lives (a temporary folder inside it).
        kinds: the fault kinds to inject; ``None``: every kind the server allows.
        keep: keep the run folder (node logs) even when the verdict is ok.
        replication: ``sync`` or ``async``: run on a replicated cluster of the harness's own
            (failover and switchover faults instead of restarts); ``None``: one server.
        pg_bin: the cluster's PostgreSQL programs (default: the embedded server's).
        patroni: with ``replication``, a Patroni-managed cluster (etcd and two members, the
            primary moved by patronictl: :mod:`~pgpulse_tools.chaos.patroni`) instead of the
            harness's own pair.
    """

    duration: float = 60.0
    nodes: int = 4
    seed: int | None = None
    jobs: int = 300
    node: NodeSettings = field(default_factory=NodeSettings)
    settle: float | None = None
    database_url: str | None = None
    data_dir: Path | None = None
    kinds: tuple[str, ...] | None = None
    keep: bool = False
    replication: Replication | None = None
    pg_bin: Path | None = None
    patroni: bool = False

    def fault_kinds(self) -> tuple[str, ...]:
        """The kinds to plan: the given ones, or every kind this run's server allows.

        Raises:
            InvalidInput: a kind the server does not allow (``field`` is ``faults``).
        """
        if self.replication is not None:
            allowed, why = CLUSTER_RUN_KINDS, "a replicated cluster is failed over, not restarted"
        elif self.database_url:
            allowed = tuple(k for k in FAULT_KINDS if k != "pg_restart")
            why = "the harness never restarts a server it did not start"
        else:
            allowed, why = FAULT_KINDS, "failover and switchover need --cluster"
        allowed = (*allowed, *OPT_IN_KINDS)
        chosen = (
            tuple(k for k in allowed if k not in OPT_IN_KINDS) if self.kinds is None else self.kinds
        )
        refused = [kind for kind in chosen if kind not in allowed]
        if refused:
            raise InvalidInput(
                f"fault kind {refused[0]!r} is not available here: {why}",
                field="faults",
                value=refused[0],
            )
        return chosen

    def settle_seconds(self) -> float:
        """The settle period: a lease to expire, the sweeper, the longest handler, margin."""
        if self.settle is not None:
            return self.settle
        longest = max(k.max for k in kinds(self.node.lease))
        return self.node.lease + 2 * self.node.heartbeat + longest + 3.0


@dataclass(slots=True)
class _Run:
    """What a run holds while it goes (the imperative shell around the pure parts)."""

    config: ChaosConfig
    echo: Echo
    server: Server
    dbname: str = ""
    proxies: list[ProxyGroup] = field(default_factory=list)
    offset: timedelta = timedelta(0)
    folder: Path = field(default_factory=Path)

    def clock(self) -> datetime:
        """The database's current instant (local clock plus the offset measured at start:
        :func:`clock_offset`)."""
        return datetime.now(UTC) + self.offset

    def dsn(self) -> str:
        """The harness's own (unproxied) DSN of the run's database."""
        return self.server.admin_dsn(self.dbname)


async def run_chaos(config: ChaosConfig, echo: Echo = print) -> Verdict:
    """Run the harness once and return the verdict (``verdict.ok``: every must-be-zero is 0).

    Args:
        config: the run's settings (the seed is drawn and printed when ``None``).
        echo: where progress and the verdict are printed.

    Raises:
        DatabaseUnavailable: the server could not start or does not answer.
        InvalidInput: ``database_url`` names a non-local host, or is given with
            ``replication``; a fault kind the server does not allow.
    """
    seed = config.seed if config.seed is not None else random.SystemRandom().randrange(10**6)
    config = replace(config, seed=seed, node=replace(config.node, seed=seed))
    config = replace(config, kinds=config.fault_kinds())
    server = _server(config, echo)
    run = _Run(config, echo, server, folder=Path(tempfile.mkdtemp(prefix="pgpulse-chaos-run-")))
    on = f" on a {config.replication}-replicated cluster" if config.replication else ""
    on += " managed by Patroni" if config.patroni else ""
    echo(
        f"chaos seed {seed}: {config.nodes} nodes{on}, {config.jobs} jobs, faults for "
        f"{config.duration:g}s (lease {config.node.lease:g}s, heartbeat "
        f"{config.node.heartbeat:g}s, {config.node.guard} guard); logs in {run.folder}"
    )
    verdict: Verdict | None = None
    try:
        await server.start()
        verdict = await _run(run)
        return verdict
    finally:
        for proxy in run.proxies:
            await proxy.close()
        if run.dbname and isinstance(server, ExternalServer):
            await drop_database(server, run.dbname)
        await server.close()
        started = run.folder.is_dir() and any(run.folder.iterdir())
        if not started or (verdict is not None and verdict.ok and not config.keep):
            shutil.rmtree(run.folder, ignore_errors=True)  # a failed start leaves nothing
        else:
            echo(f"node logs kept in {run.folder}")
        where = " (on the same --database-url)" if config.database_url else ""
        echo(f"seed {seed}: replay with `{_replay(config)}`{where}")


def soak_configs(config: ChaosConfig) -> tuple[ChaosConfig, ChaosConfig]:
    """The two runs of a soak (``pgpulse chaos --soak``), with ``config``'s seed and settings:

    * the long run: ``config`` as it is, its fault phase longer than :data:`SOAK_LONGER_THAN`;
    * resharding during failovers: on a replicated cluster of the harness's own (``config``'s
      replication mode; asynchronous when it has none, the mode whose failovers lose commits),
      every cluster fault kind and ``reshard`` (:data:`SOAK_CLUSTER_KINDS`), for a quarter of
      the long run (at least two minutes).

    Raises:
        InvalidInput: ``config.duration`` is not longer than :data:`SOAK_LONGER_THAN`
            (``field`` ``duration``).
    """
    if config.duration <= SOAK_LONGER_THAN:
        raise InvalidInput(
            f"a soak's long run lasts longer than {SOAK_LONGER_THAN:g}s, got {config.duration:g}s",
            field="duration",
            value=config.duration,
        )
    resharding = replace(
        config,
        duration=max(config.duration / 4, 120.0),
        replication=config.replication or "async",
        kinds=SOAK_CLUSTER_KINDS,
        database_url=None,
    )
    return config, resharding


async def run_soak(config: ChaosConfig, echo: Echo = print) -> list[Verdict]:
    """Run the soak's two runs (:func:`soak_configs`) one after the other, print a line per
    run, and return their verdicts (the soak is ok when both are).

    Raises:
        InvalidInput: as :func:`soak_configs`, or as :func:`run_chaos`.
        DatabaseUnavailable: as :func:`run_chaos`.
    """
    runs = soak_configs(config)
    names = ("long run", "resharding during failovers")
    verdicts: list[Verdict] = []
    for name, each in zip(names, runs, strict=True):
        echo(f"soak: {name}, faults for {each.duration:g}s")
        verdicts.append(await run_chaos(each, echo))
    for name, verdict in zip(names, verdicts, strict=True):
        echo(f"soak: {name}: {'OK' if verdict.ok else 'FAILED'}")
    return verdicts


def _server(config: ChaosConfig, echo: Echo) -> Server:
    if config.replication is not None:
        if config.database_url:
            raise InvalidInput(
                "--cluster starts a replicated cluster of its own: drop --database-url",
                field="database_url",
                value=config.database_url,
            )
        if config.patroni:
            return PatroniServer(config.data_dir, config.replication, config.pg_bin)
        return ReplicatedServer(config.data_dir, config.replication, config.pg_bin)
    if config.database_url:
        echo("using the given server: PostgreSQL restarts are left out of the plan")
        return ExternalServer(config.database_url)
    return ManagedServer(config.data_dir)


def _replay(config: ChaosConfig) -> str:
    """The command that replays a run (same seed, same settings)."""
    words = [
        f"pgpulse chaos --seed {config.seed} --duration {config.duration:g}",
        f"--nodes {config.nodes} --jobs {config.jobs} --guard {config.node.guard}",
    ]
    if config.replication is not None:
        words.append(f"--cluster --replication {config.replication}")
    if config.patroni:
        words.append("--patroni")
    if config.pg_bin is not None:
        words.append(f"--pg-bin {config.pg_bin}")
    if config.kinds is not None and set(config.kinds) != set(
        CLUSTER_RUN_KINDS if config.replication else FAULT_KINDS
    ):
        words.append(f"--faults {','.join(config.kinds)}")
    return " ".join(words)


async def _run(run: _Run) -> Verdict:
    config = run.config
    run.dbname = await create_database(run.server)
    async with connect(run.dsn(), max_size=2) as store:
        async with await psycopg.AsyncConnection.connect(
            run.dsn(), autocommit=True, row_factory=dict_row
        ) as conn:
            run.offset = await clock_offset(lambda: _db_clock(conn))
            await conn.execute(Q["create_history"])
        assert config.seed is not None
        specs = build_jobs(config.jobs, lease=config.node.lease, seed=config.seed)
        specs += chain_jobs(config.seed)
        await store.upsert_jobs(
            specs + keys.keyed_jobs(), extra_handlers=list(workload_app.handlers)
        )
        await keys.set_limit(store)
    for index in range(config.nodes + 1):
        proxy = ProxyGroup(Cluster.node_id(index), run.server.endpoints)
        await proxy.start()
        run.proxies.append(proxy)
    cluster = Cluster(config.node, lambda i: run.proxies[i].dsn(run.dbname), run.folder, run.clock)
    try:
        return await _drive(run, cluster)
    finally:
        await _stop(run, cluster)


async def clock_offset(
    read: Callable[[], Awaitable[datetime]], samples: int = OFFSET_SAMPLES
) -> timedelta:
    """The database's clock minus this process's, from ``samples`` readings of the database's
    clock (``read``): the tightest reading's instant minus the midpoint of the local instants
    before and after it, so its error is at most half that round trip, either way. (One
    reading minus the local instant after it would put the database's clock behind by the
    whole reply's latency — under load tens of milliseconds — and every fault instant, a
    failover's kill among them, that much early: effects.py says why that errs the unsafe way.)

    Raises:
        psycopg.Error: a reading failed.
    """
    best: tuple[timedelta, timedelta] | None = None
    for _ in range(samples):
        before = datetime.now(UTC)
        db = await read()
        after = datetime.now(UTC)
        trip = after - before
        if best is None or trip < best[0]:
            best = (trip, db - (before + trip / 2))
    assert best is not None
    return best[1]


async def _db_clock(conn: psycopg.AsyncConnection[DictRow]) -> datetime:
    row = await (await conn.execute(Q["clock"])).fetchone()
    assert row is not None
    return row["at"]  # type: ignore[no-any-return]


async def _stop(run: _Run, cluster: Cluster) -> None:
    codes = await cluster.stop_all()
    bad = {node: code for node, code in codes.items() if code not in (0, None)}
    if bad:
        run.echo(f"nodes that did not exit cleanly on SIGTERM: {bad}")


async def _drive(run: _Run, cluster: Cluster) -> Verdict:
    config = run.config
    node = config.node
    async with await psycopg.AsyncConnection.connect(
        run.dsn(), autocommit=True, row_factory=dict_row
    ) as conn:
        await asyncio.gather(*(cluster.start(i) for i in range(config.nodes)))
        await _wait_alive(conn, config.nodes, ttl=3 * node.heartbeat + 1)
    started_at = run.clock()
    assert config.seed is not None
    assert config.kinds is not None
    plan = plan_faults(
        config.seed,
        duration=config.duration,
        nodes=config.nodes,
        lease=node.lease,
        kinds=config.kinds,
    )
    injector = Injector(
        cluster,
        run.proxies,
        run.server,
        run.clock,
        lambda: _leader(run),
        dsn=run.dsn,
        node_ttl=3 * node.heartbeat + 1,
    )
    run.echo(f"all {config.nodes} nodes alive; {len(plan)} faults planned")
    stop_requests = asyncio.Event()
    requests: list[Request] = []
    requester = asyncio.create_task(_request_extras(run, stop_requests, requests))
    try:
        faults = await _inject(run, injector, plan)
    finally:
        stop_requests.set()
        with contextlib.suppress(Exception):
            await requester
    acknowledged = sum(1 for r in requests if r.ok)
    run.echo(f"{len(requests)} triggers and backfills requested, {acknowledged} acknowledged")
    settle_at = run.clock()
    settle = config.settle_seconds()
    run.echo(f"faults over at {settle_at:%H:%M:%S}; settling for {settle:.1f}s")
    await asyncio.sleep(settle)
    # An overlap-allow job drains its backlog at ~2/3 of its firing rate, so a backlog built
    # over the whole fault phase may need as long again; the wait ends as soon as it is gone.
    await _drain_backlog(run, settle_at, limit=max(30.0, 2 * settle, config.duration))
    history = await _snapshot(run, faults, settle_at, cluster)
    # Graceful stop is part of the test: a node that hangs on SIGTERM is a crash.
    await _stop(run, cluster)
    history = replace(
        history,
        started_at=started_at,
        node_exits=tuple(cluster.exits),
        requests=tuple(requests),
    )
    await asyncio.to_thread(dump_history, history, run.folder / "history.json")
    verdict = check(history)
    run.echo("\n" + verdict.table() + "\n")
    for fault in faults:
        run.echo(f"  {fault.started_at:%H:%M:%S.%f}"[:-3] + f"  {fault.detail}")
    run.echo(f"\nverdict: {'OK' if verdict.ok else 'FAILED'} (seed {config.seed})")
    return verdict


async def _request_extras(run: _Run, stop: asyncio.Event, out: list[Request]) -> None:
    """Until ``stop`` is set, every :data:`REQUEST_EVERY` seconds make one seeded run-control
    request through the Python API (the CLI's and the HTTP API's calls), appended to ``out``
    as the API answered it: a trigger with a payload (the job's own, marked), a payload-less
    trigger (the job row's occurrence moves to now; refused when the job is running), or a
    backfill of a few seconds of the last fifteen (``only`` missing, failed, all or the
    default, ``max_concurrency`` 1-3). A request that raises or outlasts
    :data:`REQUEST_TIMEOUT` (the database down, a job running) is recorded unacknowledged."""
    config = run.config
    rng = random.Random(f"{config.seed}:requests")
    async with connect(run.dsn(), max_size=2) as store:
        async with store.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, tenant, name, payload FROM pgpulse_jobs ORDER BY id"
            )
            jobs = list(await cur.fetchall())
        control = RunControl(store.pool)
        backfillable = [j for j in jobs if j["payload"]["kind"] in BACKFILL_KINDS]
        number = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), rng.uniform(*REQUEST_EVERY))
            if stop.is_set():
                return
            number += 1
            action = rng.choices(("trigger", "trigger_job", "backfill"), (4, 2, 4))[0]
            job = rng.choice(backfillable if action == "backfill" else jobs)
            at = run.clock()
            request = Request(action, job["id"], at)
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT):
                    if action == "trigger":
                        payload = {**job["payload"], "trigger": number}
                        done = await control.trigger(job["tenant"], job["name"], payload)
                        request = replace(
                            request, run_id=done.occurrence, scheduled_for=done.scheduled_for
                        )
                    elif action == "trigger_job":
                        instant = await store.trigger_job(job["tenant"], job["name"])
                        request = replace(request, scheduled_for=instant)
                    else:
                        # the recent past, where faults left occurrences missing or failed
                        end = at - timedelta(seconds=rng.uniform(0.5, 15.0))
                        start = end - timedelta(seconds=rng.uniform(2.0, 8.0))
                        only = rng.choice((("missing",), ("failed",), ("all",), ("all",), ()))
                        bound = rng.choice((1, 1, 2, 3))
                        plan = await control.backfill(
                            job["tenant"],
                            job["name"],
                            start=start,
                            end=end,
                            only=only,
                            max_concurrency=bound,
                        )
                        request = replace(
                            request,
                            batch_id=plan.batch_id,
                            selected=tuple(plan.selected) if plan.batch_id is not None else (),
                            start=start,
                            end=end,
                            only=only,
                            max_concurrency=bound,
                        )
            except (PulseError, psycopg.Error, OSError, TimeoutError) as exc:
                request = replace(request, ok=False, error=f"{type(exc).__name__}: {exc}")
            out.append(request)


async def _wait_alive(conn: psycopg.AsyncConnection[DictRow], count: int, ttl: float) -> None:
    async with asyncio.timeout(60):
        while True:
            row = await (await conn.execute(Q["live_nodes"], {"ttl": ttl})).fetchone()
            if row and row["n"] >= count:
                return
            await asyncio.sleep(0.2)


async def _drain_backlog(run: _Run, settle_at: datetime, limit: float) -> None:
    """Wait (at most ``limit`` seconds) until every job has moved past the settle point and
    every forked occurrence of it has run, so that the checker checks every occurrence due by
    then (one still queued behind a long outage is not checked: the verdict counts them), and
    say how it ended."""
    began = time.monotonic()
    left = -1
    async with await psycopg.AsyncConnection.connect(
        run.dsn(), autocommit=True, row_factory=dict_row
    ) as conn:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                while left != 0:
                    row = await (await conn.execute(Q["backlog"], {"at": settle_at})).fetchone()
                    left = 0 if row is None else row["n"]
                    if left:
                        await asyncio.sleep(0.5)
    took = time.monotonic() - began
    if left:
        run.echo(f"backlog not drained after {took:.0f}s: {left} jobs or occurrences behind")
    else:
        run.echo(f"backlog drained in {took:.0f}s")


async def _leader(run: _Run) -> str | None:
    async with await psycopg.AsyncConnection.connect(
        run.dsn(), autocommit=True, row_factory=dict_row, connect_timeout=2
    ) as conn:
        row = await (await conn.execute(Q["leader"], {"key": LEADER_LOCK_KEY})).fetchone()
        return None if row is None else row["node_id"]


async def _inject(run: _Run, injector: Injector, plan: list[PlannedFault]) -> list[Fault]:
    start = time.monotonic()

    async def one(fault: PlannedFault) -> Fault:
        await asyncio.sleep(max(0.0, start + fault.at - time.monotonic()))
        done = await injector.apply(fault)
        run.echo(f"t={time.monotonic() - start:6.1f}s  {done.detail} — over")
        return done

    progress = asyncio.create_task(_progress(run, start))
    try:
        return list(await asyncio.gather(*(one(f) for f in plan)))
    finally:
        progress.cancel()


async def _progress(run: _Run, start: float) -> None:
    while True:
        await asyncio.sleep(5)
        with contextlib.suppress(psycopg.Error, OSError):
            async with await psycopg.AsyncConnection.connect(
                run.dsn(), autocommit=True, row_factory=dict_row, connect_timeout=2
            ) as conn:
                row = await (await conn.execute(Q["progress"])).fetchone()
                assert row is not None
                run.echo(
                    f"t={time.monotonic() - start:6.1f}s  executions {row['executions']}, "
                    f"effects {row['applied']}, fenced {row['fenced']}"
                )


async def _rows(conn: psycopg.AsyncConnection[DictRow], name: str) -> list[dict[str, Any]]:
    return list(await (await conn.execute(Q[name])).fetchall())


async def _snapshot(
    run: _Run, faults: list[Fault], settle_at: datetime, cluster: Cluster
) -> History:
    """The history as of one instant, while the nodes still run: the nodes' journals, then
    the database's tables in one REPEATABLE READ transaction.

    The journals first: a node journals an end only once the database acknowledged it, so
    every end read then is in the database's snapshot taken after (unless a failover lost
    it), and an execution the journals have and the snapshot lacks is one a failover lost —
    or one that was starting as the journals were read (its start is journaled before the
    database hears of it), which has no end there. Read after the snapshot, the journals
    would also hold what the nodes did meanwhile (seconds, under load: 442 executions on
    seed 7), which the checker would take for records a failover lost (a false duplicate
    where a lease loss re-ran one).

    Raises:
        DatabaseUnavailable: the database cannot be reached.
    """
    journals = await asyncio.to_thread(read_journals, run.folder)
    try:
        conn = await psycopg.AsyncConnection.connect(run.dsn(), row_factory=dict_row)
    except psycopg.Error as exc:
        raise DatabaseUnavailable(f"cannot read the history: {exc}") from exc
    async with conn:  # one REPEATABLE READ transaction: every table as of one instant
        await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        jobs = await _rows(conn, "read_jobs")
        rows = [Execution.from_row(r) for r in await _rows(conn, "read_history")]
        return History(
            executions=merge(rows, journals),
            run_events=tuple(RunEvent.from_row(r) for r in await _rows(conn, "read_run_log")),
            runs=tuple(Run.from_row(r) for r in await _rows(conn, "read_runs")),
            jobs=tuple(Job.from_row(r) for r in jobs),
            faults=tuple(faults),
            settle_at=settle_at,
            checked_at=jobs[0]["checked_at"] if jobs else run.clock(),
            lease=run.config.node.lease,
            heartbeat=run.config.node.heartbeat,
            node_exits=tuple(cluster.exits),
            replication=run.config.replication,
        )
