"""A task with a separate verifier plans on docker (its verifier's size counts in host admission)
and is refused in one line where the backend makes no second sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.ray_local import set_test_routes
from support.separate_verifier import write_separate_verifier_task

from ray_bench.errors import ConfigError, MultipleInputErrors, UserInputError
from ray_bench.plan.compile import PlanRequest, compile_plan


def _plan(tmp_path: Path, backend: str, verifier_memory_mb: int = 128) -> object:
    set_test_routes()
    task = write_separate_verifier_task(tmp_path / "tasks" / "sep", "ray-bench-base:busybox")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 128", f"memory_mb = {verifier_memory_mb}"))
    suite = {"name": "s", "tasks_dir": "tasks", "backend": backend, "preflight_cells": 0,
             "arms": [{"name": "oracle", "role": "baseline", "command": 'sh "$SOLUTION_DIR/solve.sh"',
                       "expose_solution": True}]}
    accounts = {"accounts": [{"name": "a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                              "limits": {"max_concurrent": 1}}]}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    (tmp_path / "accounts.yaml").write_text(yaml.safe_dump(accounts))
    return compile_plan(PlanRequest(suite=tmp_path / "suite.yaml", accounts=tmp_path / "accounts.yaml", run_id="r"))


def test_a_separate_verifier_plans_on_docker_and_its_size_counts(tmp_path: Path) -> None:
    plan = _plan(tmp_path / "ok", "docker")
    assert [c.task for c in plan.cells] == ["sep"]  # type: ignore[attr-defined]
    assert any("128 MiB each" in line for line in plan.capacity.lines)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"task sep .* asks for unlimited CPUs / 99999999 MiB"):
        _plan(tmp_path / "big", "docker", verifier_memory_mb=99_999_999)


def test_local_refuses_a_separate_verifier_in_one_line(tmp_path: Path) -> None:
    with pytest.raises((UserInputError, MultipleInputErrors)) as info:
        _plan(tmp_path, "local")
    assert "task sep: verifier asks for a separate verifier container; backend local does not run one" \
        in str(info.value)


def test_the_receipt_says_which_tasks_verify_apart(tmp_path: Path) -> None:
    from ray_bench.commands.receipt import render_receipt

    receipt = render_receipt(_plan(tmp_path, "docker"), "sha256:x")  # type: ignore[arg-type]
    assert "- `sep` (1 cells; its verifier runs in a sandbox of its own)" in receipt
