"""Compose tasks for the docker tests, built on the test base image and planned as a user plans
them: the plan's cell spec (``AttemptSpecs``) run by the cell runner; and compose files written
by Harbor itself."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import yaml

from ray_bench.api import plan_run
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.attempts import AttemptSpecs
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RunPaths
from ray_bench.sandboxes.base import LABEL_RUN
from ray_bench.sandboxes.docker import DockerBackend
from support.specs import run_on_docker
from support.suites import make_suite

#: What Harbor's Terminal-Bench mapper writes for main (harbor/mappers/terminal_bench.py
#: HARBOR_MAIN_SERVICE), here with the network_mode it could not fold into a Dockerfile.
MAPPER_MAIN = """\
services:
  main:
    build:
      context: ${CONTEXT_DIR}
    image: ${MAIN_IMAGE_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${TEST_DIR}
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: ${MEMORY}
    network_mode: "none"
"""



#: The verifier's test: db answers by name and the agent saw it too.
REACHED = '[ "$(wget -q -O- http://db:8080/ping)" = pong ] && [ "$(cat /app/seen 2>/dev/null)" = pong ]'
#: What the agent does: read db's answer into /app/seen.
AGENT = "wget -q -O- http://db:8080/ping > /app/seen; cat /app/seen"


def db_service(base_image: str, *, delay: int = 2) -> dict[str, Any]:
    """busybox httpd that starts serving after ``delay`` s: healthy only then."""
    return {
        "image": base_image,
        "command": ["sh", "-c", f"sleep {delay}; mkdir -p /www && echo pong > /www/ping && httpd -f -p 8080 -h /www"],
        "healthcheck": {"test": ["CMD", "wget", "-q", "-O-", "http://127.0.0.1:8080/ping"],
                        "interval": "1s", "timeout": "2s", "retries": 30},
    }


def compose_task(root: Path, name: str, base_image: str, compose: dict[str, Any] | str | None, *,
                 passes: str = REACHED, agent_toml: str = "") -> Path:
    """A task of ``compose`` whose verifier writes 1 when the shell test ``passes``; ``agent_toml``
    goes into its ``[agent]`` table."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text(f'version = "1.0"\n[agent]\ntimeout_sec = 60.0\n{agent_toml}'
                                    '[verifier]\ntimeout_sec = 30.0\n[environment]\nworkdir = "/app"\n')
    (task / "instruction.md").write_text("Ask db for its answer.\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {base_image}\nWORKDIR /app\n")
    if compose is not None:  # None: a task of one container
        text = compose if isinstance(compose, str) else yaml.safe_dump(compose, sort_keys=False)
        (task / "environment" / "docker-compose.yaml").write_text(text)
    (task / "tests" / "test.sh").write_text(f"#!/bin/sh\nmkdir -p /logs/verifier\nif {passes}; then\n"
                                            "  echo 1 > /logs/verifier/reward.txt\nelse\n"
                                            "  echo 0 > /logs/verifier/reward.txt\nfi\n")
    return task


def plan_docker(tmp_path: Path, command: str, run_id: str) -> RunPaths:
    """Plan the suite under ``tmp_path/suite`` (its tasks/ already written) on docker, one arm."""
    suite, accounts = make_suite(tmp_path / "suite", tasks=[], backend="docker",
                                 backends={"docker": {"max_sandboxes": 2}},
                                 arms=[{"name": "baseline", "role": "baseline", "command": command}])
    plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id=run_id)
    return RunPaths(tmp_path / "runs" / run_id)


def run_cell(paths: RunPaths, task: str) -> AttemptSummary:
    plan, _ = load_plan_file(paths.plan)
    cell = next(c for c in plan.cells if c.task == task)
    row = AttemptRow(attempt_id=f"{cell.id}-a1", cell_id=cell.id, task=task, task_checksum="", arm=cell.arm,
                     rep=cell.rep, seq=1, account=plan.accounts[0].name, backend="docker", epoch="e",
                     preflight=False, started_at=time.time())
    return run_on_docker(AttemptSpecs(plan, paths).of(row, cell))


def left_by_run(run_id: str) -> list[Any]:
    async def go() -> list[Any]:
        backend = DockerBackend()
        try:
            return await backend.list({LABEL_RUN: run_id})
        finally:
            await backend.close()
    return asyncio.run(go())
