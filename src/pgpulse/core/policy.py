"""What the HTTP edge refuses before anything is written: its settings and security rules.

* ``shell`` jobs run commands on every node. The API creates or changes one only for an admin
  token AND when the server was started with ``--allow-shell-jobs`` (the rule is
  :mod:`pgpulse.core.access`'s, applied by the store to every write; :attr:`WebSettings` carries the
  opt-in).
* ``http`` jobs must not turn the scheduler into a request-forgery tool
  (:mod:`pgpulse.core.egress`): their URL's host must be on the operator's allow-list
  (:attr:`WebSettings.http_allow`) or resolve only to public addresses; so a job that could never
  run is refused when written. The guarantee is the node's: it checks the address it connects to, at
  connect time (a name may resolve elsewhere by then). ``follow_redirects: true`` is accepted only
  for allow-listed hosts, since a redirect could lead anywhere.
* Text must be storable: NUL characters and unpaired surrogates are refused with a 422 naming
  the field instead of failing in the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pgpulse.core.address_registry import host_address
from pgpulse.core.egress import HttpAllowList, target_addresses
from pgpulse.core.errors import Forbidden, InvalidInput, PulseError
from pgpulse.core.json_limits import check_shape

#: Default limit of a request body, bytes. Larger bodies are refused with 413.
DEFAULT_MAX_BODY_BYTES = 64 * 1024


__all__ = [
    "SERVER_ALLOW",
    "Forbidden",
    "HttpAllowList",
    "WebSettings",
    "check_http_target",
    "check_text",
]


class TargetNotAllowed(InvalidInput):
    """An ``http`` job's URL points at an address the operator has not allowed."""


class PayloadTooLarge(PulseError):
    """A request body is larger than :attr:`WebSettings.max_body_bytes`."""


@dataclass(frozen=True, slots=True)
class WebSettings:
    """Settings of the HTTP edge (``pgpulse serve``, ``node run --http``).

    Attributes:
        allow_shell_jobs: the operator's opt-in to ``shell`` jobs from the API (admin only).
        http_allow: extra targets ``http`` jobs may call (see :class:`HttpAllowList`).
        max_body_bytes: largest request body accepted, bytes (else 413).
        node_ttl: a node silent this many seconds is shown dead.
        refresh_seconds: how often dashboard pages refresh their live part.
        resolve_timeout: seconds to resolve an ``http`` job's host name.
        secure_cookies: mark the sign-in cookie ``Secure`` (serve behind HTTPS).
    """

    allow_shell_jobs: bool = False
    http_allow: HttpAllowList = field(default_factory=HttpAllowList)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    node_ttl: float = 10.0
    refresh_seconds: float = 2.0
    resolve_timeout: float = 2.0
    secure_cookies: bool = False


#: Where an operator allows a private target refused by the HTTP edge: the serving process's own
#: option (``pgpulse serve``, or ``node run --http``). Other edges name their own option.
SERVER_ALLOW = "the server's --http-allow list (pgpulse serve --http-allow HOST)"


def _url_host(url: str) -> tuple[str, int]:
    """The host (ASCII, as the connection gets it) and port ``url`` sends to, read by httpx's
    parser, the one that sends the request (the standard library's ``urlsplit`` reads some
    hosts otherwise: ``127。0。0。1``).

    Raises:
        ValueError: httpx refuses the URL (it could never be sent); the message says why.
    """
    import httpx  # with the check, not with this module (imported by edges that send nothing)

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise ValueError(str(exc)) from None
    if not parsed.raw_host:
        raise ValueError("it names no host")
    return parsed.raw_host.decode("ascii"), parsed.port or (443 if parsed.scheme == "https" else 80)


async def check_http_target(
    payload: dict[str, Any],
    settings: WebSettings,
    *,
    allowed_by: str = SERVER_ALLOW,
    allowed_flag: str | None = None,
) -> None:
    """Refuse an ``http`` job whose URL host is not allowed (see the module docstring).

    Call after the payload's shape was validated (``url`` is an http(s) URL with a host). The
    host is read as the node's connection reads it (:func:`pgpulse.core.egress.target_addresses`):
    an address in any spelling (``http://2130706433/``, ``http://0x7f.1/``, ``[fe80::1%25x]``)
    is judged as that address, a name by what it resolves to now.

    Args:
        payload: the job's payload (``url``, ``follow_redirects``).
        settings: its ``http_allow`` list and ``resolve_timeout`` (seconds) are used.
        allowed_by: the option that would allow the target where the refusal happens, named
            by the message (:data:`SERVER_ALLOW` on the HTTP edge).
        allowed_flag: instead of an allow-list, the switch that allows any such target where
            the refusal happens (``job create``'s ``--allow-private-target``, an apply file's
            ``allow_private_target = true``): the message then says ``…; FLAG allows it``.

    Raises:
        TargetNotAllowed: ``field="payload.url"`` (or ``payload.follow_redirects``), the value.
    """
    url = payload.get("url")
    if not isinstance(url, str):
        return  # the payload validator names this
    try:
        host, port = _url_host(url)
    except ValueError as exc:
        raise TargetNotAllowed(
            f"payload.url {url!r} is not a valid URL: {exc}", field="payload.url", value=url
        ) from None
    allow = settings.http_allow
    literal = host_address(host)
    listed = allow.allows_name(host) or (literal is not None and allow.allows_address(literal))
    if payload.get("follow_redirects") is True and not listed:
        raise TargetNotAllowed(
            f"payload.follow_redirects is allowed only for hosts on {allowed_by} "
            "(a redirect could lead anywhere)"
            if allowed_flag is None
            else f"payload.follow_redirects is refused (a redirect could lead anywhere); "
            f"{allowed_flag} allows it",
            field="payload.follow_redirects",
            value=True,
        )
    if listed:
        return
    addresses = await target_addresses(host, port, settings.resolve_timeout)
    if not addresses:
        raise TargetNotAllowed(
            f"payload.url host {host!r} does not resolve; "
            + (f"add it to {allowed_by}" if allowed_flag is None else f"{allowed_flag} allows it"),
            field="payload.url",
            value=url,
        )
    for address in addresses:
        why = allow.refuses(address)
        if why is not None:
            raise TargetNotAllowed(
                f"payload.url {url!r} targets {address} ({why}); such addresses are refused "
                + (
                    f"unless {allowed_by} names them"
                    if allowed_flag is None
                    else f"without {allowed_flag}"
                ),
                field="payload.url",
                value=url,
            )


def check_text(field_name: str, value: Any) -> None:
    """Refuse text the database cannot store: NUL characters, unpaired surrogates (walks dicts
    and lists), after the nesting and number rule of every path
    (:func:`pgpulse.core.json_limits.check_shape`).

    Raises:
        InvalidInput: ``field`` names where the text is (``payload.env.HOME``,
            ``payload.args[2]``), ``value`` is the refused string (NUL shown as ``\\u0000``);
            or ``field_name`` for a value nested too deep or an integer too long.
    """
    check_shape(field_name, value)
    stack: list[tuple[Any, str]] = [(value, field_name)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            _check_string(where, item)
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_string(where, str(key))
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))


def _check_string(where: str, text: str) -> None:
    if "\x00" in text:
        raise InvalidInput(
            f"{where} must not contain NUL characters",
            field=where,
            value=text.replace("\x00", "\\u0000"),
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            f"{where} holds an unpaired surrogate",
            field=where,
            value=text.encode("utf-8", "backslashreplace").decode(),
        ) from None
