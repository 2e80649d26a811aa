"""A local sandbox's processes found by the mark in their environment, not by process group.

A command's process group does not hold everything it starts: ``setsid``, a daemonising server
(``nohup setsid npm run dev &``) or a double fork makes a session of its own, which the group
kill of a delete never reached, and the process ran on after its sandbox was gone. Every
command of a local sandbox is started with :data:`MARK` ``=<sandbox id>`` in its environment,
which its descendants inherit (and ``/proc/<pid>/environ`` keeps: it is the environment the
process was started with), so the delete finds them wherever they went. A process started with
an empty environment (``env -i``) carries no mark and is out of this reach.

A pass over ``/proc`` costs an ``open`` and a ``read`` per process (~20 us here), and at scale
a runner's cells end by the thousand while as many others are alive: a pass per ending cell
was O(N^2) (10,000 in flight took 61-135 s to drain). So the passes are shared: every cell of an
event loop that asks (:func:`reap`) joins the next pass, which reads each process once and files
the marked ones under their sandbox (:class:`Census`); a request that arrives while a pass runs
joins the one after it, so every request is answered by a pass begun after it. A sandbox's
cleanup costs a share of a pass, not a pass. Nothing cheaper than the environment tells a
process's sandbox: a process group or session id is left by ``setsid``, and the parent of a
double-forked daemon is ``init`` (or a subreaper) once its middle process exits (proc(5):
``/proc/<pid>/stat``'s ``ppid``, ``pgrp``, ``session``); the environment is inherited through
all of these and ``exec`` (proc(5): ``/proc/<pid>/environ``, "the initial environment that was
set when the currently executing program was started via execve(2)").

Two things keep a short cell's pass from reading every process on the host: a sandbox that ran
nothing is not scanned, and while every sandbox of a pass is young (:data:`PID_WINDOW_SEC`) only
the pids allocated since the oldest of them was made are read (the kernel hands out pids in
increasing order, wrapping at ``pid_max``; ``/proc/loadavg`` names the newest). Linux only;
elsewhere (no ``/proc``) nothing is found."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import weakref
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


def _widest(windows: Iterable[Window | None]) -> Window | None:
    """The window that holds every other one's pids: the one made first (the pids handed out
    since an earlier moment include those since a later one, while all are trusted); None (read
    every process) when one of them is missing or no longer trusted."""
    widest: Window | None = None
    for window in windows:
        if window is None or not window.trusted():
            return None
        if widest is None or window.made < widest.made:
            widest = window
    return widest


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


#: An environment read in one ``read`` up to this size: ``environ_read`` (fs/proc/base.c) fills
#: the buffer page by page up to its end, so a shorter answer is the whole environment.
_ENV_READ = 1 << 16


def _environ(pid: int) -> bytes | None:
    """The environment ``pid`` was started with; None when it is gone or not ours to read."""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
    except OSError:
        return None
    try:
        chunk = os.read(fd, _ENV_READ)
        if len(chunk) < _ENV_READ:
            return chunk
        chunks = [chunk]
        while chunk := os.read(fd, _ENV_READ):
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


@dataclass(frozen=True)
class Census:
    """One pass over some processes: the marked ones by their sandbox id (each listed under every
    value of :data:`MARK` its environment holds), and those caught mid-``exec``, whose environment
    is empty for now and whose sandbox is not known yet."""

    marked: dict[str, list[int]]
    exec_caught: list[int]


_KEY = f"\0{MARK}=".encode()


def _marks(env: bytes) -> set[str]:
    """Every value of :data:`MARK` in an environment (a mark is matched whole: an entry
    ``MARK=<id>``, not a longer name ending in ``MARK`` nor the text inside another value)."""
    ids: set[str] = set()
    if _KEY[1:] not in env:
        return ids
    entries = b"\0" + env
    at = entries.find(_KEY)
    while at >= 0:
        begin = at + len(_KEY)
        end = entries.find(b"\0", begin)
        ids.add(entries[begin : len(entries) if end < 0 else end].decode("utf-8", "surrogateescape"))
        at = -1 if end < 0 else entries.find(_KEY, end)
    return ids


def census(pids: Iterable[int]) -> Census:
    """Read each of ``pids``' environment once and file the marked ones."""
    marked: dict[str, list[int]] = {}
    caught: list[int] = []
    for pid in pids:
        env = _environ(pid)
        if env is None:
            continue
        if not env:
            if not _settled(pid):
                caught.append(pid)
            continue
        for sandbox_id in _marks(env):
            marked.setdefault(sandbox_id, []).append(pid)
    return Census(marked, caught)


