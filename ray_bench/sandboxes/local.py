"""The ``local`` backend: a host process group in a scratch directory. No isolation.

For demos and for wrapping another harness. Sandbox paths (``/app``, ``/logs``) live below
the scratch root; :meth:`LocalSandbox.path` names them for commands, and the cell runner also
exports them as ``APP_DIR``, ``LOGS_DIR``, ``TESTS_DIR`` and friends, which portable tasks use
(``${LOGS_DIR:-/logs}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from ray_bench.errors import ArchiveEscapeError, SandboxGoneError
from ray_bench.sandboxes.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    Sandbox,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
)

_MARKER = ".ray-bench-sandbox.json"
_PIDS = ".ray-bench-pgids"


def default_root() -> Path:
    return Path(os.environ.get("RAY_BENCH_LOCAL_ROOT", Path(tempfile.gettempdir()) / "ray-bench-local"))


class LocalSandbox(Sandbox):
    def __init__(self, root: Path, spec: SandboxSpec) -> None:
        self.root = root
        self.id = root.name
        self.labels = dict(spec.labels)
        self._env = dict(spec.env)
        self._workdir = spec.workdir
        self._procs: set[asyncio.subprocess.Process] = set()

    def path(self, sandbox_path: str) -> str:
        return str(self._host(sandbox_path))

    def _host(self, sandbox_path: str) -> Path:
        rel = Path(sandbox_path.lstrip("/"))
        if ".." in rel.parts:
            raise ArchiveEscapeError(f"sandbox path {sandbox_path!r} leaves the sandbox")
        return self.root / rel

    def _check_alive(self) -> None:
        if not (self.root / _MARKER).exists():
            raise SandboxGoneError(f"local sandbox {self.id} no longer exists")

    async def exec(
        self,
        command: str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ExecResult:
        self._check_alive()
        workdir = self._host(cwd or self._workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root / "home")}
        full_env.update(self._env)
        full_env.update(env or {})
        (self.root / "home").mkdir(exist_ok=True)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", command,
            cwd=workdir, env=full_env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so a kill reaches its children
        )
        self._procs.add(proc)
        # Recorded so that a later `remove` (audit, resume after a crash) can kill what a dead
        # runner left behind: the group outlives the worker process that started it.
        with (self.root / _PIDS).open("a") as pids:
            pids.write(f"{proc.pid}\n")
        assert proc.stdout is not None
        assert proc.stderr is not None
        dropped = [0]
        out_task = asyncio.ensure_future(_read_capped(proc.stdout, output_cap, dropped))
        err_task = asyncio.ensure_future(_read_capped(proc.stderr, output_cap, dropped))
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            timed_out = True
            _kill_group(proc)
            await proc.wait()
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            self._procs.discard(proc)
        # Children that outlive sh keep the pipes open; the group kill above and this bound
        # keep a stray background process from holding the runner forever.
        done, pending = await asyncio.wait({out_task, err_task}, timeout=5)
        for task in pending:
            task.cancel()
        stdout = out_task.result() if out_task in done else b""
        stderr = err_task.result() if err_task in done else b""
        return ExecResult(
            exit_code=proc.returncode if proc.returncode is not None else -1,
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            timed_out=timed_out,
            duration_sec=time.monotonic() - started,
            truncated_bytes=dropped[0],
        )

    async def put_dir(self, local_dir: Path, sandbox_dir: str) -> None:
        self._check_alive()
        dest = self._host(sandbox_dir)
        await asyncio.to_thread(shutil.copytree, local_dir, dest, dirs_exist_ok=True, symlinks=True)

    async def put_file(self, data: bytes, sandbox_path: str, mode: int = 0o644) -> None:
        self._check_alive()
        dest = self._host(sandbox_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        dest.chmod(mode)

    async def get_dir(self, sandbox_dir: str, local_dir: Path, *, max_bytes: int) -> int:
        self._check_alive()
        src = self._host(sandbox_dir)
        if not src.is_dir():
            return 0
        return await asyncio.to_thread(copy_tree_capped, src, local_dir, max_bytes)

    async def delete(self) -> None:
        for proc in list(self._procs):
            _kill_group(proc)
        _kill_recorded(self.root)
        await asyncio.to_thread(shutil.rmtree, self.root, True)


def copy_tree_capped(src: Path, dest: Path, max_bytes: int) -> int:
    """Copy regular files below ``src`` into ``dest`` up to ``max_bytes`` in all. Symlinks are
    not followed: a link pointing out of the sandbox is skipped rather than copied."""
    written = 0
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        target = (dest / rel).resolve()
        if not target.is_relative_to(root):
            raise ArchiveEscapeError(f"{rel} would be written outside {dest}")
        if path.is_symlink():
            continue
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        budget = max_bytes - written
        if budget <= 0:
            break
        target.parent.mkdir(parents=True, exist_ok=True)
        with path.open("rb") as fin, target.open("wb") as fout:
            chunk = fin.read(budget)
            fout.write(chunk)
            written += len(chunk)
    return written


async def _read_capped(stream: asyncio.StreamReader, cap: int, dropped: list[int]) -> bytes:
    kept = bytearray()
    while chunk := await stream.read(1 << 16):
        room = cap - len(kept)
        if room > 0:
            kept += chunk[:room]
        dropped[0] += max(0, len(chunk) - max(room, 0))
    return bytes(kept)


def _kill_recorded(root: Path) -> None:
    try:
        pgids = [int(line) for line in (root / _PIDS).read_text().split()]
    except (OSError, ValueError):
        return
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class LocalBackend(SandboxBackend):
    name = "local"

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root else default_root()

    async def create(self, spec: SandboxSpec) -> Sandbox:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"sbx-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        (path / _MARKER).write_text(json.dumps({"labels": dict(spec.labels)}))
        return LocalSandbox(path, spec)

    async def list(self, labels: Mapping[str, str]) -> list[SandboxRef]:
        refs: list[SandboxRef] = []
        if not self.root.is_dir():
            return refs
        for marker in self.root.glob(f"*/{_MARKER}"):
            try:
                found = json.loads(marker.read_text())["labels"]
            except (OSError, ValueError, KeyError):
                continue
            if all(found.get(k) == v for k, v in labels.items()):
                refs.append(SandboxRef(self.name, marker.parent.name, found, state="running"))
        return refs

    async def remove(self, ref: SandboxRef) -> None:
        _kill_recorded(self.root / ref.id)
        await asyncio.to_thread(shutil.rmtree, self.root / ref.id, True)
