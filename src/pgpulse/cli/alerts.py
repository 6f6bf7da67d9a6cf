"""``pgpulse notifier`` and ``pgpulse alert``: thin commands over
:class:`~pgpulse.alerts.store.AlertStore` (loaded only when invoked, see ``LAZY_COMMANDS``).

Secrets are never printed back: ``notifier list`` shows configs redacted. A config may be read
from a file or standard input (``--config @path``, ``--config -``), so a secret need not be
typed into a shell's history.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, TypeVar

import click

from pgpulse.alerts.notifiers import NOTIFIER_KINDS
from pgpulse.alerts.rules import ALL_RULES, CLUSTER_RULES, RULE_KINDS
from pgpulse.alerts.store import AlertStore
from pgpulse.app import connect
from pgpulse.cli.report import one_line, print_records, run_command, to_json
from pgpulse.cli.types import read_input, valid_name
from pgpulse.cli.types import tenant_option as cli_tenant_option
from pgpulse.core.egress import HttpAllowList
from pgpulse.core.errors import InvalidInput, PulseError
from pgpulse.core.jobs import check_name
from pgpulse.core.json_limits import loads_json
from pgpulse.core.limits import parse_duration
from pgpulse.core.wording import plural

T = TypeVar("T")


def _refuse(exc: InvalidInput) -> NoReturn:
    """A refusal found before the database is opened: one line on stderr, exit 2 (as
    :func:`~pgpulse.cli.report.run_command` reports those found after)."""
    click.echo(f"error: {one_line(str(exc))}", err=True)
    sys.exit(2)


def _alerts(obj: dict[str, Any], action: Callable[[AlertStore], Coroutine[Any, Any, T]]) -> T:
    ctx = click.get_current_context()

    async def main() -> T:
        async with connect(obj["database_url"], data_dir=obj["data_dir"]) as store:
            try:
                return await action(AlertStore(store.pool))
            except PulseError as exc:  # name the option the user typed (--threshold)
                from pgpulse.cli.conventions import as_option_refusal

                as_option_refusal(ctx, exc)
                raise

    return run_command(main())


def _print(rows: list[dict[str, Any]], as_json: bool, columns: list[str]) -> None:
    if as_json:
        click.echo(json.dumps(rows, default=to_json, indent=2))
    else:
        print_records(rows, False, columns, shorten={"error", "last_error"})


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
tenant_option = cli_tenant_option()


# -- notifiers ---------------------------------------------------------------------------------

#: The option that allows a private webhook or checkin URL where ``notifier add`` refuses it.
NOTIFIER_ADD_ALLOW = "this command's --http-allow (pgpulse notifier add ... --http-allow HOST)"


@click.group()
def notifier() -> None:
    """Add, list and remove notifiers: where alerts go (webhook, email, checkin)."""


def _read_config(text: str) -> object:
    """The JSON config of ``--config``: given, ``@FILE``'s content, or ``-`` standard input.

    Raises:
        InvalidInput: ``field="config"``: FILE cannot be read (missing, a folder, not UTF-8),
            the text is not JSON (the text is not shown: it may hold secrets), or it breaks the
            nesting and number rule (:func:`pgpulse.core.json_limits.loads_json`).
    """
    if text == "-" or text.startswith("@"):
        name = "standard input" if text == "-" else text[1:]
        try:
            data = read_input(name, sys.stdin.buffer if text == "-" else None)
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InvalidInput(
                f"config {text!r}: cannot read {name!r}: {why}", field="config", value=text
            ) from None
    try:
        return loads_json("config", text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"config is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            field="config",
            value="(not shown: it may hold secrets)",
        ) from None


@notifier.command("add")
@click.argument("name")
@click.option("--kind", required=True, type=click.Choice(list(NOTIFIER_KINDS)), help="Its kind.")
@click.option(
    "--config",
    "config_text",
    required=True,
    help="Its JSON config (docs/alerts.md); @FILE reads a file, - standard input.",
)
@click.option(
    "--http-allow",
    multiple=True,
    help="Hosts, *.domains or CIDR networks a webhook or checkin URL may target although "
    "loopback or private (repeatable).",
)
@click.option(
    "--tenant",
    default=None,
    callback=valid_name("tenant"),
    help="The tenant it belongs to (its jobs' rules may name it). Default: the cluster's, "
    "which a tenant's rules may name once shared with it (pgpulse notifier share); the global "
    "pgpulse --tenant does not make it a tenant's.",
)
@click.pass_obj
def notifier_add(
    obj: dict[str, Any],
    name: str,
    kind: str,
    config_text: str,
    http_allow: tuple[str, ...],
    tenant: str | None,
) -> None:
    """Create or replace notifier NAME. Its config is validated; secrets are never shown. A
    replacement keeps the tenants it is shared with."""
    try:
        config = _read_config(config_text)
    except InvalidInput as exc:
        _refuse(exc)
    try:
        allow = HttpAllowList.parse(http_allow)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--http-allow") from None
    notifier_id, created = _alerts(
        obj,
        lambda alerts: alerts.add_notifier(
            name, kind, config, allow=allow, allowed_by=NOTIFIER_ADD_ALLOW, tenant=tenant
        ),
    )
    whose = f" of tenant {tenant}" if tenant is not None else ""
    click.echo(
        f"{'created' if created else 'replaced'} {kind} notifier {name}{whose} (id {notifier_id})"
    )
    if http_allow:  # the nodes deliver, and check the address again with their own list
        click.echo(
            f"note: the nodes deliver its alerts: start them with --http-allow "
            f"{' '.join(http_allow)} too (pgpulse node run --http-allow HOST)"
        )


@notifier.command("list")
@json_option
@click.pass_obj
def notifier_list(obj: dict[str, Any], as_json: bool) -> None:
    """List notifiers, their configs redacted (secrets as ***)."""
    rows = _alerts(obj, lambda alerts: alerts.list_notifiers())
    if not as_json:
        for row in rows:
            row["config"] = json.dumps(row["config"], sort_keys=True)
        for row in rows:
            row["shared_with"] = ",".join(row["shared_with"])
    _print(rows, as_json, ["id", "name", "kind", "tenant", "shared_with", "config", "updated_at"])


def _check_tenants(tenants: tuple[str, ...]) -> None:
    """Refuse a name no write would take (an argument, not the global --tenant: worded here,
    before the database is opened)."""
    for tenant in tenants:
        try:
            check_name("tenant", tenant)
        except InvalidInput as exc:
            _refuse(exc)


@notifier.command("share")
@click.argument("name")
@click.argument("tenants", nargs=-1, required=True)
@click.pass_obj
def notifier_share(obj: dict[str, Any], name: str, tenants: tuple[str, ...]) -> None:
    """Let the jobs of TENANTS route their alerts to notifier NAME (their API tokens and apps
    may then name it in rules)."""
    _check_tenants(tenants)
    shared = _alerts(obj, lambda alerts: alerts.share_notifier(name, add=tenants))
    click.echo(f"notifier {name} is shared with {', '.join(shared)}")


@notifier.command("unshare")
@click.argument("name")
@click.argument("tenants", nargs=-1, required=True)
@click.pass_obj
def notifier_unshare(obj: dict[str, Any], name: str, tenants: tuple[str, ...]) -> None:
    """Stop sharing notifier NAME with TENANTS: their tokens and apps may no longer name it in
    new rules (rules already set keep it: remove them with pgpulse alert rule remove)."""
    _check_tenants(tenants)
    shared = _alerts(obj, lambda alerts: alerts.share_notifier(name, remove=tenants))
    left = ", ".join(shared) if shared else "no tenant"
    click.echo(f"notifier {name} is shared with {left}")


@notifier.command("remove")
@click.argument("name")
@click.pass_obj
def notifier_remove(obj: dict[str, Any], name: str) -> None:
    """Remove notifier NAME (refused while a rule names it)."""
    _alerts(obj, lambda alerts: alerts.remove_notifier(name))
    click.echo(f"removed notifier {name}")


# -- rules -------------------------------------------------------------------------------------


@click.group()
def alert() -> None:
    """Alert rules, alerts and their deliveries, silences, acknowledgements."""


@alert.group()
def rule() -> None:
    """Set, list and remove alert rules (of a job, or cluster-wide)."""


def _job(job: str | None, tenant: str) -> tuple[str, str] | None:
    return (tenant, job) if job is not None else None


def _rules_help() -> str:
    """``rule set``'s help, from the rule kinds' table."""
    job = ", ".join(k.name for k in RULE_KINDS.values() if k.scope == "job")
    cluster = ", ".join(k.name for k in RULE_KINDS.values() if k.scope == "cluster")
    return (
        f"Create or replace rule RULE: {job} (of --job, or the default of every job), "
        f"{cluster} (the cluster's). checkin pings its checkin notifiers at each attempt's "
        "start and end."
    )


def _threshold_help() -> str:
    """``--threshold``'s help, from the rule kinds' table."""
    counts = ", ".join(k.name for k in RULE_KINDS.values() if k.unit == "runs")
    durations = ", ".join(k.name for k in RULE_KINDS.values() if k.unit == "seconds")
    return f"{counts}: a count; {durations}: a duration (90s, 10m, 2h, 1d)."


@rule.command("set", help=_rules_help())
@click.argument("kind", metavar="RULE")
@click.option(
    "--job",
    default=None,
    callback=valid_name("job"),
    help="The job (default: the cluster-wide rule or default).",
)
@tenant_option
@click.option(
    "--threshold",
    default=None,
    help=_threshold_help(),
)
@click.option(
    "--notify",
    "notifiers",
    multiple=True,
    required=True,
    help="A notifier's name (repeatable).",
)
@click.pass_obj
def rule_set(
    obj: dict[str, Any],
    kind: str,
    job: str | None,
    tenant: str,
    threshold: str | None,
    notifiers: tuple[str, ...],
) -> None:
    """Create or replace rule RULE (its help: :func:`_rules_help`)."""
    value: float | None = None
    if threshold is not None:
        try:
            value = parse_duration(threshold, "threshold")
        except InvalidInput as exc:
            _refuse(exc)
    rule_id, created = _alerts(
        obj,
        lambda alerts: alerts.set_rule(
            kind, list(notifiers), threshold=value, job=_job(job, tenant)
        ),
    )
    where = f"job {job}" if job is not None else "the cluster"
    # "rule id": a bare "(id 1)" after a job's name reads as the job's id.
    click.echo(f"{'set' if created else 'replaced'} rule {kind} of {where} (rule id {rule_id})")


@rule.command("list")
@click.option(
    "--job",
    default=None,
    callback=valid_name("job"),
    help="Only the rules that apply to this job: its own and the defaults of job rules (no "
    "cluster rule).",
)
@tenant_option
@json_option
@click.pass_obj
def rule_list(obj: dict[str, Any], job: str | None, tenant: str, as_json: bool) -> None:
    """List rules: cluster rules and defaults first (job empty), then jobs' own."""
    rows = _alerts(obj, lambda alerts: alerts.list_rules(job=_job(job, tenant)))
    if job is not None:  # a cluster rule (node_died, lag...) is about no job
        rows = [row for row in rows if row["rule"] not in CLUSTER_RULES]
    _print(rows, as_json, ["id", "tenant", "job", "rule", "threshold", "notifiers"])


