"""bench_vs_inspect.py's own logic: both workloads hold the same number of cells (a 2,000-cell
plan, an Inspect task of 2,000 samples), and an execute's wall time splits into its phases."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_vs_inspect import build, phases

from ray_bench.api import plan_run


def test_both_workloads_have_2000_cells(tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    from inspect_noop import noop

    wl = build(tmp_path, 2000, 16)
    planned = plan_run(suite=wl.suite, accounts=wl.accounts, runs_dir=tmp_path / "runs", run_id="vs")
    assert planned.cells == 2000
    assert wl.inspect_task.read_text() == (Path(__file__).parent / "inspect_noop.py").read_text()
    assert len(noop(samples=2000).dataset) == 2000


def test_an_execute_splits_into_start_up_fan_out_and_shut_down() -> None:
    assert phases(100.0, 160.0, [110.0, 112.0, 111.0], [150.0, 155.0, 140.0]) == (10.0, 45.0, 5.0)
