"""The ``docker`` backend: one container per attempt, on the Docker SDK for Python.

The container's main process is a long ``sleep`` under ``sh`` (which also reaps orphans); every
command is a ``docker exec`` of ``sh -c``. Each exec'd process is a session and process-group
leader (runc makes it one), so a timeout kills the whole group with one ``kill -9 -PGID``
exec'd next to it. The SDK is blocking: every call runs in this backend's own thread pool,
because the default executor has ``min(32, cpus + 4)`` workers (6 on a 2-core runner) and an
exec streams for as long as its agent runs; a shared pool would let long execs starve deletes.

Docker errors are translated here: daemon unreachable -> ``SandboxUnavailableError``, image or
container creation -> ``SandboxCreateError``, container vanished -> ``SandboxGoneError``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import hashlib
import io
import re
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions

from ray_bench import sandboxes
from ray_bench.errors import (
    ArchiveEscapeError,
    SandboxCreateError,
    SandboxError,
    SandboxGoneError,
    SandboxUnavailableError,
)
from ray_bench.sandboxes.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    Resources,
    Sandbox,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
)

T = TypeVar("T")

TASK_IMAGE_REPO = "ray-bench-task"
_PID_DIR = "/tmp/.ray-bench-exec"
# $1 pid file, $2 cwd, $3 the command. The pid is the exec's process group (see module doc).
_WRAPPER = (
    'mkdir -p "${1%/*}" 2>/dev/null; echo $$ > "$1" 2>/dev/null; '
    'mkdir -p "$2" 2>/dev/null; cd "$2" || exit 126; '
    'sh -c "$3"; rc=$?; rm -f "$1"; exit $rc'
)
_KILL = 'p=$(cat "$1" 2>/dev/null) && { kill -9 -"$p" || kill -9 "$p"; } 2>/dev/null; rm -f "$1"'
_OOM_COUNT = "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"
# After a kill, a process that escaped its group (setsid) can keep the output pipes open.
_DRAIN_GRACE_SEC = 5.0
_GONE_SETTLE_SEC = 0.5

_BUILD_LOCKS: dict[str, threading.Lock] = {}
_BUILD_LOCKS_GUARD = threading.Lock()


def context_hash(context_dir: Path) -> str:
    """sha256 of a build context: relative paths, executable bits and contents, in order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in context_dir.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(context_dir).as_posix()
        digest.update(rel.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"L" + str(path.readlink()).encode() + b"\0")
            continue
        digest.update(b"X" if path.stat().st_mode & 0o111 else b"F")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def task_image_tag(context_dir: Path) -> str:
    return f"{TASK_IMAGE_REPO}:{context_hash(context_dir)[:16]}"


def _unreachable(exc: BaseException) -> bool:
    if isinstance(exc, requests.exceptions.ConnectionError):
        return True
    return (
        isinstance(exc, docker.errors.DockerException)
        and not isinstance(exc, docker.errors.APIError)
        and "server API version" in str(exc)
    )


def _gone_message(exc: docker.errors.APIError) -> bool:
    text = str(exc).lower()
    return exc.status_code == 404 or "is not running" in text or "is paused" in text


