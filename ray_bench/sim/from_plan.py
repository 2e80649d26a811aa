"""A simulator spec from a compiled plan: its cells, accounts and pools, with a duration model
and events supplied by the operator."""

from __future__ import annotations

from typing import Any

from ray_bench.models.plan import Plan
from ray_bench.scheduler.order import CellRef


def spec_from_plan(plan: Plan, *, durations: dict[str, Any], events: list[dict[str, Any]] | None = None,
                   history: bool = False, deadline_h: float | None = None, seed: int = 7) -> dict[str, Any]:
    tasks = {c.task for c in plan.cells}
    reps = max((c.rep for c in plan.cells), default=1)
    accounts = []
    for acc in plan.accounts:
        entry: dict[str, Any] = {"name": acc.name, "max_concurrent": acc.limits.max_concurrent}
        if acc.limits.min_concurrent > 1:
            entry["min_concurrent"] = acc.limits.min_concurrent
        if acc.limits.window is not None:
            window = {"hours": acc.limits.window.hours}
            if acc.limits.window.max_cells is not None:
                window["max_cells"] = acc.limits.window.max_cells
            entry["window"] = window
        accounts.append(entry)
    spec: dict[str, Any] = {
        "seed": seed,
        "suite": {"tasks": len(tasks), "arms": [a.name for a in plan.arms], "reps": reps},
        "durations": durations,
        "accounts": accounts,
        "events": events or [],
        "backend_slots": min(plan.capacity.backend_pools.values()) if plan.capacity.backend_pools else None,
    }
    if history:
        spec["history"] = {"noise_sigma": 0.3}
    if deadline_h is not None:
        spec["deadline_h"] = deadline_h
    return spec


def estimate_makespan_h(plan: Plan) -> float | None:
    """The scheduler's estimate of a plan's makespan: the real driver on a virtual clock
    (:func:`~ray_bench.sim.driven.run_driven`) over the plan's own cells, each taking its
    task's expected duration (the median of the known tasks for the others), with that
    history given to the driver. None when no task has an expected duration."""
    from ray_bench.sim.driven import run_driven
    from ray_bench.sim.workload import Workload, parse_spec

    known = sorted(t.expected_sec for t in plan.tasks if t.expected_sec)
    if not known:
        return None
    median = known[len(known) // 2]
    expected = {t.id: t.expected_sec or median for t in plan.tasks}
    cells = [CellRef(c.id, c.task, c.arm, c.rep) for c in plan.cells]
    workload = Workload(cells, {c.cell_id: expected[c.task] for c in cells}, expected)
    spec = parse_spec(spec_from_plan(plan, durations={"lognormal": {"median_s": median, "sigma": 0.0}},
                                     history=True), where=f"plan {plan.run_id}")
    return run_driven(spec, workload).makespan_s / 3600
