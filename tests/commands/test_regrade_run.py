"""`ray-bench regrade` on a real run (plan, the driver, the real runner on the local backend, no
Ray): the arms keep their workspaces; one task's test.sh changes so the reward flips, another's
instruction changes; regrade writes new attempt rows of kind `regrade` (the original rows as they
were), the report shows the new reward, the changed instruction is a rerun (asked to regrade it,
regrade refuses, exit 2), and status still folds the ledger's events."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from support.local_pool import LocalRunPool
from support.regrades import FAST, LENIENT, invoke
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.ledger import Ledger, accepted_rows
from ray_bench.ledger.events import Regraded
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import PLAN_FILE, load_plan_file
from ray_bench.runroot import RunPaths, hold_lock
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions
from ray_bench.sim.driven import roomy_host
from ray_bench.status.read import read_status

#: The scripted agent solves every task (skill 100) or none (skill 0): rewards 1 and 0.
ARMS = [
    {"name": "baseline", "role": "baseline", "command": 'sh "$AGENT_DIR/scripted-agent.sh"', "agent_dir": "agents",
     "env": {**FAST, "SCRIPTED_SKILL": "0"}, "expose_solution": True, "keep_workspace": True},
    {"name": "mcp", "role": "variant", "command": 'sh "$AGENT_DIR/scripted-agent.sh"', "agent_dir": "agents",
     "env": {**FAST, "SCRIPTED_SKILL": "100"}, "expose_solution": True, "keep_workspace": True},
]


def _run(tmp_path: Path, arms: list[dict[str, object]], tasks: list[str]) -> tuple[Path, Path]:
    suite, accounts = make_suite(tmp_path / "s", tasks=tasks, arms=arms, preflight_cells=0,
                                 backends={"local": {"options": {"root": str(tmp_path / "sbx")}}})
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="rg").run_root
    plan, identity = load_plan_file(root / PLAN_FILE)
    options = RunOptions(tick_sec=0.05, state_root=tmp_path / "state")
    outcome = Driver(plan, identity, root, LocalRunPool(tmp_path / "sbx"), CoreGate(plan.accounts), roomy_host(plan),
                     options=options).run()
    assert outcome.exit_code == 0, outcome
    return root, tmp_path / "s" / "tasks"


@pytest.fixture
def finished_run(tmp_path: Path) -> tuple[Path, Path]:
    """A finished run of two tasks x two arms with kept workspaces, and its tasks directory."""
    return _run(tmp_path, ARMS, ["hello-world", "count-words"])


def test_kept_workspaces_are_hashed_in_the_summary_and_hold_the_agents_files(finished_run: tuple[Path, Path]) -> None:
    root, _ = finished_run
    attempts = Ledger.read_attempts(root)
    assert len(attempts) == 4 and all(a.valid and a.kind == "run" for a in attempts)
    for a in attempts:
        summary = AttemptSummary.parse(json.loads((RunPaths(root).attempt(a) / "result.json").read_text()))
        ws = summary.workspace
        assert ws is not None and ws.kept and ws.file == "workspace.tar.gz" and ws.workdir == "/app"
        assert len(ws.sha256 or "") == 64 and ws.bytes > 0 and set(ws.task_parts) >= {"tests", "instruction"}
        with tarfile.open(RunPaths(root).attempt(a) / ws.file) as tar:
            names = tar.getnames()
        if a.task == "hello-world" and a.arm == "mcp":
            assert "hello.txt" in names  # what the solving agent wrote, before the verifier ran


def test_regrade_runs_only_changed_tests_as_new_attempts_and_the_report_uses_them(
        finished_run: tuple[Path, Path]) -> None:
    root, tasks = finished_run
    code, _, err = invoke("regrade", str(root))
    assert code == 0 and "nothing to regrade" in err  # nothing changed: a no-op

    (tasks / "hello-world" / "tests" / "test.sh").write_text(LENIENT)
    instruction = tasks / "count-words" / "instruction.md"
    instruction.write_text(instruction.read_text() + "\nCount hyphenated words once.\n")
    before = Ledger.read_attempts(root)

    code, out, err = invoke("regrade", str(root), "--dry-run")
    assert code == 0, err
    lines = {line.split()[1]: line.split()[0] for line in out.splitlines()}
    assert lines == {"hello-world/baseline/1": "regrade", "hello-world/mcp/1": "regrade",
                     "count-words/baseline/1": "rerun", "count-words/mcp/1": "rerun"}
    assert "instruction changed" in out and "2 reuse" not in err and "2 regrade, 2 rerun" in err
    assert Ledger.read_attempts(root) == before  # a dry run writes nothing

    # count-words' instruction changed: a rerun's case. Asked for, it is refused whole.
    code, out, err = invoke("regrade", str(root))
    assert code == 2 and err.count("\n") == 1 and out == ""
    assert "2 cells of count-words changed beyond tests/ (instruction)" in err and "--tasks hello-world" in err
    assert Ledger.read_attempts(root) == before

    code, out, err = invoke("regrade", str(root), "--tasks", "hello-world")
    assert code == 0, err
    after = Ledger.read_attempts(root)
    assert after[:len(before)] == before  # the original rows as they were
    regrades = [a for a in after if a.kind == "regrade"]
    assert len(after) == len(before) + 2 and len(regrades) == 2
    by_source = {a.source_attempt: a for a in regrades}
    for row in before:
        if row.task == "hello-world":
            new = by_source[row.attempt_id]
            assert (new.cell_id, new.valid, new.reward, new.cost_usd, new.counts) == (row.cell_id, True, 1.0, 0.0,
                                                                                      False)
            assert new.task_checksum != row.task_checksum
    baseline = next(a for a in before if a.task == "hello-world" and a.arm == "baseline")
    assert baseline.reward == 0.0 and f"{baseline.attempt_id} -> {by_source[baseline.attempt_id].attempt_id}" in out

    code, report, err = invoke("report", str(root))
    assert code == 0, err
    assert "## Regraded rows" in report
    assert (f"| hello-world | baseline | 1 | {baseline.attempt_id} | {by_source[baseline.attempt_id].attempt_id} "
            "| 0.00 | 1.00 |") in report
    assert "| baseline | 2 | 2 | 0 | 1 | 0.500 |" in report  # hello-world's row now solved, count-words' not

    code, _, err = invoke("export", "harbor", str(root), "--out", str(root.parent / "harbor"))
    assert code == 0, err  # Harbor's viewer sees the regraded reward too, with the regrade's test output
    trials = [json.loads(p.read_text()) for p in (root.parent / "harbor").glob("*/*/result.json")]
    assert len(trials) == 4
    hello = [t["verifier_result"]["rewards"]["reward"] for t in trials if t["task_name"].endswith("hello-world")]
    assert hello == [1.0, 1.0]  # the baseline's 0.0 was regraded to 1.0

    code, _, err = invoke("regrade", str(root), "--tasks", "count-words")
    assert code == 2 and err.count("\n") == 1 and "need a rerun, not a regrade" in err and "--tasks" not in err
    code, _, err = invoke("regrade", str(root), "--tasks", "hello-world")
    assert code == 0 and "nothing to regrade" in err  # graded by these tests already: reuse
    assert len(Ledger.read_attempts(root)) == len(after)

    status = read_status(root)  # the ledger still folds: the regrades are not cells' attempts
    assert status.state == "finished" and status.counts["valid"] == 4 and status.counts["pending"] == 0
    assert status.solved == 3 and status.attempts == 6  # the regraded baseline row is solved now
    with Ledger.reading(root) as ledger:
        events = [e.event for e in ledger.events(Regraded)]
    assert sorted((e.task, e.arm, e.reward_before, e.reward_after) for e in events if isinstance(e, Regraded)) == [
        ("hello-world", "baseline", 0.0, 1.0), ("hello-world", "mcp", 1.0, 1.0)]

    # A lost ledger rebuilt from the attempts' result.json keeps the regrades as regrades.
    rows_before = {c: (r.attempt_id, r.reward, r.regraded_by, r.task_checksum)
                   for c, r in accepted_rows(Ledger.read_attempts(root)).items()}
    for made in root.glob("ledger.sqlite*"):
        made.rename(root.parent / made.name)
    code, _, err = invoke("ledger", "rebuild", str(root))
    assert code == 0, err
    rebuilt = Ledger.read_attempts(root)
    assert sorted((a.attempt_id, a.kind, a.source_attempt, a.valid, a.reward) for a in rebuilt) == sorted(
        (a.attempt_id, a.kind, a.source_attempt, a.valid, a.reward) for a in after)
    assert {c: (r.attempt_id, r.reward, r.regraded_by, r.task_checksum)  # the regrades' checksums too
            for c, r in accepted_rows(rebuilt).items()} == rows_before


def test_bad_input_is_one_line_and_writes_nothing(finished_run: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = finished_run
    before = Ledger.read_attempts(root)
    code, _, err = invoke("regrade", str(root), "--tasks", "no-such-task")
    assert code == 2 and err.count("\n") == 1 and "no task no-such-task" in err
    code, _, err = invoke("regrade", str(tmp_path / "nowhere"))
    assert code == 2 and "Traceback" not in err
    assert Ledger.read_attempts(root) == before


def test_a_live_driver_or_a_tampered_workspace_is_refused(finished_run: tuple[Path, Path]) -> None:
    root, tasks = finished_run
    (tasks / "hello-world" / "tests" / "test.sh").write_text(LENIENT)
    before = Ledger.read_attempts(root)
    with hold_lock(root):  # what a running `execute` holds
        code, _, err = invoke("regrade", str(root))
    assert code == 2 and "live `ray-bench execute` holds this run" in err and err.count("\n") == 1
    source = next(a for a in before if a.task == "hello-world" and a.arm == "mcp")
    with (RunPaths(root).attempt(source) / "workspace.tar.gz").open("ab") as tarball:
        tarball.write(b"\0")  # no longer the workspace its summary hashed
    code, out, err = invoke("regrade", str(root))
    assert code == 0, err
    assert f"kept workspace of {source.attempt_id} is missing or does not match the sha256" in err
    assert "hello-world/baseline/1:" in out and "hello-world/mcp/1:" not in out
    assert len(Ledger.read_attempts(root)) == len(before) + 1


def test_a_row_that_kept_no_workspace_needs_a_rerun(tmp_path: Path) -> None:
    arms = [{k: v for k, v in arm.items() if k != "keep_workspace"} for arm in ARMS]
    root, tasks = _run(tmp_path, arms, ["hello-world"])
    (tasks / "hello-world" / "tests" / "test.sh").write_text(LENIENT)
    code, _, err = invoke("regrade", str(root))
    assert code == 0 and "kept no workspace" in err and "keep_workspace" in err and "nothing to regrade" in err
    assert all(a.kind == "run" for a in Ledger.read_attempts(root))
