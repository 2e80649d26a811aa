"""A task whose phases differ in network on Daytona (the real SDK against the local fixture
server): made as the runner makes it, its network follows the phases through
``update_network_settings``: setup offline, the agent on a list of host names, the verifier
public. Each phase checks what it reaches; the reward is 1 only when each saw its own network."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.daytona_fixtures import backend_for, fresh_server, server, two_hosts  # noqa: F401

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.config.tasks import load_task
from ray_bench.tasks.network import needs_network

pytestmark = [pytest.mark.docker, pytest.mark.daytona]

TASK = """schema_version = "1.4"

[task]
name = "ray-bench/network-phases"

[environment]
docker_image = "{image}"
network_mode = "no-network"

[environment.healthcheck]
command = "! nc -w 2 unlisted.test {port} </dev/null"
retries = 1

[agent]
timeout_sec = 60
network_mode = "allowlist"
allowed_hosts = ["*.listed.test"]

[verifier]
timeout_sec = 60
network_mode = "public"
"""

SOLVE = """#!/bin/sh
mkdir -p /logs/agent
echo "listed $(nc -w 3 api.listed.test {port} </dev/null)" > /logs/agent/seen.txt
echo "unlisted $(nc -w 3 unlisted.test {port} </dev/null)" >> /logs/agent/seen.txt
"""

TEST = """#!/bin/sh
echo "verifier $(nc -w 3 unlisted.test {port} </dev/null)" > /logs/verifier/seen.txt
if grep -qx "listed hi" /logs/agent/seen.txt && grep -qx "unlisted " /logs/agent/seen.txt \\
   && grep -qx "verifier hi" /logs/verifier/seen.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def test_a_daytona_sandboxs_network_follows_its_phases(
        tmp_path: Path, server: Any, base_image: str, docker_client: Any) -> None:  # noqa: F811
    pytest.importorskip("daytona", reason="the daytona extra is not installed")
    with two_hosts(server, docker_client, base_image) as port:
        root = tmp_path / "phases"
        for sub in ("tests", "solution", "environment"):
            (root / sub).mkdir(parents=True)
        (root / "task.toml").write_text(TASK.format(image=base_image, port=port))
        (root / "instruction.md").write_text("Reach what you may.\n")
        (root / "solution" / "solve.sh").write_text(SOLVE.format(port=port))
        (root / "tests" / "test.sh").write_text(TEST.format(port=port))
        task = load_task(root)
        spec = AttemptSpec(
            run_id="phaseday", attempt_id="c-a1", cell_id="c", task_id=task.id, arm="oracle", rep=1,
            account="acct", task_path=task.path, stage_key=task.checksum, attempt_dir=str(tmp_path / "a1"),
            backend="daytona", backend_options={}, agent_command='sh "$SOLUTION_DIR/solve.sh"', agent_env={},
            agent_dir=None, route_env={}, route_home=None, agent_timeout_sec=60, verifier_timeout_sec=60,
            verifier_env={}, image=base_image, build_context=None, workdir=None,
            network=needs_network(task.config), cpus=None, memory_mb=None, pids=None, expose_solution=True,
            artifact_cap_bytes=1 << 20, seed="s", task_config=task.config)

        async def go() -> Any:
            backend = backend_for(server)
            try:
                return await run_attempt(spec, backend)
            finally:
                await backend.close()

        summary = asyncio.run(go())
    seen = [(tmp_path / "a1" / "logs" / d / "seen.txt") for d in ("agent", "verifier")]
    assert summary.error is None, summary.error
    assert summary.reward == 1.0, [p.read_text() for p in seen if p.exists()]
    made = [b for b in server.create_requests if b.get("labels", {}).get("ray-bench.run") == "phaseday"]
    assert len(made) == 1 and made[0]["networkBlockAll"] is False and made[0].get("domainAllowList") is None
