"""What `execute` would trip on, seen from where `plan` runs: an image the cells need that this
machine's Docker does not have (execute would pull it, or a build would pull its ``FROM``, which
needs a registry), an agent CLI that is not installed where the cells run (every cell would fail as
``cli_missing``), and an account probe that cannot reach its host (offline, the probe fails every
120 s). Each is a receipt warning naming the fix; ``plan --strict`` refuses the plan instead.

The decisions are pure over a :class:`Looks` port (what is there); :class:`HostLooks` asks this
machine: the Docker daemon (``inspect_image``), the agent layer's own search
(:mod:`ray_bench.agents.layer`), and a TCP connection to the probe's host. A cluster's other nodes
are not asked: what this machine sees is what a single-machine run meets, and on a cluster the
preflight meets the rest first.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from ray_bench.agents import ADAPTERS
from ray_bench.harbor.arms import laid_cli
from ray_bench.models.accounts import Account
from ray_bench.models.plan import PlanTask
from ray_bench.models.suite import Arm, Suite
from ray_bench.plan.agents import sandbox_image
from ray_bench.sandboxes.capabilities import capabilities
from ray_bench.sandboxes.images import BASE_IMAGE

#: Distinct images, and probe hosts, looked at in one plan: each look is a daemon call or a
#: connection (a few ms; a connection to an unreachable host up to :data:`CONNECT_TIMEOUT_SEC`).
MAX_LOOKS = 50
CONNECT_TIMEOUT_SEC = 3.0
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE | re.MULTILINE)
_URL = re.compile(r"https?://[^\s'\"<>|;)]+")


@dataclass(frozen=True)
class Finding:
    where: str
    what: str
    fix: str

    def line(self) -> str:
        return f"{self.where}: {self.what}; fix: {self.fix}"


class Looks(Protocol):
    def image(self, tag: str) -> bool | None:
        """Whether this machine's Docker has ``tag``; None when Docker does not answer."""

    def cli(self, agent: str, *, laid: bool) -> bool:
        """Whether ``agent``'s CLI is here: as the layer lays it (``laid``), or on PATH."""

    def reaches(self, host: str, port: int) -> bool:
        """Whether a TCP connection to ``host:port`` opens from here."""


def dockerfile_bases(context: Path) -> list[str]:
    """The images a build context's Dockerfile starts ``FROM`` (stages it names itself, ``scratch``
    and ``$ARG`` references left out: they are not pulled, or not known before the build)."""
    try:
        text = (context / "Dockerfile").read_text(errors="replace")
    except OSError:
        return []
    stages: set[str] = set()
    bases: list[str] = []
    for image, alias in _FROM.findall(text):
        if image.lower() not in stages and image != "scratch" and "$" not in image and image not in bases:
            bases.append(image)
        if alias:
            stages.add(alias.lower())
    return bases


def _pull_fix(image: str) -> str:
    if image == BASE_IMAGE:
        return "run `ray-bench image base` (it is made from this machine's busybox, no registry needed)"
    return f"`docker pull {image}` where its registry is reachable (or `docker load` it), then plan again"


def _names(items: list[str]) -> str:
    return ", ".join(items[:3]) + (f" (+{len(items) - 3})" if len(items) > 3 else "")


def image_findings(suite: Suite, arms: list[Arm], tasks: list[PlanTask], looks: Looks) -> list[Finding]:
    """Images a docker cell needs that this machine's Docker does not have."""
    if not capabilities(suite.backend).local_images:
        return []
    config = suite.backends.get(suite.backend)
    needed: dict[str, list[str]] = {}  # image -> who needs it
    bases: dict[str, list[str]] = {}  # build context -> its FROM images, each Dockerfile read once
    for task in tasks:
        for arm in arms:
            image, context = sandbox_image(task, arm, config)
            if context is not None and context not in bases:
                bases[context] = dockerfile_bases(Path(context))
            for base in bases[context] if context is not None else [image] if image else []:
                who = needed.setdefault(base, [])
                if f"task {task.id}" not in who:
                    who.append(f"task {task.id}")
    found: list[Finding] = []
    for image, who in list(needed.items())[:MAX_LOOKS]:
        present = looks.image(image)
        if present is None:
            return [Finding("backend docker", "Docker does not answer here, so the images the cells need were not "
                            "checked", "start dockerd (or set DOCKER_HOST) where the cells run")]
        if not present:
            found.append(Finding(_names(who), f"image {image} is not on this machine's Docker (execute would pull "
                                 "it, which needs its registry)", _pull_fix(image)))
    return found


