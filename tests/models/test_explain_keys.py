"""`ray-bench validate --explain KEY`: a task.toml key's meaning from the schema itself, the hint a
task error gives (installed help, not a path inside this repository)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ray_bench.cli.app import app
from ray_bench.errors import UserInputError
from ray_bench.models.task.explain import explain_key

CORPUS = Path(__file__).parents[1] / "tasks" / "corpus"


def test_a_key_and_the_keys_below_it_are_explained() -> None:
    assert explain_key("environment.memory_mb") == ["environment.memory_mb: Memory limit, MiB. "
                                                    "[int | NoneType, default None]"]
    lines = explain_key("environment")
    assert lines[0].startswith("environment: ") and "a table" in lines[0]
    assert any(line.strip().startswith("environment.docker_image: A prebuilt image.") for line in lines)
    assert explain_key("steps[0].agent.timeout_sec")[0].startswith("steps.agent.timeout_sec: Agent time limit")
    assert "default 'public'" in explain_key("environment.network_mode")[0]


@pytest.mark.parametrize(("key", "says"), [("environment.nope", "has no key 'environment.nope'"),
                                           ("environment.cpus.x", "environment.cpus has no keys below it"),
                                           ("", "needs a task.toml key")])
def test_an_unknown_key_is_one_clear_error(key: str, says: str) -> None:
    with pytest.raises(UserInputError) as info:
        explain_key(key)
    assert says in info.value.line()


def test_a_task_error_points_at_the_explain_command_for_its_key(tmp_path: Path) -> None:
    task = tmp_path / "t"
    shutil.copytree(CORPUS / "legacy" / "minimal", task)
    (task / "task.toml").write_text('[environment]\ncpus = "two"\n')
    result = CliRunner().invoke(app, ["validate", str(task)])
    assert result.exit_code == 2
    assert "see `ray-bench validate --explain environment.cpus`" in result.stderr
    assert "docs/" not in result.stderr
    explained = CliRunner().invoke(app, ["validate", "--explain", "environment.cpus"])
    assert explained.exit_code == 0 and explained.stdout.startswith("environment.cpus: CPUs.")
