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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ray_bench import sandboxes
from ray_bench.errors import ArchiveEscapeError, SandboxError, SandboxGoneError
from ray_bench.sandboxes.base import (
    DEFAULT_OUTPUT_CAP,
    STOP_GRACE_SEC,
    ExecResult,
    ExecWatch,
    Sandbox,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
    halt_when_done,
    until_done,
)
from ray_bench.sandboxes.local_dirs import MARKER as _MARKER
from ray_bench.sandboxes.local_dirs import create_dir, remove_dir, remove_small_dir, sweep
from ray_bench.sandboxes.local_pipes import OutputPipe
from ray_bench.sandboxes.local_procs import MARK, reap, window_now

T = TypeVar("T")

#: How long an exec waits, after its command exited, for a child still holding the command's
#: output to let go (at most what is left of the exec's timeout); then what the pipes hold is
#: read and they are closed. dockerd waits 2 s likewise before it ends a `docker exec`'s streams.
DRAIN_GRACE_SEC = 1.0


def default_root() -> Path:
    return Path(os.environ.get("RAY_BENCH_LOCAL_ROOT", Path(tempfile.gettempdir()) / "ray-bench-local"))


class LocalSandbox(Sandbox):
    on_host = True

    def __init__(self, root: Path, spec: SandboxSpec) -> None:
        self.root = root
        self.id = root.name
        self.labels = dict(spec.labels)
        self._env = dict(spec.env)
        self._workdir = spec.workdir
        self._procs: set[asyncio.subprocess.Process] = set()
        #: The process groups this sandbox started, as its record lists them (the record is for
        #: a later runner; this one need not read it back).
        self._groups: list[int] = []
        #: The pids handed out from here on are the only ones its processes can have, for a while
        #: (local_procs); its delete looks for processes that left their group only if it ran any
        #: since the last look.
        self._window = window_now()
        self._ran = False

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
        user: str | None = None,
        watch: ExecWatch | None = None,
    ) -> ExecResult:
        return await self._run(["/bin/sh", "-c", command], self._env_of(env), timeout=timeout, cwd=cwd,
                               output_cap=output_cap, user=user, watch=watch)

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
        """``bash SCRIPT`` (``sh SCRIPT`` without a bash on the command's PATH) started as is:
        the ``sh -c`` that chooses the shell elsewhere is a process of its own here."""
        full_env = self._env_of(env)
        shell = _which_shell(full_env.get("PATH", ""))
        if shell is None:
            return await super().exec_script(script, timeout=timeout, env=env, cwd=cwd, output_cap=output_cap,
                                              user=user)
        return await self._run([shell, self.path(script)], full_env, timeout=timeout, cwd=cwd,
                               output_cap=output_cap, user=user)

    def _env_of(self, env: Mapping[str, str] | None) -> dict[str, str]:
        # HOME is the sandbox root, as "/" is a container's: nothing to create per sandbox. TMPDIR
        # is in it too (its /tmp where one was made, as Harbor's host-side agents make one, else
        # the root: a directory per cell costs a mkdir and an rmdir, tests/scheduler/
        # test_cost_per_cell.py), so what a program leaves in its temporary directory (Gemini
        # CLI's gemini-client-error-*.json reports, os.tmpdir()) goes with the sandbox, not to the
        # host's /tmp.
        tmp = self.root / "tmp"
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root),
                    "TMPDIR": str(tmp if tmp.is_dir() else self.root)}
        full_env.update(self._env)
        full_env.update(env or {})
        full_env[MARK] = self.id  # inherited by every process it starts: how the delete finds them
        return full_env

    async def _run(self, argv: list[str], full_env: dict[str, str], *, timeout: float, cwd: str | None,
                   output_cap: int, user: str | None, watch: ExecWatch | None = None) -> ExecResult:
        self._check_alive()
        if user is not None:
            raise SandboxError(f"the local backend cannot run a command as user {user!r}")
        workdir = self._host(cwd or self._workdir or "/app")
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self._ran = True
        out, err = OutputPipe("stdout", output_cap, watch), OutputPipe("stderr", output_cap, watch)
        # Shielded: a cancel while asyncio connects the new process would SIGKILL the shell alone
        # (its pid never returned), leaving the children it had started running. Instead the start
        # ends, and its whole group is stopped.
        spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
            *argv,
            cwd=workdir, env=full_env,
            stdout=out.write_fd, stderr=err.write_fd,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so a kill reaches its children
        ))
        try:
            proc = await asyncio.shield(spawn)
        except BaseException:
            out.close()
            err.close()
            if not spawn.cancelled():
                await _stop_spawned(spawn)
            raise
        out.start()
        err.start()
        self._procs.add(proc)
        # The group outlives the worker process that started it: recorded for `remove`.
        with (self.root / _MARKER).open("a") as record:
            record.write(f"{proc.pid}\n")
        self._groups.append(proc.pid)
        waiter = asyncio.ensure_future(proc.wait())
        killed = False
        try:
            outcome = await until_done(waiter, timeout, watch)
            if outcome != "done":
                killed = await _stop_group(proc)
                if watch is not None:
                    watch.note_halt(killed)
                await waiter
        except BaseException:
            waiter.cancel()
            out.close()
            err.close()
            stop = asyncio.ensure_future(_stop_group(proc))
            halt_when_done(stop, watch)  # told when the stop ends, though this call is gone by then
            await asyncio.shield(stop)
            raise
        finally:
            self._procs.discard(proc)
        # A child that outlives sh (`sleep 100 &`, a setsid that escaped the kill) may hold the
        # pipes open: what was written up to here is kept all the same, and the exec's bound holds.
        grace = min(DRAIN_GRACE_SEC, max(0.0, started + timeout - time.monotonic()))
        stdout, stderr = await asyncio.gather(out.finish(grace), err.finish(grace))
        return ExecResult(
            exit_code=proc.returncode if proc.returncode is not None else -1,
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            timed_out=outcome == "timeout",
            duration_sec=time.monotonic() - started,
            truncated_bytes=out.dropped + err.dropped,
            stopped=watch.reason if outcome == "stopped" and watch is not None else None,
            killed=killed,
        )

    async def put_dir(self, local_dir: Path, sandbox_dir: str) -> None:
        self._check_alive()
        dest = self._host(sandbox_dir)
        try:  # inline while small (see _off_loop_if_large), in one walk
            _copy_tree(local_dir, dest, [SMALL_TREE])
        except _LargeTree:  # all of it in a thread, merged over what was copied already
            await asyncio.to_thread(_copy_tree, local_dir, dest)

    async def put_file(self, data: bytes, sandbox_path: str, mode: int = 0o644) -> None:
        self._check_alive()
        dest = self._host(sandbox_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        dest.chmod(mode)

    async def get_dir(self, sandbox_dir: str, local_dir: Path, *, max_bytes: int,
                      bounds: Mapping[str, int] | None = None) -> int:
        self._check_alive()
        src = self._host(sandbox_dir)
        if not src.is_dir():
            return 0
        return await _off_loop_if_large(src, copy_tree_capped, src, local_dir, max_bytes)

    async def take_dir(self, sandbox_dir: str, local_dir: Path, *, max_bytes: int,
                       bounds: Mapping[str, int] | None = None) -> int:
        """Move the directory out when it fits the cap and ``local_dir`` is new and on the same
        filesystem (one rename instead of a copy per file); copy otherwise. The sandbox's
        processes are killed first, so none writes into the collected files afterwards, and
        symbolic links are dropped, as a copy would skip them."""
        self._check_alive()
        src = self._host(sandbox_dir)
        if not src.is_dir():
            return 0
        await self._kill_processes()
        try:  # inline while small (see _off_loop_if_large), measured in the same walk
            return _move_or_copy(src, local_dir, max_bytes, SMALL_TREE)
        except _LargeTree:
            return await asyncio.to_thread(_move_or_copy, src, local_dir, max_bytes)

    async def delete(self) -> None:
        await self._kill_processes()
        if not remove_small_dir(self.root, SMALL_TREE):  # a large tree goes to a thread (_off_loop_if_large)
            await asyncio.to_thread(remove_dir, self.root)

    async def _kill_processes(self) -> None:
        """Every process group this sandbox started, running or not: a command's children may
        outlive it; then every process marked as this sandbox's that left its group (a
        ``setsid``; local_procs). (Only :meth:`LocalBackend.create` makes a LocalSandbox, so its
        record lists these groups alone; :meth:`LocalBackend.remove` reads the record of a
        sandbox another runner made.) The look is a share of a pass that the cells of this loop
        ending at the same time make together (local_procs.reap)."""
        for proc in list(self._procs):
            _kill_group(proc)
        for pgid in self._groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        if self._ran:
            await reap(self.id, self._window)
        self._ran = False  # clean: the delete after a take_dir looks again only if more ran since


def _which_shell(path: str) -> str | None:
    """The shell ``command -v bash`` (else ``sh``) finds on ``path``, as the command's ``sh``
    would; None when ``path`` names a relative directory (the command's cwd, not this
    process's, would resolve it) or neither shell is there. A shell found is remembered per
    ``path`` while it is still there (every verifier runs one: the look-up was 0.14 ms of a
    no-op cell's runner CPU); not finding one is never remembered."""
    if not all(os.path.isabs(d) for d in path.split(os.pathsep)):
        return None
    known = _SHELLS.get(path)
    if known is not None and os.access(known, os.X_OK):
        return known
    found = shutil.which("bash", path=path) or shutil.which("sh", path=path)
    if found is not None and (path in _SHELLS or len(_SHELLS) < _SHELLS_KEPT):
        _SHELLS[path] = found
    return found


#: The shell :func:`_which_shell` found per ``PATH``, for this many ``PATH`` values at most.
_SHELLS: dict[str, str] = {}
_SHELLS_KEPT = 64


#: Trees up to this many entries are copied, moved or removed on the event loop itself.
SMALL_TREE = 256


async def _off_loop_if_large(tree: Path, func: Callable[..., T], *args: Any) -> T:
    """Run filesystem work on the event loop when ``tree`` is small, in a thread otherwise.
    A thread per call looked free but was not: with a dozen cells in flight the worker
    threads and the loop fight over the GIL around every system call; inline, the runner's
    CPU per no-op cell is about half (tests/perf/bench_runner.py). A large tree (a repository
    the agent cloned) still goes to a thread so that the loop keeps serving the other cells."""
    if _small(tree, SMALL_TREE):
        return func(*args)
    return await asyncio.to_thread(func, *args)


class _LargeTree(Exception):
    """A walk met more than its budget of entries: the rest of the work goes to a thread."""


def _spend(budget: list[int] | None) -> None:
    if budget is not None:
        budget[0] -= 1
        if budget[0] < 0:
            raise _LargeTree


def _small(root: Path, limit: int) -> bool:
    """Whether ``root`` holds at most ``limit`` entries (a walk that stops early)."""
    seen = 0
    stack = [root]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if seen > limit:
                        return False
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
        except (FileNotFoundError, NotADirectoryError):
            continue
    return True


#: The process umask, read once (reading it means setting it).
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def _copy_tree(src: Path, dest: Path, budget: list[int] | None = None, made: bool = False) -> None:
    """Merge ``src`` into ``dest`` (``cp -a`` without times): files keep their mode, symlinks
    stay links. Each file and directory is created with its mode in one call, without the
    ``copystat`` of ``shutil.copytree``: on the hosts measured a metadata operation costs
    50-500 us of CPU, and a cell's uploads are mostly metadata. ``budget``: raise
    :class:`_LargeTree` past that many entries (what was copied stays; a merge again completes it).
    ``made``: ``dest`` exists (its parent's walk just made it)."""
    if not made:
        dest.mkdir(parents=True, exist_ok=True)
    with os.scandir(src) as entries:
        for entry in entries:
            _spend(budget)
            target = dest / entry.name
            if entry.is_symlink():
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir():
                _make_dir(target, entry.stat().st_mode)
                _copy_tree(Path(entry.path), target, budget, made=True)
            else:
                _copy_file(entry.path, target, entry.stat().st_mode)


def _make_dir(path: Path, mode: int) -> None:
    try:
        os.mkdir(path, mode & 0o7777)
    except FileExistsError:
        return
    if mode & 0o7777 & _UMASK:
        os.chmod(path, mode & 0o7777)


def _copy_file(src: str, dest: Path, mode: int) -> None:
    with open(src, "rb") as fin:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode & 0o7777)
        with open(fd, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    if mode & 0o7777 & _UMASK:
        os.chmod(dest, mode & 0o7777)


def copy_tree_capped(src: Path, dest: Path, max_bytes: int) -> int:
    """Copy regular files below ``src`` into ``dest`` up to ``max_bytes`` in all, in name
    order. Symlinks are not followed: a link pointing out of the sandbox is skipped rather
    than copied. Names come from directory listings (never ``..``), so nothing lands outside
    ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    return _copy_capped(src, dest, max_bytes)


def _copy_capped(src: Path, dest: Path, budget: int) -> int:
    written = 0
    with os.scandir(src) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        if entry.is_symlink():
            continue
        target = dest / entry.name
        if entry.is_dir():
            target.mkdir(exist_ok=True)
            written += _copy_capped(Path(entry.path), target, budget - written)
            continue
        if budget - written <= 0:
            break
        if not entry.is_file():
            continue  # fifos, sockets, devices
        with open(entry.path, "rb") as fin, target.open("wb") as fout:
            chunk = fin.read(budget - written)
            fout.write(chunk)
            written += len(chunk)
    return written


def _move_or_copy(src: Path, dest: Path, max_bytes: int, entries: int | None = None) -> int:
    """Move ``src`` to ``dest`` when it holds at most ``max_bytes`` of regular files only
    (symlinks are removed first); otherwise copy with the cap. ``entries``: raise
    :class:`_LargeTree` (nothing moved or copied) when ``src`` holds more than that many."""
    size = _drop_links_and_measure(src, max_bytes, None if entries is None else [entries])
    if size is None and entries is not None and not _small(src, entries):
        raise _LargeTree
    if size is not None and not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(src, dest)
            return size
        except OSError:  # another filesystem (EXDEV), or dest appeared: copy instead
            pass
    return copy_tree_capped(src, dest, max_bytes)


def _drop_links_and_measure(root: Path, limit: int, budget: list[int] | None = None) -> int | None:
    """Unlink symlinks below ``root`` and total the regular files' sizes; None when the
    total passes ``limit`` or something other than files and directories is there.
    ``budget``: raise :class:`_LargeTree` past that many entries."""
    total = 0
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                _spend(budget)
                if entry.is_symlink():
                    os.unlink(entry.path)
                elif entry.is_dir():
                    stack.append(Path(entry.path))
                elif entry.is_file():
                    total += entry.stat().st_size
                    if total > limit:
                        return None
                else:
                    return None
    return total


def _kill_recorded(root: Path) -> None:
    try:
        pgids = [int(line) for line in (root / _MARKER).read_text().splitlines()[1:]]
    except (OSError, ValueError):
        return
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


async def _stop_group(proc: asyncio.subprocess.Process) -> bool:
    """SIGTERM to the command's group, SIGKILL if it is still there after
    :data:`~ray_bench.sandboxes.base.STOP_GRACE_SEC` (what :func:`stop_group_sh` does in a
    container): a CLI writes out what it buffered. True when the SIGKILL was needed."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + STOP_GRACE_SEC
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        await asyncio.sleep(0.05)
    _kill_group(proc)
    return True


async def _stop_spawned(spawn: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """Stop the group of a process whose start was interrupted, once the start has ended (a
    start that failed started nothing)."""
    try:
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:  # cancelled again meanwhile: the start goes on; stop it then
        spawn.add_done_callback(lambda f: None if f.cancelled() or f.exception() else _kill_group(f.result()))
        raise
    except Exception:
        return
    await asyncio.shield(_stop_group(proc))


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class LocalBackend(SandboxBackend):
    name = "local"

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root else default_root()

    async def create(self, spec: SandboxSpec) -> Sandbox:
        return LocalSandbox(create_dir(self.root, spec.labels), spec)

    async def list(self, labels: Mapping[str, str]) -> list[SandboxRef]:
        refs: list[SandboxRef] = []
        if not self.root.is_dir():
            return refs
        await asyncio.to_thread(sweep, self.root)
        for marker in self.root.glob(f"*/{_MARKER}"):
            try:
                with marker.open() as record:
                    found = json.loads(record.readline())["labels"]
            except (OSError, ValueError, KeyError):
                continue
            if all(found.get(k) == v for k, v in labels.items()):
                refs.append(SandboxRef(self.name, marker.parent.name, found, state="running"))
        return refs

    async def remove(self, ref: SandboxRef) -> None:
        _kill_recorded(self.root / ref.id)
        await reap(ref.id)  # every process read: its age is not known
        await asyncio.to_thread(remove_dir, self.root / ref.id)


sandboxes.register("local", LocalBackend)
