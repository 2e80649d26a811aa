"""The sandbox interface every backend implements: create, exec, put/get files, delete,
list-by-label.

Paths passed to a sandbox are *sandbox paths* (``/app``, ``/logs/agent``). A backend
without a private filesystem (``local``) maps them below a scratch root; :meth:`Sandbox.path`
tells a caller what a sandbox path is called inside commands, so that commands built by the
cell runner work on every backend.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from ray_bench.errors import SandboxError

#: Labels every sandbox carries (DESIGN.md).
LABEL_MANAGED = "ray-bench.managed"
LABEL_RUN = "ray-bench.run"
LABEL_CELL = "ray-bench.cell"
LABEL_ATTEMPT = "ray-bench.attempt"

#: Output kept per stream of one exec; the rest is dropped and counted. An agent that
#: prints gigabytes must not take the driver down with it.
DEFAULT_OUTPUT_CAP = 1 << 20


#: Run inside a Linux container: its cgroup's OOM-kill counters (cgroup v1 and v2).
OOM_EVENTS_COMMAND = "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"


#: The seconds a stopped command's process group has between SIGTERM and SIGKILL (a watch's
#: stop, a timeout, a cancellation): a CLI writes out on SIGTERM what it buffered, and a SIGKILL
#: loses it. Measured with Claude Code 2.1.197 killed 1.5 s into a looping run: SIGKILL left 2 of
#: the 4 messages it had been served in its session transcript, SIGTERM all of them, exiting in
#: 0.03 s. A process that ignores SIGTERM is killed when the grace is up.
STOP_GRACE_SEC = 3


#: What :func:`stop_group_sh` prints when the group outlived its grace and was SIGKILLed.
KILLED_MARKER = "RB-SIGKILLED"

#: Where a HOME login is copied into a sandbox (``HOME`` points there for the agent).
SANDBOX_HOME = "/rb-home"
#: The directories the harness writes at fixed paths in every sandbox, as Harbor's tasks name
#: them (``/logs/agent``, ``/logs/verifier``, ``/tests``, ...): a backend whose commands cannot
#: run as root makes them (``ray_bench.sandboxes.daytona.harness``); none is ever moved.
HARNESS_DIRS = ("/logs/agent", "/logs/verifier", "/tests", "/task", "/agent", "/solution", SANDBOX_HOME)


def stop_group_sh(pid: str, on_kill: str = f"echo {KILLED_MARKER}") -> str:
    """A ``sh`` fragment that stops process group ``pid`` (a shell word, e.g. ``"$p"``; the
    single process of that pid when it leads no group): SIGTERM, then SIGKILL if the group is
    still there after :data:`STOP_GRACE_SEC`, and then ``on_kill`` (by default it prints
    :data:`KILLED_MARKER`: what the group did in its grace may be in no record). For busybox too
    (``sleep`` with a fraction where it has one). Never fails."""
    tenths = STOP_GRACE_SEC * 10
    alive = f"{{ kill -0 -{pid} 2>/dev/null || kill -0 {pid} 2>/dev/null; }}"
    return (f'kill -TERM -{pid} 2>/dev/null || kill -TERM {pid} 2>/dev/null; i=0; '
            f'while [ $i -lt {tenths} ] && {alive}; do '
            'sleep 0.1 2>/dev/null || { sleep 1; i=$((i+9)); }; i=$((i+1)); done; '
            f'if {alive}; then kill -9 -{pid} 2>/dev/null || kill -9 {pid} 2>/dev/null; {on_kill}; fi; true')


def oom_kills(raw: bytes | str) -> int:
    """The OOM-kill count in the output of :data:`OOM_EVENTS_COMMAND` (0 when unreadable)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return max((int(n) for n in re.findall(r"^oom_kill (\d+)$", text, re.MULTILINE)), default=0)


def run_labels(run_id: str, cell_id: str | None = None, attempt_id: str | None = None) -> dict[str, str]:
    labels = {LABEL_MANAGED: "true", LABEL_RUN: run_id}
    if cell_id is not None:
        labels[LABEL_CELL] = cell_id
    if attempt_id is not None:
        labels[LABEL_ATTEMPT] = attempt_id
    return labels


