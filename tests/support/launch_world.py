"""A small simulated plan for the pure scheduler decisions' tests (scheduler/launch.py,
scheduler/stops.py): six cells, two arms, two accounts of two slots, one local backend."""

from __future__ import annotations

from typing import Any

from ray_bench.models.plan import Plan
from ray_bench.sim.driven import plan_for
from ray_bench.sim.workload import build_workload, parse_spec

SPEC: dict[str, Any] = {
    "seed": 1,
    "suite": {"tasks": 3, "arms": ["baseline", "mcp"], "reps": 1},
    "durations": {"lognormal": {"median_s": 600, "sigma": 0.3}},
    "accounts": [{"name": "a", "max_concurrent": 2}, {"name": "b", "max_concurrent": 2}],
    "policies": ["adaptive"],
}


def a_plan(**update: Any) -> Plan:
    spec = parse_spec(SPEC)
    return plan_for(spec, build_workload(spec)).model_copy(update=update)
