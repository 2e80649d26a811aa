"""A separate verifier on docker: the agent's container, then a second one built from the task's
``tests/Dockerfile`` with its own memory limit, network and env, handed the task's artifacts and
``/logs/artifacts`` (nothing else), deleted like the agent's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.separate_verifier import write_separate_verifier_task
from support.specs import run_on_docker

from ray_bench.cells.spec import AttemptSpec
from ray_bench.config.tasks import load_task
from ray_bench.sandboxes import run_labels
from ray_bench.sandboxes.docker import DockerBackend

pytestmark = [pytest.mark.docker]


def _left(run_id: str) -> list[Any]:
    async def go() -> list[Any]:
        backend = DockerBackend()
        try:
            return list(await backend.list(run_labels(run_id)))
        finally:
            await backend.close()

    return asyncio.run(go())


def test_a_separate_verifier_runs_in_its_own_container_with_what_harbor_hands_it(
        tmp_path: Path, docker_client: Any, base_image: str) -> None:
    task = load_task(write_separate_verifier_task(tmp_path / "sep", base_image))
    spec = AttemptSpec(
        run_id="seprun", attempt_id="c-a1", cell_id="c", task_id=task.id, arm="oracle", rep=1, account="acct",
        task_path=task.path, stage_key=task.checksum, attempt_dir=str(tmp_path / "a1"), backend="docker",
        backend_options={}, agent_command='sh "$SOLUTION_DIR/solve.sh"', agent_env={}, agent_dir=None,
        route_env={}, route_home=None, agent_timeout_sec=60, verifier_timeout_sec=60, verifier_env={},
        image=base_image, build_context=None, workdir=None, network=True, cpus=None, memory_mb=256, pids=None,
        expose_solution=True, artifact_cap_bytes=1 << 20, seed="s", task_config=task.config)

    summary = run_on_docker(spec)

    assert summary.error is None and summary.cleanup_error is None, summary.error
    seen = (tmp_path / "a1" / "logs" / "verifier" / "seen.txt").read_text().splitlines()
    assert summary.reward == 1.0, seen
    assert {"answer", "notes", "convention", "own-image", "env"} <= set(seen)
    assert not [line for line in seen if "leaked" in line]  # no scratch file, no excluded file, no network
    assert "memory 134217728" in seen and "cwd /grade" in seen  # its own limit, its image's WORKDIR
    assert summary.verifier_sandbox_id and summary.verifier_sandbox_id != summary.sandbox_id
    assert {"handover", "verifier_create", "verifier"} <= set(summary.phases)
    assert (tmp_path / "a1" / "logs" / "agent").is_dir()  # the agent's logs came out before its container went
    assert _left("seprun") == []  # both containers are gone, as `ray-bench audit` would find them
