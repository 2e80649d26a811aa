"""Capacity planning: the admission core on a virtual clock.

``simulate(spec)`` builds one seeded workload from a :class:`SimSpec` (or a path to a YAML/
JSON spec, or a mapping), runs each requested policy on it — ``adaptive`` (the real driver
on a virtual clock, :mod:`ray_bench.sim.driven`), ``round-robin`` and ``global-semaphore``
(baselines) — computes the honest lower bound, and returns a :class:`SimReport`;
``report.to_dict()`` is JSON-able.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ray_bench.sim.baselines import GlobalSemaphorePolicy, RoundRobinPolicy
from ray_bench.sim.driven import run_driven
from ray_bench.sim.engine import PolicyResult, SimPolicy, run
from ray_bench.sim.lowerbound import LowerBound, lower_bound
from ray_bench.sim.workload import SimSpec, Workload, build_workload, load_spec, parse_spec


@dataclass(frozen=True, slots=True)
class SimReport:
    """The simulator's answer for one spec."""

    cells: int
    accounts: int
    history: bool
    bound: LowerBound
    results: dict[str, PolicyResult]
    deadline_s: float | None
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        lb = self.bound.seconds
        policies: dict[str, Any] = {}
        for name, r in self.results.items():
            d = asdict(r)
            del d["policy"]
            d["makespan_h"] = round(r.makespan_s / 3600, 3)
            d["ratio_to_lower_bound"] = round(r.makespan_s / lb, 4) if lb > 0 else None
            d["wasted_pct_of_cells"] = round(100 * r.wasted_attempts / max(1, self.cells), 2)
            if self.deadline_s is not None:
                d["meets_deadline"] = r.cells_lost == 0 and r.makespan_s <= self.deadline_s
            policies[name] = d
        return {
            "cells": self.cells,
            "accounts": self.accounts,
            "history": self.history,
            "lower_bound_s": round(lb, 1),
            "lower_bound_h": round(lb / 3600, 3),
            "lower_bound": {k: round(v, 1) for k, v in asdict(self.bound).items()},
            "deadline_s": self.deadline_s,
            "policies": policies,
            "wall_s": round(self.wall_s, 3),
        }


_POLICIES: dict[str, type[RoundRobinPolicy] | type[GlobalSemaphorePolicy]] = {
    "round-robin": RoundRobinPolicy,
    "global-semaphore": GlobalSemaphorePolicy,
}


def simulate(spec: SimSpec | Mapping[str, Any] | str | Path) -> SimReport:
    """Simulate every policy the spec names on one workload; see the module docstring."""
    t0 = time.perf_counter()
    if isinstance(spec, str | Path):
        spec = load_spec(spec)
    elif not isinstance(spec, SimSpec):
        spec = parse_spec(spec)
    workload = build_workload(spec)
    results: dict[str, PolicyResult] = {}
    for name in spec.policies:
        if name == "adaptive":
            d = run_driven(spec, workload)
            results[name] = PolicyResult("adaptive", d.makespan_s, d.attempts, d.wasted_attempts,
                                         d.cells_lost, d.duplicate_rows, d.valid_cells + d.duplicate_rows,
                                         d.pair_start_gap_s)
            continue
        policy: SimPolicy = _POLICIES[name](spec, workload)
        results[name] = run(spec, workload, policy)
    return SimReport(
        cells=len(workload.cells), accounts=len(spec.accounts),
        history=workload.history is not None, bound=lower_bound(spec, workload),
        results=results, deadline_s=spec.deadline_h * 3600 if spec.deadline_h else None,
        wall_s=time.perf_counter() - t0)


__all__ = [
    "LowerBound",
    "PolicyResult",
    "SimReport",
    "SimSpec",
    "Workload",
    "build_workload",
    "load_spec",
    "lower_bound",
    "parse_spec",
    "simulate",
]
