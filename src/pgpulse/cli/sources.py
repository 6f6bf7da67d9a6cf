"""The ``pgpulse`` commands that keep whole sources of definitions in step with their files:
``apply`` (TOML files), ``crontab import`` (with ``--sync``), and ``job history`` (the audit
trail). Thin: they read files, call the library (:mod:`pgpulse.cli.applyfile`,
:mod:`pgpulse.core.crontab_sync`, :meth:`Store.reconcile <pgpulse.db.store.Store.reconcile>`) and
print.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import click

from pgpulse.alerts.declared import DeclaredRules, RuleRefused
from pgpulse.cli.applyfile import ApplyFile, ApplyFileError, parse_apply_file
from pgpulse.cli.report import CELL_MAX, emit, print_records, to_json
from pgpulse.cli.types import read_input
from pgpulse.core.audit import cli_actor
from pgpulse.core.crontab import entry_to_spec, is_system_crontab, parse_crontab, percent_note
from pgpulse.core.crontab_sync import plan_crontab_sync
from pgpulse.core.errors import InvalidInput, JobNotFound, PulseError
from pgpulse.core.jobs import CatchUp
from pgpulse.core.month_diff import MonthDiff, format_month_diff, month_diff, month_document
from pgpulse.core.plan import WRITES, Plan, format_plan, plan_source
from pgpulse.core.wording import plural
from pgpulse.db.registry import DEFAULT_NODE_TTL
from pgpulse.db.store import Store

__all__ = [
    "apply_files",
    "import_crontab",
    "month_diffs",
    "print_history",
    "print_plans",
    "read_text",
]


def read_text(path: Path) -> str:
    """The UTF-8 text of input file ``path`` (:func:`~pgpulse.cli.types.read_input`'s limit).

    Raises:
        InvalidInput: ``field="file"``: not UTF-8 (the line and byte said), or too long.
    """
    data = read_input(str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InvalidInput(
            f"{path}:{line}: not valid UTF-8: byte 0x{data[exc.start]:02x}",
            field="file",
            value=str(path),
        ) from None


#: Where an apply file allows a private http-job target: the job's own field (the refusal names it).
APPLY_FILE_ALLOW = "the job's allow_private_target = true"


async def _check_targets(files: list[ApplyFile]) -> None:
    """An ``http`` job's URL follows the API's rule (public addresses only), as ``job create``
    checks it; ``allow_private_target = true`` is the file's explicit exception."""
    from pgpulse.core.policy import WebSettings, check_http_target  # no web framework

    for parsed in files:
        for spec in parsed.specs:
            if spec.handler == "http" and spec.name not in parsed.private_targets:
                try:
                    await check_http_target(
                        spec.payload, WebSettings(), allowed_flag=APPLY_FILE_ALLOW
                    )
                except InvalidInput as exc:
                    raise parsed.refusal(spec.name, exc) from None


def print_plans(
    plans: list[Plan],
    labels: list[str],
    *,
    as_json: bool,
    dry_run: bool,
    diffs: Mapping[tuple[str, str], MonthDiff] | None = None,
) -> None:
    """Print ``plans`` (one per source, ``labels`` naming where each came from) as ``apply``
    does: the steps and a closing ``applied``/``dry run`` line, or one JSON document. ``diffs``
    (a dry run's, by tenant and name): each changed job's next 30 days, after those lines (in
    JSON, a step's ``next_30_days``)."""
    diffs = diffs or {}
    if as_json:
        document = [
            {
                "source": plan.source,
                "file": label,
                "applied": not dry_run,  # written (or nothing to write), or only planned
                "steps": [
                    {
                        "action": step.action,
                        "tenant": step.tenant,
                        "name": step.name,
                        "job_id": step.job_id,
                        "changes": step.changes,
                        "renamed_from": step.rename_from,
                        **(
                            {"next_30_days": month_document(diffs[(step.tenant, step.name)])}
                            if (step.tenant, step.name) in diffs
                            else {}
                        ),
                    }
                    for step in plan.steps
                ],
            }
            for plan, label in zip(plans, labels, strict=True)
        ]
        click.echo(json.dumps(document, default=to_json, indent=2))
        return
    for plan, label in zip(plans, labels, strict=True):
        click.echo(f"{plan.source} ({label})")
        for line in format_plan(plan):
            click.echo(line)
        for step in plan.steps:  # a code-declared job taken over: its code takes it back
            old = (step.changes or {}).get("source", [None])[0]
            if isinstance(old, str) and old.startswith("code:"):
                click.echo(
                    f"note: {step.name} is declared by {old}: the next start of a node running "
                    "that code takes it back (remove it from the code to keep it here)"
                )
    changed = any(plan.changes_anything for plan in plans)
    if dry_run:
        click.echo("dry run: nothing written" if changed else "dry run: nothing to change")
    else:
        click.echo("applied" if changed else "nothing to change")
    if diffs:
        start = next(iter(diffs.values())).start
        click.echo(f"next 30 days, from {start:%Y-%m-%d %H:%M:%S}Z (occurrences added, removed):")
        for diff in diffs.values():
            for line in format_month_diff(diff):
                click.echo(line)


async def month_diffs(store: Store, plans: list[Plan]) -> dict[tuple[str, str], MonthDiff]:
    """Each created, updated or deleted job's next 30 days (:func:`month_diff`), by tenant and
    name, in the plans' order: the stored definitions and where the jobs stand are read, the
    schedules evaluated off the event loop."""
    from pgpulse.db.lint_reads import stored_jobs, tenant_calendars

    steps = [step for plan in plans for step in plan.steps if step.action in WRITES]
    if not steps:
        return {}
    now, stored = await stored_jobs(store, [s.job_id for s in steps if s.job_id is not None])
    named = {s.tenant for s in steps if s.spec is not None and s.spec.calendars}
    named |= {old.tenant for old, _ in stored.values() if old is not None and old.calendars}
    calendars = {
        (tenant, calendar.name): calendar
        for tenant, found in (await tenant_calendars(store, named)).items()
        for calendar in found
    }

    def compute() -> dict[tuple[str, str], MonthDiff]:
        out: dict[tuple[str, str], MonthDiff] = {}
        for step in steps:
            old, pending = stored.get(step.job_id, (None, None)) if step.job_id else (None, None)
            if old is None and step.spec is None:
                continue  # a deleted job whose definition this version refuses: unknown
            out[(step.tenant, step.name)] = month_diff(
                step.action, old, step.spec, now=now, pending=pending, calendars=calendars
            )
        return out

    return await asyncio.to_thread(compute)


async def apply_files(
    store: Store,
    paths: tuple[Path, ...],
    *,
    dry_run: bool,
    prune: bool,
    exit_code: bool,
    as_json: bool,
) -> None:
    """``pgpulse apply``: parse every file (any refusal: nothing is written, exit 2), plan each
    source, print the plans, and write them all in one transaction unless ``dry_run``. With
    ``exit_code``, exit 1 when the plans change anything."""
    try:
        files = [
            parse_apply_file(await asyncio.to_thread(read_text, p), path=str(p)) for p in paths
        ]
    except ApplyFileError as exc:  # every refused job of the file, one line each
        for other in [exc, *exc.others][:-1]:
            click.echo(f"error: {other}", err=True)
        raise exc.others[-1] if exc.others else exc from None
    sources = [parsed.source for parsed in files]
    if len(set(sources)) != len(sources):
        dup = next(s for s in sources if sources.count(s) > 1)
        named = " and ".join(
            str(path) for path, parsed in zip(paths, files, strict=True) if parsed.source == dup
        )
        raise InvalidInput(
            f"{named} are both source {dup!r}: give one a `source = ...` of its own",
            field="source",
            value=dup,
        )
    await _check_targets(files)
    rules = {key: specs for parsed in files for key, specs in parsed.rules.items()}
    try:
        plans = await store.reconcile(
            [(parsed.source, parsed.specs) for parsed in files],
            partial(plan_source, prune=prune),
            dry_run=dry_run,
            actor=cli_actor(),
            rules=DeclaredRules(rules) if rules else None,
        )
    except RuleRefused as exc:  # said at the file and line that declares the rule
        parsed = next(f for f in files if exc.job in f.rules)
        raise parsed.rule_refusal(exc.job[1], exc.field or f"alerts.{exc.kind}", exc) from None
    except PulseError as exc:  # found in the database: where in which file
        holder = next(
            (f for f in reversed(files) for s in f.specs if (s.tenant, s.name) == exc.job), None
        )
        if holder is None or exc.job is None:
            raise
        raise holder.refusal(exc.job[1], exc) from None
    diffs = await month_diffs(store, plans) if dry_run else None
    print_plans(plans, [str(p) for p in paths], as_json=as_json, dry_run=dry_run, diffs=diffs)
    if exit_code and any(plan.changes_anything for plan in plans):
        sys.exit(1)


async def import_crontab(
    store: Store,
    path: Path,
    *,
    tenant: str,
    system: bool | None,
    catch_up: CatchUp,
    sync: bool,
    dry_run: bool,
    as_json: bool = False,
) -> None:
    """``pgpulse crontab import``: every line imported or refused (any refusal: nothing is
    written, exit 2). ``system`` ``None``: the system format for ``/etc/crontab`` and
    ``/etc/cron.d/*``, else the user format. With ``sync``, the file's jobs are made to match it
    (:mod:`pgpulse.core.crontab_sync`); ``dry_run`` prints the plan of what the same command without
    it would do (the sync's, or the import's) and writes nothing. ``as_json``: what was done as
    one JSON object on stdout (the plan's, as ``apply --json`` prints it, for ``sync`` or
    ``dry_run``), notes on stderr."""
    resolved = await asyncio.to_thread(path.resolve)
    if system is None:
        system = is_system_crontab(resolved)
    # At most MAX_INPUT_BYTES; lines that are not UTF-8 are refused
    data = await asyncio.to_thread(read_input, str(path))
    parsed = parse_crontab(data, path=str(path), system=system)
    for error in parsed.errors:
        click.echo(f"refused {error}", err=True)
    if parsed.errors:
        click.echo(
            f"error: {plural(len(parsed.errors), 'line')} refused; nothing imported", err=True
        )
        sys.exit(2)
    for entry in parsed.entries:
        note = percent_note(entry)
        if note is not None:
            click.echo(f"note: {note}", err=True)
    source = f"crontab:{resolved}"
    specs = [
        dataclasses.replace(entry_to_spec(e, tenant=tenant, source=source), catch_up=catch_up)
        for e in parsed.entries
    ]
    if sync or dry_run:
        # --dry-run previews the command it is given: with --sync the sync, without it the
        # import (each line created or updated by name; no job deleted).
        [plan] = await store.reconcile(
            [(source, specs)],
            plan_crontab_sync if sync else partial(plan_source, prune=False),
            dry_run=dry_run,
            actor=cli_actor(),
        )
        diffs = await month_diffs(store, [plan]) if dry_run else None
        print_plans([plan], [str(path)], as_json=as_json, dry_run=dry_run, diffs=diffs)
        written = 0 if dry_run else plan.count("create") + plan.count("update")
        note = await shell_wait_note(store, written)
        if note is not None:
            click.echo(note, err=as_json)
        return
    results = await store.upsert_jobs(specs, actor=cli_actor())
    made = sum(1 for _, created in results if created)
    lines = [
        f"{'created' if created else 'kept   '} {spec.name}  [{spec.schedule}] "
        f"{str(spec.payload.get('command', '')).strip()}"
        for spec, (_, created) in zip(specs, results, strict=True)
    ]
    lines.append(
        f"imported {plural(len(specs), 'job')} from {path}: {made} created, "
        f"{len(specs) - made} already imported"
    )
    jobs = [
        {
            "id": job_id,
            "tenant": spec.tenant,
            "name": spec.name,
            "schedule": spec.schedule,
            "action": "created" if created else "kept",
        }
        for spec, (job_id, created) in zip(specs, results, strict=True)
    ]
    emit(as_json, {"file": str(path), "source": source, "jobs": jobs}, *lines)
    note = await shell_wait_note(store, made)
    if note is not None:
        click.echo(note, err=as_json)


async def shell_wait_note(store: Store, jobs: int) -> str | None:
    """The note for ``jobs`` shell jobs just written when no live node allows shell jobs (they
    wait, as ``status`` then shows), else ``None``: one wording for ``job create`` and
    ``crontab import``, beside the one for an http job's private target."""
    if jobs == 0:
        return None
    nodes = await store.cluster_nodes(ttl=DEFAULT_NODE_TTL)
    if any(node["alive"] and node["shell"] != "off" for node in nodes):  # run or dry-run
        return None
    whose = "its runs wait" if jobs == 1 else "their runs wait"
    return (
        f"note: no live node allows shell jobs: {whose} for a node started with "
        "--allow-shell-jobs (pgpulse node run --allow-shell-jobs; --shell-dry-run records the "
        "commands instead)"
    )


def _changes_text(changes: dict[str, Any], action: str) -> str:
    """A history row's changes for its table cell, one line per field, ``field: old → new``
    (the field count of a create), ``meta`` last: it holds a crontab line, the one value cut
    (to :data:`~pgpulse.cli.report.CELL_MAX` characters, ``…``; whole in ``--json``), so a rename
    or a new schedule is always read in full."""
    if action == "create":
        return plural(len(changes), "field")
    ordered = sorted(changes.items(), key=lambda item: item[0] == "meta")
    return "\n".join(
        _cut(f"{key}: {_value(old)} → {_value(new)}", key == "meta") for key, (old, new) in ordered
    )


def _value(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _cut(line: str, cut: bool) -> str:
    return line[: CELL_MAX - 1] + "…" if cut and len(line) > CELL_MAX else line


async def print_history(store: Store, name: str, *, tenant: str, limit: int, as_json: bool) -> None:
    """``pgpulse job history``: the job's audit trail, newest first. Raises
    :class:`JobNotFound` when nothing of that name was ever recorded."""
    rows = await store.job_history(tenant, name, limit=limit)
    if not rows:
        raise JobNotFound(tenant, name)
    if not as_json:
        rows = [{**row, "changes": _changes_text(row["changes"], row["action"])} for row in rows]
    print_records(
        rows,
        as_json,
        ["at", "action", "revision", "source", "actor", "changes"],
    )
