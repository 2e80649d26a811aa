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

# The lock, its probe and the heartbeat have one definition, in the run-root module (re-exported here).
from ray_bench.runroot import (
    HEARTBEAT_EVENT,
    HEARTBEAT_SEC,
    HEARTBEAT_STALE_SEC,
    LOCK_FILE,
    LockHolder,
    lock_holder,
    pid_alive,
    pid_suspended,
)

__all__ = ["HEARTBEAT_EVENT", "HEARTBEAT_SEC", "HEARTBEAT_STALE_SEC", "LOCK_FILE", "LockHolder", "lock_holder",
           "pid_alive", "pid_suspended"]
