"""The scheduler's makespan estimate for a plan (sim/from_plan.py), as the receipt calls it,
and `simulate --plan`: both under every limit of the plan's accounts."""

from __future__ import annotations

from typing import Any

import pytest

from ray_bench.models.plan import Plan
from ray_bench.scheduler.order import CellRef
from ray_bench.sim import simulate
from ray_bench.sim.driven import plan_for
from ray_bench.sim.from_plan import dollar_limits, estimate_makespan_h, spec_from_plan
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


CELL_S = 600.0


def limited(limits: dict[str, Any], tasks: int = 8) -> Plan:
    """``2 * tasks`` cells of 10 min, all known, on one account with ``limits``."""
    spec = parse_spec({"seed": 1, "suite": {"tasks": tasks, "arms": ["a", "b"], "reps": 1},
                       "durations": {"lognormal": {"median_s": CELL_S, "sigma": 0}},
                       "accounts": [{"name": "x", "limits": limits}]})
    cells = [CellRef(f"t{t}/{a}/1", f"t{t}", a, 1) for t in range(tasks) for a in ("a", "b")]
    return plan_for(spec, Workload(cells, {c.cell_id: 1.0 for c in cells}, {f"t{t}": CELL_S for t in range(tasks)}))


def simulated_s(p: Plan, usd_per_hour: float = 0.0) -> float:
    """`simulate --plan` (the adaptive policy: the real driver) on exact 10-minute cells."""
    durations = {"lognormal": {"median_s": CELL_S, "sigma": 0.0}, "cell_noise_sigma": 0.0}
    report = simulate(spec_from_plan(p, durations=durations, history=True, usd_per_hour=usd_per_hour))
    return float(report.to_dict()["policies"]["adaptive"]["makespan_h"]) * 3600


def test_the_spec_keeps_every_limit_of_the_plan_as_is() -> None:
    limits = {"max_concurrent": 6, "min_concurrent": 2, "starts_per_minute": 3.0,
              "window": {"hours": 5, "max_cells": 40, "max_usd": 20.0}, "spend_usd": 100.0,
              "cooldown_s": 30.0}
    p = limited(limits)
    spec = parse_spec(spec_from_plan(p, durations={"lognormal": {"median_s": 60, "sigma": 0}}))
    assert spec.accounts[0].limits == p.accounts[0].limits
    assert spec.accounts[0].limits.model_dump() == {**limits, "window": {**limits["window"]}}


def test_a_plan_bound_by_starts_per_minute_is_estimated_at_its_start_rate() -> None:
    # 16 cells on 8 slots would take two waves (1,200 s); one start per 2 min puts the last
    # start at 15 x 120 s, so the run ends no sooner than 1,800 + 600 s
    free = estimate_makespan_h(limited({"max_concurrent": 8}))
    bound = estimate_makespan_h(limited({"max_concurrent": 8, "starts_per_minute": 0.5}))
    assert free is not None and bound is not None
    rate_bound_s = 15 * 120 + CELL_S
    assert free * 3600 < 1.1 * 2 * CELL_S
    assert rate_bound_s <= bound * 3600 <= 1.1 * rate_bound_s
    assert rate_bound_s <= simulated_s(limited({"max_concurrent": 8, "starts_per_minute": 0.5})) <= 1.1 * rate_bound_s


def test_a_plan_bound_by_a_dollar_window_is_estimated_across_its_windows() -> None:
    # $6/h makes a 10-min cell $1; the window allows $4 per hour, so after the first wave of
    # 8 ($8: the spend is known at the finish) the account waits for it to leave the window
    p = limited({"max_concurrent": 8, "window": {"hours": 1, "max_usd": 4.0}})
    hours = estimate_makespan_h(p, usd_per_hour=6.0)
    assert hours is not None
    window_bound_s = CELL_S + 3600 + CELL_S
    assert window_bound_s <= hours * 3600 <= 1.1 * window_bound_s
    assert window_bound_s <= simulated_s(p, usd_per_hour=6.0) <= 1.1 * window_bound_s
    # without a cost per cell the window cannot bind: the plan says it has dollar limits
    unpriced = estimate_makespan_h(p)
    assert unpriced is not None and unpriced * 3600 < 1.1 * 2 * CELL_S
    assert dollar_limits(p) == ["x window $4"]


@pytest.mark.parametrize("limits", [{"max_concurrent": 8}, {"max_concurrent": 8, "starts_per_minute": 60}])
def test_limits_that_do_not_bind_change_nothing(limits: dict[str, Any]) -> None:
    hours = estimate_makespan_h(limited(limits))
    assert hours is not None and 2 * CELL_S <= hours * 3600 <= 1.1 * 2 * CELL_S


def test_simulate_plan_runs_exactly_the_plans_cells_not_the_cross_product() -> None:
    # a gap-fill plan: rep 3 of two tasks, one arm; the old spec asked for 8 tasks x 2 arms x 3 reps
    full = limited({"max_concurrent": 2})
    gap = full.model_copy(update={"cells": [c.model_copy(update={"rep": 3}) for c in full.cells
                                            if c.arm == "a" and c.task in ("t0", "t1")]})
    spec = spec_from_plan(gap, durations={"lognormal": {"median_s": CELL_S, "sigma": 0.0}})
    report = simulate(spec).to_dict()
    assert report["cells"] == 2
    assert sorted(parse_spec(spec).suite.cells or []) == [("t0", "a", 3), ("t1", "a", 3)]


def test_a_plans_judge_leases_reach_the_estimate() -> None:
    # arm b's verifiers take their key from j (one slot): the plan says so, the spec made from it
    # carries it, and the estimate runs b's four one-hour cells one at a time (4 h, not 2)
    spec = parse_spec({**SPEC.model_dump(), "accounts": [{"name": "x", "max_concurrent": 4},
                                                         {"name": "j", "max_concurrent": 1}],
                       "judges": [{"arm": "b", "account": "j"}]})
    cells = [CellRef(f"t{t}/{a}/1", f"t{t}", a, 1) for t in range(4) for a in ("a", "b")]
    judged = plan_for(spec, Workload(cells, {c.cell_id: 1.0 for c in cells}, {f"t{t}": 3600.0 for t in range(4)}))
    made = spec_from_plan(judged, durations={"lognormal": {"median_s": 3600, "sigma": 0}})
    assert made["judges"] == [{"arm": "b", "account": "j", "tasks": ["t0", "t1", "t2", "t3"]}]
    free = plan_for(SPEC.model_copy(update={"accounts": spec.accounts}),
                    Workload(cells, {c.cell_id: 1.0 for c in cells}, {f"t{t}": 3600.0 for t in range(4)}))
    assert "judges" not in spec_from_plan(free, durations={"lognormal": {"median_s": 3600, "sigma": 0}})
    slow, fast = estimate_makespan_h(judged), estimate_makespan_h(free)
    assert fast is not None and slow is not None and round(fast) == 2 and round(slow) == 4