def cli_findings(suite: Suite, arms: list[Arm], looks: Looks) -> list[Finding]:
    """Arms whose agent CLI is not installed on this machine, where a local run's cells start it."""
    can = capabilities(suite.backend)
    if can.image and not can.agent_layer:
        return []  # the image must carry the CLI: the preflight checks it there
    found = []
    for arm in arms:
        agent = laid_cli(arm.harbor_agent) if arm.agent == "harbor" else arm.agent
        adapter = ADAPTERS.get(agent or "")
        if adapter is None or not adapter.binary or agent is None:
            continue
        if not looks.cli(agent, laid=can.agent_layer):
            how = f"`npm install -g {adapter.npm_package}`" if adapter.npm_package else f"install `{adapter.binary}`"
            found.append(Finding(f"arm {arm.name}", f"the `{adapter.binary}` CLI ({agent}) is not installed on this "
                                 "machine, where its cells would start it: every cell would fail as cli_missing",
                                 f"{how}, or name its node_modules/.bin in RAY_BENCH_AGENT_CLIS"))
    return found


def probe_hosts(command: str) -> list[tuple[str, int]]:
    """The hosts (and ports) of the URLs a probe command names."""
    hosts: list[tuple[str, int]] = []
    for url in _URL.findall(command):
        parts = urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            continue
        if parts.hostname and "$" not in parts.hostname and (parts.hostname, port) not in hosts:
            hosts.append((parts.hostname, port))
    return hosts


def probe_findings(accounts: list[Account], looks: Looks) -> list[Finding]:
    """Accounts whose probe command calls a host this machine cannot reach."""
    wanted = [(a.name, host) for a in accounts if a.probe_command for host in probe_hosts(a.probe_command)]
    reached = _in_parallel(looks, {host for _, host in wanted[:MAX_LOOKS]})
    found = []
    for name, (host, port) in wanted[:MAX_LOOKS]:
        if not reached[(host, port)]:
            found.append(Finding(f"account {name}", f"its probe_command calls {host}:{port}, which this machine cannot "
                                 "reach (offline?): each probe would fail, before the fan-out and every 120 s",
                                 "plan where the provider is reachable, or remove probe_command from the account "
                                 "(`ray-bench accounts probe` runs it alone)"))
    return found


def _in_parallel(looks: Looks, hosts: Iterable[tuple[str, int]]) -> dict[tuple[str, int], bool]:
    """Each host looked at in its own thread: unreachable hosts cost one timeout, not one each."""
    result: dict[tuple[str, int], bool] = {}

    def look(host: str, port: int) -> None:
        result[(host, port)] = looks.reaches(host, port)

    threads = [threading.Thread(target=look, args=hp, daemon=True) for hp in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(CONNECT_TIMEOUT_SEC * 2)
    return {hp: result.get(hp, False) for hp in hosts}


def readiness(suite: Suite, arms: list[Arm], tasks: list[PlanTask], accounts: list[Account],
              looks: Looks | None = None) -> list[Finding]:
    looks = looks or HostLooks()
    return [*image_findings(suite, arms, tasks, looks), *cli_findings(suite, arms, looks),
            *probe_findings(accounts, looks)]


class HostLooks:
    """This machine, as `execute` on it would meet it."""

    def __init__(self) -> None:
        self._client: Any = None
        self._answered: bool | None = None

    def image(self, tag: str) -> bool | None:
        import docker
        import docker.errors

        if self._answered is None:
            try:
                self._client = docker.from_env(timeout=10)
                self._client.ping()
                self._answered = True
            except docker.errors.DockerException:
                self._answered = False
        if not self._answered:
            return None
        try:
            self._client.api.inspect_image(tag)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.DockerException:
            return None
        return True

    def cli(self, agent: str, *, laid: bool) -> bool:
        from ray_bench.agents.layer import find_cli, host_cli

        return (host_cli(agent) if laid else find_cli(agent)) is not None

    def reaches(self, host: str, port: int) -> bool:
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_SEC):
                return True
        except OSError:
            return False