@rule.command("remove")
@click.argument("kind", metavar="RULE", type=click.Choice(list(ALL_RULES)))
@click.option(
    "--job", default=None, callback=valid_name("job"), help="The job (default: the cluster's rule)."
)
@tenant_option
@click.pass_obj
def rule_remove(obj: dict[str, Any], kind: str, job: str | None, tenant: str) -> None:
    """Remove rule RULE of --job, or of the cluster."""
    _alerts(obj, lambda alerts: alerts.remove_rule(kind, job=_job(job, tenant)))
    click.echo(f"removed rule {kind}")


# -- alerts, silences --------------------------------------------------------------------------


@alert.command("list")
@click.argument("job", required=False)
@tenant_option
@click.option("--open", "open_only", is_flag=True, help="Only alerts not resolved yet.")
@click.option("--limit", type=click.IntRange(1, 10000), default=50, help="At most this many.")
@json_option
@click.pass_obj
def alert_list(
    obj: dict[str, Any], job: str | None, tenant: str, open_only: bool, limit: int, as_json: bool
) -> None:
    """Alert events (of JOB), newest first, with their deliveries' outcomes."""
    rows = _alerts(
        obj,
        lambda alerts: alerts.list_alerts(job=_job(job, tenant), open_only=open_only, limit=limit),
    )
    for row in [] if as_json else rows:
        row["job"] = _subject(row)
    if not as_json:
        for row in rows:
            row["deliveries"] = ", ".join(
                f"{d['notifier']}: {d['status']} ({plural(d['attempts'], 'attempt')})"
                + (f" {d['last_error']}" if d["last_error"] and d["status"] != "delivered" else "")
                for d in row["deliveries"]
            ) or ("silenced" if row["silenced"] else "none")
    _print(
        rows,
        as_json,
        ["id", "rule", "job", "scheduled_for", "fired_at", "state", "deliveries"],
    )


