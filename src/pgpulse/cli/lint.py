"""``pgpulse lint [FILE]``: hazards in the stored jobs, or in an apply file or a crontab before
it is applied (thin: read the definitions and the database's facts, call
:func:`pgpulse.core.lint.lint_jobs`, print).

Imported by :mod:`pgpulse.cli.main`, whose group this command joins.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pgpulse.cli.main import json_option, main, with_store
from pgpulse.cli.report import to_json
from pgpulse.cli.types import read_input
from pgpulse.cli.types import tenant_option as cli_tenant_option
from pgpulse.core.jobs import JobSpec
from pgpulse.core.lint import (
    CODES,
    DEFAULT_HERD,
    finding_document,
    format_finding,
    lint_jobs,
)
from pgpulse.core.wording import plural

if TYPE_CHECKING:  # the driver loads when the command runs (not with `pgpulse`)
    from pgpulse.db.store import Store

__all__ = ["lint"]


async def _file_specs(path: Path, tenant: str) -> list[JobSpec]:
    """The definitions of ``path``: an apply file (``.toml``) or a crontab (any other name,
    system format for ``/etc/crontab`` and ``/etc/cron.d/*``), refused as ``apply`` and
    ``crontab import`` refuse them (exit 2)."""
    from pgpulse.cli.applyfile import ApplyFileError, parse_apply_file
    from pgpulse.cli.sources import read_text
    from pgpulse.core.crontab import entry_to_spec, is_system_crontab, parse_crontab

    if path.suffix == ".toml":
        try:
            return parse_apply_file(await asyncio.to_thread(read_text, path), path=str(path)).specs
        except ApplyFileError as exc:
            for other in [exc, *exc.others][:-1]:
                click.echo(f"error: {other}", err=True)
            raise exc.others[-1] if exc.others else exc from None
    resolved = await asyncio.to_thread(path.resolve)
    data = await asyncio.to_thread(read_input, str(path))
    parsed = parse_crontab(data, path=str(path), system=is_system_crontab(resolved))
    for error in parsed.errors:
        click.echo(f"refused {error}", err=True)
    if parsed.errors:
        click.echo(f"error: {plural(len(parsed.errors), 'line')} refused", err=True)
        sys.exit(2)
    source = f"crontab:{resolved}"
    return [entry_to_spec(e, tenant=tenant, source=source) for e in parsed.entries]


@main.command("lint")
@click.argument(
    "path",
    required=False,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="[FILE]",
)
@cli_tenant_option("The tenant whose stored jobs are linted, and a crontab's jobs' tenant.")
@click.option(
    "--herd",
    type=click.IntRange(min=1),
    default=DEFAULT_HERD,
    show_default=True,
    help="More jobs than this due in the same second without spread is a herd.",
)
@click.option(
    "--exit-code",
    is_flag=True,
    help="Exit 1 when there is any finding (for CI); 0 when there is none.",
)
@json_option
@with_store()
async def lint(
    store: Store, path: Path | None, tenant: str, herd: int, exit_code: bool, as_json: bool
) -> None:
    """Find hazards in the stored jobs of a tenant, or in FILE (an apply file, *.toml, or a
    crontab) before it is applied.

    \b
    Findings, by code:
      handler         no live node has the job's handler (shell: none allows shell jobs)
      upstream        after names a job the tenant does not have: the job never runs
      timeout         timeout shorter than the p95 duration of its last 200 runs
      misfire-grace   catch_up skip with misfire_grace below the p99 lag of its last runs
      dst-gap         a wall time daylight saving skips within a year (dates, what happens)
      dst-fold        a wall time daylight saving repeats within a year
      herd            more than --herd jobs due in one second without spread (a spread to use)
      calendar        occurrences on dates a calendar of the tenant excludes that the job
                      does not name
      backfill-limit  catch_up backfill without backfill_limit

    A file's jobs are matched to stored jobs by tenant and name for what their runs showed.
    Exit 2 for a refused file, 1 with --exit-code when anything is found.
    """
    from pgpulse.db.lint_reads import lint_facts, stored_specs
    from pgpulse.db.registry import DEFAULT_NODE_TTL

    notes: list[str] = []
    if path is None:
        specs, notes = await stored_specs(store, tenant)
    else:
        specs = await _file_specs(path, tenant)
    facts = await lint_facts(store, specs, ttl=DEFAULT_NODE_TTL)
    # a year of each job's zone and a week of occurrences per schedule: off the event loop
    findings = await asyncio.to_thread(lint_jobs, specs, facts, herd=herd)
    findings.sort(key=lambda f: (CODES.index(f.code), f.tenant, f.job))
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if as_json:
        document: dict[str, Any] = {
            "file": None if path is None else str(path),
            "tenant": tenant,
            "jobs": len(specs),
            "now": facts.now,
            "findings": [finding_document(f) for f in findings],
            "counts": {
                severity: sum(f.severity == severity for f in findings)
                for severity in ("error", "warning")
            },
        }
        click.echo(json.dumps(document, default=to_json, indent=2))
    else:
        for finding in findings:
            click.echo(format_finding(finding))
        errors = sum(f.severity == "error" for f in findings)
        where = str(path) if path is not None else f"tenant {tenant!r}"
        click.echo(
            f"{where}: {plural(len(specs), 'job')}, {plural(errors, 'error')}, "
            f"{plural(len(findings) - errors, 'warning')}"
        )
    if exit_code and findings:
        sys.exit(1)
