"""Where ``http`` jobs may connect: the allow-list, the address classes refused by default, and
the connection that checks them when it is made.

An ``http`` job must not turn the scheduler into a request-forgery tool. Its URL's host must be
on the operator's allow-list (host names, ``*.domain`` patterns, CIDR networks: ``--http-allow``)
or reach only public, globally routable addresses: loopback, link-local (cloud metadata at
169.254.169.254), private, shared, reserved, multicast and unspecified addresses are refused,
also inside the IPv6 forms that embed an IPv4 address (IPv4-mapped ``::ffff:127.0.0.1``, 6to4
``2002:7f00:1::1``, NAT64 ``64:ff9b::7f00:1``, IPv4-compatible ``::127.0.0.1``).

The rule is checked twice: when a job is written (the API refuses the job:
:mod:`pgpulse.web.policy`) and when its node connects (:class:`GuardedTransport`). Only the
second is a guarantee: a name can resolve to a public address when the job is written and to
127.0.0.1 when it runs (DNS rebinding). The transport resolves the host itself, refuses the
connection if any address it resolves to is refused, and connects to a checked address — never
resolving twice — for every request, redirects included. A refused connection fails the attempt
with ``ConnectError: ... refused ...``. The transport is :mod:`pgpulse.egress_transport` (httpx and
httpcore load only with it); this module is the rule, and imports neither.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from pgpulse.errors import InvalidInput

__all__ = ["HttpAllowList", "refusal", "resolve"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The well-known NAT64 prefix (RFC 6052): the IPv4 address is the last 32 bits.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
#: IPv4-compatible addresses (deprecated, RFC 4291 2.5.5.1): ``::a.b.c.d``.
_COMPATIBLE = ipaddress.IPv6Network("::/96")


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


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped, 6to4, NAT64, compatible), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):  # not :: or ::1
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` may not be targeted by default, or ``None`` if it is public.

    An IPv6 form that embeds an IPv4 address is refused if that address is: ``2002:7f00:1::1``
    (6to4 of 127.0.0.1) is loopback. A translation of a public address is public
    (``64:ff9b::808:808``, NAT64 of 8.8.8.8); the deprecated ``::a.b.c.d`` form never is.
    """
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            why = refusal(embedded)
            if why is not None:
                return f"{why}: {embedded} inside {address}"
            if address not in _COMPATIBLE:
                return None
    for kind in ("loopback", "link_local", "multicast", "unspecified", "private", "reserved"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if address.is_global else "not globally routable"


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
