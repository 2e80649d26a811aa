"""Two reference policies, as launchers do it today, for the simulator to compare against.

* ``round-robin``: fixed slots per account (its configured ``max_concurrent``), accounts
  taken in turn, cells in suite order. A rate-limited or auth-failed cell is retried once,
  on the next account in turn, then lost. Knows no quota, no cooldown, no health.
* ``global-semaphore``: one concurrency limit for everything (the sum of the accounts'
  limits, or the backend pools if smaller), accounts in turn whatever their own load, no
  health gating. A failed cell goes to the back of the queue and is lost after 3 attempts.
"""

from __future__ import annotations

import itertools
from collections import deque

from ray_bench.accounts.core import Lease
from ray_bench.accounts.outcome import Outcome
from ray_bench.scheduler.order import CellRef
from ray_bench.sim.engine import DONE, LOST, REQUEUED
from ray_bench.sim.workload import SimSpec, Workload


class RoundRobinPolicy:
    name = "round-robin"
    max_attempts = 2

    def __init__(self, spec: SimSpec, workload: Workload) -> None:
        self.names = [a.name for a in spec.accounts]
        self.slots = {a.name: a.limits.max_concurrent for a in spec.accounts}
        self.busy = dict.fromkeys(self.names, 0)
        self.queue: deque[CellRef] = deque(workload.cells)
        self.retry: dict[str, deque[CellRef]] = {n: deque() for n in self.names}
        """Cells waiting for a slot on the account named to retry them."""
        self.tries: dict[str, int] = {}
        self.leases: dict[str, CellRef] = {}
        self.turn = 0
        self._ids = itertools.count()

    def pending(self) -> int:
        return len(self.queue) + sum(len(q) for q in self.retry.values())

    def dispatch(self, now: float, free_slots: int | None) -> list[tuple[CellRef, Lease]]:
        out: list[tuple[CellRef, Lease]] = []
        budget = self.pending() if free_slots is None else min(free_slots, self.pending())
        while len(out) < budget:
            for k in range(len(self.names)):
                name = self.names[(self.turn + k) % len(self.names)]
                if self.busy[name] < self.slots[name] and (self.queue or self.retry[name]):
                    self.turn = (self.turn + k + 1) % len(self.names)
                    break
            else:
                break
            retry = self.retry[name]
            cell = retry.popleft() if retry else self.queue.popleft()
            lease = Lease(f"{cell.cell_id}#{next(self._ids)}", cell.cell_id, name)
            self.busy[name] += 1
            self.tries[cell.cell_id] = self.tries.get(cell.cell_id, 0) + 1
            self.leases[lease.lease_id] = cell
            out.append((cell, lease))
        return out

    def finish(self, now: float, lease: Lease, outcome: Outcome) -> str:
        self.busy[lease.account] -= 1
        cell = self.leases.pop(lease.lease_id)
        if not outcome.wasted:
            return DONE
        if self.tries[cell.cell_id] < self.max_attempts:
            nxt = self.names[(self.names.index(lease.account) + 1) % len(self.names)]
            self.retry[nxt].append(cell)
            return REQUEUED
        return LOST

    def next_wakeup(self, now: float) -> float | None:
        return None


class GlobalSemaphorePolicy:
    name = "global-semaphore"
    max_attempts = 3

    def __init__(self, spec: SimSpec, workload: Workload) -> None:
        self.names = [a.name for a in spec.accounts]
        limit = sum(a.limits.max_concurrent for a in spec.accounts)
        self.limit = limit if spec.backend_slots is None else min(limit, spec.backend_slots)
        self.queue: deque[CellRef] = deque(workload.cells)
        self.tries: dict[str, int] = {}
        self.leases: dict[str, CellRef] = {}
        self.turn = 0
        self._ids = itertools.count()

    def pending(self) -> int:
        return len(self.queue)

    def dispatch(self, now: float, free_slots: int | None) -> list[tuple[CellRef, Lease]]:
        out: list[tuple[CellRef, Lease]] = []
        room = self.limit - len(self.leases)
        if free_slots is not None:
            room = min(room, free_slots)
        while room > 0 and self.queue:
            cell = self.queue.popleft()
            name = self.names[self.turn]
            self.turn = (self.turn + 1) % len(self.names)
            lease = Lease(f"{cell.cell_id}#{next(self._ids)}", cell.cell_id, name)
            self.tries[cell.cell_id] = self.tries.get(cell.cell_id, 0) + 1
            self.leases[lease.lease_id] = cell
            out.append((cell, lease))
            room -= 1
        return out

    def finish(self, now: float, lease: Lease, outcome: Outcome) -> str:
        cell = self.leases.pop(lease.lease_id)
        if not outcome.wasted:
            return DONE
        if self.tries[cell.cell_id] < self.max_attempts:
            self.queue.append(cell)
            return REQUEUED
        return LOST

    def next_wakeup(self, now: float) -> float | None:
        return None
