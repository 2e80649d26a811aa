"""A Docker-free stand-in for the Daytona API that answers at once and holds every toolbox
execute until ``hold_until`` of them are in flight at the same time (or ``hold_sec`` passed):
what the client side can have in flight, measured at the server, with no container behind it.

Only what the SDK's create, get, delete and ``process.exec`` use: ``POST /api/sandbox`` (started
at once), ``GET``/``DELETE /api/sandbox/{id}``, ``GET /api/sandbox/{id}/toolbox-proxy-url`` and
``POST /toolbox/{id}/process/execute``. A command answers the exec wrapper's frame with exit 0
and no output; the backend's user probe (``id -u``) answers uid 0."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from support.daytona_server import DEFAULT_API_KEY


class DaytonaStub:
    def __init__(self, *, hold_until: int, hold_sec: float = 20.0) -> None:
        self.hold_until = hold_until
        self.hold_sec = hold_sec
        self.api_key = DEFAULT_API_KEY
        self.in_flight = 0
        #: The most toolbox executes in flight at once.
        self.peak = 0
        self._boxes: dict[str, dict[str, Any]] = {}
        self._reached: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def start(self) -> DaytonaStub:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            loop.run_until_complete(self._serve())
            ready.set()
            loop.run_forever()
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="daytona-stub", daemon=True)
        self._thread.start()
        ready.wait(30)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    async def _serve(self) -> None:
        self._reached = asyncio.Event()
        app = web.Application()
        app.router.add_post("/api/sandbox", self._create)
        app.router.add_get("/api/sandbox/{id}", self._get)
        app.router.add_delete("/api/sandbox/{id}", self._delete)
        app.router.add_get("/api/sandbox/{id}/toolbox-proxy-url", self._proxy_url)
        app.router.add_post("/toolbox/{id}/process/execute", self._execute)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def _dto(self, box: dict[str, Any]) -> dict[str, Any]:
        now = datetime.now(UTC).isoformat()
        return {**box, "organizationId": "stub-org", "user": "daytona", "env": {}, "public": False,
                "networkBlockAll": False, "kvm": False, "target": "local", "cpu": 1, "gpu": 0, "memory": 1, "disk": 3,
                "createdAt": now, "updatedAt": now, "toolboxProxyUrl": f"http://127.0.0.1:{self.port}/toolbox"}

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        box = {"id": str(uuid.uuid4()), "name": body.get("name"), "labels": body.get("labels") or {},
               "state": "started", "desiredState": "started"}
        self._boxes[box["id"]] = box
        return web.json_response(self._dto(box))

    async def _get(self, request: web.Request) -> web.Response:
        key = request.match_info["id"]
        box = self._boxes.get(key) or next((b for b in self._boxes.values() if b["name"] == key), None)
        if box is None:
            return web.json_response({"statusCode": 404, "message": "not found"}, status=404)
        return web.json_response(self._dto(box))

    async def _delete(self, request: web.Request) -> web.Response:
        box = self._boxes.pop(request.match_info["id"], None)
        if box is None:
            return web.json_response({"statusCode": 404, "message": "not found"}, status=404)
        return web.json_response(self._dto({**box, "desiredState": "destroyed"}))

    async def _proxy_url(self, request: web.Request) -> web.Response:
        return web.json_response({"url": f"http://127.0.0.1:{self.port}/toolbox"})

    async def _execute(self, request: web.Request) -> web.Response:
        command = (await request.json())["command"]
        if "id -u" in command:
            return web.json_response({"exitCode": 0, "result": "0 root\n"})
        assert self._reached is not None
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.hold_until:
            self._reached.set()
        try:
            # Held until enough are in flight at once: a client that can send only fewer waits
            # out hold_sec, and the peak says how many it could.
            await asyncio.wait_for(self._reached.wait(), self.hold_sec)
        except TimeoutError:
            pass
        finally:
            self.in_flight -= 1
        return web.json_response({"exitCode": 0, "result": "RB 0 0 0 0\nRB-SEP\n"})
