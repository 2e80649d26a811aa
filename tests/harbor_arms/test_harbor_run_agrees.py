"""The same tasks run by Harbor's own ``harbor run`` (its Trial, oracle agent and verifier) and
by ray-bench (plan, the driver on Ray, an ``agent: harbor`` oracle arm) on docker give the same
rewards per task, a broken solution's 0 included (issue 32's measurement), and every key of a
multi-key ``reward.json`` (Harbor's cookbook ``multi-reward`` shape; issue 52).

Harbor's own docker environment needs ``docker compose``, which Debian's docker.io here lacks, so
``harbor run`` gets the one hook Harbor documents for other sandboxes, ``--env MODULE:CLASS``:
:class:`support.harbor_docker_env.RayBenchDockerEnvironment`, a ray-bench docker container."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.harbor_run import harbor_oracle_rewards
from support.ray_local import set_test_routes
from support.runs import ledger_rows, plan_and_run

from ray_bench.runroot import RunPaths
from ray_bench.sandboxes.base import LABEL_RUN
from ray_bench.tasks.rewards import headline

pytestmark = [pytest.mark.harbor, pytest.mark.docker, pytest.mark.ray, pytest.mark.slow]
QUICKSTART = Path(__file__).parents[2] / "ray_bench" / "examples" / "quickstart" / "tasks"
TASKS = ["hello-world", "count-words", "reverse-text"]
#: A Daytona credential route for the in-process run (the fixture accepts only this value).
KEY_ENV = "RAY_BENCH_TEST_AGREE_DAYTONA_KEY"
os.environ.setdefault(KEY_ENV, "fake-daytona-agree-key")
set_test_routes()  # before Ray starts, so its workers inherit the routes


#: A verifier writing two keys and no ``reward`` (both files: Harbor reads reward.json first).
MULTI_KEY_TEST = """#!/bin/sh
out="${LOGS_DIR:-/logs}/verifier"
mkdir -p "$out"
if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then ok=1; else ok=0; fi
echo 0 > "$out/reward.txt"
printf '{"correctness": %s, "performance": 0.5}\\n' "$ok" > "$out/reward.json"
"""


def _tasks(root: Path, image: str) -> dict[str, dict[str, float]]:
    """The quickstart tasks on ``image``, one whose solution is wrong and one with a multi-key
    reward: their expected rewards."""
    for name in TASKS:
        shutil.copytree(QUICKSTART / name, root / name)
    shutil.copytree(QUICKSTART / "count-words", root / "count-words-broken")
    (root / "count-words-broken" / "solution" / "solve.sh").write_text("#!/bin/sh\necho 8 > count.txt\n")
    shutil.copytree(QUICKSTART / "hello-world", root / "multi-reward")
    (root / "multi-reward" / "tests" / "test.sh").write_text(MULTI_KEY_TEST)
    for task in root.iterdir():
        toml = task / "task.toml"
        toml.write_text(toml.read_text().replace('workdir = "/app"', f'workdir = "/app"\ndocker_image = "{image}"'))
    return {**{t: {"reward": 1.0} for t in TASKS}, "count-words-broken": {"reward": 0.0},
            "multi-reward": {"correctness": 1.0, "performance": 0.5}}


@pytest.fixture(scope="module")
def agreed(tmp_path_factory: pytest.TempPathFactory, base_image: str) -> tuple[Path, dict[str, dict[str, float]]]:
    """The tasks, and what Harbor's own ``harbor run`` gave each (checked against the expected)."""
    root = tmp_path_factory.mktemp("agree")
    tasks = root / "tasks"
    tasks.mkdir()
    expected = _tasks(tasks, base_image)
    harbor = harbor_oracle_rewards(tasks, root / "jobs")
    assert harbor == expected
    return tasks, harbor


def _ray_bench(tmp_path: Path, tasks: Path, backend: str, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    suite = {"name": "agree", "task_roots": [str(tasks)], "backend": backend, "preflight_cells": 0,
             "max_attempts": 1, "backends": {backend: {"max_sandboxes": 2, "options": options}},
             "arms": [{"name": "oracle", "role": "baseline", "agent": "harbor", "harbor_agent": "oracle"}]}
    route = {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}
    accounts = {"accounts": [{"name": "a", "route": route, "limits": {"max_concurrent": 2}}]}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    (tmp_path / "accounts.yaml").write_text(yaml.safe_dump(accounts))
    outcome, root = plan_and_run(tmp_path / "suite.yaml", tmp_path / "accounts.yaml", tmp_path / "runs")
    attempts, rows = ledger_rows(root)
    ours: dict[str, dict[str, float]] = {}
    for row in rows.values():
        if row.valid:
            summary = json.loads((RunPaths(root).attempt(row) / "result.json").read_text())
            ours[row.task] = summary["rewards"]
            assert row.reward == headline(summary["rewards"])  # the row's one number: correctness here
    return (outcome.detail, [(a.task, a.failure_class) for a in attempts]), ours


def test_harbor_run_and_ray_bench_on_docker_give_each_task_the_same_reward(
        tmp_path: Path, agreed: tuple[Path, dict[str, dict[str, float]]], docker_client: Any) -> None:
    tasks, harbor = agreed
    said, ours = _ray_bench(tmp_path, tasks, "docker", {})
    assert ours == harbor, said
    from support.harbor_docker_env import RUN_LABEL  # imports Harbor: the 3.11 pass only collects this file

    assert docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={RUN_LABEL}"}) == []


def test_ray_bench_on_daytona_gives_each_task_harbors_reward(
        tmp_path: Path, agreed: tuple[Path, dict[str, dict[str, float]]], docker_client: Any, base_image: str) -> None:
    """Harbor's oracle unchanged on daytona (the real SDK against the local fixture server)."""
    pytest.importorskip("daytona", reason="the daytona extra is not installed")
    from support.daytona_server import DaytonaServer

    tasks, harbor = agreed
    server = DaytonaServer(docker_client=docker_client, default_image=base_image,
                           api_key=os.environ[KEY_ENV]).start()
    try:
        said, ours = _ray_bench(tmp_path, tasks, "daytona", {"api_url": server.api_url, "api_key_env": KEY_ENV})
        assert ours == harbor, said
        assert server.containers() == []
    finally:
        server.stop()
