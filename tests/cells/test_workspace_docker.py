"""keep_workspace and a regrade on docker (busybox): the workspace comes out of one container
through ``get_dir`` and goes into a fresh one through ``put_dir``, where only the verifier runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from support.specs import run_on_docker
from support.suites import make_suite

from ray_bench.cells.spec import AttemptSpec
from ray_bench.cells.workspace import WORKSPACE_FILE, RegradeSource

pytestmark = [pytest.mark.docker]


def test_a_docker_workspace_is_kept_and_regraded_in_a_fresh_container(tmp_path: Path, docker_client: Any,
                                                                      base_image: str) -> None:
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    spec = AttemptSpec(
        run_id="wsrun", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="a", rep=1, account="acct",
        task_path=str(tmp_path / "suite" / "tasks" / "hello-world"), stage_key=str(tmp_path),
        attempt_dir=str(tmp_path / "a1"), backend="docker", backend_options={},
        agent_command='echo "Hello, world" > hello.txt', agent_env={}, agent_dir=None, route_env={},
        route_home=None, agent_timeout_sec=30, verifier_timeout_sec=30, verifier_env={}, image=base_image,
        build_context=None, workdir="/app", network=False, cpus=None, memory_mb=256, pids=None,
        expose_solution=False, artifact_cap_bytes=1 << 20, seed="s", keep_workspace=True)

    first = run_on_docker(spec)
    assert first.error is None and first.reward == 0.0  # no comma: the task's verifier says unsolved
    assert first.workspace is not None and first.workspace.kept and first.workspace.workdir == "/app"
    tests = tmp_path / "suite" / "tasks" / "hello-world" / "tests" / "test.sh"
    tests.write_text('#!/bin/sh\nmkdir -p /logs/verifier\n'
                     'grep -q "^Hello" /app/hello.txt && echo 1 > /logs/verifier/reward.txt || '
                     'echo 0 > /logs/verifier/reward.txt\n')
    again = run_on_docker(dataclasses.replace(spec, attempt_id="c-a2", attempt_dir=str(tmp_path / "a2"),
                                              keep_workspace=False),
                          regrade=RegradeSource("c-a1", tmp_path / "a1" / WORKSPACE_FILE, "/app"))
    assert again.error is None and again.regrade_of == "c-a1" and again.agent is None
    assert again.reward == 1.0 and again.sandbox_id != first.sandbox_id
