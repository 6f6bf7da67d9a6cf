"""``pgpulse why JOB --at T``: the fate of the occurrence of JOB at or nearest T, as a short trace
(:mod:`pgpulse.core.why`, read by :mod:`pgpulse.db.why`).

Loaded only when invoked (:data:`pgpulse.cli.conventions.LAZY_COMMANDS`). Thin, as every
command: parse, call the library, print; a refusal is one line and exit 2.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from pgpulse.cli.main import json_option, with_store
from pgpulse.cli.types import IsoDateTime, valid_name
from pgpulse.cli.types import tenant_option as cli_tenant_option
from pgpulse.core.errors import InvalidInput
from pgpulse.core.zones import check_instant_range, utc_if_naive
from pgpulse.db.store import Store


class AtInstant(IsoDateTime):
    """``now`` (the database's instant) or an ISO 8601 date and time, UTC unless it has an
    offset (as every instant that names stored history)."""

    name = "instant"

    def convert(  # type: ignore[override]
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime | None:
        if value is None or (isinstance(value, str) and value.strip().lower() == "now"):
            return None
        try:
            return check_instant_range("at", utc_if_naive(super().convert(value, param, ctx)))
        except InvalidInput as exc:  # outside the instants Pulse can store
            self.fail(exc.message, param, ctx)


@click.command("why")
@click.argument("job_name", callback=valid_name("name"))
@cli_tenant_option("The job's tenant.")
@click.option(
    "--at",
    "at",
    type=AtInstant(),
    default="now",
    show_default=True,
    help="The instant asked about: ISO 8601 (UTC unless it has an offset) or 'now'; the trace "
    "is of the job's occurrence at or nearest it.",
)
@json_option
@with_store()
async def why(store: Store, job_name: str, tenant: str, at: datetime | None, as_json: bool) -> None:
    """Why the occurrence of JOB_NAME at or nearest --at ran, or did not: when it was due (UTC
    and the job's zone, any daylight-saving move, its spread), who claimed it and with what
    lag, each attempt (token, node, outcome, error, fenced or not), or what kept it from
    running (a pause, the window, a calendar date, catch-up, overlap, a handler no live node
    has, the job's end or deletion), and what Pulse cannot know about it."""
    from pgpulse.db.why import why as read_why

    trace = await read_why(store, tenant=tenant, name=job_name, at=at)
    if as_json:
        click.echo(json.dumps(trace.as_json(), indent=2, ensure_ascii=False))
        return
    for line in trace.lines():
        click.echo(line)
