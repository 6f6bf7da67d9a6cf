"""The address table http jobs and notifiers are held to: every entry of the
IANA special-purpose address registries is refused, from Pulse's own table, not Python's (whose
3.11.7 tables let 192.0.0.192 and fec0::1 through); every IPv6 form carrying an IPv4 address is
judged by that address; a host spelled as an integer, in octal or hex, with a trailing dot or a
zone id is read the same way when the job is written and when its node connects.

Nothing here connects out: refusals at write time are of address literals (no resolution), and
the connect-time check runs over a network backend that records what it would connect to and
never does; real connections go to a listener on 127.0.0.1."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx
import pytest

from helpers import ALL_SHARDS, pgpulse, spec, utc
from pgpulse.core.address_registry import SPECIAL_BLOCKS, host_address
from pgpulse.core.egress import HttpAllowList, refusal
from pgpulse.core.policy import WebSettings
from pgpulse.db.store import Store
from pgpulse.node.builtins import http_handler
from pgpulse.node.dispatch import plan_finish
from pgpulse.node.egress_transport import GuardedTransport
from pgpulse.node.handlers import NodeHandlers
from test_egress import secret  # noqa: F401 - the listener fixture
from web_helpers import api_client, make_token

OUTSIDE = "reserved (outside 2000::/3, the global unicast space)"

#: One or more addresses of every registry entry (first, last or inner addresses, and the
#: addresses the issue named), with the reason each is refused. Written from the registries,
#: not from Pulse's table.
REGISTRY: list[tuple[str, str]] = [
    ("0.0.0.0", "this host on this network"),
    ("0.1.2.3", "this network"),
    ("0.255.255.255", "this network"),
    ("10.0.0.0", "private"),
    ("10.255.255.255", "private"),
    ("100.64.0.1", "shared address space"),
    ("100.127.255.254", "shared address space"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("169.254.169.254", "link-local"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.0.0.1", "IPv4 service continuity prefix"),
    ("192.0.0.8", "IPv4 dummy address"),
    ("192.0.0.9", "port control protocol anycast"),
    ("192.0.0.10", "TURN anycast"),
    ("192.0.0.170", "NAT64/DNS64 discovery"),
    ("192.0.0.171", "NAT64/DNS64 discovery"),
    ("192.0.0.192", "IETF protocol assignments"),
    ("192.0.0.255", "IETF protocol assignments"),
    ("192.0.2.1", "documentation (TEST-NET-1)"),
    ("192.31.196.1", "AS112-v4"),
    ("192.52.193.1", "AMT"),
    ("192.88.99.1", "deprecated 6to4 relay anycast"),
    ("192.168.1.1", "private"),
    ("192.175.48.1", "direct delegation AS112 service"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.255", "benchmarking"),
    ("198.51.100.1", "documentation (TEST-NET-2)"),
    ("203.0.113.1", "documentation (TEST-NET-3)"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.255", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.254", "reserved"),
    ("255.255.255.255", "limited broadcast"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::808:808", "IPv4-compatible (deprecated)"),
    ("::ffff:8.8.8.8", "IPv4-mapped"),
    ("64:ff9b:1::808:808", "NAT64 local-use prefix"),
    ("100::1", "discard-only"),
    ("100:0:0:1::1", "dummy IPv6 prefix"),
    ("2001:0:808:808::f7f7:f7f7", "Teredo"),  # server and client 8.8.8.8
    ("2001:1::1", "port control protocol anycast"),
    ("2001:1::2", "TURN anycast"),
    ("2001:1::3", "DNS-SD service registration protocol anycast"),
    ("2001:2::1", "benchmarking"),
    ("2001:3::1", "AMT"),
    ("2001:4:112::1", "AS112-v6"),
    ("2001:10::1", "deprecated ORCHID"),
    ("2001:20::1", "ORCHIDv2"),
    ("2001:30::1", "drone remote ID entity tags"),
    ("2001:1ff:ffff::1", "IETF protocol assignments"),
    ("2001:db8::1", "documentation"),
    ("2002:808:808::1", "6to4 (deprecated)"),
    ("2620:4f:8000::1", "direct delegation AS112 service"),
    ("3fff::1", "documentation"),
    ("3fff:fff::1", "documentation"),
    ("5f00::1", "segment routing SIDs"),
    ("fc00::1", "unique-local"),
    ("fdff::1", "unique-local"),
    ("fe80::1", "link-local"),
    ("febf::1", "link-local"),
    ("fec0::1", "site-local (deprecated)"),
    ("feff::1", "site-local (deprecated)"),
    ("ff02::1", "multicast"),
    ("1::1", OUTSIDE),
    ("4000::1", OUTSIDE),
    ("e000::1", OUTSIDE),
]

#: Public addresses next to the registry's edges, and NAT64 of a public address.
PUBLIC = [
    "8.8.8.8",
    "1.0.0.1",
    "100.128.0.1",
    "172.32.0.1",
    "192.0.1.1",
    "192.0.3.1",
    "198.17.255.255",
    "198.20.0.1",
    "223.255.255.255",
    "2001:200::1",  # just past 2001::/23
    "2606:4700::1111",
    "64:ff9b::808:808",
]

#: IPv4 addresses the registries refuse, to carry inside IPv6 forms.
CARRIED = ["127.0.0.1", "10.1.2.3", "169.254.169.254", "192.0.0.192", "100.64.0.1"]


def _v6(value: int) -> str:
    return str(ipaddress.IPv6Address(value))


def _forms(v4: str) -> dict[str, str]:
    """Every IPv6 form that carries ``v4``."""
    n = int(ipaddress.IPv4Address(v4))
    public = int(ipaddress.IPv4Address("8.8.8.8"))
    octets = n.to_bytes(4, "big")
    local48 = bytes.fromhex("0064ff9b0001") + octets[:2] + b"\0" + octets[2:] + bytes(5)
    return {
        "mapped": _v6(0xFFFF << 32 | n),
        "compatible": _v6(n),
        "6to4": _v6(0x2002 << 112 | n << 80 | 1),
        "nat64": _v6(0x64FF9B << 96 | n),
        "nat64-local/96": _v6(0x64FF9B0001 << 80 | n),
        "nat64-local/48": _v6(int.from_bytes(local48, "big")),
        "teredo-server": _v6(0x20010000 << 96 | n << 64 | (~public & 0xFFFFFFFF)),
        "teredo-client": _v6(0x20010000 << 96 | public << 64 | (~n & 0xFFFFFFFF)),
    }


EMBEDDED = [(v4, form, address) for v4 in CARRIED for form, address in _forms(v4).items()]


def test_the_registry_table_lists_every_entry_the_test_names() -> None:
    """Each block of Pulse's table has a sample here (the table is not longer than the test;
    the NAT64 well-known prefix is sampled by its forms)."""
    sampled = {ipaddress.ip_address(address) for address, _ in REGISTRY} | {
        ipaddress.ip_address(address) for _, _, address in EMBEDDED
    }
    for block in SPECIAL_BLOCKS:
        assert any(a in block.network for a in sampled), block


@pytest.mark.parametrize(("address", "why"), REGISTRY)
def test_every_registry_entry_is_refused(address: str, why: str) -> None:
    assert refusal(ipaddress.ip_address(address)) == why


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_beside_the_entries_are_not(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(("v4", "form", "address"), EMBEDDED)
def test_every_ipv6_form_is_judged_by_the_ipv4_address_it_carries(
    v4: str, form: str, address: str
) -> None:
    why = refusal(ipaddress.IPv4Address(v4))
    assert refusal(ipaddress.ip_address(address)) == f"{why}: {v4} inside {address}", form


def test_forms_of_a_public_address_are_refused_by_their_block_except_nat64() -> None:
    forms = _forms("8.8.8.8")
    assert {form: refusal(ipaddress.ip_address(a)) for form, a in forms.items()} == {
        "mapped": "IPv4-mapped",
        "compatible": "IPv4-compatible (deprecated)",
        "6to4": "6to4 (deprecated)",
        "nat64": None,  # how an IPv6-only node reaches 8.8.8.8
        "nat64-local/96": "NAT64 local-use prefix",
        "nat64-local/48": "NAT64 local-use prefix",
        "teredo-server": "Teredo",
        "teredo-client": "Teredo",
    }


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("3232235777", "192.168.1.1"),
        ("0300.0250.1.1", "192.168.1.1"),
        ("0xc0.0.0.0xc0", "192.0.0.192"),
        ("fe80::1%25eth0", "fe80::1"),
        ("[fec0::1]", "fec0::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("example.com", None),
        ("256.0.0.1", None),
        ("4294967296", None),
        ("08.0.0.1", None),
        ("1.2.3.4.5", None),
        ("127..1", None),
    ],
)
def test_a_host_is_read_in_every_ipv4_spelling_the_resolver_takes(
    host: str, address: str | None
) -> None:
    found = host_address(host)
    assert (None if found is None else str(found)) == address


def _literal(address: str) -> str:
    return f"[{address}]" if ":" in address else address


REFUSED_URLS = [f"http://{_literal(a)}/" for a, _ in REGISTRY] + [
    f"http://[{a}]/" for _, _, a in EMBEDDED
]
SPELLED_URLS = [
    "http://2130706433/",
    "http://0x7f.1/",
    "http://127.1/",
    "http://127.0.0.1./",
    "http://3232235777/",
    "http://0xc0.0.0.0xc0/",
    "http://[fe80::1%25eth0]/",
    "http://[::ffff:127.0.0.1]/",
    "http://127\u30020\u30020\u30021/",  # ideographic full stops: httpx reads 127.0.0.1
]


async def test_the_api_refuses_every_entry_and_form_when_a_job_is_written(store: Store) -> None:
    admin = await make_token(store, admin=True)
    accepted: list[str] = []
    async with api_client(store, admin, WebSettings()) as client:
        for url in REFUSED_URLS + SPELLED_URLS:
            body = {"name": "x", "schedule": "@hourly", "handler": "http", "payload": {"url": url}}
            answer = await client.post("/api/v1/jobs", json=body)
            if answer.status_code != 422 or answer.json()["error"]["field"] != "payload.url":
                accepted.append(url)
    assert accepted == []
    assert await store.list_jobs() == []


def test_job_create_refuses_them_as_a_real_process(dsn: str) -> None:
    """The CLI's write path, the one a crontab line or a script takes."""
    for url, shown in [
        ("http://192.0.0.192/latest", "192.0.0.192 (IETF protocol assignments)"),
        ("http://[fec0::1]/", "fec0::1 (site-local (deprecated))"),
        (
            "http://[2002:c000:c0::1]/",
            "2002:c000:c0::1 (IETF protocol assignments: 192.0.0.192 inside 2002:c000:c0::1)",
        ),
        (
            "http://[64:ff9b::c000:c0]/",
            "64:ff9b::c000:c0 (IETF protocol assignments: 192.0.0.192 inside 64:ff9b::c000:c0)",
        ),
        ("http://0xc0.0.0.0xc0/", "192.0.0.192 (IETF protocol assignments)"),
    ]:
        done = pgpulse("job", "create", "hook", "--schedule", "@hourly", "--handler", "http",
                       "--payload", f'{{"url": "{url}"}}', dsn=dsn)  # fmt: skip
        assert (done.returncode, done.stdout) == (2, ""), url
        assert f"payload.url {url!r} targets {shown}; such addresses are refused" in done.stderr
        assert len(done.stderr.splitlines()) == 1
    assert "hook" not in pgpulse("job", "list", dsn=dsn).stdout


