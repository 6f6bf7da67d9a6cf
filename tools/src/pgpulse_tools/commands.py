"""The tools' commands: ``pgpulse demo``, ``pgpulse chaos`` and ``pgpulse bench``.

:mod:`pgpulse.cli.main` lists them in its help and imports this module only when one of them is
invoked (``LAZY_COMMANDS`` in :mod:`pgpulse.cli.conventions`). Like every command they are
thin: parse options, call the tool, print one line on error.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from pgpulse.cli.report import run_command
from pgpulse.cli.types import Number, Seconds

if TYPE_CHECKING:
    from pgpulse_tools.chaos.replication import Replication


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("crontabs", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--duration", type=Seconds(20, 170), default=75, help="How long the three nodes run.")
@click.option(
    "--system",
    is_flag=True,
    help="CRONTABS are in system format (/etc/crontab and /etc/cron.d/* always are).",
)
@click.pass_obj
def demo(obj: dict[str, Any], crontabs: tuple[Path, ...], duration: float, system: bool) -> None:
    """Three nodes share the Relay crontab (plus CRONTABS); one is killed midway."""
    from pgpulse_tools.demo.run import run_demo

    # the demo makes its own database on the server: --database names none for it
    database_url = None if obj["embedded"] else obj["database_url"]
    sys.exit(run_command(run_demo(database_url, obj["data_dir"], list(crontabs), duration, system)))


# -- chaos: the fault-injection harness (pgpulse_tools.chaos) ----------------------------------


@click.command("chaos")
@click.option(
    "--duration",
    type=Seconds(5),
    default=60,
    help="How long faults are injected.",
)
@click.option(
    "--nodes",
    type=click.IntRange(2, 16),
    default=4,
    help="Scheduler nodes (one more joins and leaves).",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    show_default="random, printed",
    help="Seed of the fault plan and workload.",
)
@click.option("--jobs", type=click.IntRange(7), default=300, help="Jobs in the workload.")
@click.option(
    "--guard",
    type=click.Choice(["token", "lease"]),
    default="lease",
    help="Effect guard: lease (the token must hold a live lease: exactly once) or "
    "token (newest token wins: orders writes, but a zombie can still write).",
)
@click.option("--lease", type=Seconds(2), default=4, help="Every node's --lease.")
@click.option(
    "--heartbeat",
    type=Seconds(0.1),
    default=0.5,
    help="Every node's --heartbeat (under a third of --lease).",
)
@click.option("--slots", type=click.IntRange(1, 1000), default=32, help="Every node's --slots.")
@click.option(
    "--drain-timeout",
    type=Seconds(0),
    default=3,
    help="Every node's --drain-timeout.",
)
@click.option(
    "--cluster",
    is_flag=True,
    help="Run on a primary and a streaming standby of its own (nodes get a multi-host DSN), "
    "with failover and switchover faults instead of restarts.",
)
@click.option(
    "--replication",
    type=click.Choice(["sync", "async"]),
    default="sync",
    help="With --cluster: synchronous replication (nothing committed is lost) or asynchronous "
    "(a failover loses the last commits).",
)
@click.option(
    "--pg-bin",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    show_default="the embedded server's",
    help="With --cluster: the PostgreSQL programs' folder, e.g. /usr/lib/postgresql/15/bin.",
)
@click.option(
    "--patroni",
    is_flag=True,
    help="With --cluster: a Patroni-managed cluster (etcd and two members; needs patroni and "
    "etcd on the PATH), failed over and switched over with patronictl.",
)
@click.option(
    "--faults",
    default=None,
    show_default="all",
    help="Fault kinds, comma-separated (kill, pause, partition, delay, pg_restart, join_leave; "
    "with --cluster failover, switchover instead of pg_restart). "
    "Opt-in: reshard (change the shard count online while the nodes run).",
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Also write the verdict as JSON to this file.",
)
@click.option(
    "--soak",
    is_flag=True,
    help="A soak: a long run (--duration over 600 s; 1200 s unless given), then a run with "
    "resharding during failovers on a replicated cluster of its own (--replication, async "
    "unless given with --cluster) for a quarter of it; exit 1 if either fails.",
)
@click.pass_obj
def chaos(
    obj: dict[str, Any],
    duration: float,
    nodes: int,
    seed: int | None,
    jobs: int,
    guard: str,
    lease: float,
    heartbeat: float,
    slots: int,
    drain_timeout: float,
    cluster: bool,
    replication: str,
    pg_bin: Path | None,
    patroni: bool,
    faults: str | None,
    report: Path | None,
    soak: bool,
) -> None:
    """Kill, pause, partition and restart a live cluster (or fail its replicated database
    over); check the history; exit 1 on a duplicate, overlap, lost or stuck run, or a fencing
    token held twice. Starts its own PostgreSQL unless --database-url."""
    from pgpulse_tools.chaos.cluster import NodeSettings
    from pgpulse_tools.chaos.faults import CLUSTER_KINDS, FAULT_KINDS, OPT_IN_KINDS
    from pgpulse_tools.chaos.runner import ChaosConfig, run_chaos

    if lease <= 2 * heartbeat:
        raise click.BadParameter(
            f"{lease:g}: the lease must be longer than two heartbeats ({heartbeat:g}s)",
            param_hint="--lease",
        )
    kinds = None
    if faults is not None:
        kinds = tuple(part.strip() for part in faults.split(",") if part.strip())
        every = (*FAULT_KINDS, *CLUSTER_KINDS, *OPT_IN_KINDS)
        unknown = [k for k in kinds if k not in every] or kinds == ()
        if unknown:
            raise click.BadParameter(
                f"{faults!r}: kinds are {', '.join(every)}",
                param_hint="--faults",
            )
    settings = NodeSettings(
        lease=lease, heartbeat=heartbeat, slots=slots, drain_timeout=drain_timeout, guard=guard
    )
    config = ChaosConfig(
        duration=duration,
        nodes=nodes,
        seed=seed,
        jobs=jobs,
        node=settings,
        database_url=obj["database_url"],
        data_dir=obj["data_dir"],
        kinds=kinds,
        replication=_replication(cluster, replication, pg_bin, patroni),
        pg_bin=pg_bin,
        patroni=patroni,
    )
    if soak:
        sys.exit(_soak(config, report))
    verdict = run_command(run_chaos(config, click.echo))
    if report is not None:
        report.write_text(json.dumps(verdict.as_dict(), indent=2) + "\n", encoding="utf-8")
    sys.exit(0 if verdict.ok else 1)


def _soak(config: Any, report: Path | None) -> int:
    """``pgpulse chaos --soak``: the soak's runs (:func:`~pgpulse_tools.chaos.runner.run_soak`)
    with ``config`` (a ``ChaosConfig``; its duration :data:`SOAK_DURATION` unless
    --duration was given); the exit code (0: every run ok). The report holds every verdict."""
    from dataclasses import replace

    from pgpulse.core.errors import InvalidInput
    from pgpulse_tools.chaos.runner import SOAK_DURATION, run_soak, soak_configs

    source = click.get_current_context().get_parameter_source("duration")
    if source in (ParameterSource.DEFAULT, None):
        config = replace(config, duration=SOAK_DURATION)
    try:
        soak_configs(config)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--duration") from None
    verdicts = run_command(run_soak(config, click.echo))
    ok = all(v.ok for v in verdicts)
    if report is not None:
        data = {"ok": ok, "runs": [v.as_dict() for v in verdicts]}
        report.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0 if ok else 1


def _replication(
    cluster: bool, replication: str, pg_bin: Path | None, patroni: bool
) -> Replication | None:
    """The run's replication mode (``None``: one server); --replication, --pg-bin and
    --patroni are refused without --cluster."""
    source = click.get_current_context().get_parameter_source("replication")
    if not cluster:
        if pg_bin is not None:
            raise click.BadParameter("needs --cluster", param_hint="--pg-bin")
        if patroni:
            raise click.BadParameter("needs --cluster", param_hint="--patroni")
        if source not in (ParameterSource.DEFAULT, None):
            raise click.BadParameter("needs --cluster", param_hint="--replication")
        return None
    return "sync" if replication == "sync" else "async"


# -- bench: Pulse against the raw SQL ceiling and peer schedulers (pgpulse_tools.bench) --------


#: The modules of the ``bench`` extra that ``pgpulse bench`` imports (the report's plots, the
#: peers of scenario 7, the process figures), checked before anything runs.
BENCH_MODULES = ("matplotlib", "psutil", "apscheduler", "pgqueuer", "procrastinate")


@click.command("bench")
@click.option(
    "--scale",
    type=Number(0.001, 10),
    default=0.1,
    help="Fraction of the full sizes (1 = 1,000,000 jobs stored; 0.1 for a quick run; "
    "scenario 8 stores up to 10 M at 10).",
)
@click.option(
    "--only",
    default="1,2,3,4,5,6,7,8,9,11",
    help="Scenarios, comma-separated: 1 claim latency, 2 drain, 3 raw SQL ceiling, "
    "4 steady state, 5 thundering herd, 6 idle cost, 7 peers, 8 latency against jobs stored, "
    "9 alert latency, 10 scale-out (1 to 32 nodes), 11 the history partitioned by day "
    "against DELETE, 12 the celery handler to Redis beside the no-op (needs Redis).",
)
@click.option(
    "--slots",
    type=click.IntRange(1, 1000),
    default=50,
    help="--slots of every benchmark node (and the ceiling's claim batch).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("docs"),
    help="Docs folder for benchmarks.md, plots and results.json.",
)
@click.option(
    "--report-only",
    is_flag=True,
    help="Only rewrite benchmarks.md and the plots from the last results.json.",
)
@click.option(
    "--compare-with",
    metavar="PYTHON",
    type=click.Path(exists=True, dir_okay=False, executable=True),
    default=None,
    help="The interpreter of another installation of Pulse (the before): scenarios 1, 2, 4 "
    "and 5 of --only run on both, rounds interleaved, instead of as usual, and scenario 3 "
    "adds its levers' before and after; writes the section 'Before and after, one run'.",
)
@click.option(
    "--compare-rounds",
    type=click.IntRange(3, 20),
    default=3,
    help="Rounds per side of each unit --compare-with measures.",
)
@click.pass_obj
def bench(
    obj: dict[str, Any],
    scale: float,
    only: str,
    slots: int,
    out: Path,
    report_only: bool,
    compare_with: str | None,
    compare_rounds: int,
) -> None:
    """Benchmark Pulse against the raw SQL ceiling and peer schedulers (figures, not tests);
    write docs/benchmarks.md. Run it through ./scripts/bench (peers live in .venv-bench)."""
    from pgpulse.db.database import resolve_dsn
    from pgpulse_tools.bench.run import ALL, run_bench
    from pgpulse_tools.bench.run import report_only as rewrite_report

    chosen = tuple(part.strip() for part in only.split(",") if part.strip())
    if not report_only and (not chosen or any(part not in ALL for part in chosen)):
        raise click.BadParameter(f"{only!r}: scenarios are {','.join(ALL)}", param_hint="--only")
    missing = [name for name in BENCH_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        click.echo(
            f"error: pgpulse bench needs the bench extra: {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed here; run it as "
            "./scripts/bench, which creates .venv-bench with the extra",
            err=True,
        )
        sys.exit(2)
    if report_only:
        click.echo(f"wrote {rewrite_report(out)}")
        return
    if compare_with is not None:
        from pgpulse_tools.bench.compare import describe, runtime

        try:  # before any database is made: a wrong interpreter is a refusal, not a traceback
            describe(runtime(compare_with, "before"))
        except RuntimeError as exc:
            click.echo(f"error: invalid value for --compare-with: {exc}", err=True)
            sys.exit(2)

    async def bench_main() -> None:
        dsn = resolve_dsn(obj["database_url"], obj["data_dir"])
        await run_bench(
            dsn,
            scale=scale,
            only=chosen,
            slots=slots,
            out=out,
            echo=click.echo,
            compare_with=compare_with,
            compare_rounds=compare_rounds,
        )

    run_command(bench_main())
