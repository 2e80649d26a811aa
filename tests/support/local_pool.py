"""A runner pool that runs each attempt to its end in this process when it is submitted: the
real runner and sandbox backend without Ray, for tests whose subject is what an attempt leaves in
the run root (kept workspaces, regrades), not scheduling. :class:`LocalRunPool` on the local
backend; :class:`InProcessPool` on any (docker, daytona); :class:`ConcurrentPool` runs them side by side."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection
from concurrent import futures
from pathlib import Path
from typing import Any

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import ArtifactPlace, AttemptSummary
from ray_bench.sandboxes import SandboxBackend
from ray_bench.sandboxes.local import LocalBackend


class InProcessPool:
    """Attempts one at a time on ``backend``, all on one event loop of the pool's (a backend's
    HTTP sessions belong to the loop that opened them); :meth:`close` closes the backend on it."""

    def __init__(self, backend: SandboxBackend) -> None:
        self.backend = backend
        self._loop = asyncio.new_event_loop()
        self._done: dict[int, AttemptSummary] = {}
        self._seq = 0

    def submit(self, spec: AttemptSpec) -> int:
        self._seq += 1
        place = ArtifactPlace(via="run-root", uri=spec.attempt_dir)
        self._done[self._seq] = self._loop.run_until_complete(run_attempt(spec, self.backend, place))
        return self._seq

    def wait(self, refs: Collection[Any], timeout: float) -> list[tuple[Any, AttemptSummary]]:
        return [(ref, self._done.pop(ref)) for ref in sorted(refs) if ref in self._done]

    def cancel(self, refs: list[Any]) -> None:
        """Every attempt has finished by the time it could be cancelled."""

    def cleanup(self, backends: dict[str, Any], backend: str, run_id: str, attempt_id: str | None) -> int:
        return 0  # the runner deleted each sandbox itself

    def count(self, backends: dict[str, Any], backend: str, run_id: str) -> int:
        return 0

    def retire(self, node: str) -> None:
        """One node, never retired."""

    def lost_nodes(self) -> list[str]:
        return []

    def close(self) -> None:
        try:
            self._loop.run_until_complete(self.backend.close())
        finally:
            self._loop.close()


class LocalRunPool(InProcessPool):
    def __init__(self, sandboxes: Path) -> None:
        super().__init__(LocalBackend(sandboxes))


class ConcurrentPool(InProcessPool):
    """Attempts run side by side on ``backend``, on one event loop in a thread of the pool's: the
    driver's admission (``max_sandboxes``, account limits) decides how many, as it does on Ray."""

    def __init__(self, backend: SandboxBackend) -> None:
        super().__init__(backend)
        self._thread = threading.Thread(target=self._loop.run_forever, name="rb-pool-loop", daemon=True)
        self._thread.start()

    def submit(self, spec: AttemptSpec) -> Any:
        place = ArtifactPlace(via="run-root", uri=spec.attempt_dir)
        return asyncio.run_coroutine_threadsafe(run_attempt(spec, self.backend, place), self._loop)

    def wait(self, refs: Collection[Any], timeout: float) -> list[tuple[Any, AttemptSummary]]:
        if not refs:
            return []
        done, _ = futures.wait(list(refs), timeout=timeout, return_when=futures.FIRST_COMPLETED)
        return [(ref, ref.result()) for ref in done]

    def close(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.backend.close(), self._loop).result(timeout=120)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop.close()