class DockerSandbox(Sandbox):
    def __init__(self, backend: DockerBackend, container_id: str, spec: SandboxSpec) -> None:
        self._b = backend
        self.id = container_id
        self.labels = dict(spec.labels)
        self._workdir = spec.workdir
        self._oom_seen = 0

    # -- exec -----------------------------------------------------------------------------

    async def exec(
        self,
        command: str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ExecResult:
        started = time.monotonic()
        pidfile = f"{_PID_DIR}/{uuid.uuid4().hex}.pid"
        argv = ["sh", "-c", _WRAPPER, "ray-bench", pidfile, cwd or self._workdir, command]
        exec_id = await self._b.call(self._exec_create, argv, dict(env or {}))
        streams: list[Any] = []
        reader = asyncio.ensure_future(self._b.call(self._exec_drain, exec_id, output_cap, streams))
        timed_out = False
        try:
            out, err, dropped = await asyncio.wait_for(asyncio.shield(reader), timeout)
        except TimeoutError:
            timed_out = True
            await self._b.call(self._kill, pidfile)
            out, err, dropped = await self._finish_drain(reader, streams)
        except BaseException:
            # Cancelled (or failed): the process must not outlive the caller's interest in it.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._b.call(self._kill, pidfile))
            for stream in streams:
                stream.close()
            raise
        exit_code = await self._b.call(self._exec_exit_code, exec_id)
        oom = False
        if exit_code is None or exit_code >= 128:
            # 137 is also what a `docker kill` from outside looks like: tell the two apart.
            oom = await self._b.call(self._check_alive_and_oom, exit_code == 137 and not timed_out)
        return ExecResult(
            exit_code=-1 if exit_code is None else exit_code,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            timed_out=timed_out,
            duration_sec=time.monotonic() - started,
            truncated_bytes=dropped,
            oom_killed=oom,
        )

    async def _finish_drain(
        self, reader: asyncio.Future[tuple[bytes, bytes, int]], streams: list[Any]
    ) -> tuple[bytes, bytes, int]:
        try:
            return await asyncio.wait_for(asyncio.shield(reader), _DRAIN_GRACE_SEC)
        except TimeoutError:
            for stream in streams:
                stream.close()
            return await reader

    def _exec_create(self, argv: list[str], env: dict[str, str]) -> str:
        try:
            created = self._b.client().api.exec_create(
                self.id, argv, stdout=True, stderr=True, stdin=False, environment=env or None
            )
        except docker.errors.APIError as exc:
            if _gone_message(exc):
                raise SandboxGoneError(f"container {self.id[:12]} is gone: {exc}") from exc
            raise
        return str(created["Id"])

    def _exec_drain(self, exec_id: str, cap: int, streams: list[Any]) -> tuple[bytes, bytes, int]:
        try:
            stream = self._b.client().api.exec_start(exec_id, stream=True, demux=True)
        except docker.errors.APIError as exc:
            if _gone_message(exc):
                raise SandboxGoneError(f"container {self.id[:12]} is gone: {exc}") from exc
            raise
        streams.append(stream)
        kept = [bytearray(), bytearray()]
        dropped = 0
        for frames in stream:
            for i, chunk in enumerate(frames):
                if not chunk:
                    continue
                room = cap - len(kept[i])
                if room > 0:
                    kept[i] += chunk[:room]
                dropped += max(0, len(chunk) - max(room, 0))
        return bytes(kept[0]), bytes(kept[1]), dropped

    def _exec_exit_code(self, exec_id: str) -> int | None:
        try:
            info = self._b.client().api.exec_inspect(exec_id)
        except docker.errors.NotFound as exc:
            raise SandboxGoneError(f"container {self.id[:12]} is gone") from exc
        code = info.get("ExitCode")
        return None if code is None else int(code)

    def _kill(self, pidfile: str) -> None:
        with contextlib.suppress(SandboxGoneError, docker.errors.APIError):
            exec_id = self._exec_create(["sh", "-c", _KILL, "ray-bench", pidfile], {})
            self._b.client().api.exec_start(exec_id)

    def _check_alive_and_oom(self, killed: bool) -> bool:
        """Raise SandboxGoneError unless the container still runs; then say whether the
        memory limit's OOM killer ended the exec (only asked for exit 137)."""
        state = self._state()
        if killed and state.get("OOMKilled"):
            return True
        count = self._oom_count() if killed else 0
        if count > self._oom_seen:
            self._oom_seen = count
            return True
        if killed:
            # A SIGKILL from `docker kill` / `docker rm -f` reaches the exec before dockerd
            # marks the container stopped (measured: up to ~100 ms here); look again.
            deadline = time.monotonic() + _GONE_SETTLE_SEC
            while time.monotonic() < deadline:
                time.sleep(0.1)
                self._state()
        return False

    def _state(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = self._b.client().api.inspect_container(self.id)["State"]
        except docker.errors.NotFound as exc:
            raise SandboxGoneError(f"container {self.id[:12]} was removed mid-cell") from exc
        if state.get("Status") != "running" or not state.get("Running"):
            raise SandboxGoneError(
                f"container {self.id[:12]} stopped mid-cell ({state.get('Status')}, "
                f"exit {state.get('ExitCode')}, oom {state.get('OOMKilled')})"
            )
        return state

    def _oom_count(self) -> int:
        try:
            exec_id = self._exec_create(["sh", "-c", _OOM_COUNT], {})
            raw = self._b.client().api.exec_start(exec_id)
        except docker.errors.APIError as exc:
            if _gone_message(exc):
                raise SandboxGoneError(f"container {self.id[:12]} is gone: {exc}") from exc
            raise
        found = [int(n) for n in re.findall(rb"^oom_kill (\d+)$", raw, re.MULTILINE)]
        return max(found, default=0)

    # -- files ----------------------------------------------------------------------------

    async def put_dir(self, local_dir: Path, sandbox_dir: str) -> None:
        data = await asyncio.to_thread(_tar_dir, local_dir, sandbox_dir)
        await self._b.call(self._put_archive, data)

    async def put_file(self, data: bytes, sandbox_path: str, mode: int = 0o644) -> None:
        await self._b.call(self._put_archive, _tar_file(data, sandbox_path, mode))

    def _put_archive(self, data: bytes) -> None:
        try:
            self._b.client().api.put_archive(self.id, "/", data)
        except docker.errors.APIError as exc:
            if exc.status_code == 404:
                raise SandboxGoneError(f"container {self.id[:12]} is gone") from exc
            raise SandboxError(f"copying into container {self.id[:12]} failed: {exc}") from exc

    async def get_dir(self, sandbox_dir: str, local_dir: Path, *, max_bytes: int) -> int:
        return await self._b.call(self._get_dir, sandbox_dir, local_dir, max_bytes)

    def _get_dir(self, sandbox_dir: str, local_dir: Path, max_bytes: int) -> int:
        api = self._b.client().api
        try:
            response = api.get_archive(self.id, sandbox_dir)
        except docker.errors.NotFound as exc:
            try:
                api.inspect_container(self.id)
            except docker.errors.NotFound:
                raise SandboxGoneError(f"container {self.id[:12]} is gone") from exc
            return 0  # the directory does not exist: nothing to copy
        chunks, stat = response
        top = str(stat.get("name") or PurePosixPath(sandbox_dir).name)
        try:
            return extract_capped(chunks, local_dir, max_bytes, top=top)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    # -- lifecycle ------------------------------------------------------------------------

    async def delete(self) -> None:
        # Shielded: a cancelled cell still removes its container.
        await asyncio.shield(self._b.call(self._b.remove_container, self.id))


class DockerBackend(SandboxBackend):
    """``base_url`` defaults to the environment (``DOCKER_HOST`` or the local socket)."""

    name = "docker"

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
        with contextlib.suppress(BaseException):
            await made
        with contextlib.suppress(SandboxError):
            await self.call(self.remove_container, name)

    def _ensure_image(self, spec: SandboxSpec) -> str:
        if spec.dockerfile_dir is not None:
            return self.build_image(spec.dockerfile_dir)
        if spec.image is None:
            raise SandboxCreateError("the sandbox spec names neither an image nor a dockerfile_dir")
        api = self.client().api
        try:
            api.inspect_image(spec.image)
        except docker.errors.ImageNotFound:
            try:
                self.client().images.pull(spec.image)
            except docker.errors.APIError as exc:
                raise SandboxCreateError(
                    f"image {spec.image} is not present and pull failed: {exc}"
                ) from exc
        return spec.image

    def build_image(self, context_dir: Path) -> str:
        """Build ``context_dir`` once per content hash; return its tag. Blocking."""
        tag = task_image_tag(context_dir)
        with _BUILD_LOCKS_GUARD:
            lock = _BUILD_LOCKS.setdefault(tag, threading.Lock())
        with lock:
            client = self.client()
            try:
                client.api.inspect_image(tag)
                return tag  # built before, by this process or another one
            except docker.errors.ImageNotFound:
                pass
            try:
                client.images.build(path=str(context_dir), tag=tag, rm=True, forcerm=True)
            except docker.errors.BuildError as exc:
                raise SandboxCreateError(
                    f"building {context_dir} failed: {exc.msg}\n{_log_tail(exc.build_log)}"
                ) from exc
            except docker.errors.APIError as exc:
                raise SandboxCreateError(f"building {context_dir} failed: {exc}") from exc
        return tag

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
            raise SandboxCreateError(f"creating a container from {image} failed: {exc}") from exc
        return str(created["Id"])

    # -- delete, list, remove -------------------------------------------------------------

    def remove_container(self, container: str) -> None:
        try:
            self.client().api.remove_container(container, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise SandboxError(f"removing container {container[:12]} failed: {exc}") from exc

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
    return limits


def _log_tail(build_log: Iterable[Mapping[str, Any]], lines: int = 20) -> str:
    text: list[str] = []
    for entry in build_log:
        for key in ("stream", "error"):
            value = entry.get(key)
            if isinstance(value, str):
                text += value.rstrip("\n").splitlines()
    return "\n".join(text[-lines:])


def _sandbox_arcname(sandbox_path: str) -> str:
    rel = PurePosixPath(sandbox_path.lstrip("/"))
    if ".." in rel.parts or not rel.parts:
        raise ArchiveEscapeError(f"sandbox path {sandbox_path!r} is not a path below /")
    return rel.as_posix()


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _tar_dir(local_dir: Path, sandbox_dir: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(local_dir, arcname=_sandbox_arcname(sandbox_dir), filter=_root_owned)
    return buf.getvalue()


def _tar_file(data: bytes, sandbox_path: str, mode: int) -> bytes:
    buf = io.BytesIO()
    info = _root_owned(tarfile.TarInfo(_sandbox_arcname(sandbox_path)))
    info.size = len(data)
    info.mode = mode
    info.mtime = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class _ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks, for streaming tar extraction."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def extract_capped(chunks: Iterable[bytes], dest: Path, max_bytes: int, *, top: str) -> int:
    """Extract the tar stream ``chunks`` (as ``get_archive`` returns it, entries below ``top/``)
    into ``dest``: directories and regular files only, at most ``max_bytes`` of file data.
    Any entry that would land outside ``dest`` (absolute, ``..``, a link pointing out) raises
    :class:`ArchiveEscapeError`; links that stay inside are skipped, as on ``local``."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    written = 0
    with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(chunks)), mode="r|") as tar:
        for member in tar:
            rel = _member_rel(member.name, top)
            target = (root / rel).resolve() if rel.parts else root
            if not target.is_relative_to(root):
                raise ArchiveEscapeError(f"archive entry {member.name!r} leaves {dest}")
            if member.issym() or member.islnk():
                _check_link(member, rel, top)
                continue
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            if not member.isfile():
                continue
            budget = max_bytes - written
            if budget <= 0:
                break
            source = tar.extractfile(member)
            if source is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                remaining = min(budget, member.size)
                while remaining > 0 and (chunk := source.read(min(remaining, 1 << 20))):
                    out.write(chunk)
                    remaining -= len(chunk)
                    written += len(chunk)
            target.chmod(0o755 if member.mode & 0o100 else 0o644)
    return written


def _member_rel(name: str, top: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise ArchiveEscapeError(f"archive entry {name!r} is absolute or climbs out")
    parts = [p for p in path.parts if p != "."]
    if not parts or parts[0] != top:
        raise ArchiveEscapeError(f"archive entry {name!r} is not below {top!r}")
    return PurePosixPath(*parts[1:])


def _check_link(member: tarfile.TarInfo, rel: PurePosixPath, top: str) -> None:
    link = PurePosixPath(member.linkname)
    if member.islnk():  # hard links name another archive member
        _member_rel(member.linkname, top)
        return
    if link.is_absolute():
        raise ArchiveEscapeError(f"symlink {member.name!r} points out to {member.linkname!r}")
    depth = len(rel.parts) - 1  # directories between the archive root and the link
    for part in link.parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise ArchiveEscapeError(f"symlink {member.name!r} points out to {member.linkname!r}")


sandboxes.register("docker", DockerBackend)
