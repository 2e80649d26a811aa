"""The allowlist rule (Harbor's: names, ``*.suffix`` wildcards, addresses and ranges) and the
egress proxy that applies it to CONNECT and plain-HTTP requests, on loopback."""

from __future__ import annotations

import asyncio

import pytest

from ray_bench.models.task.network import host_allowed, normalize_hosts
from ray_bench.sandboxes.egress import EgressProxy

ENTRIES = normalize_hosts(["api.anthropic.com", "*.pypi.org", "10.0.0.0/8", "192.0.2.7", "2001:db8::/32"]) or []


@pytest.mark.parametrize(("host", "addresses", "ok"), [
    ("api.anthropic.com", [], True),
    ("API.Anthropic.com.", [], True),
    ("anthropic.com", [], False),
    ("files.pypi.org", [], True),
    ("a.b.pypi.org", [], True),
    ("pypi.org", [], False),  # a wildcard is the names below it
    ("evilpypi.org", [], False),
    ("10.1.2.3", [], True),
    ("internal.example", ["10.9.9.9"], True),  # a name whose address is in a listed range
    ("192.0.2.7", [], True),
    ("192.0.2.8", [], False),
    ("[2001:db8::1]", [], True),
    ("example.com", ["93.184.216.34"], False),
])
def test_the_allowlist_rule(host: str, addresses: list[str], ok: bool) -> None:
    assert host_allowed(host, addresses, ENTRIES) is ok


async def _ask(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


def test_the_proxy_relays_listed_hosts_and_refuses_the_rest() -> None:
    async def go() -> tuple[bytes, bytes, bytes, list[tuple[str, int, bool]]]:
        async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.0 200 OK\r\n\r\nsaw " + head.split(b"\r\n")[0])
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        up = server.sockets[0].getsockname()[1]
        proxy = EgressProxy()
        proxy.allowed = ("127.0.0.1",)
        port = await proxy.start("127.0.0.1")
        try:
            plain = await _ask(port, f"GET http://127.0.0.1:{up}/x?y=1 HTTP/1.0\r\n\r\n".encode())
            tunnel = await _ask(port, f"CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\nGET /t HTTP/1.0\r\n\r\n".encode())
            refused = await _ask(port, b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
        finally:
            await proxy.close()
            server.close()
        return plain, tunnel, refused, proxy.asked

    plain, tunnel, refused, asked = asyncio.run(go())
    assert plain.endswith(b"saw GET /x?y=1 HTTP/1.0")  # the absolute URI made relative for the origin
    assert tunnel.startswith(b"HTTP/1.1 200 Connection established") and tunnel.endswith(b"saw GET /t HTTP/1.0")
    assert refused.startswith(b"HTTP/1.1 403 Forbidden") and b"example.com" in refused
    assert [(h, ok) for h, _, ok in asked] == [("127.0.0.1", True), ("127.0.0.1", True), ("example.com", False)]
