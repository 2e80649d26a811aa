"""The simulated run's work per cell does not grow with the cells in flight (issue 16).

Counted, not timed: the lines ray_bench executes (``sys.settrace`` on its own files: the
driver, ledger, scheduler, accounts and the simulated world) for runs whose cells are all
in flight at once and finish one by one. A scan over the attempts in flight per loop round
(the in-process pool's wait, the queue's running tasks, the typical length re-sorted per
finish) makes the work per cell grow with the cells: before issue 16 it was 7,356 lines per cell
between 400 and 800 cells against 3,818 between 100 and 200 (1.9x); now 1,132 and 1,126.
tests/perf/bench_inflight.py measures the same workload at 100,000.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import ray_bench
from ray_bench.sim.driven import run_driven
from ray_bench.sim.workload import build_workload, parse_spec

PACKAGE = str(Path(ray_bench.__file__).parent)


def all_in_flight(cells: int) -> Any:
    """``cells`` cells of 1.5-5.5 h on four accounts with a slot for each."""
    return parse_spec({
        "seed": 16, "suite": {"tasks": cells // 2, "arms": ["baseline", "mcp"], "reps": 1},
        "durations": {"lognormal": {"median_s": 3 * 3600, "sigma": 0.25, "min_s": 1.5 * 3600,
                                    "max_s": 5.5 * 3600}},
        "accounts": [{"name": f"a{i}", "max_concurrent": cells // 4} for i in range(4)],
        "policies": ["adaptive"]})


def lines_run(cells: int) -> int:
    spec = all_in_flight(cells)
    workload = build_workload(spec)
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += 1
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(PACKAGE) else None

    previous = sys.gettrace()  # a coverage tracer, say: put back afterwards
    sys.settrace(calls)
    try:
        result = run_driven(spec, workload)
    finally:
        sys.settrace(previous)
    assert result.valid_cells == cells and result.attempts == cells and not result.violations
    return count


def test_work_per_cell_does_not_grow_with_the_cells_in_flight() -> None:
    small = (lines_run(200) - lines_run(100)) / 100
    large = (lines_run(800) - lines_run(400)) / 400
    assert large < 1.5 * small, f"{large:.0f} lines per cell at 400-800 in flight, {small:.0f} at 100-200"
