"""A task's environment/docker-compose.yaml as Harbor 0.26 reads it: a file that only restates
Harbor's main is the default container; anything else is a compose project; what Compose would
refuse from the file alone is one line and exit 2 at validate, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.compose_tasks import MAPPER_MAIN
from typer.testing import CliRunner

from ray_bench.cli.app import app
from ray_bench.config.compose import read_compose
from ray_bench.config.tasks import load_task
from ray_bench.errors import TaskDirError


def task_with(tmp_path: Path, compose: str, name: str = "docker-compose.yaml") -> Path:
    task = tmp_path / "t"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "instruction.md").write_text("do it\n")
    (task / "tests" / "test.sh").write_text("#!/bin/sh\n")
    (task / "environment" / "Dockerfile").write_text("FROM busybox\n")
    (task / "environment" / name).write_text(compose)
    return task


def test_harbor_mappers_main_with_network_none_restates_main(tmp_path: Path) -> None:
    project = read_compose(task_with(tmp_path, MAPPER_MAIN))
    assert project is not None and project.main_only and project.offline
    assert project.services == ("main",) and project.unsupported == ()


@pytest.mark.parametrize("main", [
    {"build": "."},
    {"build": {"context": "."}, "network_mode": "bridge"},
    {"image": "${PREBUILT_IMAGE_NAME}", "command": "sleep infinity"},
])
def test_other_spellings_of_harbors_main_restate_it(tmp_path: Path, main: dict[str, object]) -> None:
    project = read_compose(task_with(tmp_path, yaml.safe_dump({"services": {"main": main}})))
    assert project is not None and project.main_only and not project.offline


@pytest.mark.parametrize("compose", [
    {"services": {"main": {"environment": {"MODE": "fast"}}}},  # an env Harbor would set: not the default
    {"services": {"main": {"volumes": ["data:/data"]}}, "volumes": {"data": {}}},
    {"services": {"main": {"network_mode": "host"}}},
    {"services": {"main": {}, "db": {"image": "postgres:16"}}},
])
def test_anything_more_is_a_compose_project(tmp_path: Path, compose: dict[str, object]) -> None:
    project = read_compose(task_with(tmp_path, yaml.safe_dump(compose)))
    assert project is not None and not project.main_only


def test_a_main_built_elsewhere_is_unsupported(tmp_path: Path) -> None:
    compose = {"services": {"main": {"build": {"context": "app", "dockerfile": "Dockerfile.dev"}},
                            "db": {"image": "postgres:16"}}}
    project = read_compose(task_with(tmp_path, yaml.safe_dump(compose)))
    assert project is not None and project.unsupported and "app/Dockerfile.dev" in project.unsupported[0]


@pytest.mark.parametrize(("compose", "said"), [
    ("services: [main\n", "invalid YAML"),
    ("services: {}\n", "has no services"),
    ("services:\n  main: {}\n  db: {command: x}\n", "service 'db' has neither an image nor a build context"),
    ("services:\n  main: {depends_on: [cache]}\n", "depends on undefined service 'cache'"),
    ("services:\n  main: {network_mode: 'service:proxy'}\n", "undefined service 'proxy'"),
    ("services:\n  main: {networks: [back]}\n", "undefined network 'back'"),
    ("services:\n  main: {volumes: ['pgdata:/var/lib/x']}\n", "undefined volume 'pgdata'"),
])
def test_what_compose_would_refuse_is_one_line_at_validate(tmp_path: Path, compose: str, said: str) -> None:
    task = task_with(tmp_path, compose)
    with pytest.raises(TaskDirError, match=said):
        load_task(task)
    result = CliRunner().invoke(app, ["validate", str(task)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and said in lines[0] and "docker-compose.yaml" in lines[0], lines


def test_a_yml_file_is_not_read_as_harbor_does_not_and_is_warned(tmp_path: Path) -> None:
    task = load_task(task_with(tmp_path, "services:\n  main: {}\n  db: {image: x}\n", name="docker-compose.yml"))
    assert task.compose is None and not task.has_compose
    assert any("docker-compose.yml is not read" in w for w in task.warnings)


@pytest.mark.parametrize(("mode", "pinned"), [(None, None), ("none", False), ("bridge", True), ("host", True)])
def test_mains_network_mode_pins_its_network_in_every_phase(tmp_path: Path, mode: str | None,
                                                            pinned: bool | None) -> None:
    main = {"network_mode": mode} if mode else {}
    project = read_compose(task_with(tmp_path, yaml.safe_dump({"services": {"main": main}})))
    assert project is not None and project.pinned_network is pinned and project.offline is (pinned is False)