def _subject(alert: dict[str, Any]) -> str:
    """What an alert is about, for ``alert list``'s job column: the job's name, the node of a
    ``node_died`` alert (``node n2``), else ``cluster`` (as the dashboard says)."""
    if alert["job"] is not None:
        return str(alert["job"])
    node = (alert.get("details") or {}).get("node")
    return f"node {node}" if alert["rule"] == "node_died" and node else "cluster"


#: How ``alert silences`` shows the tenant and job of a silence of everything (``--all``).
EVERYTHING = "(all)"


@alert.command("silence")
@click.argument("job", required=False)
@click.option("--all", "every", is_flag=True, help="Every job and the cluster.")
@tenant_option
@click.option("--for", "duration", required=True, help="How long: 2h, 30m, 1d, 90s.")
@click.option("--reason", default="", help="Why, shown with the silence.")
@click.pass_obj
def alert_silence(
    obj: dict[str, Any], job: str | None, every: bool, tenant: str, duration: str, reason: str
) -> None:
    """Record, but do not deliver, alerts of JOB (or --all) for a while. An alert fires once
    per streak: a failures alert recorded silenced is not sent when the silence ends, nor for
    the same streak's next failures (a run that succeeds ends the streak)."""
    if (job is None) == (not every):
        raise click.UsageError("name a JOB or give --all (not both)")
    try:
        seconds = parse_duration(duration, "for")
    except InvalidInput as exc:
        _refuse(exc)
    row = _alerts(obj, lambda alerts: alerts.silence(seconds, job=_job(job, tenant), reason=reason))
    what = f"job {job}" if job is not None else "every job and the cluster"
    click.echo(f"silenced {what} until {row['ends_at'].isoformat()} (silence {row['id']})")


