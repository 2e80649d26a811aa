"""A simulator spec from a compiled plan: its cells, accounts and pools, with a duration model
and events supplied by the operator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray_bench.models.plan import Plan
from ray_bench.plan.roles import judge_lease_account
from ray_bench.scheduler.order import CellRef
from ray_bench.sim.driven import run_driven
from ray_bench.sim.workload import Workload, parse_spec


def spec_from_plan(plan: Plan, *, durations: dict[str, Any], events: list[dict[str, Any]] | None = None,
                   history: bool = False, deadline_h: float | None = None, seed: int = 7,
                   usd_per_hour: float = 0.0) -> dict[str, Any]:
    """The plan's own cells (a gap-fill plan's few reps and arms, not every task's cross product)
    and its accounts with their limits as is (every limit, the same model);
    ``usd_per_hour``: what one running cell costs, which dollar windows and budgets bind on."""
    tasks = {c.task for c in plan.cells}
    reps = max((c.rep for c in plan.cells), default=1)
    # an account whose login had expired at plan time starts no cell (the driver's expiry watch)
    accounts = [{"name": acc.name, "limits": acc.limits, "usd_per_hour": usd_per_hour} for acc in plan.accounts
                if acc.name not in plan.capacity.left_out]
    spec: dict[str, Any] = {
        "seed": seed,
        "suite": {"tasks": len(tasks), "arms": [a.name for a in plan.arms], "reps": reps,
                  "cells": [(c.task, c.arm, c.rep) for c in plan.cells] or None},
        "durations": durations,
        "accounts": accounts,
        "events": events or [],
        "backend_slots": min(plan.capacity.backend_pools.values()) if plan.capacity.backend_pools else None,
        "spend_limit_usd": plan.spend_limit_usd,
    }
    judges = [j for j in judge_specs(plan) if j["account"] not in plan.capacity.left_out]
    if judges:
        spec["judges"] = judges
    if history:
        spec["history"] = {"noise_sigma": 0.3}
    if deadline_h is not None:
        spec["deadline_h"] = deadline_h
    return spec


def judge_specs(plan: Plan) -> list[dict[str, Any]]:
    """The plan's judge leases as the simulator's ``judges``: per arm and judge account, the
    tasks whose cells hold one (ray_bench/plan/roles.py ``judge_lease_account``)."""
    accounts = {a.name: a for a in plan.accounts}
    tasks = {t.id: t for t in plan.tasks}
    found: dict[tuple[str, str], set[str]] = {}
    for arm in plan.arms:
        for task in {c.task for c in plan.cells if c.arm == arm.name}:
            account = judge_lease_account(arm, tasks[task].config, accounts)
            if account is not None:
                found.setdefault((arm.name, account), set()).add(task)
    return [{"arm": arm, "account": account, "tasks": sorted(ts)} for (arm, account), ts in sorted(found.items())]


@dataclass(frozen=True)
class RunEstimate:
    """What the driver on a virtual clock made of a plan (:func:`estimate_run`)."""

    makespan_h: float
    spend_usd: float
    usd_per_hour: float
    valid_cells: int
    cells: int
    stopped: str | None
    detail: str


def history_usd_per_hour(plan: Plan) -> float | None:
    """What one running cell costs per hour in the plan's history: the recorded cost of its
    cells' tasks over their expected durations (None: no task has both). The simulator prices a
    cell by its running time, so a task's cost is spread over its seconds at one rate."""
    both = {t.id: t for t in plan.tasks if t.expected_sec and t.expected_usd is not None}
    seconds = sum(both[c.task].expected_sec or 0.0 for c in plan.cells if c.task in both)
    if not seconds:
        return None
    return sum(both[c.task].expected_usd or 0.0 for c in plan.cells if c.task in both) / seconds * 3600


def estimate_run(plan: Plan, *, usd_per_hour: float | None = None) -> RunEstimate | None:
    """The scheduler's estimate of a plan's run: the real driver on a virtual clock
    (:func:`~ray_bench.sim.driven.run_driven`) over the plan's own cells, each taking its
    task's expected duration (the median of the known tasks for the others), with that
    history given to the driver, under every limit of the plan's accounts (the same spec as
    ``simulate --plan``: :func:`spec_from_plan`). A cell costs ``usd_per_hour`` while it runs
    (None: the plan's cost history, :func:`history_usd_per_hour`; 0 or no history: dollar
    limits never bind, :func:`dollar_limits` says whether the plan has any). None when no task
    has an expected duration."""
    known = sorted(t.expected_sec for t in plan.tasks if t.expected_sec)
    if not known:
        return None
    rate = usd_per_hour if usd_per_hour is not None else (history_usd_per_hour(plan) or 0.0)
    median = known[len(known) // 2]
    expected = {t.id: t.expected_sec or median for t in plan.tasks}
    cells = [CellRef(c.id, c.task, c.arm, c.rep) for c in plan.cells]
    workload = Workload(cells, {c.cell_id: expected[c.task] for c in cells}, expected)
    spec = parse_spec(spec_from_plan(plan, durations={"lognormal": {"median_s": median, "sigma": 0.0}},
                                     history=True, usd_per_hour=rate), where=f"plan {plan.run_id}")
    result = run_driven(spec, workload)
    return RunEstimate(makespan_h=result.makespan_s / 3600, spend_usd=result.spend_usd, usd_per_hour=rate,
                       valid_cells=result.valid_cells, cells=result.cells, stopped=result.stopped,
                       detail=result.detail)


def estimate_makespan_h(plan: Plan, *, usd_per_hour: float | None = None) -> float | None:
    """:func:`estimate_run`'s makespan in hours."""
    found = estimate_run(plan, usd_per_hour=usd_per_hour)
    return None if found is None else found.makespan_h


def dollar_limits(plan: Plan) -> list[str]:
    """The plan's limits counted in dollars (a window's ``max_usd``, an account's budget, the
    run's limit): without a cost per cell an estimate cannot model them, and says so."""
    out = [f"{a.name} window ${a.limits.window.max_usd:g}" for a in plan.accounts
           if a.limits.window is not None and a.limits.window.max_usd is not None]
    out += [f"{a.name} budget ${a.limits.spend_usd:g}" for a in plan.accounts if a.limits.spend_usd is not None]
    if plan.spend_limit_usd is not None:
        out.append(f"run limit ${plan.spend_limit_usd:g}")
    return out
