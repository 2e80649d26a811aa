"""An honest lower bound on the makespan of a simulated workload.

``lower_bound = max(longest cell, T*)`` where ``T*`` is the earliest time by which the
capacity actually available could have done all the work, even by a clairvoyant policy
with divisible work:

* each account offers ``max_concurrent`` slots from time 0 until it loses its credentials
  (then none); the total is capped by ``backend_slots``;
* storms block *starts*, not running cells (see :mod:`ray_bench.sim.engine`), so a
  clairvoyant policy fills an account just before its storm and loses no slot-time: storms
  take nothing away from the bound. Counting a storm's slots as lost would make the bound
  larger than what is achievable, i.e. not a bound; an operator's hold blocks starts too, and is
  relaxed the same way;
* an account with a cell quota (``max_cells`` per ``H`` hours) can start at most
  ``max_cells * ceil(T / H)`` cells in ``[0, T]``, and one with ``starts_per_minute`` at most
  its bucket's burst plus ``T`` minutes' refill (:func:`~ray_bench.accounts.limits.starts_allowed`);
  the work all such accounts together do by ``T`` is at most their slot-time and at most the
  summed durations of that many of the longest cells;
* dollar quotas are relaxed (ignored), which only lowers the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ray_bench.accounts.limits import starts_allowed
from ray_bench.sim.workload import AuthLossEvent, SimSpec, Workload


@dataclass(frozen=True, slots=True)
class LowerBound:
    seconds: float
    longest_cell_s: float
    capacity_s: float
    total_work_s: float


def lower_bound(spec: SimSpec, workload: Workload) -> LowerBound:
    durations = np.sort(np.fromiter(workload.duration.values(), dtype=float))[::-1]
    prefix = np.concatenate([[0.0], np.cumsum(durations)])
    work = float(prefix[-1])
    longest = float(durations[0]) if len(durations) else 0.0
    loss = {e.account: e.at_h * 3600 for e in spec.events if isinstance(e, AuthLossEvent)}

    def doable(t: float) -> float:
        free = quota = 0.0
        starts = 0
        for a in spec.accounts:
            active = min(t, loss.get(a.name, math.inf))
            slot_time = a.limits.max_concurrent * active
            allowed = starts_allowed(a.limits, active)
            if allowed is not None:
                quota += slot_time
                starts += allowed
            else:
                free += slot_time
        quota_work = min(quota, float(prefix[min(starts, len(durations))]))
        total = free + quota_work
        if spec.backend_slots is not None:
            total = min(total, spec.backend_slots * t)
        return total

    hi = max(longest, 1.0)
    while doable(hi) < work:
        hi *= 2
        if hi > 1e9:  # the work cannot be done at all: every account is lost
            return LowerBound(math.inf, longest, math.inf, work)
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if doable(mid) >= work:
            hi = mid
        else:
            lo = mid
    return LowerBound(max(longest, hi), longest, hi, work)
