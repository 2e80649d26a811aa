"""`ray-bench init DIR` writes a suite that validates and plans as written, with no warning; it
refuses a directory that is not empty, writing nothing. `ray-bench image base` builds the base image
the starter's task needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli import app
from ray_bench.commands.starter import env_prefix, suite_name, write_starter
from ray_bench.runroot import RunPaths
from ray_bench.validate import validate_paths


@pytest.mark.parametrize("backend", ["docker", "local"])
def test_the_starter_validates_and_plans_without_a_warning(tmp_path: Path, backend: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "my-suite"
    result = CliRunner().invoke(app, ["init", str(target), "--backend", backend])
    assert result.exit_code == 0, result.output
    assert "export MY_SUITE_KEY_A=" in result.output
    checked = list(validate_paths([target / "suite.yaml", target / "accounts.yaml", target / "tasks"]))
    assert [c.error for c in checked] == [None] * len(checked)
    assert not [w for c in checked for w in c.warnings]
    monkeypatch.setenv("MY_SUITE_KEY_A", "any-value")
    monkeypatch.setenv("MY_SUITE_KEY_B", "any-value")
    planned = plan_run(suite=target / "suite.yaml", accounts=target / "accounts.yaml", runs_dir=tmp_path / "runs",
                       run_id="first")
    assert planned.cells == 4  # 1 task x 2 arms x 2 repetitions
    receipt = RunPaths(planned.run_root).receipt.read_text()
    warned = receipt.split("## Warnings\n\n")[1].split("\n\n")[0].splitlines()
    if backend == "local":  # true of every task with a Dockerfile there (ray_bench.tasks.support.notices)
        assert warned == ["- task hello: environment/Dockerfile is not built on local: the task runs as host "
                          "processes, with what the host has installed"], warned
    else:
        assert warned == ["- none"], warned
    assert "| variant |" in receipt or "variant" in receipt.split("## Arms")[1]


def test_init_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("mine")
    result = CliRunner().invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.count("error:") == 1 and "not an empty directory" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["kept.txt"]
    afile = tmp_path / "kept.txt"
    assert CliRunner().invoke(app, ["init", str(afile)]).exit_code == 2


def test_names_come_from_the_directory(tmp_path: Path) -> None:
    assert suite_name(tmp_path / "evals.v2") == "evals.v2"
    assert env_prefix("evals.v2") == "EVALS_V2"
    assert env_prefix("2024-run") == "SUITE_2024_RUN"
    assert suite_name(tmp_path / "-odd") == "my-suite"
    written = write_starter(tmp_path / "evals.v2", backend="local")
    accounts = (tmp_path / "evals.v2" / "accounts.yaml").read_text()
    assert "EVALS_V2_KEY_A" in accounts and "{" + "prefix" not in accounts
    assert all(p.stat().st_size > 0 for p in written)


@pytest.mark.docker
def test_image_base_builds_the_image_the_starter_task_is_from(docker_client: Any, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["image", "base"])
    assert result.exit_code == 0, result.output
    tag = result.output.strip()
    docker_client.images.get(tag)  # raises when absent
    write_starter(tmp_path / "s")
    assert f"FROM {tag}" in (tmp_path / "s" / "tasks" / "hello" / "environment" / "Dockerfile").read_text()
