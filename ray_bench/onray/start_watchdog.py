"""The watchdog of one local Ray start: a separate process, because the driver cannot watch
itself. ``ray.init`` registers the driver with its raylet in C++ (``RayletIpcClient::RegisterClient``,
a blocking read with no timeout) while holding the GIL: a watchdog thread in the driver was
measured not to run at all until the read returned, which, with a raylet that never answers, is
never.

The driver starts it with its pid, the timeout, the grace and the error line, and tells it on its
stdin when the start connects the driver (``connecting``) and when ``ray.init`` has returned
(``ok``). At the timeout, it kills every process of the driver's Ray sessions (their names end in
the driver's pid, ``ray/_private/node.py``). A start still in Python then raises in the driver and
is tried again; a driver blocked in its registration is ended by Ray itself when the raylet goes
(measured: "Failed to register worker to Raylet: IOError ... End of file", exit status 1), so
the error line is printed first, on the driver's stderr. A driver that has not answered ``grace``
seconds after the kill is killed too, and so are its sessions again (what the start began since).
A driver that exits in the middle of a start (Ray's own exit, a signal) leaves nothing either:
the watchdog sees its stdin close and kills the sessions.

Standard library only, and run with ``python -I -S``: it starts in milliseconds on a loaded host
and no ``sitecustomize`` or user site reaches it."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import sys
import time
from pathlib import Path

#: The watchdog's exit status when it fired (the driver's start is not one to keep).
FIRED = 3
#: What the driver writes on the watchdog's stdin.
CONNECTING, OK = b"connecting\n", b"ok\n"


def own_session_pattern(pid: int | None = None) -> re.Pattern[str]:
    """Names of the Ray sessions a process started: ``session_<date>_<time>_<us>_<pid>``
    (``ray/_private/node.py``)."""
    return re.compile(rf"session_\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_{pid or os.getpid()}(?!\d)")


def session_processes(pattern: re.Pattern[str]) -> list[int]:
    """Processes whose command line names a session matching ``pattern`` (Linux ``/proc``).

    A process caught in the middle of its ``exec`` has an empty command line for a moment, also
    after its parent's ``fork``/``exec`` call returned (the kernel releases the parent before it
    writes the new arguments): measured, 65 of 200 Popen'd processes read at once. Those are read
    again, every 5 ms for up to :data:`EXEC_WAIT` s, until their command line is there; zombies
    and kernel threads, whose command line stays empty, are not waited for."""
    found: list[int] = []
    pending: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            _sort(int(entry.name), pattern, found, pending)
    deadline = time.monotonic() + EXEC_WAIT
    while pending and time.monotonic() < deadline:
        time.sleep(0.005)
        again, pending = pending, []
        for pid in again:
            _sort(pid, pattern, found, pending)
    return found


#: How long a process with an empty command line is waited for (its ``exec`` takes milliseconds).
EXEC_WAIT = 0.5


def _sort(pid: int, pattern: re.Pattern[str], found: list[int], pending: list[int]) -> None:
    """Put ``pid`` in ``found`` when its command line matches, in ``pending`` while mid-exec."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        if not command:
            if not is_zombie_or_kernel_thread(pid):
                pending.append(pid)
            return
    except OSError:
        return
    if pattern.search(command.replace(b"\0", b" ").decode(errors="replace")):
        found.append(pid)


def is_zombie_or_kernel_thread(pid: int) -> bool:
    """A zombie, or a kernel thread (``kthreadd``, pid 2, or one of its children)."""
    stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
    return state in "ZX" or pid == 2 or parent == "2"


def kill_sessions(pid: int | None = None) -> int:
    """Kill every process of the Ray sessions process ``pid`` (default: this one) started; the
    number killed."""
    stopped = 0
    for found in session_processes(own_session_pattern(pid)):
        try:
            os.kill(found, signal.SIGKILL)
            stopped += 1
        except ProcessLookupError:
            continue
    return stopped


def _read_until(fd: int, deadline: float, seen: bytearray) -> bool:
    """Read the driver's words into ``seen`` until ``ok`` or its end (True) or ``deadline`` (False)."""
    while (left := deadline - time.monotonic()) > 0:
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 64)
            if not chunk:
                return True
            seen.extend(chunk)
            if OK in seen:
                return True
    return False


def watch(driver: int, timeout: float, grace: float, line: str, fd: int = 0) -> int:
    """Watch one start of ``driver``; 0 when it ended in time, :data:`FIRED` when it did not."""
    seen = bytearray()
    if _read_until(fd, time.monotonic() + timeout, seen):
        if OK not in seen:  # the driver died mid-start: nothing of its start may stay
            kill_sessions(driver)
        return 0
    said = CONNECTING in seen
    if said:  # blocked in the registration: Ray ends the driver when the raylet goes
        os.write(2, f"error: {line}\n".encode())
    kill_sessions(driver)
    if not _read_until(fd, time.monotonic() + grace, seen):
        if not said:
            os.write(2, f"error: {line}\n".encode())
        with contextlib.suppress(ProcessLookupError):
            os.kill(driver, signal.SIGKILL)
    kill_sessions(driver)
    return FIRED


if __name__ == "__main__":
    sys.exit(watch(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]))
