"""Sandboxes start where the image says (issue 53; DESIGN, fourth round): the same task on an
image with ``USER 1234`` and ``WORKDIR /srv/repo`` holding the repo runs on ``docker`` and on
``daytona`` (the local server) with the agent and the verifier in ``/srv/repo`` as uid 1234,
seeing the repo, and the same reward; no path is moved. And Daytona's default snapshot (user
``daytona``, no WORKDIR) starts in the user's HOME."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

from support.daytona_fixtures import KEY_ENV, backend_for
from support.daytona_server import DaytonaServer

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes import make_backend
from ray_bench.sandboxes.base import SandboxSpec, run_labels
from ray_bench.sandboxes.daytona.harness import final_user

pytestmark = [pytest.mark.docker, pytest.mark.daytona]

SEEN = "{ pwd; id -u; ls; } > /logs/agent/seen.txt && echo done > answer.txt"
# The verifier, as a task hard-codes it: Harbor's paths, run wherever the image starts it.
TEST_SH = """#!/bin/sh
mkdir -p /logs/verifier
if [ "$(pwd)" = /srv/repo ] && [ "$(id -u)" = 1234 ] && [ -f README ] && [ "$(cat answer.txt)" = done ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


@pytest.fixture(scope="module")
def nonroot_image(docker_client: Any, base_image: str) -> str:
    dockerfile = (f"FROM {base_image}\nRUN mkdir -p /srv/repo && echo the repo > /srv/repo/README && "
                  "chown -R 1234 /srv/repo\nUSER 1234\nWORKDIR /srv/repo\n")
    tag = "ray-bench-test-nonroot:1234"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    return tag


def _task(root: Path) -> Path:
    task = root / "task"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 30.0\n')
    (task / "instruction.md").write_text("write answer.txt\n")
    (task / "tests" / "test.sh").write_text(TEST_SH)
    return task


def _attempt(tmp: Path, backend: str, options: dict[str, Any], image: str) -> AttemptSummary:
    spec = AttemptSpec(
        run_id="nonroot", attempt_id=f"{backend}-a1", cell_id="c", task_id="t", arm="a", rep=1, account="acct",
        task_path=str(_task(tmp)), stage_key=str(tmp), attempt_dir=str(tmp / "attempt"), backend=backend,
        backend_options=options, agent_command=SEEN, agent_env={}, agent_dir=None, route_env={}, route_home=None,
        agent_timeout_sec=60, verifier_timeout_sec=60, verifier_env={}, image=image, build_context=None,
        workdir=None, network=False, cpus=None, memory_mb=256, pids=None, expose_solution=False,
        artifact_cap_bytes=1 << 20, seed="s")

    async def go() -> AttemptSummary:
        impl = make_backend(backend, **options)
        try:
            return await run_attempt(spec, impl)
        finally:
            await impl.close()

    return asyncio.run(go())


def test_a_non_root_task_starts_in_the_image_workdir_as_its_user_on_docker_and_daytona(
        tmp_path: Path, server: DaytonaServer, nonroot_image: str) -> None:
    seen = {}
    for backend, options in (("docker", {}), ("daytona", {"api_url": server.api_url, "api_key_env": KEY_ENV})):
        summary = _attempt(tmp_path / backend, backend, options, nonroot_image)
        assert summary.error is None, (backend, summary.error)
        assert summary.reward == 1.0, (backend, summary.verifier)
        seen[backend] = (tmp_path / backend / "attempt" / "logs" / "agent" / "seen.txt").read_text()
    assert seen["daytona"] == seen["docker"] == "/srv/repo\n1234\nREADME\n"


def test_the_default_snapshot_starts_in_the_users_home_with_the_harness_dirs(server: DaytonaServer) -> None:
    async def main() -> str:
        backend = backend_for(server)
        try:
            sbx = await backend.create(SandboxSpec(labels=run_labels("nonroot-home"), workdir=None))
            try:
                await sbx.put_file(b"x", "/logs/agent/usage.json")
                got = await sbx.exec("pwd; id -u; cat /logs/agent/usage.json; touch /logs/verifier/r", timeout=30)
                assert got.exit_code == 0, got.stderr
                return got.stdout
            finally:
                await sbx.delete()
        finally:
            await backend.close()

    assert asyncio.run(main()) == "/home/daytona\n1000\nx"


def test_a_dockerfiles_final_user_is_the_last_user_of_its_last_stage() -> None:
    assert final_user("FROM a\nUSER 1234\nRUN x\n") == "1234"
    assert final_user("FROM a AS b\nUSER dev\nFROM b\nRUN x\n") is None  # the last stage names none
    assert final_user("from a\nuser root\nUSER dev:dev\n") == "dev:dev"
