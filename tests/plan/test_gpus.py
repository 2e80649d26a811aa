"""A GPU task plans on docker where the daemon has a GPU runtime (asked once, `docker info`), its
container then asked for with a device request; elsewhere one line names the need and the runtimes
the daemon has, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import docker.types
import pytest
from support.ray_local import TEST_ROUTES
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.cli.app import app
from ray_bench.plan.compile import PlanRequest, compile_plan
from ray_bench.sandboxes.base import Resources
from ray_bench.sandboxes.docker.backend import _limits


def _suite(tmp: Path) -> tuple[Path, Path]:
    suite, accounts = make_suite(tmp, tasks=["fizzbuzz"], backend="docker", backends={"docker": {"max_sandboxes": 2}})
    toml = tmp / "tasks" / "fizzbuzz" / "task.toml"
    toml.write_text(toml.read_text().replace('workdir = "/app"',
                                             'workdir = "/app"\ndocker_image = "debian:bookworm-slim"\ngpus = 1'))
    return suite, accounts


def _daemon(monkeypatch: pytest.MonkeyPatch, runtimes: list[str]) -> list[int]:
    """The SDK's `docker info` answers with these runtimes (its real shape); counts the calls."""
    calls: list[int] = []

    def info(self: Any) -> dict[str, Any]:
        calls.append(1)
        return {"Runtimes": {r: {"path": r} for r in runtimes}, "CDISpecDirs": None}

    monkeypatch.setattr(docker.DockerClient, "info", info)
    return calls


def test_plans_where_the_daemon_has_the_nvidia_runtime_and_asks_for_the_gpus(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _daemon(monkeypatch, ["io.containerd.runc.v2", "nvidia", "runc"])
    suite, accounts = _suite(tmp_path)
    plan = compile_plan(PlanRequest(suite=suite, accounts=accounts, run_id="r1", environ=dict(TEST_ROUTES)))
    assert {c.task for c in plan.cells} == {"fizzbuzz"} and calls == [1]
    (task,) = plan.tasks
    # what the cell's container is created with (cells/runner.py passes the task's gpus)
    limits = _limits(Resources(cpus=1, gpus=task.config.environment.gpus))
    assert limits["device_requests"] == [docker.types.DeviceRequest(count=1, capabilities=[["gpu"]])]


def test_refused_in_one_line_naming_the_runtimes_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _daemon(monkeypatch, ["io.containerd.runc.v2", "runc"])
    suite, accounts = _suite(tmp_path)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--runs-dir", str(runs)], env=dict(TEST_ROUTES))
    assert result.exit_code == 2, result.stderr
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert "task fizzbuzz: asks for 1 GPU(s); docker's runtimes here: io.containerd.runc.v2, runc (no nvidia" in line
    assert not runs.exists()
