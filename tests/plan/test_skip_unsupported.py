"""`plan --skip-unsupported` leaves out the tasks the backend cannot run, listing each with its
reason in the receipt and counting them in its header; without it every problem of every task
is listed in one pass, with a tally line."""

from __future__ import annotations

from pathlib import Path

from support.ray_local import TEST_ROUTES
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.cli.app import app
from ray_bench.commands.receipt import render_receipt
from ray_bench.plan.compile import PlanRequest, compile_plan


def _suite(tmp: Path) -> tuple[Path, Path]:
    suite, accounts = make_suite(tmp, tasks=["hello-world", "fizzbuzz", "sum-list", "count-words"],
                                 backend="docker", backends={"docker": {"max_sandboxes": 2}})
    # count-words names no image and has no Dockerfile: no container could start (issue 52)
    image = 'docker_image = "debian:bookworm-slim"'
    for task, extra in (("hello-world", image), ("fizzbuzz", f"{image}\ngpus = 1"),
                        ("sum-list", f'{image}\nos = "windows"')):
        toml = tmp / "tasks" / task / "task.toml"
        toml.write_text(toml.read_text().replace('workdir = "/app"', f'workdir = "/app"\n{extra}'))
    tests = tmp / "tasks" / "sum-list" / "tests"  # a Windows task's verifier, as Harbor requires
    (tests / "test.bat").write_text((tests / "test.sh").read_text())
    return suite, accounts


def test_skipped_tasks_are_left_out_and_listed_with_their_reasons(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path)
    plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES),
                                    skip_unsupported=True))
    assert {t.id for t in plan.tasks} == {"hello-world"} and {c.task for c in plan.cells} == {"hello-world"}
    reasons = {s.id: s.reason for s in plan.skipped}
    assert set(reasons) == {"fizzbuzz", "sum-list", "count-words"}
    assert "GPU" in reasons["fizzbuzz"] and "windows" in reasons["sum-list"].lower()
    assert "neither [environment] docker_image nor environment/Dockerfile" in reasons["count-words"]
    receipt = render_receipt(plan, "sha256:x")
    assert "tasks left out (--skip-unsupported): 3" in receipt
    assert "| fizzbuzz |" in receipt and "| sum-list |" in receipt


def test_without_it_every_problem_is_listed_once_with_a_tally_and_nothing_written(tmp_path: Path) -> None:
    suite, accounts = _suite(tmp_path)
    broken = tmp_path / "tasks" / "hello-world" / "task.toml"
    broken.write_text(broken.read_text().replace("timeout_sec = 60.0", "timeout_sec = -1"))
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--runs-dir", str(runs)], env=dict(TEST_ROUTES))
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 4, result.stderr  # the broken task.toml, the GPU, Windows and image-less tasks
    assert any("hello-world" in ln and "timeout_sec" in ln for ln in lines)
    assert any("fizzbuzz" in ln for ln in lines) and any("sum-list" in ln for ln in lines)
    assert any("count-words" in ln and "nothing to start its container from" in ln for ln in lines)
    assert result.stderr.rstrip().endswith("4 problems; nothing was written")
    assert not runs.exists()


def test_skipping_every_task_is_refused_in_one_line(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path, tasks=["fizzbuzz"], backend="docker",
                                 backends={"docker": {"max_sandboxes": 2}})
    toml = tmp_path / "tasks" / "fizzbuzz" / "task.toml"
    toml.write_text(toml.read_text().replace('workdir = "/app"', 'workdir = "/app"\ngpus = 1'))
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts), "--runs-dir",
                                      str(tmp_path / "runs"), "--skip-unsupported"], env=dict(TEST_ROUTES))
    assert result.exit_code == 2
    assert "--skip-unsupported leaves no task" in result.stderr and len(result.stderr.strip().splitlines()) == 1
