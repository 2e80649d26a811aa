"""One container: commands run as ``docker exec`` of ``sh -c`` (a timeout or a watch's stop ends
the exec's process group, SIGTERM first: :func:`~ray_bench.sandboxes.base.stop_group_sh`; exit
137 is told apart into OOM, an outside kill and a vanished container), and files travel as tar
archives (:mod:`ray_bench.sandboxes.archive`)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import tarfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import docker.errors

from ray_bench.errors import ArchiveEscapeError, SandboxError, SandboxGoneError, SandboxOutOfMemoryError
from ray_bench.sandboxes.archive import extract_capped, root_owned, tar_file
from ray_bench.sandboxes.base import (
    DEFAULT_OUTPUT_CAP,
    KILLED_MARKER,
    OOM_EVENTS_COMMAND,
    ExecResult,
    ExecWatch,
    Sandbox,
    SandboxSpec,
    Stream,
    halt_when_done,
    oom_kills,
    stop_group_sh,
    until_done,
)
from ray_bench.sandboxes.docker.egress import EgressGate
from ray_bench.sandboxes.docker.streams import exec_output, exec_stream

if TYPE_CHECKING:
    from ray_bench.sandboxes.docker.backend import DockerBackend

_PID_DIR = "/tmp/.ray-bench-exec"
#: The network a container made with one is on; phases without a network disconnect it.
_BRIDGE = "bridge"
# $1 pid file, $2 cwd, $3 the command. The pid is the exec's process group (see module doc).
_WRAPPER = (
    'mkdir -p "${1%/*}" 2>/dev/null; chmod 1777 "${1%/*}" 2>/dev/null; echo $$ > "$1" 2>/dev/null; '
    'mkdir -p "$2" 2>/dev/null; cd "$2" || exit 126; '
    'sh -c "$3"; rc=$?; rm -f "$1"; exit $rc'
)
# The pid file goes first: the wrapper, killed, cannot remove it; a second stop finds nothing.
_KILL = 'p=$(cat "$1" 2>/dev/null) || exit 0; rm -f "$1"; ' + stop_group_sh('"$p"')
# After a kill, a process that escaped its group (setsid) can keep the output pipes open.
_DRAIN_GRACE_SEC = 5.0
_GONE_SETTLE_SEC = 0.5
#: How long an exit 137's OOM-kill count is tried for while the cgroup is still at its limit.
_OOM_READ_SEC = 5.0


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
        #: Allowlist phases (made on the first one); the proxy variables while one is on.
        self._gate = EgressGate(backend, spec.labels)
        self._phase_env: dict[str, str] = {}

    # -- exec -----------------------------------------------------------------------------

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
        started = time.monotonic()
        pidfile = f"{_PID_DIR}/{uuid.uuid4().hex}.pid"
        # "." is the container's working directory: the image's WORKDIR when the task sets none.
        argv = ["sh", "-c", _WRAPPER, "ray-bench", pidfile, cwd or self._workdir or ".", command]
        exec_id = await self._b.call(self._exec_create, argv, {**self._phase_env, **(env or {})}, user)
        streams: list[Any] = []
        feed: Callable[[Stream, bytes], None] | None = None
        if watch is not None:  # the drain runs in a pool thread; the watch lives on the loop
            loop, live = asyncio.get_running_loop(), watch

            def to_loop(name: Stream, chunk: bytes) -> None:
                loop.call_soon_threadsafe(live.feed, name, chunk)
            feed = to_loop
        reader = asyncio.ensure_future(self._b.call(self._exec_drain, exec_id, output_cap, streams, feed))
        killed = False
        try:
            outcome = await until_done(reader, timeout, watch)
            if outcome == "timeout" and await self._b.call(self._exec_ended, exec_id):
                # It ended in time; a child that outlives it holds the streams, which dockerd
                # ends 2 s after the exit (measured: `sleep 20 & echo hi` answered in 2.0-2.4 s).
                outcome = "done"
                out, err, dropped = await self._finish_drain(reader, streams)
            elif outcome == "done":
                out, err, dropped = reader.result()
            else:
                killed = await self._b.call(self._kill, pidfile)
                if watch is not None:
                    watch.note_halt(killed)
                out, err, dropped = await self._finish_drain(reader, streams)
        except BaseException:
            # Cancelled (or failed): the process must not outlive the caller's interest in it.
            stop = asyncio.ensure_future(self._b.call(self._kill, pidfile))
            halt_when_done(stop, watch)  # told when the stop ends, though this call is gone by then
            with contextlib.suppress(Exception):
                await asyncio.shield(stop)
            for stream in streams:
                stream.close()
            raise
        exit_code = await self._b.call(self._exec_exit_code, exec_id)
        timed_out = outcome == "timeout"
        oom = False
        if exit_code is None or exit_code >= 128:
            # 137 is also what a `docker kill` from outside looks like: tell the two apart.
            oom = await self._b.call(self._check_alive_and_oom, exit_code == 137 and outcome == "done")
        return ExecResult(
            exit_code=-1 if exit_code is None else exit_code,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            timed_out=timed_out,
            duration_sec=time.monotonic() - started,
            truncated_bytes=dropped,
            oom_killed=oom,
            stopped=watch.reason if outcome == "stopped" and watch is not None else None,
            killed=killed,
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

    def _exec_create(self, argv: list[str], env: dict[str, str], user: str | None = None) -> str:
        try:
            created = self._b.client().api.exec_create(
                self.id, argv, stdout=True, stderr=True, stdin=False, environment=env or None,
                user=user or "",
            )
        except docker.errors.APIError as exc:
            if _gone_message(exc):
                raise self._gone(exc) from exc
            raise
        return str(created["Id"])

    def _gone(self, exc: docker.errors.APIError) -> SandboxGoneError:
        """Why the container is not there to run in: its memory limit killed it
        (:class:`SandboxOutOfMemoryError`, from its state), or it went otherwise."""
        try:
            self._state()
        except SandboxGoneError as gone:
            return gone
        return SandboxGoneError(f"container {self.id[:12]} is gone: {exc}")

    async def set_network(self, online: bool) -> None:
        self._phase_env = {}
        await self._gate.leave(self.id)
        await self._b.call(self._set_network, online)

    async def set_allowlist(self, hosts: tuple[str, ...]) -> None:
        await self._b.call(self._set_network, False)
        await self._gate.enter(self.id, hosts)
        self._phase_env = self._gate.env

    def _set_network(self, online: bool) -> None:
        api = self._b.client().api
        attached = (api.inspect_container(self.id).get("NetworkSettings") or {}).get("Networks") or {}
        try:
            if online and _BRIDGE not in attached:
                api.connect_container_to_network(self.id, _BRIDGE)
            elif not online and _BRIDGE in attached:
                api.disconnect_container_from_network(self.id, _BRIDGE, force=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"{'connecting' if online else 'disconnecting'} the network of "
                               f"{self.id[:12]} failed: {exc}") from exc

    def _exec_drain(self, exec_id: str, cap: int, streams: list[Any],
                    feed: Callable[[Stream, bytes], None] | None = None) -> tuple[bytes, bytes, int]:
        try:
            stream = exec_stream(self._b.client().api, exec_id)
        except docker.errors.APIError as exc:
            if _gone_message(exc):
                raise self._gone(exc) from exc
            raise
        streams.append(stream)
        kept = [bytearray(), bytearray()]
        dropped = 0
        for number, chunk in stream:
            i = 1 if number == 2 else 0
            if feed is not None:
                feed("stdout" if i == 0 else "stderr", chunk)
            room = cap - len(kept[i])
            if room > 0:
                kept[i] += chunk[:room]
            dropped += max(0, len(chunk) - max(room, 0))
        return bytes(kept[0]), bytes(kept[1]), dropped

    def _exec_ended(self, exec_id: str) -> bool:
        """Whether the exec has run and exited (one not yet started has no exit code)."""
        try:
            info = self._b.client().api.exec_inspect(exec_id)
        except docker.errors.NotFound as exc:
            raise SandboxGoneError(f"container {self.id[:12]} is gone") from exc
        return not info.get("Running") and info.get("ExitCode") is not None

    def _exec_exit_code(self, exec_id: str) -> int | None:
        try:
            info = self._b.client().api.exec_inspect(exec_id)
        except docker.errors.NotFound as exc:
            raise SandboxGoneError(f"container {self.id[:12]} is gone") from exc
        code = info.get("ExitCode")
        return None if code is None else int(code)

    def _kill(self, pidfile: str) -> bool:
        """Stop the exec's group; True when it needed the SIGKILL (its stop printed so)."""
        with contextlib.suppress(SandboxGoneError, docker.errors.APIError):
            exec_id = self._exec_create(["sh", "-c", _KILL, "ray-bench", pidfile], {})
            return KILLED_MARKER.encode() in exec_output(self._b.client().api, exec_id)
        return False

    def _check_alive_and_oom(self, killed: bool) -> bool:
        """Raise SandboxGoneError unless the container still runs; then say whether the
        memory limit's OOM killer ended the exec (only asked for exit 137).

        dockerd marks ``OOMKilled`` when the kernel's event reaches it, which under load can come
        after the exec's exit; the cgroup's own counter is read then, by an exec into a cgroup
        that may still be at its limit (runc's exec fails there until the victim's memory is
        uncharged), so that read is retried for up to :data:`_OOM_READ_SEC`."""
        state = self._state()
        if not killed:
            return False
        deadline = time.monotonic() + _OOM_READ_SEC
        while True:
            if state.get("OOMKilled"):
                return True
            try:
                count = self._oom_count()
            except docker.errors.APIError as exc:
                if time.monotonic() >= deadline:
                    raise SandboxError(f"exit 137 in container {self.id[:12]}, and its OOM-kill count "
                                       f"could not be read for {_OOM_READ_SEC:.0f} s: {exc}") from exc
                time.sleep(0.2)
                state = self._state()
                continue
            if count > self._oom_seen:
                self._oom_seen = count
                return True
            break
        # A SIGKILL from `docker kill` / `docker rm -f` reaches the exec before dockerd
        # marks the container stopped (measured: up to ~100 ms here); look again.
        settle = time.monotonic() + _GONE_SETTLE_SEC
        while time.monotonic() < settle:
            time.sleep(0.1)
            if self._state().get("OOMKilled"):
                return True
        return False

    def _state(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = self._b.client().api.inspect_container(self.id)["State"]
        except docker.errors.NotFound as exc:
            raise SandboxGoneError(f"container {self.id[:12]} was removed mid-cell") from exc
        if state.get("Status") != "running" or not state.get("Running"):
            if state.get("OOMKilled"):  # the memory limit's killer took the container's own process
                raise SandboxOutOfMemoryError(
                    f"container {self.id[:12]} was killed by its memory limit (out of memory) "
                    f"mid-cell (exit {state.get('ExitCode')})")
            raise SandboxGoneError(
                f"container {self.id[:12]} stopped mid-cell ({state.get('Status')}, "
                f"exit {state.get('ExitCode')}, oom {state.get('OOMKilled')})"
            )
        return state

    def _oom_count(self) -> int:
        try:
            exec_id = self._exec_create(["sh", "-c", OOM_EVENTS_COMMAND], {})
            raw = exec_output(self._b.client().api, exec_id)
        except docker.errors.APIError as exc:
            if _gone_message(exc):
                raise self._gone(exc) from exc
            raise
        return oom_kills(raw)

    # -- files ----------------------------------------------------------------------------

    async def put_dir(self, local_dir: Path, sandbox_dir: str) -> None:
        # The archive is made in the same pool thread that sends it: one thread hop per put,
        # not two, inside the container's life (issue 57).
        await self._b.call(self._put_dir, local_dir, sandbox_dir)

    def _put_dir(self, local_dir: Path, sandbox_dir: str) -> None:
        self._put_archive(_tar_dir(local_dir, sandbox_dir))

    async def put_file(self, data: bytes, sandbox_path: str, mode: int = 0o644) -> None:
        await self._b.call(self._put_archive, tar_file(data, _sandbox_arcname(sandbox_path), mode))

    def _put_archive(self, data: bytes) -> None:
        try:
            self._b.client().api.put_archive(self.id, "/", data)
        except docker.errors.APIError as exc:
            if exc.status_code == 404:
                raise SandboxGoneError(f"container {self.id[:12]} is gone") from exc
            raise SandboxError(f"copying into container {self.id[:12]} failed: {exc}") from exc

    async def get_dir(self, sandbox_dir: str, local_dir: Path, *, max_bytes: int,
                      bounds: Mapping[str, int] | None = None) -> int:
        return await self._b.call(self._get_dir, sandbox_dir, local_dir, max_bytes, bounds)

    def _get_dir(self, sandbox_dir: str, local_dir: Path, max_bytes: int,
                 bounds: Mapping[str, int] | None = None) -> int:
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
            # the tar header gives each file's size before its data: one over its bound is not copied
            return extract_capped(chunks, local_dir, max_bytes, top=top, bounds=bounds)
        except (tarfile.ReadError, EOFError) as exc:
            # The stream broke mid-archive (the container died, the daemon restarted).
            raise SandboxGoneError(f"logs of container {self.id[:12]} could not be read: {exc}") from exc
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    # -- lifecycle ------------------------------------------------------------------------

    async def delete(self) -> None:
        # Shielded: a cancelled cell still removes its container, then its allowlist network.
        await asyncio.shield(self._b.call(self._b.remove_container, self.id))
        await asyncio.shield(self._gate.remove())


def _sandbox_arcname(sandbox_path: str) -> str:
    rel = PurePosixPath(sandbox_path.lstrip("/"))
    if ".." in rel.parts or not rel.parts:
        raise ArchiveEscapeError(f"sandbox path {sandbox_path!r} is not a path below /")
    return rel.as_posix()


def _tar_dir(local_dir: Path, sandbox_dir: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if PurePosixPath(sandbox_dir) == PurePosixPath("/"):
            # Into the root: the directory's children, each under its own name.
            for child in sorted(local_dir.iterdir()):
                tar.add(child, arcname=child.name, filter=root_owned)
        else:
            tar.add(local_dir, arcname=_sandbox_arcname(sandbox_dir), filter=root_owned)
    return buf.getvalue()
