"""Tasks in the Harbor / Terminal-Bench task-directory format.

    task-id/
      task.toml            version, [metadata], [agent], [verifier], [environment]
      instruction.md       the prompt
      environment/         Dockerfile and its context (optional for the local backend)
      tests/test.sh        the verifier; writes /logs/verifier/reward.txt or reward.json
      solution/solve.sh    a reference solution (optional)
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from ray_bench.models._base import ConfigModel, FrozenModel


class AgentSection(ConfigModel):
    timeout_sec: float = Field(default=600.0, gt=0, description="Agent time limit, seconds.")


class VerifierSection(ConfigModel):
    timeout_sec: float = Field(default=600.0, gt=0, description="Verifier time limit, seconds.")
    env: dict[str, str] = Field(default_factory=dict, description="Env for tests/test.sh.")


class EnvironmentSection(ConfigModel):
    docker_image: str | None = Field(default=None, description="A prebuilt image name.")
    build_timeout_sec: float = Field(default=600.0, gt=0, description="Image build limit, seconds.")
    cpus: float | None = Field(default=None, gt=0, description="CPU limit.")
    memory_mb: int | None = Field(default=None, ge=16, description="Memory limit, MiB.")
    memory: str | None = Field(default=None, description="Memory limit as text, e.g. 2G.")
    storage_mb: int | None = Field(default=None, ge=1, description="Disk limit, MiB.")
    storage: str | None = Field(default=None, description="Disk limit as text.")
    gpus: int | None = Field(default=None, ge=0, description="GPUs (not supported here).")
    allow_internet: bool = Field(default=False, description="Give the sandbox a network.")
    workdir: str = Field(default="/app", description="Working directory of the agent.")


class TaskToml(ConfigModel):
    version: str = Field(default="1.0", description="Format version.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form metadata.")
    agent: AgentSection = Field(default_factory=AgentSection, description="[agent]")
    verifier: VerifierSection = Field(default_factory=VerifierSection, description="[verifier]")
    environment: EnvironmentSection = Field(
        default_factory=EnvironmentSection, description="[environment]"
    )
    model_config = ConfigDict(extra="forbid")


class TaskRef(FrozenModel):
    """A loaded task: where it is and what its content hashes to."""

    id: str
    path: str
    checksum: str = Field(description="sha256 of the directory's relative paths and bytes.")
    config: TaskToml
    has_dockerfile: bool
    has_solution: bool
