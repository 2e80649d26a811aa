"""The egress proxy of allowlist phases: an HTTP proxy (``CONNECT host:port`` for TLS, absolute-URI
requests for plain HTTP) that lets through only the hosts on the phase's list.

Harbor enforces an allowlist with a sidecar that shares main's network namespace and redirects all
of its TCP to a gost proxy deciding on the sniffed host name or the address
(``harbor/environments/docker/harbor-docker-egress-control-sidecar``). Here main is moved onto an
internal network, which routes nowhere, and this proxy listens on that network's gateway, in the
process that runs the cell; the phase's commands get ``HTTPS_PROXY`` / ``HTTP_PROXY`` naming it.
A connection to a host off the list is refused with ``403`` (the client's connection fails, the
cell goes on); one that ignores the proxy variables has no route at all. The list is decided by
:func:`ray_bench.models.task.network.host_allowed`, Harbor's rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from urllib.parse import urlsplit

from ray_bench.models.task.network import host_allowed

#: The request head a client may send before the proxy answers (a CONNECT line and its headers).
_HEAD_LIMIT = 64 * 1024
_CONNECT_TIMEOUT_SEC = 15.0
_DENIED = b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
_BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n"


class EgressProxy:
    """One sandbox's proxy; :attr:`allowed` is the current phase's list (empty: nothing)."""

    def __init__(self) -> None:
        self.allowed: tuple[str, ...] = ()
        #: (host, port, allowed) of every connection asked for, for the attempt's record and tests.
        self.asked: list[tuple[str, int, bool]] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, host: str) -> int:
        """Listen on ``host`` (an address of this machine); return the port."""
        self._server = await asyncio.start_server(self._serve, host, 0, limit=_HEAD_LIMIT)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._relay(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            port, rest = int(port_text), b""
        else:  # plain HTTP through a proxy: an absolute URI
            url = urlsplit(target)
            host, port = url.hostname or "", url.port or 80
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            rest = head.replace(target.encode("latin-1"), path.encode("latin-1"), 1)
        host = host.strip("[]")
        addresses = await self._addresses(host, port)
        ok = bool(host) and host_allowed(host, addresses, self.allowed)
        self.asked.append((host, port, ok))
        if not ok:
            writer.write(_DENIED + f"ray-bench: {host} is not on this phase's allowlist\n".encode())
            await writer.drain()
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, port), _CONNECT_TIMEOUT_SEC)
        except (OSError, TimeoutError):
            writer.write(_BAD_GATEWAY)
            await writer.drain()
            return
        if rest:
            up_writer.write(rest)
        else:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()

    async def _addresses(self, host: str, port: int) -> list[str]:
        """The addresses of ``host``, only when the list has address entries (a name entry
        needs no lookup; an unknown name resolves to nothing)."""
        if not any(e[:1].isdigit() or ":" in e for e in self.allowed):
            return []
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            return []
        return [str(info[4][0]) for info in infos]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
