"""Harbor's own ``harbor run --env support.harbor_docker_env:RayBenchDockerEnvironment``: Harbor's
Trial (its agent, its verifier, its reward reading) over a ray-bench docker sandbox, for the tests
that compare what Harbor's orchestration and ray-bench's make of one task. Harbor's own docker
environment needs ``docker compose``, which this machine's Debian docker.io lacks; this class is
Harbor's documented custom-environment hook (an import path), built on ray-bench's bridge
(:class:`ray_bench.harbor.environment.SandboxEnvironment`), which makes and deletes the sandbox
itself, as Harbor's environments do. Imports Harbor: Python 3.12 only."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

from ray_bench.harbor.environment import SandboxEnvironment
from ray_bench.sandboxes.base import Resources, Sandbox, SandboxSpec, run_labels
from ray_bench.sandboxes.docker import DockerBackend

#: The run label of every sandbox ``harbor run`` makes through this class (a test cleans by it).
RUN_LABEL = "harbor-run"


class _NotYet:
    """The sandbox before :meth:`RayBenchDockerEnvironment.start` made it (a container: not on host)."""

    on_host = False


class RayBenchDockerEnvironment(SandboxEnvironment):  # type: ignore[misc,unused-ignore]
    def __init__(self, environment_dir: Path, environment_name: str, session_id: str, trial_paths: TrialPaths,
                 task_env_config: EnvironmentConfig, logger: logging.Logger | None = None, **kwargs: Any) -> None:
        self._backend = DockerBackend()
        self._image = task_env_config.docker_image
        # No image: built from the environment's Dockerfile, as Harbor's docker environment builds
        # it (a separate verifier's environment_dir is the task's tests/).
        dockerfile = Path(environment_dir) / "Dockerfile"
        self._build = Path(environment_dir) if self._image is None and dockerfile.is_file() else None
        kwargs.pop("enable_environment_dir_upload", None)  # the image is built here, not uploaded into
        workdir = getattr(task_env_config, "workdir", None)
        super().__init__(_NotYet(), task_dir=Path(environment_dir).parent, trial_paths=trial_paths,  # type: ignore[arg-type]
                         task_env_config=task_env_config, session_id=session_id, base_env={},
                         workdir=workdir, download_cap=64 << 20, logger=logger, **kwargs)

    @staticmethod
    def type() -> str:
        return "ray-bench-docker"

    async def start(self, force_build: bool) -> None:
        sandbox: Sandbox = await self._backend.create(SandboxSpec(
            labels=run_labels(RUN_LABEL, self.session_id, self.session_id), image=self._image,
            dockerfile_dir=self._build, workdir=self._workdir, resources=Resources(cpus=1, memory_mb=512)))
        self._sandbox = sandbox
        # as Harbor's own environments without host mounts start (daytona, modal): the log dirs
        await self.ensure_dirs(self._mount_targets(writable_only=True))

    async def stop(self, delete: bool) -> None:
        if not isinstance(self._sandbox, _NotYet):
            await self._sandbox.delete()
        await self._backend.close()
