"""The web edge's commands: ``pgpulse serve`` and ``pgpulse token create|revoke|list``.

Registered on the ``pgpulse`` group by :mod:`pgpulse.cli.main`. Like every command they are thin:
parse options, call the library, print one line on error (exit 2 refused input, 3 database
down). :func:`run_node_with_web` gives ``pgpulse node run`` its ``--metrics`` / ``--http``
servers (its options are in :mod:`pgpulse.web.options`, which imports no web framework).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from pgpulse.app import App, connect
from pgpulse.cli.report import emit, print_records, run_command, to_json
from pgpulse.cli.types import HostPort, valid_name
from pgpulse.core.policy import WebSettings
from pgpulse.db.tokens import TokenStore
from pgpulse.node.engine import Node, NodeConfig
from pgpulse.web.options import web_options, web_settings

T = TypeVar("T")


@click.command()
@click.option(
    "--listen",
    default="127.0.0.1:8080",
    type=HostPort(),
    metavar="HOST:PORT",
    help="Address of the API, dashboard (/ui) and metrics (/metrics).",
)
@web_options
@click.pass_obj
def serve(obj: dict[str, Any], /, listen: str, **options: Any) -> None:
    """Serve the JSON API, the dashboard and Prometheus metrics (until SIGTERM)."""
    from pgpulse.web.server import serve as serve_app  # the web stack: only for the servers

    settings = web_settings(**options)

    async def main() -> None:
        async with connect(
            obj["database_url"],
            data_dir=obj["data_dir"],
            application_name="pgpulse:serve",
            max_size=8,
            read_url=obj["read_database_url"],
        ) as store:
            await serve_app(store, listen, settings, lambda line: click.echo(line, err=True))

    run_command(main())


def run_node_with_web(
    app: App,
    obj: dict[str, Any],
    config: NodeConfig,
    *,
    metrics: str | None,
    http: str | None,
    settings: WebSettings,
    on_started: Callable[[Node, str], None] | None = None,
    pool_database_url: str | None = None,
) -> None:
    """Run a node (``pgpulse node run``) with its ``--metrics`` / ``--http`` servers beside it.

    The servers bind before the node starts (a busy address exits 2 at once) and stop after
    the node has drained. ``on_started``, ``pool_database_url``: as
    :meth:`pgpulse.app.App.run_node`'s (the servers' own pool stays on ``--database-url``).
    """
    from pgpulse.web.server import web_sidecar  # the web stack: only for the servers

    database_url: str | None = obj["database_url"]
    data_dir: Path | None = obj["data_dir"]

    async def main() -> None:
        async with web_sidecar(
            database_url,
            data_dir,
            metrics=metrics,
            http=http,
            settings=settings,
            read_url=obj["read_database_url"],
        ):
            await app.run_node(
                database_url,
                data_dir=data_dir,
                config=config,
                on_started=on_started,
                pool_database_url=pool_database_url,
            )

    run_command(main())


@click.group()
def token() -> None:
    """Create, list and revoke API tokens (stored only as hashes)."""


def _tokens(
    obj: dict[str, Any],
    action: Callable[[TokenStore], Coroutine[Any, Any, T]],
    *,
    migrate: bool = False,
) -> T:
    """Run ``action`` on the tokens; only ``token create`` (``migrate``) creates the schema,
    the others refuse a database without it (one line, exit 2)."""

    async def main() -> T:
        async with connect(
            obj["database_url"], data_dir=obj["data_dir"], migrate=migrate, require_schema=True
        ) as store:
            return await action(TokenStore(store.pool))

    return run_command(main())


@token.command("create")
@click.option(
    "--tenant",
    default=None,
    callback=valid_name("tenant"),
    help="The tenant the token sees (required unless --admin).",
)
@click.option("--admin", is_flag=True, help="See every tenant; may manage shell jobs.")
@click.option("--label", default="", help="A note shown by token list.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (with the token).")
@click.pass_obj
def token_create(
    obj: dict[str, Any], tenant: str | None, admin: bool, label: str, as_json: bool
) -> None:
    """Create a token and print it once (only its hash is stored)."""
    if tenant is None and not admin:  # the global --tenant (PGPULSE_TENANT), if given
        tenant = obj.get("tenant")
    secret, row = _tokens(
        obj, lambda tokens: tokens.create(tenant=tenant, admin=admin, label=label), migrate=True
    )
    scope = "admin" if admin else f"tenant {tenant}"
    click.echo(f"created token {row['id']} ({scope}); it is shown only now:", err=True)
    if as_json:
        emit(
            True,
            {"id": row["id"], "tenant": tenant, "admin": admin, "label": label, "token": secret},
        )
    else:
        click.echo(secret)


@token.command("revoke")
@click.argument("token_id", type=click.IntRange(1))
@click.pass_obj
def token_revoke(obj: dict[str, Any], token_id: int) -> None:
    """Revoke token TOKEN_ID (see token list); it is refused from the next request on."""
    row = _tokens(obj, lambda tokens: tokens.revoke(token_id))
    click.echo(f"revoked token {row['id']} ({row['prefix']}…)")


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def token_list(obj: dict[str, Any], as_json: bool) -> None:
    """List tokens (prefix, tenant, admin, last use, revocation) without secrets."""
    rows = _tokens(obj, lambda tokens: tokens.list())
    if as_json:
        click.echo(json.dumps(rows, default=to_json, indent=2))
        return
    print_records(
        rows,
        False,
        ["id", "prefix", "tenant", "admin", "label", "created_at", "last_used_at", "revoked_at"],
    )
