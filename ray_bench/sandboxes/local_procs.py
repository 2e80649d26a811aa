"""A local sandbox's processes found by the mark in their environment, not by process group.

A command's process group does not hold everything it starts: ``setsid``, a daemonising server
(``nohup setsid npm run dev &``) or a double fork makes a session of its own, which the group
kill of a delete never reached, and the process ran on after its sandbox was gone. Every
command of a local sandbox is started with :data:`MARK` ``=<sandbox id>`` in its environment,
which its descendants inherit (and ``/proc/<pid>/environ`` keeps: it is the environment the
process was started with), so the delete finds them wherever they went. A process started with
an empty environment (``env -i``) carries no mark and is out of this reach.

The scan costs an ``open`` per process read. Two things keep a short cell's from reading every
process on the host: a sandbox that ran nothing is not scanned, and while the sandbox is young
(:data:`PID_WINDOW_SEC`) only the pids allocated since it was made are read (the kernel hands
out pids in increasing order, wrapping at ``pid_max``; ``/proc/loadavg`` names the newest).
Linux only; elsewhere (no ``/proc``) nothing is found."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ray_bench.errors import SandboxProcessesSurvivedError

#: The environment variable that marks a local sandbox's commands: ``<sandbox id>``.
MARK = "RAY_BENCH_LOCAL_SANDBOX"
#: How long after a sandbox was made the pid window is trusted; past it every process is read
#: (the window would mislead only after ``pid_max`` pids were handed out since: 32,768 here).
PID_WINDOW_SEC = 10.0
#: How long a process whose environment cannot be read yet (caught in its ``exec``: empty for a
#: moment, as its command line is) is read again, and how long the kill goes on finding more.
EXEC_WAIT_SEC = 0.5
KILL_ROUNDS_SEC = 5.0


def newest_pid() -> int | None:
    """The pid the kernel handed out last (``/proc/loadavg``'s last field), or None."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().rsplit(maxsplit=1)[-1])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Window:
    """The pids handed out after ``after`` (exclusive), cyclically: the sandbox's processes can
    have no other pid while the window is trusted."""

    after: int
    made: float  # monotonic

    def trusted(self) -> bool:
        return time.monotonic() - self.made < PID_WINDOW_SEC

    def holds(self, pid: int, newest: int) -> bool:
        if newest >= self.after:
            return self.after < pid <= newest
        return pid > self.after or pid <= newest  # wrapped past pid_max since


def window_now() -> Window | None:
    newest = newest_pid()
    return None if newest is None else Window(newest, time.monotonic())


def _candidates(window: Window | None) -> list[int]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    me = os.getpid()
    pids = [int(n) for n in names if n.isdigit() and int(n) != me]
    if window is None or not window.trusted():
        return pids
    newest = newest_pid()
    if newest is None:
        return pids
    return [p for p in pids if window.holds(p, newest)]


def _environ(pid: int) -> bytes | None:
    """The environment ``pid`` was started with; None when it is gone or not ours to read."""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _settled(pid: int) -> bool:
    """A zombie, a kernel thread or gone: its empty environment is not waited for."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    state, parent = stat[stat.rindex(b")") + 2 :].split()[:2]
    return state in (b"Z", b"X") or pid == 2 or parent == b"2"


def scan(sandbox_id: str, pids: Iterable[int]) -> tuple[list[int], list[int]]:
    """(the pids marked as ``sandbox_id``'s, the pids caught mid-``exec`` whose environment is
    empty for now)."""
    needle = f"\0{MARK}={sandbox_id}\0".encode()
    found: list[int] = []
    pending: list[int] = []
    for pid in pids:
        env = _environ(pid)
        if env is None:
            continue
        if not env:
            if not _settled(pid):
                pending.append(pid)
        elif needle in b"\0" + env + b"\0":
            found.append(pid)
    return found, pending


def glance(sandbox_id: str, window: Window | None) -> bool:
    """Whether anything may be left to kill: a marked process, or one caught mid-``exec``. One
    pass and no waiting, cheap enough for the event loop in a young sandbox."""
    found, pending = scan(sandbox_id, _candidates(window))
    return bool(found or pending)


def kill_marked(sandbox_id: str, window: Window | None = None) -> int:
    """SIGKILL every process marked as ``sandbox_id``'s, again until a pass finds none (a
    process may fork between a pass and its kill), and those caught mid-``exec`` once their
    environment shows; the number killed. Raises :class:`SandboxProcessesSurvivedError` when
    marked processes are still there after :data:`KILL_ROUNDS_SEC` (one stuck in the kernel)."""
    killed: set[int] = set()
    deadline = time.monotonic() + KILL_ROUNDS_SEC
    exec_deadline = time.monotonic() + EXEC_WAIT_SEC
    while True:
        found, pending = scan(sandbox_id, _candidates(window))
        alive = [pid for pid in found if not _settled(pid)]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        if not alive and (not pending or time.monotonic() > exec_deadline):
            return len(killed)
        if time.monotonic() > deadline:
            raise SandboxProcessesSurvivedError(
                f"local sandbox {sandbox_id}: {len(alive)} of its processes survived SIGKILL for "
                f"{KILL_ROUNDS_SEC:g} s (pids {', '.join(map(str, sorted(alive)[:10]))}); kill them by hand")
        time.sleep(0.005 if pending and not alive else 0.02)
