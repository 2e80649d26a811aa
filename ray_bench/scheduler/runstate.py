"""The state of a run's cells, rebuilt from the plan and the ledger. Pure: no Ray, no I/O.

A cell is *valid* once it has a valid row, *failed* once it used up its counted attempts,
*running* while an attempt is in flight, and *pending* otherwise. Failures that are about the
world around the cell (rate limits, sandboxes, auth) do not use up its attempts; they put it
back at the front of the queue so another account can take it at once.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass

from ray_bench.evidence.classify import Verdict
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.plan import Plan, PlanCell

#: Safety net against a cell that fails in ways that never count: after this many attempts
#: in all it is failed, whatever their classes.
ABSOLUTE_ATTEMPTS_FACTOR = 4


@dataclass
class CellState:
    cell: PlanCell
    attempts: int = 0
    counted: int = 0
    running: bool = False
    valid: bool = False
    failed: bool = False
    cancelled: bool = False
    last_failure: str | None = None

    @property
    def state(self) -> str:
        if self.valid:
            return "valid"
        if self.running:
            return "running"
        if self.failed:
            return "failed"
        return "pending"


class RunState:
    def __init__(self, plan: Plan, history: Iterable[AttemptRow]) -> None:
        self.max_attempts = plan.max_attempts
        self.cells: dict[str, CellState] = {c.id: CellState(c) for c in plan.cells}
        for row in history:
            state = self.cells.get(row.cell_id)
            if state is None:
                continue
            state.attempts += 1
            if row.valid:
                state.valid = True
            elif row.counts:
                state.counted += 1
                state.last_failure = row.failure_class
        for state in self.cells.values():
            self._settle(state)
        self.pending: deque[str] = deque(
            c.id for c in plan.cells if self.cells[c.id].state == "pending")

    def _settle(self, state: CellState) -> None:
        if not state.valid and (state.counted >= self.max_attempts or
                                state.attempts >= self.max_attempts * ABSOLUTE_ATTEMPTS_FACTOR):
            state.failed = True

    def restrict(self, cell_ids: set[str]) -> list[str]:
        """Keep only ``cell_ids`` in the queue (preflight); return the ones set aside."""
        aside = [c for c in self.pending if c not in cell_ids]
        self.pending = deque(c for c in self.pending if c in cell_ids)
        return aside

    def extend(self, cell_ids: list[str]) -> None:
        self.pending.extend(c for c in cell_ids if self.cells[c].state == "pending")

    def started(self, cell_id: str) -> None:
        state = self.cells[cell_id]
        state.running = True
        state.attempts += 1

    def finished(self, cell_id: str, verdict: Verdict | None) -> str:
        """Record an attempt's end (``None``: cancelled or stale). Returns the cell's state."""
        state = self.cells[cell_id]
        state.running = False
        if verdict is not None and verdict.valid:
            state.valid = True
            return state.state
        if verdict is not None:
            state.last_failure = verdict.failure_class
            if verdict.counts:
                state.counted += 1
        self._settle(state)
        if state.state == "pending":
            if verdict is None or not verdict.counts:
                self.pending.appendleft(cell_id)
            else:
                self.pending.append(cell_id)
        return state.state

    def counts(self) -> dict[str, int]:
        counter = Counter(s.state for s in self.cells.values())
        return {k: counter.get(k, 0) for k in ("pending", "running", "valid", "failed")}

    @property
    def done(self) -> bool:
        return all(s.state in ("valid", "failed") for s in self.cells.values())

    @property
    def remaining(self) -> int:
        return sum(1 for s in self.cells.values() if s.state in ("pending", "running"))
