"""Where http jobs may connect, checked at connect time on the node: a name
that resolved to a public address when its job was written and resolves to loopback when it
runs (DNS rebinding) must not reach a loopback listener; nor may a redirect, nor an IPv6 form
that carries a refused IPv4 address. Real loopback listeners, a real database for the run."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import pytest

from helpers import ALL_SHARDS, spec, utc
from pgpulse.core.egress import HttpAllowList, refusal
from pgpulse.core.policy import WebSettings
from pgpulse.db.store import Store
from pgpulse.node.attempts import decide_claim
from pgpulse.node.builtins import http_handler
from pgpulse.node.dispatch import plan_finish
from pgpulse.node.handlers import HandlerFailed, NodeHandlers
from test_builtins import make_ctx
from web_helpers import api_client, make_token

SECRET = b"INTERNAL-SECRET-42"


async def _listen(answer: bytes, seen: list[bytes]) -> asyncio.Server:
    """A loopback listener answering every request with ``answer``, recording the requests."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(answer)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(reply, "127.0.0.1", 0)


@pytest.fixture
async def secret() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A loopback listener that answers every request with SECRET; yields (port, requests)."""
    seen: list[bytes] = []
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 18\r\nConnection: close\r\n\r\n" + SECRET
    async with await _listen(answer, seen) as listener:
        yield listener.sockets[0].getsockname()[1], seen


async def test_a_name_resolving_to_loopback_at_run_time_is_refused(
    secret: tuple[int, list[bytes]],
) -> None:
    port, seen = secret
    ctx = make_ctx({"url": f"http://localhost:{port}/secret"}, options={})  # public only
    with pytest.raises(HandlerFailed) as caught:
        await http_handler(ctx)
    assert "ConnectError" in str(caught.value) and "refused" in str(caught.value)
    assert "127.0.0.1 (loopback)" in str(caught.value)
    assert caught.value.output is None and seen == []  # nothing reached the listener


async def test_a_stored_job_rebound_to_loopback_fails_its_run_with_the_reason(
    store: Store, secret: tuple[int, list[bytes]]
) -> None:
    """As if the job had been written while its name resolved to a public address: the
    operator's write takes no DNS check; the node's connection is what refuses."""
    port, seen = secret
    job = spec(
        "rebind", handler="http", payload={"url": f"http://localhost:{port}/"}, max_attempts=1
    )
    await store.upsert_jobs([job], now=utc(2026, 1, 1))
    handlers = NodeHandlers({"http": http_handler}, "node-a", {})
    at = utc(2026, 1, 1, 0, 1)
    [claimed] = await store.claim_due("node-a", ALL_SHARDS, 1, lease=30, now=at)
    assert (await decide_claim(claimed, handlers)).outcome is None  # to be run
    outcome = plan_finish(claimed, await handlers.run(claimed), at)
    assert await store.finish_runs([outcome], now=at, node="node-a") == {claimed.key}
    [run] = await store.list_runs(name="rebind")
    assert run["outcome"] == "failed" and run["attempts"] == 1
    assert "refused" in run["error"] and "127.0.0.1" in run["error"]
    assert run["output"] is None and seen == []


async def test_a_redirect_to_a_refused_address_is_refused() -> None:
    """127.0.0.1 is allow-listed; its redirect to ::1 is checked on its own, and refused."""
    seen: list[bytes] = []
    answer = b"HTTP/1.1 302 Found\r\nLocation: http://[::1]:1/secret\r\nContent-Length: 0\r\n\r\n"
    async with await _listen(answer, seen) as listener:
        port = listener.sockets[0].getsockname()[1]
        payload = {"url": f"http://127.0.0.1:{port}/out", "follow_redirects": True}
        with pytest.raises(HandlerFailed, match=r"refused: it resolves to ::1 \(loopback\)"):
            await http_handler(make_ctx(payload))
    assert len(seen) == 1 and seen[0].startswith(b"GET /out ")


async def test_allow_listed_loopback_is_reached(secret: tuple[int, list[bytes]]) -> None:
    port, seen = secret
    ctx = make_ctx({"url": f"http://localhost:{port}/"}, options={"http_allow": _allow("::1")})
    with pytest.raises(HandlerFailed, match=r"127\.0\.0\.1"):  # localhost is 127.0.0.1 here
        await http_handler(ctx)
    ctx = make_ctx(
        {"url": f"http://localhost:{port}/"}, options={"http_allow": _allow("localhost")}
    )
    assert await http_handler(ctx) == "200 OK\n" + SECRET.decode()
    assert len(seen) == 1


def _allow(*entries: str) -> HttpAllowList:
    return HttpAllowList.parse(entries)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("2002:7f00:1::1", "loopback: 127.0.0.1 inside 2002:7f00:1::1"),  # 6to4
        ("64:ff9b::7f00:1", "loopback: 127.0.0.1 inside 64:ff9b::7f00:1"),  # NAT64
        ("64:ff9b::a00:1", "private: 10.0.0.1 inside 64:ff9b::a00:1"),
        ("::ffff:169.254.169.254", "link-local: 169.254.169.254 inside ::ffff:a9fe:a9fe"),
        ("::7f00:1", "loopback: 127.0.0.1 inside ::7f00:1"),  # IPv4-compatible
        ("::808:808", "IPv4-compatible (deprecated)"),  # never public
        ("64:ff9b::808:808", None),  # NAT64 of 8.8.8.8: public
        ("2002:808:808::1", "6to4 (deprecated)"),  # a registry block, whatever it carries
        ("2606:4700::1111", None),
        ("::1", "loopback"),
    ],
)
def test_ipv6_forms_are_judged_by_the_ipv4_address_they_carry(address: str, why: Any) -> None:
    assert refusal(ipaddress.ip_address(address)) == why


@pytest.mark.parametrize("url", ["http://[2002:7f00:1::1]/", "http://[64:ff9b::a00:1]/"])
async def test_the_api_refuses_embedded_loopback_and_private_targets(
    store: Store, url: str
) -> None:
    admin = await make_token(store, admin=True)
    body = {"name": "x", "schedule": "@hourly", "handler": "http", "payload": {"url": url}}
    async with api_client(store, admin, WebSettings()) as client:
        refused = await client.post("/api/v1/jobs", json=body)
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "payload.url"
    assert await store.list_jobs() == []
