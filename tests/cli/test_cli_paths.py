"""The operator's path through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.cli import app


def test_plan_prints_identity_and_execute_refuses_wrong_confirmation(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s")
    runner = CliRunner()
    planned = runner.invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts), "--run-id", "r1",
                                  "--runs-dir", str(tmp_path / "runs")])
    assert planned.exit_code == 0, planned.output
    identity = planned.stdout.strip().splitlines()[-1]
    assert identity.startswith("sha256:") and len(identity) == 71
    plan = tmp_path / "runs" / "r1" / "launch-plan.json"
    before = sorted(p.name for p in plan.parent.iterdir())
    wrong = "sha256:" + "0" * 64
    for args in (["--confirm", wrong], [], ["--confirm", "yes"]):
        result = runner.invoke(app, ["execute", "--plan", str(plan), *args])
        assert result.exit_code == 2
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ")
        assert "Traceback" not in result.output
    assert sorted(p.name for p in plan.parent.iterdir()) == before  # nothing written, no ledger


def test_bad_suite_is_one_line_per_problem_and_writes_nothing(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s")
    suite.write_text(suite.read_text().replace("reps: 1", "reps: 0\nbogus_key: 1"))
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2
    *lines, tally = result.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(f"error: {suite}:") for line in lines)
    assert tally == "2 problems; nothing was written"
    assert not (tmp_path / "runs").exists()


# The quickstart end to end (its output, report, receipt and `status --json`) is checked on the
# first of the three quickstarts in tests/cli/test_quickstart_state.py: one local Ray start and
# 32-cell run fewer than a quickstart of its own.


@pytest.mark.docker
@pytest.mark.slow
def test_docker_backend_run_leaves_no_container(tmp_path: Path, docker_client: object, base_image: str) -> None:
    # the driver and runner in this process (no Ray): the subject is the docker backend's run
    from support.runs import ledger_rows
    from support.runs import plan_and_run_here as plan_and_run

    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "fizzbuzz"], backend="docker",
        backends={"docker": {"image": base_image, "max_sandboxes": 2,
                             "resources": {"cpus": 0.5, "memory_mb": 128, "pids": 128}}})
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs", run_id="docker-run")
    assert outcome.exit_code == 0, outcome
    _attempts, rows = ledger_rows(root)
    assert len(rows) == 4
    receipt = (root / "receipt.md").read_text()
    assert "host admission fits" in receipt
    left = docker_client.containers.list(all=True, filters={"label": "ray-bench.run=docker-run"})  # type: ignore[attr-defined]
    assert left == []


def test_bad_account_cooldown_is_one_line_and_exit_2(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", accounts=[
        {"name": "acct-a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
         "limits": {"max_concurrent": 3, "cooldown_s": 0}}])
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith(f"error: {accounts}:") and "cooldown_s" in lines[0], lines
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()
