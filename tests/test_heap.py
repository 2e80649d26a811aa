"""The collector around blocks whose objects all live on (ray_bench/heap.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.errors import PlanError
from ray_bench.heap import kept
from ray_bench.plan.store import PLAN_FILE, load_plan_file


@pytest.fixture
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_no_collection_runs_inside_and_the_collector_is_back_after(collecting: None) -> None:
    passes: list[str] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        passes.append(phase)

    gc.callbacks.append(seen)
    try:
        with kept():
            assert not gc.isenabled()
            held = [[i] for i in range(50_000)]  # ~70 passes' worth of containers
            assert passes == []
        assert gc.isenabled() and len(held) == 50_000
        [[i] for i in range(5_000)]
        assert passes  # collecting again
    finally:
        gc.callbacks.remove(seen)


def test_an_error_inside_gives_the_collector_back(collecting: None) -> None:
    with pytest.raises(ValueError, match="refused"), kept():
        raise ValueError("refused")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with kept():
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_loading_a_plan_leaves_the_collector_as_it_was(tmp_path: Path, collecting: None) -> None:
    suite, accounts = make_suite(tmp_path / "s", reps=1)
    run_root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1").run_root
    plan, identity = load_plan_file(run_root / PLAN_FILE)
    assert gc.isenabled() and plan.cells and identity.startswith("sha256:")
    (run_root / PLAN_FILE).write_text("{not json")
    with pytest.raises(PlanError, match="not a plan file"):
        load_plan_file(run_root / PLAN_FILE)
    assert gc.isenabled()
