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

from ray_bench.cells.runner import cancelled_summary, run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.config.tasks import load_task
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.audit import audit
from ray_bench.sandboxes.base import LABEL_RUN
from ray_bench.sandboxes.docker import DockerBackend

pytestmark = [pytest.mark.docker]


def _left(run_id: str) -> list[Any]:
    """What ``ray-bench audit`` finds of the run (its containers, volumes and networks)."""
    async def go() -> list[Any]:
        backend = DockerBackend()
        try:
            report = await audit([backend], run_id, cleanup=False)
        finally:
            await backend.close()
        assert report.errors == []
        return list(report.found)

    return asyncio.run(go())


def _runs_sleep(container: Any) -> bool:
    """The verifier's test.sh has reached its ``sleep 120`` (not the container's own keep-alive,
    PID 1's ``sleep <lifetime>``, which runs from the start, inside ``create``: a CI run under load
    cancelled there, the create's undo, and recorded no verifier id)."""
    try:
        top = container.top()
    except Exception:  # gone, or not yet started: not there yet
        return False
    return any(str(proc[-1]).split() == ["sleep", "120"] for proc in top.get("Processes") or [] if proc)


def _spec(tmp_path: Path, base_image: str, run_id: str) -> AttemptSpec:
    task = load_task(tmp_path / "sep") if (tmp_path / "sep").is_dir() else \
        load_task(write_separate_verifier_task(tmp_path / "sep", base_image))
    return AttemptSpec(
        run_id=run_id, attempt_id="c-a1", cell_id="c", task_id=task.id, arm="oracle", rep=1, account="acct",
        task_path=task.path, stage_key=task.checksum, attempt_dir=str(tmp_path / "a1"), backend="docker",
        backend_options={}, agent_command='sh "$SOLUTION_DIR/solve.sh"', agent_env={}, agent_dir=None,
        route_env={}, route_home=None, agent_timeout_sec=60, verifier_timeout_sec=60, verifier_env={},
        image=base_image, build_context=None, workdir=None, network=True, cpus=None, memory_mb=256, pids=None,
        expose_solution=True, artifact_cap_bytes=1 << 20, seed="s", task_config=task.config)


def test_a_separate_verifier_runs_in_its_own_container_with_what_harbor_hands_it(
        tmp_path: Path, docker_client: Any, base_image: str) -> None:
    spec = _spec(tmp_path, base_image, "seprun")

    summary = run_on_docker(spec)

    assert summary.error is None and summary.cleanup_error is None, summary.error
    seen = (tmp_path / "a1" / "logs" / "verifier" / "seen.txt").read_text().splitlines()
    assert summary.reward == 1.0, seen
    assert {"answer", "notes", "convention", "own-image", "env", "tmp-kept"} <= set(seen)
    assert not [line for line in seen if "leaked" in line]  # no scratch file, no excluded file, no network
    assert "memory 134217728" in seen and "cwd /grade" in seen  # its own limit, its image's WORKDIR
    assert summary.verifier_sandbox_id and summary.verifier_sandbox_id != summary.sandbox_id
    assert {"handover", "verifier_create", "verifier"} <= set(summary.phases)
    assert (tmp_path / "a1" / "logs" / "agent").is_dir()  # the agent's logs came out before its container went
    assert _left("seprun") == []  # both containers are gone: `ray-bench audit` finds nothing


def test_a_separate_verifier_cancelled_mid_run_leaves_nothing(tmp_path: Path, docker_client: Any,
                                                              base_image: str) -> None:
    write_separate_verifier_task(tmp_path / "sep", base_image)
    with (tmp_path / "sep" / "tests" / "test.sh").open("a") as script:
        script.write("sleep 120\n")
    spec = _spec(tmp_path, base_image, "sepcancel")

    async def go() -> AttemptSummary:
        backend = DockerBackend()
        try:
            attempt = asyncio.ensure_future(run_attempt(spec, backend))
            # until the verifier's tests run in its own container (its image is not the agent's): its
            # build takes over a minute on a loaded machine, and a cancel while the container is still
            # being made tests the create's undo, not this (the container listed as running before
            # create returns was removed, and no verifier sandbox id was recorded)
            for _ in range(3000):
                await asyncio.sleep(0.1)
                running = docker_client.containers.list(filters={"label": f"{LABEL_RUN}=sepcancel"})
                if any(c.attrs["Config"]["Image"] != base_image and _runs_sleep(c) for c in running):
                    break
            else:
                pytest.fail("the separate verifier's tests never ran")
            attempt.cancel()
            with pytest.raises(asyncio.CancelledError):
                await attempt
            summary = cancelled_summary(spec.attempt_id)
            assert summary is not None
            return summary
        finally:
            await backend.close()

    summary = asyncio.run(go())
    assert summary.cancelled and summary.verifier_sandbox_id and summary.cleanup_error is None
    assert _left("sepcancel") == []
