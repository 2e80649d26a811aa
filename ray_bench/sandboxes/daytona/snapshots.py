"""Snapshots made ahead of the cells (the driver's build phase, ``scheduler/builds.py``).

A snapshot is created with ``POST /snapshots`` (the SDK's ``snapshot.create``): ``pending``,
then ``building`` (a ``buildInfo``: a declarative ``FROM image`` or a Dockerfile) or
``pulling``, then ``active`` -- or ``build_failed`` / ``error`` with its ``errorReason``. Names
are unique per organisation: a snapshot of that name already there (an earlier session, another
run of the same image) is adopted, never built twice.

A snapshot no sandbox used for 14 days is made ``inactive`` by the API's snapshot manager
(``DEFAULT_SNAPSHOT_DEACTIVATION_TIMEOUT_MINUTES``, ``apps/api/src/sandbox/managers/
snapshot.manager.ts``) and stays so until ``POST /snapshots/{id}/activate`` (``activateSnapshot``,
``apps/api/src/sandbox/services/snapshot.service.ts``: ``inactive`` -> ``pending``, then pulled
to ``active``; refused 400 within 10 minutes of its deactivation). It is activated, never waited
on: a resume two weeks later waited the whole build timeout and failed every cell of the image.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from functools import partial
from pathlib import Path

from daytona import CreateSnapshotParams, DaytonaError, DaytonaNotFoundError
from daytona import Resources as DaytonaResources

from ray_bench.errors import SandboxCreateError
from ray_bench.models.build import BuildTarget, SnapshotSeen
from ray_bench.sandboxes.daytona.backend import DaytonaBackend
from ray_bench.sandboxes.daytona.harness import harness_image
from ray_bench.sandboxes.daytona.translate import state_name, translate

#: States a snapshot reaches by itself; ``active`` is the one a sandbox can be made from.
_FAILED = frozenset({"error", "build_failed"})


class DaytonaSnapshotBuilder:
    """:class:`ray_bench.scheduler.builds.SnapshotBuilder` on one :class:`DaytonaBackend`."""

    def __init__(self, backend: DaytonaBackend) -> None:
        self.backend = backend

    async def _state(self, name: str) -> tuple[str, str | None] | None:
        """The snapshot's state and error reason, or ``None`` when there is none of that name."""
        try:
            found = await self.backend.retrying(f"get snapshot {name}",
                                                lambda: self.backend.client().snapshot.get(name))
        except DaytonaNotFoundError:
            return None
        except DaytonaError as exc:
            raise translate(exc, f"get snapshot {name}") from exc
        return state_name(found.state), found.error_reason

    async def present(self, snapshot: str) -> bool:
        found = await self._state(snapshot)
        return found is not None and found[0] == "active"

    async def build(self, target: BuildTarget, timeout_sec: float) -> None:
        deadline = time.monotonic() + timeout_sec
        found = await self._state(target.snapshot)
        if found is not None and found[0] == "inactive":
            await self._activate(target.snapshot, deadline)
        elif found is None:
            image = harness_image(target.image, Path(target.dockerfile_dir) if target.dockerfile_dir else None)
            params = CreateSnapshotParams(
                name=target.snapshot, image=image,
                resources=DaytonaResources(cpu=target.cpu, memory=target.memory_gib, disk=target.disk_gib))
            try:
                # The POST is not repeated on a 5xx (a lost answer made it): the poll below finds it.
                await self.backend.retrying(
                    f"create snapshot {target.snapshot}",
                    lambda: self.backend.client().snapshot.create(params, timeout=timeout_sec),
                    server_retries=False, timeout=timeout_sec)
                return
            except DaytonaError as exc:
                if exc.status_code not in (409, 502, 503, 504) and await self._state(target.snapshot) is None:
                    raise translate(exc, f"create snapshot {target.snapshot}") from exc
        await self._await_active(target.snapshot, deadline)

    async def _await_active(self, name: str, deadline: float) -> None:
        """Wait for a snapshot someone made (or whose answer was lost) to become ``active``."""
        delay = 1.0
        while True:
            found = await self._state(name)
            if found is None:
                raise SandboxCreateError(f"Daytona snapshot {name} vanished while it was being made")
            state, reason = found
            if state == "active":
                return
            if state == "inactive":  # deactivated while we waited
                await self._activate(name, deadline)
                continue
            if state in _FAILED:
                raise SandboxCreateError(f"Daytona snapshot {name} is {state}" + (f": {reason}" if reason else ""))
            if time.monotonic() >= deadline:
                raise SandboxCreateError(f"Daytona snapshot {name} still {state} at the build timeout")
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 10.0)

    async def snapshots(self) -> list[SnapshotSeen]:
        """Every snapshot of the organisation, page by page (the API's pages hold 100)."""
        seen: list[SnapshotSeen] = []
        page = 1
        while True:
            try:
                found = await self.backend.retrying(
                    "list snapshots", partial(self.backend.client().snapshot.list, page=page, limit=100))
            except DaytonaError as exc:
                raise translate(exc, "list snapshots") from exc
            for snap in found.items:
                used = getattr(snap, "last_used_at", None) or getattr(snap, "created_at", None)
                seen.append(SnapshotSeen(name=snap.name, state=state_name(snap.state), last_used=_unix(used)))
            if page >= (found.total_pages or 1):
                return seen
            page += 1

    async def delete(self, snapshot: str) -> None:
        """``DELETE /snapshots/{id}``: ``removing`` at once, which no longer counts."""
        try:
            await self.backend.retrying(f"delete snapshot {snapshot}",
                                        lambda: self.backend.client().snapshot.delete(snapshot))
        except DaytonaNotFoundError:
            return
        except DaytonaError as exc:
            raise translate(exc, f"delete snapshot {snapshot}") from exc

    async def _activate(self, name: str, deadline: float) -> None:
        """``POST /snapshots/{id}/activate``; a refusal because its deactivation is still under
        way (the API's 10-minute cooldown) is asked again until ``deadline``."""
        delay = 5.0
        while True:
            try:
                await self.backend.retrying(f"activate snapshot {name}",
                                            lambda: self.backend.client().snapshot.activate(name))
                return
            except DaytonaError as exc:
                message = str(exc)
                if "already active" in message:
                    return
                if "still in progress" not in message or time.monotonic() + delay >= deadline:
                    raise translate(exc, f"activate snapshot {name}") from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)

    async def close(self) -> None:
        await self.backend.close()


def _unix(value: object) -> float:
    """Unix seconds of an API timestamp (an ISO string or a datetime); 0 when unknown."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0
