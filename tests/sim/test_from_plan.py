"""The scheduler's makespan estimate for a plan (sim/from_plan.py), as the receipt calls it."""

from __future__ import annotations

from ray_bench.models.plan import Plan
from ray_bench.scheduler.order import CellRef
from ray_bench.sim.driven import plan_for
from ray_bench.sim.from_plan import estimate_makespan_h
from ray_bench.sim.workload import Workload, parse_spec

SPEC = parse_spec({"seed": 1, "suite": {"tasks": 4, "arms": ["a", "b"], "reps": 1},
                   "durations": {"lognormal": {"median_s": 600, "sigma": 0}},
                   "accounts": [{"name": "x", "max_concurrent": 2}]})


def plan(history: dict[str, float]) -> Plan:
    cells = [CellRef(f"t{t}/{a}/1", f"t{t}", a, 1) for t in range(4) for a in ("a", "b")]
    return plan_for(SPEC, Workload(cells, {c.cell_id: 1.0 for c in cells}, history))


def test_the_estimate_runs_the_plans_cells_at_their_expected_durations() -> None:
    # eight cells, two slots: 4 x 1,800 s of work (t3 is not known: the median of the others)
    hours = estimate_makespan_h(plan({"t0": 600.0, "t1": 1800.0, "t2": 1800.0}))
    assert hours is not None
    assert 2 * (600 + 3 * 1800) / 2 / 3600 <= hours <= 1.1 * 2 * (600 + 3 * 1800) / 2 / 3600


def test_no_history_no_estimate() -> None:
    assert estimate_makespan_h(plan({})) is None
