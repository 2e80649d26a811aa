"""A runner pool that runs each attempt to its end in this process when it is submitted: the
real runner and sandbox backend without Ray, for tests whose subject is what an attempt leaves in
the run root (kept workspaces, regrades), not scheduling. :class:`LocalRunPool` on the local
backend; :class:`InProcessPool` on any (docker, daytona)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
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
