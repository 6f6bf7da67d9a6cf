"""Pulse's own copy of the IANA special-purpose address registries, the IPv4 forms IPv6
addresses carry, and the IPv4 spellings a URL host can take. Pure: no I/O.

Pulse does not ask Python's :mod:`ipaddress` whether an address is private or global: its
tables (``is_private``, ``is_global``...) changed between patch releases (3.11.7 counts
192.0.0.192 as global), so the rule :mod:`pgpulse.core.egress` applies would move with the
interpreter. The blocks below are written out from the registries instead:

* IANA IPv4 Special-Purpose Address Registry (RFC 6890 and its updates), with the multicast
  block (RFC 5771) and the limited broadcast address;
* IANA IPv6 Special-Purpose Address Registry, with the IPv6 Address Space registry's blocks that
  are not global unicast: multicast ``ff00::/8``, the deprecated site-local ``fec0::/10``
  (RFC 3879) and IPv4-compatible ``::/96`` (RFC 4291), and everything outside ``2000::/3``
  (reserved by the IETF; :data:`IPV6_GLOBAL_UNICAST`).

Every block is listed, also those the registry marks globally reachable (the anycast addresses of
PCP and TURN, AS112, AMT, ORCHIDv2): none is a service an ``http`` job calls, and a table that
refuses a whole registry needs no judgement per entry. The one block judged by what it carries
instead is the NAT64 well-known prefix ``64:ff9b::/96`` (:data:`NAT64_WELL_KNOWN`): it is how an
IPv6-only node reaches public IPv4 hosts (DNS64 answers with it).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = [
    "IPV6_GLOBAL_UNICAST",
    "NAT64_WELL_KNOWN",
    "SPECIAL_BLOCKS",
    "Block",
    "IPAddress",
    "embedded_ipv4",
    "host_address",
    "special_block",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Block:
    """One registry entry: ``network``, what it is (``name``, as a refusal says it) and the
    document that assigns it (``source``)."""

    network: IPNetwork
    name: str
    source: str


def _blocks(*entries: tuple[str, str, str]) -> tuple[Block, ...]:
    return tuple(Block(ipaddress.ip_network(net), name, src) for net, name, src in entries)


#: The IPv4 blocks (IANA IPv4 Special-Purpose Address Registry, multicast, broadcast).
IPV4_BLOCKS = _blocks(
    ("0.0.0.0/8", "this network", "RFC 791"),
    ("0.0.0.0/32", "this host on this network", "RFC 1122"),
    ("10.0.0.0/8", "private", "RFC 1918"),
    ("100.64.0.0/10", "shared address space", "RFC 6598"),
    ("127.0.0.0/8", "loopback", "RFC 1122"),
    ("169.254.0.0/16", "link-local", "RFC 3927"),
    ("172.16.0.0/12", "private", "RFC 1918"),
    ("192.0.0.0/24", "IETF protocol assignments", "RFC 6890"),
    ("192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335"),
    ("192.0.0.8/32", "IPv4 dummy address", "RFC 7600"),
    ("192.0.0.9/32", "port control protocol anycast", "RFC 7723"),
    ("192.0.0.10/32", "TURN anycast", "RFC 8155"),
    ("192.0.0.170/32", "NAT64/DNS64 discovery", "RFC 8880"),
    ("192.0.0.171/32", "NAT64/DNS64 discovery", "RFC 8880"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737"),
    ("192.31.196.0/24", "AS112-v4", "RFC 7535"),
    ("192.52.193.0/24", "AMT", "RFC 7450"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526"),
    ("192.168.0.0/16", "private", "RFC 1918"),
    ("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534"),
    ("198.18.0.0/15", "benchmarking", "RFC 2544"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737"),
    ("224.0.0.0/4", "multicast", "RFC 5771"),
    ("240.0.0.0/4", "reserved", "RFC 1112"),
    ("255.255.255.255/32", "limited broadcast", "RFC 919"),
)

#: The IPv6 blocks (IANA IPv6 Special-Purpose Address Registry, and the Address Space
#: registry's multicast, site-local and IPv4-compatible blocks).
IPV6_BLOCKS = _blocks(
    ("::/128", "unspecified", "RFC 4291"),
    ("::1/128", "loopback", "RFC 4291"),
    ("::/96", "IPv4-compatible (deprecated)", "RFC 4291"),
    ("::ffff:0:0/96", "IPv4-mapped", "RFC 4291"),
    ("64:ff9b::/96", "NAT64 well-known prefix", "RFC 6052"),
    ("64:ff9b:1::/48", "NAT64 local-use prefix", "RFC 8215"),
    ("100::/64", "discard-only", "RFC 6666"),
    ("100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780"),
    ("2001::/23", "IETF protocol assignments", "RFC 2928"),
    ("2001::/32", "Teredo", "RFC 4380"),
    ("2001:1::1/128", "port control protocol anycast", "RFC 7723"),
    ("2001:1::2/128", "TURN anycast", "RFC 8155"),
    ("2001:1::3/128", "DNS-SD service registration protocol anycast", "RFC 9665"),
    ("2001:2::/48", "benchmarking", "RFC 5180"),
    ("2001:3::/32", "AMT", "RFC 7450"),
    ("2001:4:112::/48", "AS112-v6", "RFC 7535"),
    ("2001:10::/28", "deprecated ORCHID", "RFC 4843"),
    ("2001:20::/28", "ORCHIDv2", "RFC 7343"),
    ("2001:30::/28", "drone remote ID entity tags", "RFC 9374"),
    ("2001:db8::/32", "documentation", "RFC 3849"),
    ("2002::/16", "6to4 (deprecated)", "RFC 3056, RFC 7526"),
    ("2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534"),
    ("3fff::/20", "documentation", "RFC 9637"),
    ("5f00::/16", "segment routing SIDs", "RFC 9602"),
    ("fc00::/7", "unique-local", "RFC 4193"),
    ("fe80::/10", "link-local", "RFC 4291"),
    ("fec0::/10", "site-local (deprecated)", "RFC 3879"),
    ("ff00::/8", "multicast", "RFC 4291"),
)

#: Every block, IPv4 then IPv6.
SPECIAL_BLOCKS = IPV4_BLOCKS + IPV6_BLOCKS

#: The global unicast space (IANA IPv6 Address Space registry); the rest is reserved by the IETF.
IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")

#: The NAT64 well-known prefix (RFC 6052): the IPv4 address is the last 32 bits.
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")

_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_TEREDO = ipaddress.IPv6Network("2001::/32")
_V4 = 0xFFFFFFFF


def special_block(address: IPAddress) -> Block | None:
    """The most specific registry block that holds ``address``, or ``None``.

    ``address`` carries no scope (``fe80::1%eth0``: pass ``fe80::1``)."""
    found: Block | None = None
    for block in IPV4_BLOCKS if address.version == 4 else IPV6_BLOCKS:
        if address in block.network and (
            found is None or block.network.prefixlen > found.network.prefixlen
        ):
            found = block
    return found


def _rfc6052(value: int, prefix: int) -> ipaddress.IPv4Address | None:
    """The IPv4 address an RFC 6052 translation under a ``prefix``-bit prefix carries (the
    address skips bits 64-71, the ``u`` octet), or ``None`` when ``value`` does not fit that
    layout (its ``u`` octet and suffix must be zero)."""
    octets = value.to_bytes(16, "big")
    carried = [i for i in range(prefix // 8, 16) if i != 8][:4]
    rest = [i for i in range(carried[-1] + 1, 16)] + ([8] if prefix < 96 else [])
    if any(octets[i] for i in rest):
        return None
    return ipaddress.IPv4Address(bytes(octets[i] for i in carried))


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 form carries, to be judged as themselves.

    IPv4-mapped ``::ffff:a.b.c.d`` and IPv4-compatible ``::a.b.c.d`` (RFC 4291; not ``::``
    nor ``::1``), 6to4 ``2002:AABB:CCDD::`` (RFC 3056), NAT64 ``64:ff9b::a.b.c.d`` (RFC 6052)
    and the local-use prefix ``64:ff9b:1::/48`` (RFC 8215: each RFC 6052 layout a prefix of 48
    bits or more can use, /48, /56, /64 and /96, that the address fits; 0.0.0.0 only if no
    other), Teredo's server (bits 32-63) and client (the
    last 32 bits, inverted: RFC 4380). Empty for any other address.
    """
    value = int(address)
    if address in _MAPPED or address in NAT64_WELL_KNOWN or (address in _COMPATIBLE and value > 1):
        return (ipaddress.IPv4Address(value & _V4),)
    if address in _SIX_TO_FOUR:
        return (ipaddress.IPv4Address((value >> 80) & _V4),)
    if address in _NAT64_LOCAL:
        layouts = (_rfc6052(value, prefix) for prefix in (48, 56, 64, 96))
        fitting = tuple(dict.fromkeys(carried for carried in layouts if carried is not None))
        # 0.0.0.0 is what a longer layout reads in a shorter one's zero suffix
        return tuple(c for c in fitting if int(c)) or fitting
    if address in _TEREDO:
        return (
            ipaddress.IPv4Address((value >> 64) & _V4),
            ipaddress.IPv4Address(~value & _V4),
        )
    return ()


