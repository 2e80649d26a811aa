"""An AttemptSpec of the quickstart's hello-world on the local backend, for runner-level tests,
and one attempt run by the cell runner on a fresh docker backend."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptSummary
from support.suites import make_suite


def local_spec(tmp_path: Path, command: str, **kw: object) -> AttemptSpec:
    """hello-world copied under ``tmp_path/suite``, run by ``command`` (the canary key route as
    ``API_KEY``); ``kw`` overrides any field."""
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    fields: dict[str, object] = dict(
        run_id="run", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="baseline", rep=1,
        account="acct", task_path=str(tmp_path / "suite" / "tasks" / "hello-world"), stage_key=str(tmp_path),
        attempt_dir=str(tmp_path / "attempt"), backend="local", backend_options={},
        agent_command=command, agent_env={}, agent_dir=None, route_env={"API_KEY": "RB_CANARY_KEY_1"},
        route_home=None, agent_timeout_sec=10.0, verifier_timeout_sec=10.0, verifier_env={}, image=None,
        build_context=None, workdir="/app", network=False, cpus=None, memory_mb=None, pids=None,
        expose_solution=True, artifact_cap_bytes=1 << 20, seed="s")
    fields.update(kw)
    return AttemptSpec(**fields)  # type: ignore[arg-type]


def run_on_docker(spec: AttemptSpec, **kw: Any) -> AttemptSummary:
    """``spec`` run by the cell runner on a docker backend of its own (closed after); ``kw`` go
    to :func:`~ray_bench.cells.runner.run_attempt` (``regrade=...``)."""
    from ray_bench.cells.runner import run_attempt
    from ray_bench.sandboxes.docker import DockerBackend

    async def go() -> AttemptSummary:
        backend = DockerBackend()
        try:
            return await run_attempt(spec, backend, **kw)
        finally:
            await backend.close()

    return asyncio.run(go())
