"""`execute`'s plan verification re-derives what the receipt states, not only the cell ids: a
plan edited consistently through the library (valid ids, a re-rendered receipt, a new
identity) is refused with one line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.commands.receipt import render_receipt
from ray_bench.commands.rerun import rerun_failed
from ray_bench.commands.verify import verify_plan
from ray_bench.errors import PlanError
from ray_bench.files import write_whole
from ray_bench.ledger.store import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan
from ray_bench.plan.identity import identity_of
from ray_bench.plan.store import PLAN_FILE, load_plan_file, plan_bytes


@pytest.fixture
def planned(tmp_path: Path) -> Path:
    # 8 tasks x 2 arms x 2 reps = 32 cells, one preflight pair
    suite, accounts = make_suite(tmp_path / "s", reps=2)
    return plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1").run_root


def _rewrite(root: Path, **update: Any) -> tuple[Plan, str]:
    """Edit the plan the way a library user can: a valid model, its receipt rendered again."""
    plan, _ = load_plan_file(root / PLAN_FILE)
    edited = plan.model_copy(update=update)
    data = plan_bytes(edited)
    identity = identity_of(json.loads(data))
    write_whole(root / PLAN_FILE, data)
    write_whole(root / "receipt.md", render_receipt(edited, identity))
    return load_plan_file(root / PLAN_FILE)


def _refusal(root: Path, plan: Plan, identity: str) -> str:
    with pytest.raises(PlanError) as caught:
        verify_plan(plan, identity, root / PLAN_FILE)
    line = caught.value.line()
    assert "\n" not in line and "review" in line and "ray-bench plan" in line
    return line


def test_the_plan_as_written_passes(planned: Path) -> None:
    plan, identity = load_plan_file(planned / PLAN_FILE)
    verify_plan(plan, identity, planned / PLAN_FILE)


def test_the_drift_check_and_the_rederivation_walk_each_task_once(planned: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    plan, identity = load_plan_file(planned / PLAN_FILE)
    walks: list[str] = []
    real = os.walk
    monkeypatch.setattr(os, "walk", lambda top, *a, **k: (walks.append(str(top)), real(top, *a, **k))[1])
    verify_plan(plan, identity, planned / PLAN_FILE)
    tasks = sorted(t.path for t in plan.tasks)
    assert len(tasks) == 8 and sorted(w for w in walks if w in tasks) == tasks


def test_dropped_cells_and_an_emptied_preflight_are_refused(planned: Path) -> None:
    plan, _ = load_plan_file(planned / PLAN_FILE)
    plan, identity = _rewrite(planned, cells=plan.cells[8:], preflight=[])
    assert len(plan.cells) == 24 and "paired: yes" in (planned / "receipt.md").read_text()
    assert "leaves out 8 of the cells it states" in _refusal(planned, plan, identity)


def test_an_emptied_preflight_alone_is_refused(planned: Path) -> None:
    plan, identity = _rewrite(planned, preflight=[])
    assert "its preflight is not the first 1 pairs" in _refusal(planned, plan, identity)


def test_a_repetition_dropped_for_one_task_is_refused(planned: Path) -> None:
    plan, _ = load_plan_file(planned / PLAN_FILE)
    one = plan.cells[-1].task
    cells = [c for c in plan.cells if not (c.task == one and c.rep == 2)]
    plan, identity = _rewrite(planned, cells=cells)
    assert f"task {one}" in _refusal(planned, plan, identity)


def test_reordered_cells_and_a_false_pairing_claim_are_refused(planned: Path) -> None:
    plan, _ = load_plan_file(planned / PLAN_FILE)
    plan, identity = _rewrite(planned, cells=list(reversed(plan.cells)))
    assert "order" in _refusal(planned, plan, identity)
    plan, _ = load_plan_file(planned / PLAN_FILE)
    plan, identity = _rewrite(planned, cells=list(reversed(plan.cells)), unpaired=True)
    assert "says paired: no" in _refusal(planned, plan, identity)


def test_one_arm_plans_and_task_subsets_still_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLOW_UNPAIRED_SINGLE_CONFIG", "true")
    suite, accounts = make_suite(tmp_path / "s", reps=2)
    for run_id, kw in (("one-arm", {"arms": "baseline-only"}), ("some", {"task_ids": ("sum-list",), "reps": 3}),
                       ("limited", {"limit": 3})):
        root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id=run_id,
                        **kw).run_root  # type: ignore[arg-type]
        plan, identity = load_plan_file(root / PLAN_FILE)
        verify_plan(plan, identity, root / PLAN_FILE)


def test_a_reruns_cells_are_its_selections(planned: Path) -> None:
    plan, identity = load_plan_file(planned / PLAN_FILE)
    ledger = Ledger.create(planned, run_id=plan.run_id, plan_identity=identity)
    failing = [plan.cells[0], plan.cells[3]]  # not whole pairs
    for cell in failing:
        for seq in range(plan.max_attempts):
            row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm,
                                       rep=cell.rep, account="acct-a", backend="local", epoch=identity,
                                       preflight=False, now=10.0 + seq)
            ledger.finish_attempt(row.attempt_id, status="finished", valid=False, reward=None,
                                  failure_class="evaluator", fingerprint="f", counts=True, cost_usd=0.0,
                                  summary=AttemptSummary(), now=11.0 + seq)
    for cell in plan.cells:
        if cell not in failing:
            row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm,
                                       rep=cell.rep, account="acct-a", backend="local", epoch=identity,
                                       preflight=False, now=20.0)
            ledger.finish_attempt(row.attempt_id, status="finished", valid=True, reward=1.0, failure_class=None,
                                  fingerprint=None, counts=True, cost_usd=0.0, summary=AttemptSummary(), now=21.0)
    ledger.close()
    result = rerun_failed(planned, hypothesis="fixed the verifier")
    rerun, rerun_identity = load_plan_file(result.run_root / PLAN_FILE)
    assert {c.id for c in rerun.cells} == {c.id for c in failing}
    verify_plan(rerun, rerun_identity, result.run_root / PLAN_FILE)
    edited, edited_identity = _rewrite(result.run_root, cells=rerun.cells[:1], preflight=rerun.preflight[:1])
    assert "leaves out 1 of the cells" in _refusal(result.run_root, edited, edited_identity)


def test_a_warning_the_plan_makes_cannot_be_dropped(planned: Path) -> None:
    plan, _ = load_plan_file(planned / PLAN_FILE)
    assert any("no spend budget" in w for w in plan.warnings)
    plan, identity = _rewrite(planned, warnings=[w for w in plan.warnings if "spend budget" not in w])
    assert "its warnings leave out one" in _refusal(planned, plan, identity)