@dataclass(frozen=True)
class Resources:
    """Hard limits for one sandbox. ``None`` means the backend default."""

    cpus: float | None = None
    memory_mb: int | None = None
    pids: int | None = None
    disk_mb: int | None = None
    #: GPUs passed through (a device request on docker: :mod:`ray_bench.sandboxes.gpus`).
    gpus: int | None = None


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. ``image`` is an image name; ``dockerfile_dir`` a build context whose
    content hash names the image (backends that build images build it once per hash)."""

    labels: Mapping[str, str]
    image: str | None = None
    dockerfile_dir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Resources = Resources()
    network: bool = False
    #: What the sandbox alone may reach, set at create (backends whose capabilities say
    #: ``allowlist_at_create``: IPv4 CIDRs, and host names / ``*.suffix`` where
    #: ``allowlist_names_at_create``; :func:`ray_bench.tasks.network.sandbox_allowlist`); None: ``network`` as is.
    allowlist: tuple[str, ...] | None = None
    #: None: the image's WORKDIR (container backends); ``local`` uses /app.
    workdir: str | None = "/app"
    #: Upper bound on the sandbox's life, for cloud auto-stop / auto-delete safety nets.
    lifetime_sec: float = 3600.0
    #: A build context laid over the image (an agent CLI, :mod:`ray_bench.agents.layer`); its
    #: ``Dockerfile`` takes the image as build arg ``BASE``. Container backends build it once
    #: per (image, content).
    agent_layer: Path | None = None
    #: A task's compose project: the sandbox is its ``main`` service, the other services beside it
    #: (backends whose capabilities say ``compose``); None: one container.
    compose: ComposeSpec | None = None


@dataclass(frozen=True)
class ComposeSpec:
    """A compose project to run around ``main``: the task's ``environment/docker-compose.yaml``."""

    file: Path
    #: How long ``up`` may wait for the services to be healthy.
    wait_sec: float = 300.0
    #: The task's ``[environment] env`` (templates filled), for the file's ``${VAR}`` interpolation,
    #: as Harbor hands it to Compose (``DockerEnvironment._compose_task_env``).
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_sec: float = 0.0
    #: Bytes dropped from stdout + stderr beyond the cap.
    truncated_bytes: int = 0
    #: The process was killed by the out-of-memory killer (when the backend can tell).
    oom_killed: bool = False
    #: Stopped early through its :class:`ExecWatch`: the reason given to :meth:`ExecWatch.stop`.
    stopped: str | None = None
    #: Stopped (a timeout, a watch's stop), its process group outlived the SIGTERM grace and was
    #: SIGKILLed: what it did in the grace (a model call it was serving) may be in no record.
    killed: bool = False


Stream = Literal["stdout", "stderr"]
T = TypeVar("T")


