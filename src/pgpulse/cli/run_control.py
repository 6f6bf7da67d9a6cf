"""``pgpulse job trigger``, ``job backfill``, ``job skip`` and ``job unskip``: run now (with a
payload), backfill on request, skip chosen occurrences (thin: parse, call
:class:`~pgpulse.db.run_control.RunControl` or the store, print).

Imported by :mod:`pgpulse.cli.main`, whose ``job`` group these commands join.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from pgpulse.cli.main import JOB_CREATE_ALLOW, job, json_option, tenant_option, with_store
from pgpulse.cli.report import emit, to_json
from pgpulse.cli.types import IsoDateTime, valid_name
from pgpulse.core.audit import cli_actor
from pgpulse.core.backfill import ONLY_CHOICES
from pgpulse.core.wording import plural

if TYPE_CHECKING:  # the driver loads when one of these commands runs (not with `pgpulse`)
    from pgpulse.core.skips import Skip
    from pgpulse.db.run_control import BackfillPlan
    from pgpulse.db.store import Store


@job.command("trigger")
@click.argument("name", callback=valid_name("name"))
@tenant_option
@click.option(
    "--payload",
    default=None,
    help="JSON object to run this once with instead of the job's payload: one extra "
    "occurrence beside the schedule, recorded as a trigger.",
)
@click.option(
    "--allow-private-target",
    is_flag=True,
    help="With --payload, run an http job against the payload's private or loopback address "
    "(refused otherwise, as by `job create`).",
)
@json_option
@with_store()
async def job_trigger(
    store: Store,
    name: str,
    tenant: str,
    payload: str | None,
    allow_private_target: bool,
    as_json: bool,
) -> None:
    """Run job NAME now, once, as an extra occurrence.

    Without --payload the job runs an occurrence at the trigger's instant (an idle job only),
    and its later occurrences stay as they were. With --payload the run is an occurrence of its
    own, with that payload, beside whatever runs (the job must be idle or running; a shell job's
    payload needs the rights to write the job). An http job's URL in the payload is checked as
    `job create` checks it.
    """
    from pgpulse.db.run_control import RunControl

    if payload is not None:

        async def check_target(checked: dict[str, Any]) -> None:
            from pgpulse.core.policy import WebSettings, check_http_target  # no web framework

            if not allow_private_target:
                await check_http_target(checked, WebSettings(), allowed_flag=JOB_CREATE_ALLOW)

        done = await RunControl(store.pool).trigger(
            tenant, name, payload, actor=cli_actor(), check_target=check_target
        )
        emit(
            as_json,
            {
                "tenant": tenant,
                "name": name,
                "kind": "trigger",
                "run_id": done.occurrence,
                "scheduled_for": done.scheduled_for,
                "already_due": False,
            },
            f"triggered {name} with the given payload: extra occurrence "
            f"{done.scheduled_for.isoformat()} (run {done.occurrence}, kind trigger)",
        )
        return
    result = await store.trigger_job(tenant, name, actor=cli_actor())
    due = result < await store.db_now() - timedelta(seconds=1)
    # the job row's own occurrence, moved to now: its run is one of the schedule's, and its id
    # is handed out when a node claims it
    facts = {
        "tenant": tenant,
        "name": name,
        "kind": "scheduled",
        "run_id": None,
        "scheduled_for": result,
        "already_due": due,
    }
    if due:
        emit(
            as_json, facts, f"{name} was already due (occurrence {result.isoformat()}); it runs now"
        )
    else:
        emit(
            as_json,
            facts,
            f"triggered {name}: occurrence {result.isoformat()} on the job's own schedule (its run "
            "is listed as kind scheduled; `job history` records the trigger)",
        )


@job.command("backfill")
@click.argument("name", callback=valid_name("name"))
@tenant_option
@click.option(
    "--from", "start", type=IsoDateTime(), required=True, help="First instant (UTC if naive)."
)
@click.option("--to", "end", type=IsoDateTime(), required=True, help="Last instant (UTC if naive).")
@click.option(
    "--only",
    type=click.Choice(ONLY_CHOICES),
    multiple=True,
    help="Which occurrences: missing (never ran, or skipped), failed; both by default; all "
    "(succeeded ones too). Repeat to combine.",
)
@click.option("--dry-run", is_flag=True, help="List what would run; write nothing.")
@click.option(
    "--max-concurrency",
    type=int,
    default=1,
    help="Most occurrences of this backfill running at once.",
)
@click.option("--newest-first", is_flag=True, help="Run the newest occurrence first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@with_store()
async def job_backfill(
    store: Store,
    name: str,
    tenant: str,
    start: datetime,
    end: datetime,
    only: tuple[str, ...],
    dry_run: bool,
    max_concurrency: int,
    newest_first: bool,
    as_json: bool,
) -> None:
    """Run each selected occurrence of job NAME from --from to --to (inclusive) exactly once
    more, beside the live schedule; each run is a history row of its own, marked backfill.
    Occurrences the live schedule has not reached, and those an earlier backfill still has
    to run, are never selected."""
    from pgpulse.db.run_control import RunControl

    plan = await RunControl(store.pool).backfill(
        tenant,
        name,
        start=start,
        end=end,
        only=only,
        dry_run=dry_run,
        max_concurrency=max_concurrency,
        newest_first=newest_first,
        actor=cli_actor(),
    )
    _print_plan(name, plan, dry_run=dry_run, as_json=as_json)


@job.command("skip")
@click.argument("name", callback=valid_name("name"))
@tenant_option
@click.option(
    "--next",
    "count",
    type=click.IntRange(1, 100),
    default=None,
    help="Skip this many occurrences from the next one (1 when neither --next nor --at).",
)
@click.option(
    "--at",
    default=None,
    help="Skip the one occurrence at this instant (ISO 8601; without an offset, in the job's "
    "zone).",
)
@click.option("--reason", default=None, help="Why: recorded in each skipped run's reason.")
@json_option
@with_store()
async def job_skip(
    store: Store,
    name: str,
    tenant: str,
    count: int | None,
    at: str | None,
    reason: str | None,
    as_json: bool,
) -> None:
    """Skip the next occurrences of job NAME, or the one --at, without pausing it: each is
    recorded as skipped (by you, with the reason) when its time comes, and the job runs on
    after it. A run in progress is not stopped: the skip reaches the occurrences after it.
    Undo with `pgpulse job unskip`."""
    from pgpulse.db.run_control import RunControl

    skips = await RunControl(store.pool).skip(
        tenant,
        name,
        count=count,
        at=at,
        reason=reason,
        actor=cli_actor(),
    )
    _print_skips(name, tenant, skips, as_json=as_json)


@job.command("unskip")
@click.argument("name", callback=valid_name("name"))
@tenant_option
@click.option(
    "--at",
    default=None,
    help="Run the occurrence at this instant after all (ISO 8601; without an offset, in the "
    "job's zone). Without it, every occurrence listed to skip runs.",
)
@json_option
@with_store()
async def job_unskip(store: Store, name: str, tenant: str, at: str | None, as_json: bool) -> None:
    """Undo `pgpulse job skip` for job NAME: the occurrence --at (or every listed one) runs
    as scheduled."""
    from pgpulse.db.run_control import RunControl

    skips = await RunControl(store.pool).unskip(tenant, name, at=at, actor=cli_actor())
    _print_skips(name, tenant, skips, as_json=as_json)


def _print_skips(name: str, tenant: str, skips: list[Skip], *, as_json: bool) -> None:
    result = {"tenant": tenant, "name": name, "skips": [s.as_json() for s in skips]}
    if not skips:
        emit(as_json, result, f"{name}: no occurrence is listed to skip")
        return
    lines = [f"  {s.at.isoformat()} by {s.by}{f' ({s.reason})' if s.reason else ''}" for s in skips]
    emit(as_json, result, f"{name}: {plural(len(skips), 'occurrence')} listed to skip:", *lines)


def _print_plan(name: str, plan: BackfillPlan, *, dry_run: bool, as_json: bool) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {
                    "job_id": plan.job_id,
                    "batch_id": plan.batch_id,
                    "dry_run": dry_run,
                    "occurrences": [
                        {
                            "scheduled_for": to_json(p.scheduled_for),
                            "status": p.status,
                            "selected": p.selected,
                        }
                        for p in plan.plan
                    ],
                },
                indent=2,
            )
        )
        return
    for p in plan.plan:
        click.echo(f"{'run ' if p.selected else 'keep'}  {p.scheduled_for.isoformat()}  {p.status}")
    count = len(plan.selected)
    if dry_run:
        click.echo(
            f"dry run: {count} of {plural(len(plan.plan), 'occurrence')} of {name} would run"
        )
    elif plan.batch_id is None:
        click.echo(
            f"nothing to backfill: none of {plural(len(plan.plan), 'occurrence')} of {name} "
            "selected"
        )
    else:
        click.echo(
            f"queued {count} of {plural(len(plan.plan), 'occurrence')} of {name} "
            f"(batch id {plan.batch_id}: `pgpulse runs {name}` lists them as kind backfill)"
        )
