"""The ``docker`` backend: one container per attempt, on the Docker SDK for Python.

The container's main process is a long ``sleep`` under ``sh`` (which also reaps orphans); every
command is a ``docker exec`` of ``sh -c``. Each exec'd process is a session and process-group
leader (runc makes it one), so a timeout stops the whole group with one exec next to it
(SIGTERM, then SIGKILL after the grace: :func:`~ray_bench.sandboxes.base.stop_group_sh`).
The SDK is blocking: every call runs in this backend's own thread pool, because the default
executor has ``min(32, cpus + 4)`` workers (6 on a 2-core runner) and an exec streams for as
long as its agent runs; a shared pool would let long execs starve deletes.

Docker errors are translated here: daemon unreachable -> ``SandboxUnavailableError``, image or
container creation -> ``SandboxCreateError``, container vanished -> ``SandboxGoneError``.

- :mod:`.backend`: the backend (client, thread pool, create, list, remove).
- :mod:`.sandbox`: one container (exec with timeouts and OOM detection, files in and out).
- :mod:`.images`: task images, built once per build-context hash.
"""

from __future__ import annotations

from ray_bench import sandboxes
from ray_bench.sandboxes.archive import extract_capped
from ray_bench.sandboxes.docker.backend import DockerBackend
from ray_bench.sandboxes.docker.images import TASK_IMAGE_REPO, context_hash, task_image_tag
from ray_bench.sandboxes.docker.sandbox import DockerSandbox

sandboxes.register("docker", DockerBackend)

__all__ = [
    "TASK_IMAGE_REPO",
    "DockerBackend",
    "DockerSandbox",
    "context_hash",
    "extract_capped",
    "task_image_tag",
]
