"""The watchdog of a local Ray start (ray_bench.onray.start_watchdog), on real processes and
without Ray: a start that says ``ok`` in time is left alone; one that does not has the processes
of its sessions killed, and a driver that does not answer after that is killed too, with the
error line on stderr; a driver gone mid-start leaves no session process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_bench.onray.start_watchdog import (
    CONNECTING,
    FIRED,
    OK,
    is_zombie_or_kernel_thread,
    own_session_pattern,
    session_processes,
    watch,
)

#: Watchdog timeouts here; what is killed is checked once it returns.
TIMEOUT, GRACE = 0.5, 0.5


@pytest.fixture
def driver() -> Iterator[subprocess.Popen[bytes]]:
    """A stand-in for the driver: a process whose pid names the sessions."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def _session_process(pid: int) -> subprocess.Popen[bytes]:
    """A process whose command line names a Ray session of ``pid`` (as Ray's GCS and raylet do)."""
    name = f"/tmp/ray/session_2026-12-04_01-12-33_764989_{pid}"
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--session-dir={name}"])


def _gone(proc: subprocess.Popen[bytes], within: float = 5.0) -> bool:
    try:
        proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False
    return True


def _pipe(*words: bytes, close: bool = False) -> tuple[int, int]:
    read, write = os.pipe()
    for word in words:
        os.write(write, word)
    if close:
        os.close(write)
        write = -1
    return read, write


def test_a_start_that_says_ok_in_time_is_left_alone(driver: subprocess.Popen[bytes]) -> None:
    session = _session_process(driver.pid)
    read, write = _pipe(CONNECTING, OK)
    try:
        assert watch(driver.pid, TIMEOUT, GRACE, "unused", fd=read) == 0
        assert session.poll() is None and driver.poll() is None
    finally:
        os.close(read)
        os.close(write)
        session.kill()
        session.wait()


def test_a_start_past_its_timeout_loses_its_processes_and_then_its_driver(
    driver: subprocess.Popen[bytes], capfd: pytest.CaptureFixture[str]
) -> None:
    """Still in Python (no ``connecting``) and no answer after the kill: the driver goes too."""
    session = _session_process(driver.pid)
    other = _session_process(driver.pid + 1)  # another process's session: not touched
    read, write = _pipe()
    started = time.monotonic()
    try:
        assert watch(driver.pid, TIMEOUT, GRACE, "Ray did not start", fd=read) == FIRED
        assert time.monotonic() - started < TIMEOUT + GRACE + 3
        assert _gone(session) and _gone(driver)
        assert other.poll() is None
    finally:
        os.close(read)
        os.close(write)
        other.kill()
        other.wait()
    assert capfd.readouterr().err.count("error: Ray did not start\n") == 1


def test_a_driver_blocked_in_its_registration_is_told_once_and_its_processes_killed(
    driver: subprocess.Popen[bytes], capfd: pytest.CaptureFixture[str]
) -> None:
    """``connecting`` said: the line is printed before the kill (Ray ends the driver then); the
    driver here does not end, and is killed after the grace without a second line."""
    session = _session_process(driver.pid)
    read, write = _pipe(CONNECTING)
    try:
        assert watch(driver.pid, TIMEOUT, GRACE, "no answer", fd=read) == FIRED
        assert _gone(session) and _gone(driver)
    finally:
        os.close(read)
        os.close(write)
    assert capfd.readouterr().err.count("error: no answer") == 1


def test_a_driver_gone_mid_start_leaves_no_session_process(driver: subprocess.Popen[bytes]) -> None:
    session = _session_process(driver.pid)
    read, _ = _pipe(CONNECTING, close=True)  # its stdin closed without "ok": the driver exited
    try:
        assert watch(driver.pid, 30, GRACE, "unused", fd=read) == 0
        assert _gone(session)
        assert driver.poll() is None  # not the watchdog's to kill: it had not timed out
    finally:
        os.close(read)


def test_a_session_process_caught_mid_exec_is_found() -> None:
    """Read at once after ``Popen`` returns, a new process's command line is often still empty
    (the kernel releases the parent before it writes the new arguments: 65 of 200 before the
    re-read); every one is found."""
    pattern = own_session_pattern(1)  # pid 1 names no real session here
    for _ in range(50):
        session = _session_process(1)
        try:
            assert session.pid in session_processes(pattern)
        finally:
            session.kill()
            session.wait()


def test_a_zombie_is_not_waited_for_as_a_process_mid_exec() -> None:
    child = subprocess.Popen(["true"])
    while not Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1].startswith("Z"):
        time.sleep(0.01)  # exited, not yet reaped: a zombie, whose command line is empty
    try:
        assert Path(f"/proc/{child.pid}/cmdline").read_bytes() == b""
        assert is_zombie_or_kernel_thread(child.pid)
        assert not is_zombie_or_kernel_thread(os.getpid())
    finally:
        child.wait()
