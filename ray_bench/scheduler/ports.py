"""The driver's ports: what its loop executes :mod:`~ray_bench.scheduler.runcore`'s commands
through, each an interface with a real side and a fake beside it.

- :class:`RunnerPool` (here): where attempts go. :class:`~ray_bench.onray.pool.RayPool` on a
  cluster, :class:`~ray_bench.cells.inprocess.InProcessPool` in this process (the simulator).
- :class:`~ray_bench.scheduler.admission.Gate`: admission.
  :class:`~ray_bench.onray.gate.ActorGate` (Ray actors shared across runs, built by
  :func:`ray_bench.onray.gate.actor_gate` in ``execute_run``),
  :class:`~ray_bench.scheduler.admission.CoreGate` in process.
- :class:`~ray_bench.sandboxes.supervisor.Supervision`: the nodes' resource supervisors.
- :class:`~ray_bench.clock.Clock`: the only source of time (a ``FakeClock`` in the simulator).
- The ledger (:class:`~ray_bench.ledger.store.Ledger`, SQLite in the run root) and the drift
  guard (:class:`~ray_bench.plan.drift.DriftGuard`) are the same in every run.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptSummary


class RunnerPool(Protocol):
    """Where the driver sends attempts (see the module docstring)."""

    def submit(self, spec: AttemptSpec) -> Any: ...
    def wait(self, refs: Collection[Any], timeout: float) -> list[tuple[Any, AttemptSummary]]: ...
    def cancel(self, refs: list[Any]) -> None: ...
    def cleanup(self, backends: dict[str, Any], backend: str, run_id: str, attempt_id: str | None) -> int: ...
    def count(self, backends: dict[str, Any], backend: str, run_id: str) -> int: ...
    def retire(self, node: str) -> None: ...
    def lost_nodes(self) -> list[str]: ...
