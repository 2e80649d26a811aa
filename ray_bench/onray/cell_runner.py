"""The Ray shell around the cell runner: one async actor per node runs many attempts
concurrently in one process (a worker process per cell would cost ~1 s and ~100 MB each)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import warnings
from typing import Any

import ray

from ray_bench.artifacts.bundle import Returned
from ray_bench.cells.artifact_node import cancelled_reply, run_routed, sees
from ray_bench.cells.spec import AttemptSpec
from ray_bench.errors import SandboxDeleteRefusedError
from ray_bench.heap import freeze
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes import SandboxBackend, SandboxRef, make_backend


@ray.remote(num_cpus=0, max_concurrency=10_000)  # type: ignore[call-overload]
class CellRunner:
    def __init__(self) -> None:
        self._backends: dict[str, SandboxBackend] = {}
        self._watcher_set = False
        self._frozen = False

    def _freeze(self) -> None:
        """Move what the worker holds once its modules and the first backend are imported (Ray,
        pydantic, the models: objects that live as long as the process) out of the cyclic
        collector's reach: each older-generation collection walked them all again, every few
        dozen cells. Garbage made later is collected as before."""
        self._frozen = True
        freeze()

    def _use_pidfd_watcher(self) -> None:
        """On Python 3.11 asyncio reaps each child with a thread of its own
        (ThreadedChildWatcher); a pidfd watcher does it in the event loop. Measured: about
        15% of the runner's time went to spawning subprocesses before."""
        self._watcher_set = True
        if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
            return
        with contextlib.suppress(OSError, RuntimeError, NotImplementedError), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            watcher = asyncio.PidfdChildWatcher()
            watcher.attach_loop(asyncio.get_running_loop())  # the actor's loop runs off the main thread
            asyncio.set_child_watcher(watcher)

    def _backend(self, name: str, options: dict[str, Any]) -> SandboxBackend:
        key = f"{name}:{sorted(options.items())!r}"
        if key not in self._backends:
            self._backends[key] = make_backend(name, **options)
        return self._backends[key]

    async def run(self, spec: AttemptSpec) -> AttemptSummary | Returned:
        if not self._watcher_set:
            self._use_pidfd_watcher()
        backend = self._backend(spec.backend, spec.backend_options)
        if not self._frozen:
            self._freeze()
        reply = await run_routed(spec, backend)
        summary = reply.summary if isinstance(reply, Returned) else reply
        summary.ray_node = ray.get_runtime_context().get_node_id()
        return reply

    def cancelled(self, attempt_id: str) -> AttemptSummary | Returned | None:
        """The summary an attempt cancelled here left (its usage so far, request ids,
        ``agent_started``), with its directory when it ran through Ray: a cancelled task returns
        no value, so the driver asks (once)."""
        reply = cancelled_reply(attempt_id)
        if reply is not None:
            summary = reply.summary if isinstance(reply, Returned) else reply
            summary.ray_node = ray.get_runtime_context().get_node_id()
        return reply

    def sees(self, probe: str, token: str) -> bool:
        """Whether this node sees the driver's run root (ray_bench.onray.artifact_ship)."""
        return sees(probe, token)

    async def list_sandboxes(self, backend: str, options: dict[str, Any],
                             labels: dict[str, str]) -> list[SandboxRef]:
        return await self._backend(backend, options).list(labels)

    async def remove_sandboxes(self, backend: str, options: dict[str, Any], refs: list[SandboxRef]) -> int:
        """Remove ``refs``; how many went. One still refusing deletion (coming up) is left to the
        backend's reaper and to ``audit --cleanup`` (the run's audit counts it as residue)."""
        impl = self._backend(backend, options)
        # At once: each refusing one waits its bound (REMOVE_WAIT_SEC), not one after another.
        done = await asyncio.gather(*(impl.remove(ref) for ref in refs), return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException) and not isinstance(outcome, SandboxDeleteRefusedError):
                raise outcome
        return sum(1 for outcome in done if not isinstance(outcome, BaseException))

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()
