"""A task whose agent phase has an allowlist: docker and daytona plan it (they enforce one); a backend
that cannot says so in one line naming them, and the hint it gives can be followed: arms that open
the agent's phase (`network: public`) leave the task's list unused, and the plan goes through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.ray_local import TEST_ROUTES
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.cli.app import app

ALLOWLIST = '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["api.anthropic.com", "*.pypi.org"]\n'


def _plan(tmp: Path, backend: str, **arm: Any) -> Any:
    arms = [{"name": "baseline", "role": "baseline", "command": "true", **arm},
            {"name": "mcp", "role": "variant", "command": "true", **arm}]
    suite, accounts = make_suite(tmp, tasks=["hello-world"], backend=backend, arms=arms,
                                 backends={backend: {"max_sandboxes": 2, "image": "debian:bookworm-slim"}})
    toml = tmp / "tasks" / "hello-world" / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\ntimeout_sec = 60.0\n", "") + ALLOWLIST)
    return CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts), "--run-id", "r1",
                                    "--runs-dir", str(tmp / "runs")], env=dict(TEST_ROUTES))


@pytest.mark.parametrize("backend", ["docker", "daytona"])
def test_docker_and_daytona_plan_an_agent_allowlist_of_host_names(tmp_path: Path, backend: str) -> None:
    result = _plan(tmp_path, backend)
    assert result.exit_code == 0, result.output


def test_a_backend_without_one_refuses_in_one_line_naming_docker_and_network_public(tmp_path: Path) -> None:
    result = _plan(tmp_path, "local")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if "allowlist" in line]
    assert len(lines) == 1, result.stderr
    assert "backend local cannot enforce one: run it on daytona or docker" in lines[0] and "network: public" in lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("backend", ["local"])
def test_following_the_hint_plans(tmp_path: Path, backend: str) -> None:
    result = _plan(tmp_path, backend, network="public")
    assert result.exit_code == 0, result.output