@alert.command("silences")
@json_option
@click.pass_obj
def alert_silences(obj: dict[str, Any], as_json: bool) -> None:
    """Silences in force, soonest to end first."""
    rows = _alerts(obj, lambda alerts: alerts.list_silences())
    for row in [] if as_json else rows:
        if row["job"] is None:  # a silence of every job and the cluster
            row["tenant"] = row["job"] = EVERYTHING
    _print(rows, as_json, ["id", "tenant", "job", "starts_at", "ends_at", "reason"])


@alert.command("unsilence")
@click.argument("silence_id", metavar="ID", type=click.IntRange(1))
@click.pass_obj
def alert_unsilence(obj: dict[str, Any], silence_id: int) -> None:
    """End silence ID (see alert silences) now: alerts that fire from now on are delivered."""
    row = _alerts(obj, lambda alerts: alerts.end_silence(silence_id))
    what = f"job {row['job']}" if row["job"] is not None else "every job and the cluster"
    click.echo(f"ended silence {silence_id} of {what} at {row['ends_at'].isoformat()}")


@alert.command("ack")
@click.argument("alert_id", type=click.IntRange(1))
@click.option("--by", default="", help="Who acknowledges it.")
@click.pass_obj
def alert_ack(obj: dict[str, Any], alert_id: int, by: str) -> None:
    """Acknowledge alert ALERT_ID (see alert list): someone is on it. A leader_changed or
    no_live_node notice is closed by it."""
    _alerts(obj, lambda alerts: alerts.acknowledge(alert_id, by=by))
    click.echo(f"acknowledged alert {alert_id}")
