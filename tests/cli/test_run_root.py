"""A run root only grows: nothing writes over its plan, receipt, ledger or attempts, and its
one lock is never emptied by a process that does not hold it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli import app
from ray_bench.errors import UserInputError
from ray_bench.runroot import hold_lock, lock_holder

runner = CliRunner()


def _planned(tmp_path: Path, run_id: str = "ok") -> tuple[Path, str, Path, Path]:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id=run_id)
    return planned.run_root, planned.identity, suite, accounts


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


def _one_error_line(result: object) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]  # type: ignore[attr-defined]
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_execute_refuses_attempt_directories_without_a_ledger(tmp_path: Path) -> None:
    root, identity, _, _ = _planned(tmp_path)
    (root / "attempts" / "cell-a1").mkdir(parents=True)
    (root / "attempts" / "cell-a1" / "agent-output.txt").write_text("earlier evidence")
    before = _snapshot(root)
    line = _one_error_line(runner.invoke(app, ["execute", "--plan", str(root / "launch-plan.json"),
                                               "--confirm", identity, "--no-metrics"]))
    assert "no ledger" in line and f"ray-bench ledger rebuild {root}" in line
    assert _snapshot(root) == before and not (root / ".execute.lock").exists()


def test_plan_refuses_a_run_root_with_attempts_and_a_replan_writes_nothing(tmp_path: Path) -> None:
    root, identity, suite, accounts = _planned(tmp_path)
    before = _snapshot(root)
    again = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="ok")
    assert again.identity == identity and _snapshot(root) == before  # same plan: files untouched
    (root / "attempts" / "cell-a1").mkdir(parents=True)
    with pytest.raises(UserInputError, match="ledger rebuild"):
        plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="ok")


@pytest.mark.parametrize("target", ["launch-plan.json", "topup.json", "attempts/x.json"])
def test_gaps_out_into_a_run_root_is_refused(tmp_path: Path, target: str) -> None:
    root, _, suite, _ = _planned(tmp_path)
    before = _snapshot(root)
    line = _one_error_line(runner.invoke(app, ["gaps", "--suite", str(suite), "--runs", str(tmp_path / "runs"),
                                               "--target", "2", "--out", str(root / target)]))
    assert f"inside run root {root}" in line
    assert _snapshot(root) == before


def test_report_out_into_a_run_root_is_refused(tmp_path: Path) -> None:
    root, _, _, _ = _planned(tmp_path)
    before = _snapshot(root)
    line = _one_error_line(runner.invoke(app, ["report", "--runs", str(root), "--out", str(root / "lineage")]))
    assert "report --out" in line and f"inside run root {root}" in line
    assert _snapshot(root) == before and not (root / "lineage").exists()


def test_a_refused_second_driver_leaves_the_lock_and_its_pid_alone(tmp_path: Path) -> None:
    root, identity, _, _ = _planned(tmp_path)
    with hold_lock(root):
        assert lock_holder(root).pid == os.getpid()
        with pytest.raises(UserInputError, match="another `ray-bench execute`"), hold_lock(root):
            pass
        line = _one_error_line(runner.invoke(app, ["execute", "--plan", str(root / "launch-plan.json"),
                                                   "--confirm", identity, "--no-metrics"]))
        assert "another `ray-bench execute` is running this plan" in line
        holder = lock_holder(root)
        assert holder.held and holder.pid == os.getpid()  # not emptied by the refused ones
    assert not lock_holder(root).held


def _mount_tmpfs(path: Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return os.system(f"mount -t tmpfs -o {options} tmpfs {path} 2>/dev/null") == 0


def test_a_read_only_run_root_is_one_line(tmp_path: Path) -> None:
    mounted = tmp_path / "ro"
    if not _mount_tmpfs(mounted, "size=4m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"])
        planned = plan_run(suite=suite, accounts=accounts, runs_dir=mounted, run_id="ro")
        assert os.system(f"mount -o remount,ro {mounted}") == 0
        line = _one_error_line(runner.invoke(app, ["execute", "--plan", str(planned.run_root / "launch-plan.json"),
                                                   "--confirm", planned.identity, "--no-metrics"]))
        assert "read-only filesystem" in line and "unexpected" not in line
    finally:
        os.system(f"umount {mounted}")
