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
    """Processes whose command line names a session matching ``pattern`` (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern.search(command):
            found.append(int(entry.name))
    return found


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
