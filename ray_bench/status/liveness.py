"""Is a driver alive for this run root? The lock says who holds the run; the ledger's heartbeat
says whether that holder still makes progress.

A copied run root, or one whose driver was SIGKILLed, has a lock file with a pid in it but
no process holding the lock: ``flock`` is released by the kernel when the holder dies, so a
non-blocking probe tells a live holder from a leftover file on this host. The heartbeat
(an event the driver appends every :data:`HEARTBEAT_SEC`) covers what the lock cannot: a
driver that holds the lock but is stuck, and a reader on another host of a shared
filesystem.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = ".execute.lock"

#: The ledger event the driver appends while it runs.
HEARTBEAT_EVENT = "heartbeat"
#: How often the driver appends it (seconds).
HEARTBEAT_SEC = 30.0
#: A heartbeat older than this says the driver stopped making progress: three missed beats.
HEARTBEAT_STALE_SEC = 3 * HEARTBEAT_SEC


@dataclass(frozen=True)
class LockHolder:
    """What the run's lock says: ``held`` by a live process (probed), and the pid it wrote."""

    held: bool
    pid: int | None


def lock_holder(run_root: Path) -> LockHolder:
    """Probe the run's lock without taking it for longer than the probe."""
    path = run_root / LOCK_FILE
    if not path.exists():
        return LockHolder(False, None)
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    pid = int(text) if text.isdigit() else None
    try:
        handle = path.open("r")
    except OSError:
        return LockHolder(False, pid)
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return LockHolder(True, pid)
        fcntl.flock(handle, fcntl.LOCK_UN)
    return LockHolder(False, pid)


def pid_alive(pid: int) -> bool:
    """A process with this pid exists on this host (it may be another program)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

