"""The preflight's restriction sets the rest of the queue aside without popping it all before the
first cell; the cells come back in the order popping the whole queue at once gave, whatever the
book learned in between (scheduler/runstate.py, ``Aside``)."""

from __future__ import annotations

import random

import pytest

from ray_bench.models.plan import Plan
from ray_bench.scheduler.order import CellQueue, CellRef
from ray_bench.scheduler.runstate import RunState
from ray_bench.sim.driven import plan_for
from ray_bench.sim.workload import build_workload, parse_spec


def _plan(tasks: int, reps: int) -> Plan:
    spec = parse_spec({"seed": 3, "suite": {"tasks": tasks, "arms": ["baseline", "mcp"], "reps": reps},
                       "durations": {"lognormal": {"median_s": 600, "sigma": 0.8}},
                       "accounts": [{"name": "a", "max_concurrent": 2}], "policies": ["adaptive"]})
    return plan_for(spec, build_workload(spec))


def _all_at_once(state: RunState, keep_ids: set[str]) -> list[str]:
    """The restriction as it was: every cell popped, the kept ones queued again."""
    aside: list[str] = []
    keep: list[CellRef] = []
    while (ref := state.pending.pop(0.0)) is not None:
        (keep.append(ref) if ref.cell_id in keep_ids else aside.append(ref.cell_id))
    state.pending = CellQueue(keep, state.book)
    return aside


def _drain(state: RunState, now: float) -> list[str]:
    out = []
    while (cell := state.take(now)) is not None:
        out.append(cell.id)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_cells_set_aside_come_back_in_the_order_of_popping_them_all_at_once(seed: int) -> None:
    rng = random.Random(seed)
    plan = _plan(tasks=12, reps=3)
    # some tasks known from history, the others explored
    expected = {t.id: rng.uniform(60, 5000) for t in plan.tasks if rng.random() < 0.5}
    before, after = RunState(plan, [], expected), RunState(plan, [], expected)
    kept = {c.id for c in rng.sample(plan.cells, rng.choice([1, 2, 4]))}

    aside = after.restrict(kept)
    reference = _all_at_once(before, kept)
    assert len(kept) < len(plan.cells) and len(reference) == len(plan.cells) - len(kept)
    for state in (before, after):  # the preflight runs: the book learns durations and starts
        state.book.observe(plan.tasks[-1].id, 9000.0)
        state.book.observe(plan.tasks[0].id, 1.0)
        state.book.started(plan.tasks[1].id, "lease", 10.0)
    assert _drain(after, 20.0) == _drain(before, 20.0)  # the preflight's own cells
    assert _drain(before, 20.0) == _drain(after, 20.0) == []

    came_back = list(aside)
    assert came_back == reference
    before.extend(reference)
    after.extend(came_back)
    assert _drain(after, 30.0) == _drain(before, 30.0)


def test_a_restriction_to_cells_not_in_the_queue_sets_everything_aside() -> None:
    plan = _plan(tasks=3, reps=1)
    state = RunState(plan, [])
    aside = state.restrict({"no-such-cell"})
    assert state.take(0.0) is None
    assert sorted(aside) == sorted(c.id for c in plan.cells)
