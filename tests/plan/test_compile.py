from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.ray_local import TEST_ROUTES
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.errors import ConfigError, ConfirmationError, PairingGuardError, PlanError
from ray_bench.plan.compile import PlanRequest, compile_plan
from ray_bench.plan.identity import canonical_bytes, identity_of
from ray_bench.plan.store import confirm_plan, load_plan_file

ENV = dict(TEST_ROUTES)


def _plan(suite: Path, accounts: Path, **kw: object):  # type: ignore[no-untyped-def]
    return compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=ENV, **kw))  # type: ignore[arg-type]


def _ids(plan) -> dict[tuple[str, str, int], str]:  # type: ignore[no-untyped-def]
    return {(c.task, c.arm, c.rep): c.id for c in plan.cells}


def test_cells_are_every_task_arm_and_rep(tmp_path: Path) -> None:
    plan = _plan(*make_suite(tmp_path, reps=3))
    assert len(plan.cells) == 8 * 2 * 3
    assert len({c.id for c in plan.cells}) == len(plan.cells)
    # the arms of a pair are adjacent, so they launch close together
    for first, second in zip(plan.cells[::2], plan.cells[1::2], strict=True):
        assert (first.task, first.rep) == (second.task, second.rep)
        assert {first.arm, second.arm} == {"baseline", "mcp"}