class ExecWatch:
    """The live side of one :meth:`Sandbox.exec`: every backend hands each chunk of output to
    :meth:`feed` as it arrives (on the event loop, in order per stream, before the output cap
    applies), and ends the command as a timeout would once :meth:`stop` is called; the result
    then carries the reason in :attr:`ExecResult.stopped`. Subclasses override :meth:`feed`."""

    def __init__(self, on_output: Callable[[Stream, bytes], None] | None = None) -> None:
        self._on_output = on_output
        self.reason: str | None = None
        self._stop = asyncio.Event()
        #: Whether the backend's stop of the command (a timeout, :meth:`stop`, or the caller's
        #: cancellation) needed the SIGKILL; None until a stop has ended (:meth:`halted`).
        self.killed: bool | None = None
        self._halted = asyncio.Event()

    def feed(self, stream: Stream, data: bytes) -> None:
        if self._on_output is not None:
            self._on_output(stream, data)

    def stop(self, reason: str) -> None:
        """Ask the backend to end the command (idempotent: the first reason stays)."""
        if self.reason is None:
            self.reason = reason
        self._stop.set()

    async def stopped(self) -> str:
        await self._stop.wait()
        return self.reason or "stopped"

    def note_halt(self, killed: bool) -> None:
        """Called by the backend once its stop of the command has ended, ``killed`` when the
        SIGKILL was needed (a cancelled exec reports here only: it returns no result)."""
        self.killed = bool(self.killed) or killed
        self._halted.set()

    async def halted(self, timeout: float) -> bool | None:
        """Whether the stop needed the SIGKILL, once it has ended (at most ``timeout`` s; None:
        no stop ended in that time)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._halted.wait(), timeout)
        return self.killed


def halt_when_done(stop: asyncio.Future[bool], watch: ExecWatch | None) -> None:
    """Tell ``watch`` whether ``stop`` (a cancelled exec's stop of its command, which yields
    whether it needed the SIGKILL) did, once it ends: the exec has returned no result by then.
    A stop that failed says nothing of a kill."""
    if watch is None:
        return

    def done(task: asyncio.Future[bool]) -> None:
        watch.note_halt(not task.cancelled() and task.exception() is None and task.result())
    stop.add_done_callback(done)


async def until_done(fut: asyncio.Future[T], timeout: float,
                     watch: ExecWatch | None) -> Literal["done", "timeout", "stopped"]:
    """Wait for ``fut`` at most ``timeout`` seconds or until ``watch`` asks for a stop. ``fut``
    is never cancelled here: the caller kills the command and then collects ``fut``'s result."""
    waiters: set[asyncio.Future[object]] = {fut}  # type: ignore[arg-type]
    stop: asyncio.Future[str] | None = None
    if watch is not None:
        stop = asyncio.ensure_future(watch.stopped())
        waiters.add(stop)  # type: ignore[arg-type]
    try:
        done, _ = await asyncio.wait(waiters, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if stop is not None and not stop.done():
            stop.cancel()
    if fut in done:
        return "done"
    return "stopped" if stop is not None and stop in done else "timeout"


@dataclass(frozen=True)
class SandboxRef:
    """A sandbox found by label: enough to delete it and to say what it was."""

    backend: str
    id: str
    labels: Mapping[str, str]
    state: str = "unknown"
    kind: str = "sandbox"  # docker also reports "volume" and "network"
    #: Its deletion is under way (Daytona deletes asynchronously): it will go by itself.
    removing: bool = False


class Sandbox(abc.ABC):
    """One live sandbox. Every method may raise a :class:`~ray_bench.errors.SandboxError`."""

    id: str
    labels: Mapping[str, str]
    #: Commands run as host processes and see the host's files (``local``): a HOME login is
    #: used in place instead of copied in.
    on_host: bool = False

    def path(self, sandbox_path: str) -> str:
        """The name of ``sandbox_path`` as commands inside this sandbox see it."""
        return sandbox_path

    @abc.abstractmethod
    async def exec(
        self,
        command: str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        user: str | None = None,
        watch: ExecWatch | None = None,
    ) -> ExecResult:
        """Run ``command`` with ``sh -c``; kill it (and its children) after ``timeout``.
        ``user`` (a name or UID) runs it as that user; a backend that cannot raises
        :class:`~ray_bench.errors.SandboxError` (plans refuse such tasks first). ``watch`` sees
        the output live and may stop the command early (:class:`ExecWatch`)."""

    async def exec_script(
        self,
        script: str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        user: str | None = None,
    ) -> ExecResult:
        """Run the shell script at sandbox path ``script`` as Harbor runs a task's scripts,
        ``bash SCRIPT`` (its shebang ignored), or ``sh SCRIPT`` in a sandbox without bash
        (busybox images); otherwise as :meth:`exec`. Through :meth:`exec` here: ``sh -c``
        chooses and becomes the shell (``exec``). A backend that can start a program itself
        may skip that ``sh`` (``local``: 0.5 of the 3.5 ms of CPU a no-op verifier cost)."""
        path = shlex.quote(self.path(script))
        return await self.exec(f"if command -v bash >/dev/null 2>&1; then exec bash {path}; else exec sh {path}; fi",
                               timeout=timeout, env=env, cwd=cwd, output_cap=output_cap, user=user)

    async def set_network(self, online: bool) -> None:
        """Connect or disconnect the sandbox's network between phases. A backend that fixes
        the network at create raises (plans refuse tasks whose phases differ there)."""
        raise SandboxError(f"{type(self).__name__} cannot change its network after create")

    async def set_allowlist(self, hosts: tuple[str, ...]) -> None:
        """Let the sandbox reach only ``hosts`` (entries as ``normalize_hosts`` writes them) until
        the next :meth:`set_network`; its commands' other connections fail. A backend that cannot
        enforce an allowlist raises (plans refuse such tasks there)."""
        raise SandboxError(f"{type(self).__name__} cannot enforce a network allowlist")

    @abc.abstractmethod
    async def put_dir(self, local_dir: Path, sandbox_dir: str) -> None:
        """Copy the contents of ``local_dir`` into ``sandbox_dir`` (created if missing)."""

    @abc.abstractmethod
    async def put_file(self, data: bytes, sandbox_path: str, mode: int = 0o644) -> None:
        """Write ``data`` to ``sandbox_path``, creating parent directories."""

    @abc.abstractmethod
    async def get_dir(self, sandbox_dir: str, local_dir: Path, *, max_bytes: int,
                      bounds: Mapping[str, int] | None = None) -> int:
        """Copy ``sandbox_dir`` into ``local_dir``, at most ``max_bytes`` in all; return the
        bytes written. A missing ``sandbox_dir`` copies nothing. An entry that would land
        outside ``local_dir`` raises :class:`~ray_bench.errors.ArchiveEscapeError`. ``bounds``
        (paths relative to ``sandbox_dir``, bytes): a backend that sees a file's size before
        copying it writes :func:`~ray_bench.sandboxes.archive.over_bound_note` for one over its
        bound instead (the caller bounds what was copied all the same)."""

    async def take_dir(self, sandbox_dir: str, local_dir: Path, *, max_bytes: int,
                       bounds: Mapping[str, int] | None = None) -> int:
        """Collect ``sandbox_dir`` as :meth:`get_dir` does, when the sandbox is done: nothing
        runs in it afterwards, and the backend may move the files rather than copy them."""
        return await self.get_dir(sandbox_dir, local_dir, max_bytes=max_bytes, bounds=bounds)

    @abc.abstractmethod
    async def delete(self) -> None:
        """Remove the sandbox and everything it holds. Idempotent."""

    async def service(self, name: str) -> Sandbox:
        """Another service of the sandbox's compose project, to exec in (Harbor's
        ``service_exec``); a sandbox that is one container has none."""
        raise SandboxError(f"{type(self).__name__} runs one container: no compose service {name!r}")


class SandboxBackend(abc.ABC):
    """A sandbox provider, registered by name in :mod:`ray_bench.sandboxes`."""

    name: str

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec) -> Sandbox:
        """Create and start a sandbox. A cancelled create removes whatever it made."""

    @abc.abstractmethod
    async def list(self, labels: Mapping[str, str]) -> list[SandboxRef]:
        """Every resource of this backend carrying all of ``labels``."""

    @abc.abstractmethod
    async def remove(self, ref: SandboxRef) -> None:
        """Remove one resource found by :meth:`list`. Idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and connections."""
