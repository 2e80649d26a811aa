"""Earlier runs are matched by the arm's configuration, not its name (issue 29 item 7): the
pairing guard, ``plan --history`` and lineage reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.earlier_runs import earlier_rows
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.errors import PairingGuardError, UserInputError
from ray_bench.models.suite import Arm
from ray_bench.plan.arm_identity import arm_digest, run_arm_digests
from ray_bench.plan.history import durations_from_runs
from ray_bench.plan.store import load_plan_file
from ray_bench.reports.build import build_lineage_report

TASKS = ["hello-world", "sum-list"]


def _arm(**fields: object) -> Arm:
    return Arm.model_validate({"name": "mcp", "role": "variant", "command": "true", **fields})


def test_the_digest_is_what_runs_not_what_it_is_called() -> None:
    base = arm_digest(_arm(), None)
    assert arm_digest(_arm(name="mcp-renamed", role="baseline"), None) == base
    assert arm_digest(_arm(env={"X": "1"}), None) != base
    assert arm_digest(_arm(command="false"), None) != base
    assert arm_digest(_arm(), "abc") != base  # the agent directory's content
    assert base.startswith("sha256:") and len(base) == len("sha256:") + 64


def _change_mcp_env(suite: Path) -> None:
    text = suite.read_text()
    assert "SCRIPTED_SKILL: '90'" in text
    suite.write_text(text.replace("SCRIPTED_SKILL: '90'", "SCRIPTED_SKILL: '10'"))


def _earlier(tmp_path: Path) -> tuple[Path, Path, Path]:
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS)
    runs = tmp_path / "runs"
    first = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="first")
    earlier_rows(first.run_root, {("hello-world", "baseline"): [100.0], ("hello-world", "mcp"): [300.0],
                                  ("sum-list", "baseline"): [50.0], ("sum-list", "mcp"): [70.0]})
    return suite, accounts, runs


def test_the_pairing_guard_wants_rows_of_the_other_arms_configuration(tmp_path: Path) -> None:
    suite, accounts, runs = _earlier(tmp_path)
    passed = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="top-up", arms="baseline-only",
                      counterpart_runs=[runs / "first"])
    assert {c.arm for c in load_plan_file(passed.run_root / "launch-plan.json")[0].cells} == {"baseline"}

    _change_mcp_env(suite)  # the mcp rows of "first" are of another mcp now
    with pytest.raises(PairingGuardError) as refused:
        plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="top-up-2", arms="baseline-only",
                 counterpart_runs=[runs / "first"])
    line = refused.value.line()
    assert len(line.splitlines()) == 1
    assert "no valid mcp rows for hello-world, sum-list" in line and "another configuration" in line
    assert not (runs / "top-up-2").exists()  # bad input writes nothing


def test_history_never_pools_another_configuration_of_an_arm(tmp_path: Path) -> None:
    suite, accounts, runs = _earlier(tmp_path)
    history = durations_from_runs([runs / "first"])
    same = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="same", history=history)
    expected = {t.id: t.expected_sec for t in load_plan_file(same.run_root / "launch-plan.json")[0].tasks}
    assert expected == {"hello-world": 200.0, "sum-list": 60.0}

    _change_mcp_env(suite)  # only baseline's earlier rows are of this plan's arms
    changed = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="changed", history=history)
    expected = {t.id: t.expected_sec for t in load_plan_file(changed.run_root / "launch-plan.json")[0].tasks}
    assert expected == {"hello-world": 100.0, "sum-list": 50.0}


def test_rows_of_a_run_root_without_its_plan_match_nothing(tmp_path: Path) -> None:
    _, _, runs = _earlier(tmp_path)
    (runs / "first" / "launch-plan.json").unlink()
    assert run_arm_digests(runs / "first") == {}
    assert durations_from_runs([runs / "first"]) == {}  # unknown, not another arm's durations


def test_a_lineage_over_two_configurations_of_an_arm_is_refused(tmp_path: Path) -> None:
    suite, accounts, runs = _earlier(tmp_path)
    _change_mcp_env(suite)
    second = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="second")
    earlier_rows(second.run_root, {("hello-world", "baseline"): [100.0], ("hello-world", "mcp"): [90.0]})
    with pytest.raises(UserInputError) as refused:
        build_lineage_report([runs / "first", second.run_root])
    line = refused.value.line()
    assert len(line.splitlines()) == 1
    assert "arm mcp ran 2 configurations" in line and "first" in line and "second" in line
    assert "baseline" not in line.split("(")[0]
    # the runs of one configuration still report together
    assert build_lineage_report([runs / "first"]).lineage