def _number(part: str) -> int | None:
    """One part of an IPv4 spelling as ``inet_aton`` reads it: ``0x`` hex, ``0`` octal, else
    decimal; ``None`` if it is none of them."""
    text = part.lower()
    if text.startswith("0x"):
        digits, base = text[2:], 16
        ok = all(c in "0123456789abcdef" for c in digits)
    elif len(text) > 1 and text.startswith("0"):
        digits, base = text[1:], 8
        ok = all(c in "01234567" for c in digits)
    else:
        digits, base = text, 10
        ok = digits.isascii() and digits.isdigit()
    if not ok:
        return None
    return int(digits, base) if digits else 0


def _inet_aton(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address of a numeric spelling ``inet_aton`` (so the system resolver) and
    browsers accept: one to four parts, each decimal, octal or hex, the last filling the bytes
    left (``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``127.1``)."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or any(not part for part in parts):
        return None
    numbers = [_number(part) for part in parts]
    if any(n is None for n in numbers):
        return None
    values = [n for n in numbers if n is not None]
    head, last = values[:-1], values[-1]
    if any(n > 0xFF for n in head) or last >= 1 << (8 * (5 - len(values))):
        return None
    value = last
    for i, n in enumerate(head):
        value |= n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def host_address(host: str) -> IPAddress | None:
    """The address a URL's host names by itself, or ``None`` for a name to resolve.

    ``host`` as an URL parser gives it (no brackets needed): an IPv6 literal, its zone id
    dropped (``fe80::1%25eth0`` is ``fe80::1``); an IPv4 address in any spelling the system
    resolver would take as one (:func:`_inet_aton`); either with one trailing dot (the absolute
    form). Both the check when a job is written and the connection's check read a host with
    this, so both judge the same address, without asking a resolver.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text.split("%", 1)[0])
        except ValueError:
            return None
    return _inet_aton(text)