def _signal_kill(pid: int, pidfd: int | None) -> None:
    if pidfd is None:
        os.kill(pid, signal.SIGKILL)
    else:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)


def _kill_if_marked(pid: int, sandbox_id: str) -> bool:
    """SIGKILL ``pid`` if it is, now, alive and marked as ``sandbox_id``'s; whether it was (one
    that may not be signalled counts: it is still there). The pass that listed it may be a
    while ago (a thread's pass over 10,000 processes), and its pid may have gone to another
    process since: a pidfd is opened first and the environment read again, so the process
    signalled is the one read, or none when it is gone by then (pidfd_open(2))."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfds (before Linux 5.3) or no descriptor left: by pid, as before them
        pidfd = None
    try:
        env = _environ(pid)  # a zombie's reads as empty: nothing to kill
        if not env or sandbox_id not in _marks(env):
            return False
        _signal_kill(pid, pidfd)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


class _Reaping:
    """One sandbox's kill across passes: SIGKILL every process marked as its own, again in the
    next pass until one finds none (a process may fork between a pass and its kill), and wait for
    those caught mid-``exec`` in its window until their environment shows (at most
    :data:`EXEC_WAIT_SEC`). Raises :class:`SandboxProcessesSurvivedError` when marked processes
    are still there after :data:`KILL_ROUNDS_SEC` (one stuck in the kernel)."""

    def __init__(self, sandbox_id: str, window: Window | None) -> None:
        self.sandbox_id = sandbox_id
        self.window = window
        self.killed: set[int] = set()
        now = time.monotonic()
        self.deadline = now + KILL_ROUNDS_SEC
        self.exec_deadline = now + EXEC_WAIT_SEC
        self.pause = 0.0
        self.error: SandboxProcessesSurvivedError | None = None

    def serve(self, found: Census, newest: int | None) -> bool:
        """:meth:`step`, its error kept for :meth:`result`; True when done either way."""
        try:
            return self.step(found, newest)
        except SandboxProcessesSurvivedError as e:
            self.error = e
            return True

    def result(self) -> int:
        """The number killed, once done; raises the error it ended with."""
        if self.error is not None:
            raise self.error
        return len(self.killed)

    def step(self, found: Census, newest: int | None) -> bool:
        """Kill what ``found`` lists as this sandbox's; True when nothing is left to look for."""
        window = self.window
        if window is None or not window.trusted() or newest is None:
            pending = found.exec_caught
        else:
            pending = [p for p in found.exec_caught if window.holds(p, newest)]
        alive = [pid for pid in found.marked.get(self.sandbox_id, ()) if _kill_if_marked(pid, self.sandbox_id)]
        self.killed.update(alive)
        if not alive and (not pending or time.monotonic() > self.exec_deadline):
            return True
        if time.monotonic() > self.deadline:
            raise SandboxProcessesSurvivedError(
                f"local sandbox {self.sandbox_id}: {len(alive)} of its processes survived SIGKILL for "
                f"{KILL_ROUNDS_SEC:g} s (pids {', '.join(map(str, sorted(alive)[:10]))}); kill them by hand")
        self.pause = 0.005 if pending and not alive else 0.02
        return False


def _look(windows: Iterable[Window | None]) -> tuple[list[int], int | None]:
    """The pids a pass for these windows reads, and the newest pid as they were listed."""
    newest = newest_pid()
    return _candidates(_widest(windows)), newest


def _reap_blocking(reapings: list[_Reaping]) -> None:
    """Serve ``reapings`` to the end with passes of their own, shared, on this thread."""
    left = reapings
    while left:
        pids, newest = _look(r.window for r in left)
        found = census(pids)
        left = [r for r in left if not r.serve(found, newest)]
        if left:
            time.sleep(min(r.pause for r in left))


