"""A snapshot the build phase makes (:mod:`ray_bench.scheduler.builds`) and a cloud backend
builds (:mod:`ray_bench.sandboxes.daytona.snapshots`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

#: An image naming a snapshot (``snapshot:NAME``): what the build phase made, or what a task, an
#: arm or the backend names; written by the plan (:mod:`ray_bench.plan.attempts`), read by the
#: Daytona backend when it creates from a snapshot.
SNAPSHOT_PREFIX = "snapshot:"
#: The name of every snapshot ray-bench's build phase makes: how its own are told from the
#: organisation's others (Daytona's snapshots carry no labels).
BUILT_PREFIX = "rb-build-"


class BuildTarget(BaseModel):
    """One snapshot to make: from an image (``FROM image``) or a task's Dockerfile directory,
    at one size (a snapshot's sandboxes take its size), for the cells listed."""

    model_config = ConfigDict(frozen=True)
    snapshot: str
    image: str | None = None
    dockerfile_dir: str | None = None
    cpu: int
    memory_gib: int
    disk_gib: int
    tasks: tuple[str, ...]
    cells: tuple[str, ...]

    @property
    def source(self) -> str:
        return self.image or f"{self.dockerfile_dir}/Dockerfile"


class SnapshotSeen(BaseModel):
    """One snapshot of the organisation as the API lists it; ``last_used`` unix seconds (its
    ``lastUsedAt``, else its ``createdAt``; 0 unknown)."""

    model_config = ConfigDict(frozen=True)
    name: str
    state: str
    last_used: float = 0.0

    @property
    def ours(self) -> bool:
        """Made by ray-bench's build phase (:data:`BUILT_PREFIX`)."""
        return self.name.startswith(BUILT_PREFIX)
