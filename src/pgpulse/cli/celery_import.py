"""``pgpulse celery import``: a ``celery beat`` schedule as Pulse jobs
(:mod:`pgpulse.core.celery_beat`), written through the plan-and-apply path of ``pgpulse apply``
(:meth:`Store.reconcile <pgpulse.db.store.Store.reconcile>`).

Loaded only when invoked (:data:`pgpulse.cli.conventions.LAZY_COMMANDS`): it imports Celery and
the team's app. Thin: load the app, map its schedule, plan, print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import click

from pgpulse.cli.conventions import Refused
from pgpulse.cli.main import json_option, tenant_option, with_store
from pgpulse.cli.sources import print_plans
from pgpulse.core.audit import cli_actor
from pgpulse.core.celery_beat import import_beat_schedule
from pgpulse.core.errors import InvalidInput
from pgpulse.core.jobs import JobSpec
from pgpulse.core.plan import Key, Plan, Step, plan_source
from pgpulse.core.wording import plural
from pgpulse.db.store import Store
from pgpulse.node.celery_handler import load_celery_app


def _app(_ctx: click.Context, _param: click.Parameter, ref: str) -> tuple[str, Any]:
    """``--app``'s value and the app it names, imported while the command line is read (one
    line, exit 2, before the database is opened)."""
    try:
        return ref, load_celery_app(ref)
    except InvalidInput as exc:
        raise Refused(f"invalid value for --app: {exc}") from None


def plan_create_only(
    source: str, specs: Sequence[JobSpec], stored: Mapping[Key, Mapping[str, Any]]
) -> Plan:
    """The plan of an import without ``--sync``: each entry's job is created when it does not
    exist; a job that exists is left as it is (an edited entry is listed, ``--sync`` writes
    it); nothing is deleted."""
    planned = plan_source(source, specs, stored, prune=False)
    return Plan(
        source,
        [
            Step("unchanged", s.tenant, s.name, s.spec, s.job_id, s.changes)
            if s.action == "update"
            else s
            for s in planned.steps
        ],
    )


@click.group()
def celery() -> None:
    """Pulse in place of celery beat: import a beat schedule as celery jobs."""


@celery.command("import")
@click.option(
    "--app",
    "app",
    required=True,
    metavar="MODULE:ATTR",
    callback=_app,
    help="The Celery app whose beat_schedule is imported (proj.celery:app), imported from the "
    "working directory as celery -A does.",
)
@tenant_option
@click.option(
    "--sync",
    is_flag=True,
    help="Make the stored jobs match the schedule: an edited entry updates its job in place "
    "(same name, history kept); without it only missing jobs are created.",
)
@click.option(
    "--prune",
    is_flag=True,
    help="With --sync, delete the jobs of this app's schedule whose entry is gone.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@json_option
@with_store(migrate=lambda options: not options["dry_run"])
async def celery_import(
    store: Store,
    app: tuple[str, Any],
    tenant: str,
    sync: bool,
    prune: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Turn each entry of the app's beat_schedule into a celery job named as the entry (source
    celery:MODULE:ATTR): crontab entries as cron schedules in the app's timezone, intervals as
    @every. An entry Pulse cannot express (solar, a custom class, a day rule with no cron
    equivalent) is refused on one line and left out; the others are imported. Running it twice
    changes nothing.
    """
    if prune and not sync:
        raise Refused(
            "--prune needs --sync: it deletes the jobs whose entry --sync no longer finds"
        )
    ref, celery_app = app
    source = f"celery:{ref}"
    imported = import_beat_schedule(celery_app, tenant=tenant, source=source)
    for line in imported.refused:
        click.echo(f"refused {line}", err=True)
    planner = partial(plan_source, prune=prune) if sync else plan_create_only
    [plan] = await store.reconcile(
        [(source, imported.specs)], planner, dry_run=dry_run, actor=cli_actor()
    )
    print_plans([plan], [f"beat_schedule of {ref}"], as_json=as_json, dry_run=dry_run)
    if not sync:
        for step in plan.steps:
            if step.action == "unchanged" and step.changes:
                click.echo(
                    f"note: {step.name} differs from its entry ({', '.join(step.changes)}): "
                    "--sync updates it",
                    err=True,
                )
    if imported.refused:
        click.echo(
            f"note: {plural(len(imported.refused), 'entry', 'entries')} refused and not imported: "
            "they stay with celery beat until rewritten",
            err=True,
        )
