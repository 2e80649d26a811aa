"""Whether a Docker daemon can give a container GPUs, asked once at plan (one ``docker info``).

Docker hands GPUs to a container through a device request (``--gpus N``; the SDK's
``DeviceRequest(count=N, capabilities=[["gpu"]])``), which the daemon serves only where the NVIDIA
Container Toolkit registered itself: its runtime shows in ``info()["Runtimes"]`` as ``nvidia``.
Elsewhere the create fails with "could not select device driver "" with capabilities: [[gpu]]".
CDI spec directories (``CDISpecDirs``) are listed by default whether or not a GPU is described in
them, so they do not say the daemon has one. Harbor asks nothing of the daemon: its compose
override reserves the GPUs and the start fails where none are
(harbor/environments/docker/__init__.py ``write_resources_compose_file``, Harbor 0.26).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_bench.models.task import TaskConfig

#: A runtime name that serves GPU device requests (``nvidia``, ``nvidia-cdi``, ``nvidia-legacy``).
GPU_RUNTIME = "nvidia"


@dataclass(frozen=True)
class DaemonGpus:
    """What the daemon said: its runtimes, or None when it did not answer."""

    runtimes: tuple[str, ...] | None

    @property
    def gives(self) -> bool:
        return any(GPU_RUNTIME in r for r in self.runtimes or ())

    def have(self, backend: str) -> str:
        if self.runtimes is None:
            return f"{backend}'s daemon did not answer `docker info`, so no GPU runtime is known"
        return (f"{backend}'s runtimes here: {', '.join(self.runtimes) or 'none'} (no {GPU_RUNTIME} runtime: "
                "install the NVIDIA Container Toolkit there, or run it on a daemon that has one)")


def attempt_gpus(cfg: TaskConfig) -> int:
    """The most GPUs one sandbox of an attempt asks for: the agent's, or a separate verifier's own."""
    own = cfg.verifier.environment if cfg.verifier.separate else None
    return max(cfg.environment.gpus or 0, (own.gpus or 0) if own is not None else 0)


def daemon_gpus(base_url: str | None = None) -> DaemonGpus:
    """Ask the daemon at ``base_url`` (None: the environment's) for its runtimes."""
    import docker

    try:
        client = docker.DockerClient(base_url=base_url, timeout=10) if base_url else docker.from_env(timeout=10)
        try:
            info: dict[str, Any] = client.info()
        finally:
            client.close()
    except Exception:
        return DaemonGpus(None)
    return DaemonGpus(tuple(sorted(info.get("Runtimes") or {})))


def device_requests(gpus: int | None) -> list[Any]:
    """The create kwarg's value for ``gpus`` GPUs (empty for none): any GPUs of that count, as
    ``docker run --gpus N`` asks. A task's ``gpu_types`` has no Docker equivalent (Harbor logs
    that it ignores them: harbor/environments/docker/docker.py), so it is not asked."""
    if not gpus:
        return []
    import docker.types

    return [docker.types.DeviceRequest(count=gpus, capabilities=[["gpu"]])]


def on_gpu_nodes(want: int | None, candidates: Sequence[int], node_of: Sequence[str],
                 node_gpus: Mapping[str, float]) -> list[int]:
    """The runners (indices into ``node_of``) a cell asking for ``want`` GPUs may go to: those on a
    node whose Ray resource ``GPU`` (what Ray detected there) holds as many, when any does; else all
    ``candidates`` (Ray sees no GPU where the daemon's runtime does, as on a remote daemon: plan
    asked that daemon, and a node whose daemon has none fails the create as ``task``). Like the
    ``docker`` node resource, this routes cells; it does not count GPUs already held."""
    if not want:
        return list(candidates)
    return [i for i in candidates if node_gpus.get(node_of[i], 0) >= want] or list(candidates)
