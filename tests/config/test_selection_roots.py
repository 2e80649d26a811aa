"""CodeScaleBench selection files against suites with several task roots: ``task_dir``
resolves under the roots, and is refused when it escapes them or names another task."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from support.ray_local import TEST_ROUTES
from typer.testing import CliRunner

from ray_bench.cli import app
from ray_bench.errors import MultipleInputErrors, SelectionError, TaskDirError, UserInputError
from ray_bench.plan.compile import PlanRequest, compile_plan

CORPUS = Path(__file__).parents[1] / "tasks" / "corpus"
CSB = CORPUS / "codescalebench"


def _suite(tmp_path: Path, **roots: object) -> tuple[Path, Path]:
    suite = {"name": "csb", **roots, "backend": "local",
             "arms": [{"name": "baseline", "role": "baseline", "command": "true"},
                      {"name": "mcp", "role": "variant", "command": "true"}]}
    accounts = {"accounts": [{"name": "a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                              "limits": {"max_concurrent": 2}}]}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    (tmp_path / "accounts.yaml").write_text(yaml.safe_dump(accounts))
    return tmp_path / "suite.yaml", tmp_path / "accounts.yaml"


def _selection(tmp_path: Path, entries: list[dict[str, str]]) -> Path:
    path = tmp_path / "selection.json"
    path.write_text(json.dumps({"metadata": {"suite": "csb_mixed", "task_count": len(entries)},
                                "tasks": entries}))
    return path


def _plan(suite: Path, accounts: Path, selection: Path):  # type: ignore[no-untyped-def]
    return compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", selection=selection,
                                    environ=dict(TEST_ROUTES)))


ONBOARD = {"task_id": "CCX-onboard-138", "benchmark": "csb_org_onboarding",
           "task_dir": "csb_org_onboarding/ccx-onboard-138", "mcp_benefit_score": 1.0, "difficulty": "hard"}
FIX = {"task_id": "teleport-users-can-delete-fix-001", "benchmark": "csb_sdlc_fix",
       "task_dir": "benchmarks/csb_sdlc_fix/teleport-users-can-delete-fix-001", "language": "go"}


def test_a_csb_selection_spans_two_benchmark_directories(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path, task_roots=[str(CSB / "benchmarks")])
    plan = _plan(suite, accounts, _selection(tmp_path, [ONBOARD, FIX]))
    assert {t.id for t in plan.tasks} == {"ccx-onboard-138", "teleport-users-can-delete-fix-001"}
    assert len(plan.cells) == 4
    # CSB's own keys are warnings in the receipt, per task; nothing is refused for them
    assert any(w.startswith("task ccx-onboard-138: unknown keys verification") for w in plan.warnings)


def test_task_dir_resolves_under_any_of_several_roots(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path, task_roots=[str(CORPUS / "terminal-bench-2"), str(CSB)])
    # a CSB checkout as the root: task_dir with or without its benchmarks/ prefix
    selection = _selection(tmp_path, [
        {**FIX, "task_dir": "benchmarks/csb_sdlc_fix/teleport-users-can-delete-fix-001"},
        ONBOARD, {"task_id": "fix-git"}])
    plan = _plan(suite, accounts, selection)
    assert {t.id for t in plan.tasks} == {"teleport-users-can-delete-fix-001", "ccx-onboard-138", "fix-git"}


@pytest.mark.parametrize(("entry", "needle"), [
    ({**ONBOARD, "task_dir": "../terminal-bench-2/fix-git"}, "escapes the task roots"),
    ({**ONBOARD, "task_dir": "/etc"}, "escapes the task roots"),
    ({**ONBOARD, "benchmark": "csb_sdlc_fix"}, "is not in benchmark 'csb_sdlc_fix'"),
    ({**ONBOARD, "task_dir": "csb_org_onboarding/ccx-onboard-999", "task_id": "ccx-onboard-999"},
     "is not a task directory under"),
    ({"task_id": "no-such-task"}, "is not under the suite's task roots"),
])
def test_bad_task_dir_is_one_line(tmp_path: Path, entry: dict[str, str], needle: str) -> None:
    suite, accounts = _suite(tmp_path, task_roots=[str(CSB / "benchmarks")])
    with pytest.raises(SelectionError) as info:
        _plan(suite, accounts, _selection(tmp_path, [entry]))
    assert needle in info.value.line() and "selection.json: entry 1" in info.value.line()


def test_the_task_dir_is_authoritative_and_a_differing_task_id_is_a_warning(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path, task_roots=[str(CSB / "benchmarks")])
    plan = _plan(suite, accounts, _selection(tmp_path, [{**ONBOARD, "task_id": "CCX-onboard-043"}]))
    assert [t.id for t in plan.tasks] == ["ccx-onboard-138"]
    assert any("task_id 'CCX-onboard-043' is not its task_dir's task 'ccx-onboard-138'" in w for w in plan.warnings)


@pytest.mark.parametrize("root", [".", "benchmarks"])
def test_csbs_bench_tasks_layout_plans_with_the_checkout_or_benchmarks_as_root(tmp_path: Path, root: str) -> None:
    # CSB's preamble_test_5tasks.json: task_dir ccb_locobench/tasks/<id>, an id spelt otherwise
    checkout = tmp_path / "csb"
    task_dir = checkout / "benchmarks" / "ccb_locobench" / "tasks" / "instance_nodebb-nodebb-76c6e302"
    shutil.copytree(CORPUS / "legacy" / "minimal", task_dir)
    suite, accounts = _suite(tmp_path, task_roots=[str(checkout / root)])
    entry = {"task_id": "instance_nodebb__nodebb-76c6e302", "benchmark": "ccb_locobench",
             "task_dir": "ccb_locobench/tasks/instance_nodebb-nodebb-76c6e302"}
    plan = _plan(suite, accounts, _selection(tmp_path, [entry]))
    assert [t.id for t in plan.tasks] == ["instance_nodebb-nodebb-76c6e302"]
    assert any("instance_nodebb__nodebb-76c6e302" in w and "the task_dir's is planned" in w for w in plan.warnings)


def test_every_bad_entry_of_a_selection_is_listed_in_one_pass(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path, task_roots=[str(CSB / "benchmarks")])
    with pytest.raises(MultipleInputErrors) as info:
        _plan(suite, accounts, _selection(tmp_path, [{"task_id": "no-such-a"}, ONBOARD, {"task_id": "no-such-b"}]))
    lines = info.value.lines()
    assert len(lines) == 2 and "entry 1 (no-such-a)" in lines[0] and "entry 3 (no-such-b)" in lines[1]


def test_a_link_out_of_the_roots_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "benchmarks" / "bench"
    root.mkdir(parents=True)
    (root / "sneaky").symlink_to(CORPUS / "legacy" / "minimal")
    suite, accounts = _suite(tmp_path, task_roots=["benchmarks"])
    with pytest.raises(UserInputError, match="escapes the task roots"):
        _plan(suite, accounts, _selection(tmp_path, [{"task_id": "sneaky", "task_dir": "bench/sneaky"}]))


def test_a_task_id_held_by_two_roots_exits_2(tmp_path: Path) -> None:
    for root in ("one", "two"):
        shutil.copytree(CORPUS / "legacy" / "minimal", tmp_path / root / "minimal")
    suite, accounts = _suite(tmp_path, task_roots=["one", "two"])
    with pytest.raises(TaskDirError, match="'minimal' is held twice"):
        _plan(suite, accounts, _selection(tmp_path, [{"task_id": "minimal"}]))
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--run-id", "r1"], env=dict(TEST_ROUTES))
    assert result.exit_code == 2 and "held twice" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_what_the_backend_cannot_give_is_refused_at_plan_one_line_each(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path, task_roots=[str(CORPUS / "refused")])
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--run-id", "r1"], env=dict(TEST_ROUTES))
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    for task in ("gpu-training", "windows-task", "compose-sidecar", "separate-verifier", "tpu-task",
                 "continuous-verifier"):
        assert sum(f"task {task}: " in line for line in lines) >= 1, (task, lines)
    assert not (tmp_path / "runs").exists()


def test_suite_names_exactly_one_of_tasks_dir_and_task_roots(tmp_path: Path) -> None:
    suite, _ = _suite(tmp_path, tasks_dir="a", task_roots=["b"])
    result = CliRunner().invoke(app, ["validate", str(suite)])
    assert result.exit_code == 2 and "exactly one of tasks_dir and task_roots" in result.stderr


def test_the_shipped_quickstart_selection_plans_on_the_shipped_quickstart(tmp_path: Path) -> None:
    from ray_bench.cli.quickstart import prepare

    suite, accounts = prepare(tmp_path)
    shipped = Path(__file__).parents[2] / "selections" / "quickstart-subset.json"
    plan = _plan(suite, accounts, shipped)
    assert sorted(t.id for t in plan.tasks) == ["fizzbuzz", "hello-world", "sum-list"]


@pytest.mark.parametrize("task_dir", ["../../../etc", "/etc/passwd-dir", "a/../../b"])
def test_validate_of_a_selection_alone_refuses_a_task_dir_that_escapes(tmp_path: Path, task_dir: str) -> None:
    path = _selection(tmp_path, [{"task_id": "x", "task_dir": task_dir}])
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "escapes the task roots" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1