def kill_marked(sandbox_id: str, window: Window | None = None) -> int:
    """:class:`_Reaping` for one sandbox, blocking; the number killed."""
    reaping = _Reaping(sandbox_id, window)
    _reap_blocking([reaping])
    return reaping.result()


#: A pass reading at most this many processes runs on the event loop itself (a young sandbox's
#: window: a few dozen); a larger one goes to a thread, and the loop serves the other cells.
INLINE_PIDS = 256
#: A pass begins at least this many times its predecessor's CPU after it began: while cells end
#: one after another all the time (a drain at scale), the passes take at most ~1/(1 + this) of
#: a core instead of all of it, and each serves the cells that ended meanwhile. At 10,000
#: processes a pass costs ~0.2 s, so a cleanup waits up to ~0.8 s more; a small run's ~1 ms.
PASS_GAP = 3.0


def _costed_census(pids: list[int]) -> tuple[Census, float]:
    """:func:`census` and the CPU it took (of the thread it ran on)."""
    began = time.thread_time()
    return census(pids), time.thread_time() - began


class _Reaper:
    """The shared passes of one event loop: each pass serves every :class:`_Reaping` asked for
    before it began, and those not done join the next one (after the shortest pause they ask)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._asked: list[tuple[_Reaping, asyncio.Future[int]]] = []
        self._task: asyncio.Task[None] | None = None
        self._next = 0.0  # monotonic: the earliest start of the next pass

    def ask(self, reaping: _Reaping) -> asyncio.Future[int]:
        done: asyncio.Future[int] = self._loop.create_future()
        self._asked.append((reaping, done))
        if self._task is None:
            self._task = self._loop.create_task(self._passes())
            self._task.add_done_callback(self._ended)
        return done

    def _ended(self, task: asyncio.Task[None]) -> None:
        if self._task is task:  # cancelled before it began
            self._task = None
        if task.cancelled() and self._task is None and self._asked:
            # The loop is going away (a cancelled caller does not cancel the passes): what was
            # asked for is finished here, blocking, as a thread's kill would have been.
            left, self._asked = self._asked, []
            _reap_blocking([reaping for reaping, _ in left])
            for reaping, done in left:
                _settle(done, reaping)

    async def _passes(self) -> None:
        batch: list[tuple[_Reaping, asyncio.Future[int]]] = []
        try:
            await asyncio.sleep(0)  # the other cells ending in this turn ask too
            while self._asked:
                if (wait := self._next - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                batch, self._asked = self._asked, []
                pids, newest = _look(r.window for r, _ in batch)
                began = time.monotonic()
                if len(pids) <= INLINE_PIDS:
                    found, cost = _costed_census(pids)
                else:
                    found, cost = await asyncio.to_thread(_costed_census, pids)
                self._next = began + PASS_GAP * cost
                carried = []
                for reaping, done in batch:
                    if reaping.serve(found, newest):
                        _settle(done, reaping)
                    else:
                        carried.append((reaping, done))
                batch = []
                self._asked[:0] = carried
                if carried:
                    self._next = max(self._next, time.monotonic() + min(r.pause for r, _ in carried))
        except asyncio.CancelledError:
            self._asked[:0] = batch  # finished by _ended
            raise
        except BaseException as e:  # a fault of the pass itself: every caller hears of it
            for _, done in batch + self._asked:
                if not done.done():
                    done.set_exception(e)
            self._asked = []
            raise
        finally:
            self._task = None


def _settle(done: asyncio.Future[int], reaping: _Reaping) -> None:
    if done.done():  # its caller was cancelled: the kill went on without it
        return
    if reaping.error is not None:
        done.set_exception(reaping.error)
    else:
        done.set_result(len(reaping.killed))


_REAPERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Reaper] = weakref.WeakKeyDictionary()


async def reap(sandbox_id: str, window: Window | None = None) -> int:
    """Kill every process marked as ``sandbox_id``'s (:class:`_Reaping`) in the passes this
    event loop shares among the sandboxes it is cleaning up; the number killed. A cancelled
    caller leaves the kill going on."""
    loop = asyncio.get_running_loop()
    reaper = _REAPERS.get(loop)
    if reaper is None:
        reaper = _REAPERS[loop] = _Reaper(loop)
    return await reaper.ask(_Reaping(sandbox_id, window))
