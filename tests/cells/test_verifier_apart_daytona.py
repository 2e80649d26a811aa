"""A separate verifier on Daytona (the real SDK against the local fixture server): a second
sandbox built from the task's ``tests/Dockerfile`` at its create, handed what Harbor hands it,
deleted with the agent's (the fixture checks that no container remains)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from support.daytona_fixtures import backend_for, fresh_server, server  # noqa: F401
from support.daytona_server import object_storage_over_http
from support.separate_verifier import write_separate_verifier_task

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.config.tasks import load_task
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.audit import audit

pytestmark = [pytest.mark.docker, pytest.mark.daytona]


def test_a_separate_verifier_runs_in_a_second_daytona_sandbox(
        tmp_path: Path, server: Any, base_image: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    pytest.importorskip("daytona", reason="the daytona extra is not installed")
    object_storage_over_http(monkeypatch)  # tests/Dockerfile's COPY context goes up as the SDK uploads it
    task = load_task(write_separate_verifier_task(tmp_path / "sep", base_image))
    spec = AttemptSpec(
        run_id="sepday", attempt_id="c-a1", cell_id="c", task_id=task.id, arm="oracle", rep=1, account="acct",
        task_path=task.path, stage_key=task.checksum, attempt_dir=str(tmp_path / "a1"), backend="daytona",
        backend_options={}, agent_command='sh "$SOLUTION_DIR/solve.sh"', agent_env={}, agent_dir=None,
        route_env={}, route_home=None, agent_timeout_sec=60, verifier_timeout_sec=60, verifier_env={},
        image=base_image, build_context=None, workdir=None, network=True, cpus=None, memory_mb=None, pids=None,
        expose_solution=True, artifact_cap_bytes=1 << 20, seed="s", task_config=task.config)

    async def go() -> tuple[AttemptSummary, list[Any]]:
        backend = backend_for(server)
        try:
            summary = await run_attempt(dataclasses.replace(spec), backend)
            report = await audit([backend], "sepday", cleanup=False)
            return summary, list(report.found)
        finally:
            await backend.close()

    summary, left = asyncio.run(go())
    assert summary.error is None and summary.cleanup_error is None, summary.error
    seen = (tmp_path / "a1" / "logs" / "verifier" / "seen.txt").read_text().splitlines()
    assert summary.reward == 1.0, seen
    assert {"answer", "notes", "convention", "own-image", "env"} <= set(seen) and "cwd /grade" in seen
    assert not [line for line in seen if "leaked" in line]
    assert summary.verifier_sandbox_id and summary.verifier_sandbox_id != summary.sandbox_id
    assert left == []
