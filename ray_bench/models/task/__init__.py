"""Tasks in the Harbor task-directory format.

    task-id/
      task.toml            Harbor's schema (:mod:`ray_bench.models.task.harbor`)
      instruction.md       the prompt (single-step tasks)
      environment/         Dockerfile and its context (optional with docker_image)
      tests/test.sh        the verifier; writes /logs/verifier/reward.txt or reward.json
      solution/solve.sh    a reference solution (optional)
      steps/<name>/        multi-step tasks: instruction.md, tests/, solution/, workdir/setup.sh
"""

from __future__ import annotations

from pydantic import Field

from ray_bench.models._base import FrozenModel
from ray_bench.models.task.compose import ComposeProject
from ray_bench.models.task.harbor import (
    MAIN_SERVICE,
    ArtifactConfig,
    EnvironmentConfig,
    HealthcheckConfig,
    MCPServerConfig,
    MultiStepRewardStrategy,
    StepConfig,
    TaskConfig,
    VerifierCollectConfig,
    artifact_entries,
    parse_size_mb,
    unknown_keys,
)
from ray_bench.models.task.network import NetworkMode

#: The old name of the task.toml model.
TaskToml = TaskConfig


class TaskRef(FrozenModel):
    """A loaded task: where it is, what its content hashes to, and what its task.toml says."""

    id: str
    path: str
    checksum: str = Field(description="sha256 of the directory's relative paths and bytes.")
    config: TaskConfig
    has_dockerfile: bool
    has_compose: bool = Field(default=False, description="environment/docker-compose.yaml exists.")
    compose: ComposeProject | None = Field(default=None, description="Its services, read at load.")
    has_solution: bool
    warnings: tuple[str, ...] = Field(default=(), description="Unknown keys and other non-fatal findings.")


__all__ = [
    "MAIN_SERVICE",
    "ArtifactConfig",
    "ComposeProject",
    "EnvironmentConfig",
    "HealthcheckConfig",
    "MCPServerConfig",
    "MultiStepRewardStrategy",
    "NetworkMode",
    "StepConfig",
    "TaskConfig",
    "TaskRef",
    "TaskToml",
    "VerifierCollectConfig",
    "artifact_entries",
    "parse_size_mb",
    "unknown_keys",
]
