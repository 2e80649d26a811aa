"""Deletes that the API refuses for now, kept trying until the sandbox is gone or its TTL passed.

Daytona answers 409 to a DELETE for as long as a sandbox's state differs from its desired state
(``SandboxService.destroy``), and a bring-up (a pull, a build) may take up to an hour. A delete
that gives up after a few minutes leaves the sandbox to start later, hold quota and bill for its
whole idle interval. A 409'd delete is handed here instead: one task per sandbox keeps asking,
backing off, until the sandbox is gone or its TTL (``autoDestroyAt``, after which the service
destroys it itself) has passed. Listings mark these sandboxes as being removed, ``remove`` waits
for them, and the backend's ``close`` waits for every one, so the end of a run does not drop
them; what a driver that died leaves, ``audit --cleanup`` finds by label and finishes the same way."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Reaper:
    def __init__(self, delete: Callable[[str, float | None], Awaitable[None]]) -> None:
        #: ``delete(sandbox_id, until)``: one foreground delete, kept trying until ``until``
        #: (a monotonic time; None for the backend's own bound).
        self._delete = delete
        self._tasks: dict[str, asyncio.Task[None]] = {}
        #: sandbox id -> when (monotonic) its reaper gives up: its TTL destroys it by then.
        self.until: dict[str, float | None] = {}

    def __contains__(self, sandbox_id: str) -> bool:
        task = self._tasks.get(sandbox_id)
        return task is not None and not task.done()

    def hand(self, sandbox_id: str, until: float | None) -> asyncio.Task[None]:
        """Keep deleting ``sandbox_id`` in the background until it is gone or ``until``."""
        if sandbox_id in self:
            return self._tasks[sandbox_id]
        task = asyncio.ensure_future(self._reap(sandbox_id, until))
        self._tasks[sandbox_id] = task
        self.until[sandbox_id] = until
        return task

    async def _reap(self, sandbox_id: str, until: float | None) -> None:
        try:
            await self._delete(sandbox_id, until)
        except Exception as exc:
            # Past its TTL (the service destroys it) or an error: the label audit still finds it.
            log.warning("Daytona sandbox %s not deleted by its reaper: %s", sandbox_id, exc)
            raise

    async def wait(self, sandbox_id: str) -> None:
        """Until the reaper of ``sandbox_id`` is done; its failure is raised."""
        task = self._tasks.get(sandbox_id)
        if task is not None:
            await asyncio.shield(task)

    def pending(self) -> list[str]:
        return [sid for sid in self._tasks if sid in self]

    async def drain(self, timeout: float | None = None) -> list[str]:
        """Until every reaper of the running loop is done (each is bounded by its TTL), or
        ``timeout`` s; returns the sandboxes still being reaped then (left to their TTL and to
        ``audit --cleanup``; their reapers are cancelled with the loop)."""
        loop = asyncio.get_running_loop()
        mine = {sid: t for sid, t in self._tasks.items() if t.get_loop() is loop and not t.done()}
        if mine:
            await asyncio.wait(set(mine.values()), timeout=timeout)
        return sorted(sid for sid, t in mine.items() if not t.done())
