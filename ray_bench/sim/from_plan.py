"""A simulator spec from a compiled plan: its cells, accounts and pools, with a duration model
and events supplied by the operator."""

from __future__ import annotations

from typing import Any

from ray_bench.models.plan import Plan


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
