"""Where ``http`` jobs may connect: the allow-list, the addresses refused by default, and the
connection that checks them when it is made.

An ``http`` job must not turn the scheduler into a request-forgery tool. Its URL's host must be
on the operator's allow-list (host names, ``*.domain`` patterns, CIDR networks: ``--http-allow``)
or reach only public addresses: every block of the IANA special-purpose address registries is
refused (loopback, private, link-local with cloud metadata at 169.254.169.254, shared, the IETF
protocol assignments 192.0.0.0/24, documentation, 6to4, Teredo, site-local, multicast...), from
Pulse's own table (:mod:`pgpulse.core.address_registry`), never from Python's ``ipaddress`` tables,
which differ between patch releases. An IPv6 form that carries an IPv4 address (IPv4-mapped
``::ffff:127.0.0.1``, IPv4-compatible ``::127.0.0.1``, 6to4 ``2002:7f00:1::1``, NAT64
``64:ff9b::7f00:1`` and its local-use prefix, Teredo's server and client) is also judged by the
address it carries.

A URL's host is read once, by httpx's parser (the one that sends the request), and an address
spelled in it is read by :func:`~pgpulse.core.address_registry.host_address` in every form the
system resolver takes (``2130706433``, ``0x7f.1``, ``127.1``, a trailing dot, an IPv6 zone id):
:func:`target_addresses` is what both checks judge.

The rule is checked twice: when a job is written (the API refuses the job:
:mod:`pgpulse.core.policy`) and when its node connects (:class:`GuardedTransport`). Only the
second is a guarantee: a name can resolve to a public address when the job is written and to
127.0.0.1 when it runs (DNS rebinding). The transport resolves the host itself, refuses the
connection if any address it resolves to is refused, and connects to a checked address — never
resolving twice — for every request, redirects included. A refused connection fails the attempt
with ``ConnectError: ... refused ...``. The transport is :mod:`pgpulse.node.egress_transport`
(httpx and httpcore load only with it); this module is the rule, and imports neither.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from pgpulse.core.address_registry import (
    IPV6_GLOBAL_UNICAST,
    NAT64_WELL_KNOWN,
    IPAddress,
    IPNetwork,
    embedded_ipv4,
    host_address,
    special_block,
)
from pgpulse.core.errors import InvalidInput

__all__ = ["HttpAllowList", "IPAddress", "refusal", "resolve", "target_addresses"]


@dataclass(frozen=True, slots=True)
class HttpAllowList:
    """Hosts and networks ``http`` jobs may target besides public addresses.

    Build with :meth:`parse`. ``names`` are exact host names (lower case); ``suffixes`` come
    from ``*.example.com`` entries and match any subdomain; ``networks`` from CIDRs or single
    addresses.
    """

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> HttpAllowList:
        """Parse allow-list entries: ``hooks.internal``, ``*.corp.example``, ``10.0.0.0/8``,
        ``127.0.0.1``, ``::1``.

        Raises:
            InvalidInput: an entry is empty or malformed (``field="http_allow"``).
        """
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip().lower()
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            host = entry[2:] if entry.startswith("*.") else entry
            if not host or any(c in host for c in "/:@ *[]") or host.startswith("."):
                raise InvalidInput(
                    f"http allow-list entry {raw!r} is not a host name, *.domain or CIDR network",
                    field="http_allow",
                    value=raw,
                )
            if entry.startswith("*."):
                suffixes.append("." + host)
            else:
                names.add(host)
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    def allows_name(self, host: str) -> bool:
        """Whether the host name itself is allow-listed (no resolution needed)."""
        host = host.lower().rstrip(".")
        return host in self.names or any(host.endswith(s) for s in self.suffixes)

    def allows_address(self, address: IPAddress) -> bool:
        """Whether ``address`` lies in an allow-listed network."""
        return any(address in net for net in self.networks if net.version == address.version)

    def refuses(self, address: IPAddress) -> str | None:
        """Why ``address`` may not be reached (:func:`refusal`), unless allow-listed."""
        why = refusal(address)
        return None if why is None or self.allows_address(address) else why


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` may not be targeted by default, or ``None`` if it may.

    An IPv6 form that carries an IPv4 address is refused if that address is, and says so
    (``loopback: 127.0.0.1 inside 2002:7f00:1::1``); otherwise an address in a block of
    :mod:`pgpulse.core.address_registry` is refused, named by its block (``IETF protocol
    assignments``), and so is IPv6 outside the global unicast space ``2000::/3``. The NAT64
    well-known prefix is judged only by what it carries: ``64:ff9b::808:808`` (8.8.8.8) may be
    reached. A scope (``fe80::1%eth0``) is ignored.
    """
    if isinstance(address, ipaddress.IPv6Address):
        address = ipaddress.IPv6Address(int(address))  # without its scope
        for carried in embedded_ipv4(address):
            why = refusal(carried)
            if why is not None:
                return f"{why}: {carried} inside {address}"
        if address in NAT64_WELL_KNOWN:
            return None
    block = special_block(address)
    if block is not None:
        return block.name
    if isinstance(address, ipaddress.IPv6Address) and address not in IPV6_GLOBAL_UNICAST:
        return "reserved (outside 2000::/3, the global unicast space)"
    return None


async def target_addresses(host: str, port: int, seconds: float | None) -> list[IPAddress]:
    """The addresses a URL's ``host`` (as httpx's parser gives it) names: the address it
    spells (:func:`~pgpulse.core.address_registry.host_address`), else what it resolves to
    (:func:`resolve`); ``[]`` when it does not resolve within ``seconds``."""
    literal = host_address(host)
    return [literal] if literal is not None else await resolve(host, port, seconds)


async def resolve(host: str, port: int, seconds: float | None) -> list[IPAddress]:
    """The addresses ``host`` resolves to (itself for an address literal), sorted; ``[]`` when
    it does not resolve within ``seconds`` (``None``: no limit)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(seconds):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError, UnicodeError, ValueError):
        return []
    found = {ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos}
    return sorted(found, key=lambda a: (a.version, int(a)))
