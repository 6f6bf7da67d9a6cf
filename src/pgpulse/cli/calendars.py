"""``pgpulse calendar set|list|delete``: a tenant's named exclusion calendars
(:mod:`pgpulse.core.calendars`), which jobs name with ``job create --calendar NAME``.

Loaded only when invoked (:data:`pgpulse.cli.conventions.LAZY_COMMANDS`): the ``holidays``
library it may check a country against is large. Thin, as every command: parse, call the
store, print; a refusal is one line and exit 2.
"""

from __future__ import annotations

import click

from pgpulse.cli.main import json_option, with_store
from pgpulse.cli.report import emit, print_records
from pgpulse.cli.types import tenant_option as cli_tenant_option
from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.db.store import Store

tenant_option = cli_tenant_option("The calendar's tenant.")


@click.group()
def calendar() -> None:
    """Create, list and delete exclusion calendars: dates on which jobs do not run."""


@calendar.command("set")
@click.argument("name")
@tenant_option
@click.option(
    "--date",
    "dates",
    multiple=True,
    help="An excluded date, 2026-12-24 (in each job's own zone). Repeat for several.",
)
@click.option(
    "--country",
    default=None,
    help="ISO 3166-1 code (US, GB, DE) whose public holidays are excluded (holidays library).",
)
@click.option(
    "--subdivision",
    default=None,
    help="A subdivision of --country (CA, BY...), as holidays names it.",
)
@json_option
@with_store(migrate=True)
async def calendar_set(
    store: Store,
    name: str,
    tenant: str,
    dates: tuple[str, ...],
    country: str | None,
    subdivision: str | None,
    as_json: bool,
) -> None:
    """Create or replace calendar NAME. Jobs that name it follow its new dates from their next
    occurrence."""
    cal = ExclusionCalendar.create(name, dates=dates, country=country, subdivision=subdivision)
    created = await store.put_calendar(tenant, cal)
    action = "created" if created else "replaced"
    result = {
        "tenant": tenant,
        "name": name,
        "action": action,
        "dates": sorted(cal.dates),
        "country": cal.country,
        "subdivision": cal.subdivision,
        "description": cal.describe(),
    }
    emit(as_json, result, f"{action} calendar {name}: {cal.describe()}")


@calendar.command("list")
@tenant_option
@json_option
@with_store()
async def calendar_list(store: Store, tenant: str, as_json: bool) -> None:
    """List the calendars of a tenant, with the jobs that use each."""
    rows = await store.list_calendars(tenant)
    print_records(rows, as_json, ["name", "dates", "country", "subdivision", "jobs"])


@calendar.command("delete")
@click.argument("name")
@tenant_option
@with_store()
async def calendar_delete(store: Store, name: str, tenant: str) -> None:
    """Delete calendar NAME (refused while a job names it)."""
    await store.delete_calendar(tenant, name)
    click.echo(f"deleted calendar {name}")
