"""The backend: the SDK client and the thread pool every blocking call runs in (where what is
left of Docker's errors is translated), container creation, and listing and removing what a run
left behind (containers, volumes, networks)."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions

from ray_bench.errors import SandboxCreateError, SandboxError, SandboxTooLargeError, SandboxUnavailableError
from ray_bench.sandboxes.base import Resources, Sandbox, SandboxBackend, SandboxRef, SandboxSpec
from ray_bench.sandboxes.docker import images
from ray_bench.sandboxes.docker.compose import create_project
from ray_bench.sandboxes.docker.sandbox import DockerSandbox
from ray_bench.sandboxes.gpus import device_requests

T = TypeVar("T")


def _unreachable(exc: BaseException) -> bool:
    if isinstance(exc, requests.exceptions.ConnectionError):
        return True
    return (
        isinstance(exc, docker.errors.DockerException)
        and not isinstance(exc, docker.errors.APIError)
        and "server API version" in str(exc)
    )


class DockerBackend(SandboxBackend):
    """``base_url`` defaults to the environment (``DOCKER_HOST`` or the local socket)."""

    name = "docker"
    #: How long a create whose answer was lost is watched for a late container (see _undo_create).
    undo_settle_sec = 30.0

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: float = 120.0,
        max_workers: int = 64,
        client: Any = None,
    ) -> None:
        self._base_url = base_url
        self._timeout = timeout
        self._max_workers = max_workers
        self._client = client
        self._client_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rb-docker")

    # -- plumbing -------------------------------------------------------------------------

    def client(self) -> Any:
        """The SDK client, made on first use so that a backend can exist without a daemon."""
        with self._client_lock:
            if self._client is None:
                opts: dict[str, Any] = {
                    "timeout": int(self._timeout),
                    "max_pool_size": self._max_workers,
                }
                if self._base_url is not None:
                    self._client = docker.DockerClient(base_url=self._base_url, **opts)
                else:
                    self._client = docker.from_env(**opts)
            return self._client

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking SDK call in the pool, translating what is left untranslated."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, functools.partial(fn, *args))
        except SandboxError:
            raise
        except docker.errors.DockerException as exc:
            if _unreachable(exc):
                raise SandboxUnavailableError(f"docker daemon unreachable: {exc}") from exc
            raise SandboxError(f"docker: {exc}") from exc
        except requests.exceptions.RequestException as exc:
            if _unreachable(exc):
                raise SandboxUnavailableError(f"docker daemon unreachable: {exc}") from exc
            raise SandboxError(f"docker: {exc}") from exc

    # -- create ---------------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> Sandbox:
        image = await self.call(self._ensure_image, spec)
        if spec.compose is not None:
            return await create_project(self, spec, image)
        name = f"ray-bench-{uuid.uuid4().hex[:16]}"
        made = asyncio.ensure_future(self.call(self._create_container, spec, image, name))
        try:
            container_id = await asyncio.shield(made)
        except BaseException:
            # The blocking create may still finish after we were cancelled: wait for it, then
            # remove by name whatever it made.
            await asyncio.shield(self._undo_create(made, name))
            raise
        return DockerSandbox(self, container_id, spec)

    async def _undo_create(self, made: asyncio.Future[str], name: str) -> None:
        """Remove what a failed or cancelled create made. When the daemon's answer was lost (a
        timeout, a dropped connection) the daemon may still be making the container: look for it
        by name, with backoff, for ``undo_settle_sec``, so a late ``Created`` container is not
        left behind for the end-of-run audit."""
        answered = True
        try:
            await made
        except (SandboxCreateError, SandboxTooLargeError):
            pass  # the daemon refused; _create_container removed what it had made
        except BaseException:  # any other failure: the answer may be lost
            answered = False
        if answered:
            for retry_in in (0.5, 2.0, None):  # a removal that fails is tried three times
                try:
                    await self.call(self.remove_container, name)
                    return
                except SandboxError:
                    if retry_in is None:
                        return
                    await asyncio.sleep(retry_in)
        deadline = time.monotonic() + self.undo_settle_sec
        delay = 0.5
        while True:
            with contextlib.suppress(SandboxError):
                if await self.call(self.remove_container, name):
                    return  # the late container was made and is gone: there is one per name
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, 8.0)

    def _ensure_image(self, spec: SandboxSpec) -> str:
        image = images.ensure_image(self.client(), spec)
        if spec.agent_layer is not None:
            image = images.layer_image(self.client(), image, spec.agent_layer)
        return image

    def build_image(self, context_dir: Path) -> str:
        """Build ``context_dir`` once per content hash; return its tag. Blocking."""
        return images.build_image(self.client(), context_dir)

    def _create_container(self, spec: SandboxSpec, image: str, name: str) -> str:
        lifetime = max(1, int(spec.lifetime_sec))
        # sh as PID 1 reaps orphans from execs; the sleep ends the container after its lifetime,
        # a safety net for a driver that died without deleting it (audit still finds it).
        command = ["sh", "-c", f"trap 'exit 0' TERM; sleep {lifetime} & wait $!"]
        api = self.client().api
        try:
            # The low-level API: the high-level create re-inspects the container (one more
            # round trip per cell for nothing).
            host_config = api.create_host_config(
                network_mode=None if spec.network else "none", **_limits(spec.resources)
            )
            created = api.create_container(
                image,
                command,
                name=name,
                labels=dict(spec.labels),
                environment=dict(spec.env),
                working_dir=spec.workdir,
                host_config=host_config,
            )
            api.start(created["Id"])
        except docker.errors.APIError as exc:
            if _unreachable(exc):
                raise
            with contextlib.suppress(docker.errors.APIError):
                self.client().api.remove_container(name, force=True, v=True)
            if spec.resources.gpus and _NO_GPU_DRIVER in str(exc):
                # The daemon has no driver for the device request (no NVIDIA runtime on this node):
                # no retry here makes it fit (moby daemon/devices.go: errConflict "could not select
                # device driver ... with capabilities").
                raise SandboxTooLargeError(f"asks for {spec.resources.gpus} GPU(s); this node's docker daemon "
                                           f"gives none: {exc}") from exc
            raise SandboxCreateError(f"creating a container from {image} failed: {exc}") from exc
        return str(created["Id"])

    # -- delete, list, remove -------------------------------------------------------------

    def remove_container(self, container: str) -> bool:
        """Remove a container by id or name; False when there was none."""
        try:
            self.client().api.remove_container(container, force=True, v=True)
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise SandboxError(f"removing container {container[:12]} failed: {exc}") from exc
        return True

    async def list(self, labels: Mapping[str, str]) -> list[SandboxRef]:
        return await self.call(self._list, dict(labels))

    def _list(self, labels: dict[str, str]) -> builtins.list[SandboxRef]:
        api = self.client().api
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        refs = [
            SandboxRef(
                self.name,
                c["Id"],
                c.get("Labels") or {},
                state=c.get("State", "unknown"),
                kind="container",
            )
            for c in api.containers(all=True, filters=filters)
        ]
        volumes = api.volumes(filters=filters).get("Volumes") or []
        refs += [
            SandboxRef(self.name, v["Name"], v.get("Labels") or {}, kind="volume") for v in volumes
        ]
        refs += [
            SandboxRef(self.name, n["Id"], n.get("Labels") or {}, kind="network")
            for n in api.networks(filters=filters)
        ]
        return refs

    async def remove(self, ref: SandboxRef) -> None:
        await asyncio.shield(self.call(self._remove, ref))

    def _remove(self, ref: SandboxRef) -> None:
        api = self.client().api
        try:
            if ref.kind == "volume":
                api.remove_volume(ref.id, force=True)
            elif ref.kind == "network":
                api.remove_network(ref.id)
            else:
                self.remove_container(ref.id)
        except docker.errors.NotFound:
            pass

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            self._client.close()


#: What the daemon says to a device request it has no driver for.
_NO_GPU_DRIVER = "could not select device driver"


def _limits(res: Resources) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if res.memory_mb is not None:
        # memswap == mem: no swap, so the limit is hard.
        limits["mem_limit"] = f"{res.memory_mb}m"
        limits["memswap_limit"] = f"{res.memory_mb}m"
    if res.cpus is not None:
        limits["nano_cpus"] = int(res.cpus * 1e9)
    if res.pids is not None:
        limits["pids_limit"] = res.pids
    if res.gpus:
        limits["device_requests"] = device_requests(res.gpus)
    return limits