def test_same_inputs_same_ids_and_identity(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    a, b = _plan(suite, accounts), _plan(suite, accounts)
    assert _ids(a) == _ids(b)
    assert a.model_dump() == b.model_dump()


def test_moving_the_suite_changes_no_id(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "here")
    before = _ids(_plan(suite, accounts))
    shutil.move(tmp_path / "here", tmp_path / "elsewhere")
    after = _ids(_plan(tmp_path / "elsewhere" / "suite.yaml", tmp_path / "elsewhere" / "accounts.yaml"))
    assert before == after


def test_editing_one_verifier_changes_only_that_tasks_cells(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    before = _ids(_plan(suite, accounts))
    test_sh = tmp_path / "tasks" / "sum-list" / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text() + "# stricter\n")
    after = _ids(_plan(suite, accounts))
    changed = {k for k in before if before[k] != after[k]}
    assert changed and all(task == "sum-list" for task, _, _ in changed)
    assert len(changed) == 2  # both arms, one rep


def test_editing_an_arm_changes_only_its_cells(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    before = _ids(_plan(suite, accounts))
    (tmp_path / "agents" / "scripted-agent.sh").write_text("#!/bin/sh\necho changed\n")
    after = _ids(_plan(suite, accounts))
    assert all(before[k] != after[k] for k in before)  # both arms use that agent dir
    text = suite.read_text().replace("SCRIPTED_SKILL: '90'", "SCRIPTED_SKILL: '91'")
    suite.write_text(text)
    again = _ids(_plan(suite, accounts))
    changed = {key[1] for key, value in again.items() if after[key] != value}
    assert changed == {"mcp"}


def test_missing_route_is_refused_without_reading_values(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    env = {k: v for k, v in ENV.items() if k != "RB_TEST_KEY_B"}
    with pytest.raises(ConfigError, match="env var RB_TEST_KEY_B is not set"):
        compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r", environ=env))


def test_plan_holds_no_secret_value(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")
    for name in ("launch-plan.json", "receipt.md"):
        text = (result.run_root / name).read_text()
        assert "RB_TEST_KEY_A" in text or name == "launch-plan.json"
        assert TEST_ROUTES["RB_TEST_KEY_A"] not in text
        assert TEST_ROUTES["RB_TEST_KEY_B"] not in text


def test_receipt_shows_limits_capacity_cells_and_confirmation(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1", parallel=5)
    receipt = (result.run_root / "receipt.md").read_text()
    assert result.identity in receipt
    assert "| acct-a |" in receipt and "DEMO_API_KEY<-$RB_TEST_KEY_A" in receipt
    assert "effective parallelism = min(6, 8, 5) = 5" in receipt
    assert "| baseline | 8 |" in receipt
    assert f"--confirm {result.identity}" in receipt


def test_identity_matches_file_and_edit_is_refused(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")
    path = result.run_root / "launch-plan.json"
    plan, identity = confirm_plan(path, result.identity)
    assert identity == result.identity and plan.run_id == "r1"
    data = json.loads(path.read_text())
    data["max_attempts"] = 9
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="edited") as refused:
        confirm_plan(path, result.identity)
    assert "sha256:" not in str(refused.value)
    path.write_bytes(canonical_bytes(data) + b"\n")  # edited in the canonical form
    with pytest.raises(ConfirmationError, match="not the one confirmed") as refused:
        confirm_plan(path, result.identity)
    new_identity = identity_of(data)
    assert new_identity[7:] not in str(refused.value) and "receipt.md" in str(refused.value)


@pytest.mark.parametrize("confirm", [None, "", "sha256:abc", "deadbeef"])
def test_bad_confirmation(tmp_path: Path, confirm: str | None) -> None:
    suite, accounts = make_suite(tmp_path)
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")
    with pytest.raises(ConfirmationError):
        confirm_plan(result.run_root / "launch-plan.json", confirm)


def test_not_a_plan(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(PlanError, match="not a ray-bench/plan/v1 plan"):
        load_plan_file(path)


def test_selection_with_reps_and_arms(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path, reps=2)
    sel = tmp_path / "sel.json"
    sel.write_text(json.dumps({"tasks": [{"task_id": "sum-list", "reps": [3]}, {"task_id": "fizzbuzz"}]}))
    plan = _plan(suite, accounts, selection=sel)
    assert sorted((c.task, c.rep) for c in plan.cells) == sorted(
        [("sum-list", 3)] * 2 + [("fizzbuzz", 1)] * 2 + [("fizzbuzz", 2)] * 2)
    assert any(i.kind == "selection" for i in plan.inputs)


def test_one_arm_plan_needs_counterpart_rows(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    with pytest.raises(PairingGuardError, match="no valid mcp rows for count-words"):
        _plan(suite, accounts, arms="baseline-only")


def test_one_arm_bypass_is_a_receipt_warning(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    env = {**ENV, "ALLOW_UNPAIRED_SINGLE_CONFIG": "true"}
    plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r", environ=env, arms="full-only"))
    assert {c.arm for c in plan.cells} == {"mcp"}
    assert plan.unpaired
    assert any("UNPAIRED" in w for w in plan.warnings)


def test_history_orders_longest_first(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    plan = _plan(suite, accounts, history={"sum-list": 3600.0, "fizzbuzz": 60.0})
    assert [c.task for c in plan.cells[:4]] == ["sum-list"] * 2 + ["fizzbuzz"] * 2


def test_preflight_has_every_arm(tmp_path: Path) -> None:
    plan = _plan(*make_suite(tmp_path))
    arms = {c.arm for c in plan.cells if c.id in set(plan.preflight)}
    assert arms == {"baseline", "mcp"}


def test_existing_run_root_with_other_plan_refused(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path)
    plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")
    suite.write_text(suite.read_text().replace("reps: 1", "reps: 2"))
    with pytest.raises(PlanError, match="already holds plan"):
        plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")


def test_the_sealed_plan_is_the_file_plan_writes_and_its_identity_the_one_read_back(tmp_path: Path) -> None:
    """``plan`` takes the identity from one dump (issue 57): it is what reading the file gives."""
    from ray_bench.api import plan_run
    from ray_bench.plan.identity import identity_of
    from ray_bench.plan.store import load_plan_file, sealed_plan

    suite, accounts = make_suite(tmp_path / "s")
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r")
    plan, identity = load_plan_file(result.run_root / "launch-plan.json")
    data, sealed = sealed_plan(plan)
    assert sealed == identity == result.identity == identity_of(plan.model_dump(mode="json"))
    assert data == (result.run_root / "launch-plan.json").read_bytes()
