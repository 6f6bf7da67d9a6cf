"""``pgpulse limit set|list|delete``: a tenant's limits of concurrency keys
(:mod:`pgpulse.core.keys`), which jobs name with ``job create --concurrency-key KEY``.

Thin, as every command: parse, call the store, print; a refusal (a limit below 1, a bad key) is
one line naming the field and exit 2, nothing written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pgpulse.cli.main import json_option, main, with_store
from pgpulse.cli.report import emit, print_records
from pgpulse.cli.types import tenant_option as cli_tenant_option

if TYPE_CHECKING:  # the driver loads when one of these commands runs (not with `pgpulse`)
    from pgpulse.db.store import Store

tenant_option = cli_tenant_option("The key's tenant.")


@main.group()
def limit() -> None:
    """Set, list and delete limits of concurrency keys: how many occurrences of the jobs that
    share a key run at once, across every node."""


@limit.command("set")
@click.argument("key")
@click.argument("max_running", metavar="N", type=int)
@tenant_option
@json_option
@with_store(migrate=True)
async def limit_set(store: Store, key: str, max_running: int, tenant: str, as_json: bool) -> None:
    """At most N occurrences of the tenant's jobs with concurrency key KEY run at once, across
    every node (1: a mutex); the others wait, due, and run as slots free."""
    created = await store.set_limit(tenant, key, max_running)
    action = "created" if created else "changed"
    result = {"tenant": tenant, "key": key, "max_running": max_running, "action": action}
    emit(as_json, result, f"{action} limit {key}: at most {max_running} running at once")


@limit.command("list")
@tenant_option
@json_option
@with_store()
async def limit_list(store: Store, tenant: str, as_json: bool) -> None:
    """List the limits of a tenant: each key's limit, what runs now, its jobs and how many of
    them wait, due."""
    rows = await store.list_limits(tenant)
    print_records(rows, as_json, ["key", "max_running", "running", "jobs", "waiting"])


@limit.command("delete")
@click.argument("key")
@tenant_option
@with_store()
async def limit_delete(store: Store, key: str, tenant: str) -> None:
    """Delete the limit of KEY: its jobs are no longer limited (they keep the key)."""
    await store.delete_limit(tenant, key)
    click.echo(f"deleted limit {key}")
