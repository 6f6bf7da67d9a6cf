"""The web edge's command-line options, shared by ``pgpulse serve`` and ``pgpulse node run``.

Kept apart from :mod:`pgpulse.cli.serve` so that the ``pgpulse`` command can declare
``node run``'s options without importing FastAPI or uvicorn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from pgpulse.core.errors import InvalidInput, PulseError
from pgpulse.core.policy import DEFAULT_MAX_BODY_BYTES, HttpAllowList, WebSettings

F = TypeVar("F", bound=Callable[..., Any])


def web_options(func: F) -> F:
    """Add ``--allow-shell-jobs``, ``--http-allow``, ``--max-body`` and ``--secure-cookies``."""
    options = [
        click.option(
            "--allow-shell-jobs",
            is_flag=True,
            help="Explicit opt-in to shell jobs (they run commands on the nodes): a "
            "node runs them only with it, and the API lets admin tokens create "
            "or change them only with it.",
        ),
        click.option(
            "--http-allow",
            multiple=True,
            metavar="HOST|*.DOMAIN|CIDR",
            help="Extra targets http jobs may call besides public addresses "
            "(loopback, link-local and private ones are refused unless listed). "
            "Repeat, or space-separate in the variable.",
        ),
        click.option(
            "--max-body",
            type=click.IntRange(1024, 16 * 1024 * 1024),
            default=DEFAULT_MAX_BODY_BYTES,
            help="Largest request body in bytes; larger ones get 413.",
        ),
        click.option(
            "--secure-cookies",
            is_flag=True,
            help="Mark the dashboard's sign-in cookie Secure (serving behind HTTPS).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def web_settings(
    allow_shell_jobs: bool, http_allow: tuple[str, ...], max_body: int, secure_cookies: bool
) -> WebSettings:
    """Build :class:`WebSettings` from :func:`web_options` values.

    Raises:
        click.BadParameter: a malformed ``--http-allow`` entry.
    """
    try:
        allow = HttpAllowList.parse(http_allow)
    except PulseError as exc:
        raise click.BadParameter(str(exc), param_hint="--http-allow") from None
    return WebSettings(
        allow_shell_jobs=allow_shell_jobs,
        http_allow=allow,
        max_body_bytes=max_body,
        secure_cookies=secure_cookies,
    )


def parse_address(text: str, *, field: str = "listen") -> tuple[str, int]:
    """Parse ``HOST:PORT``, ``:PORT`` (all interfaces), ``PORT`` (loopback) or ``[V6]:PORT``.

    Raises:
        InvalidInput: not an address with a port in 0-65535 (``field`` names the option; a
            port past 65535 is said to be out of range).
    """
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", text.strip()
    elif host == "":
        host = "0.0.0.0"  # ":PORT" explicitly asks for every interface
    host = host.strip("[]")
    if not port_text.isdigit() or not host:
        raise InvalidInput(f"{field} {text!r} is not HOST:PORT", field=field, value=text)
    if int(port_text) > 65535:  # TCP's port is 16 bits; 0 asks the system for a free one
        raise InvalidInput(
            f"{field} {text!r}: port {port_text} is out of range (1-65535)",
            field=field,
            value=text,
        )
    return host, int(port_text)
