"""The ``docker`` backend (being split into a package; see ``backend``)."""

from ray_bench.sandboxes.docker.backend import (
    TASK_IMAGE_REPO,
    DockerBackend,
    DockerSandbox,
    context_hash,
    extract_capped,
    task_image_tag,
)

__all__ = ["TASK_IMAGE_REPO", "DockerBackend", "DockerSandbox", "context_hash", "extract_capped", "task_image_tag"]