class _NoConnections(httpcore.AsyncNetworkBackend):
    """A network backend that records where it was asked to connect and never connects."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> Any:
        self.asked.append(host)
        raise httpcore.ConnectError(f"test backend: no connection to {host}")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connect(url: str) -> tuple[str, list[str]]:
    """What the guarded transport says when asked for ``url``, and where it would connect."""
    network = _NoConnections()
    transport = GuardedTransport(HttpAllowList(), network=network)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.get(url)
    return str(caught.value), network.asked


@pytest.mark.parametrize("url", REFUSED_URLS + SPELLED_URLS)
async def test_the_connection_refuses_every_entry_and_form(url: str) -> None:
    said, asked = await _connect(url)
    assert asked == [] and "refused: it resolves to " in said


@pytest.mark.parametrize("address", PUBLIC)
async def test_the_connection_would_reach_public_addresses(address: str) -> None:
    said, asked = await _connect(f"http://{_literal(address)}/")
    assert asked == [address] and said == f"test backend: no connection to {address}"


def _stored(urls: Iterable[str]) -> list[Any]:
    return [
        spec(f"spelled-{i}", handler="http", payload={"url": url}, max_attempts=1)
        for i, url in enumerate(urls)
    ]


async def test_a_node_refuses_spelled_loopback_at_run_time(
    store: Store,
    secret: tuple[int, list[bytes]],  # noqa: F811 - the fixture
) -> None:
    """Jobs stored without the write check (an operator's file): a node's run of each fails
    with the reason and the listener on 127.0.0.1 sees nothing."""
    port, seen = secret
    urls = [
        f"http://2130706433:{port}/",
        f"http://0x7f.1:{port}/",
        f"http://127.1:{port}/",
        f"http://127.0.0.1.:{port}/",
        f"http://[::ffff:127.0.0.1]:{port}/",
    ]
    await store.upsert_jobs(_stored(urls), now=utc(2026, 1, 1))
    handlers = NodeHandlers({"http": http_handler}, "node-a", {})
    at = utc(2026, 1, 1, 0, 1)
    claimed = await store.claim_due("node-a", ALL_SHARDS, len(urls), lease=30, now=at)
    assert len(claimed) == len(urls)
    outcomes = [plan_finish(c, await handlers.run(c), at) for c in claimed]
    await store.finish_runs(outcomes, now=at, node="node-a")
    runs = {run["name"]: run for run in await store.list_runs()}
    for i, url in enumerate(urls):
        run = runs[f"spelled-{i}"]
        assert run["outcome"] == "failed", url
        assert "refused: it resolves to " in run["error"] and "(loopback" in run["error"], url
    assert seen == []
