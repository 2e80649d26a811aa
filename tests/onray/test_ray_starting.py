"""Ray started on a thread of its own (ray_bench.onray.starting): the instance outlives the
thread's start (Ray's children die with the thread that forked them), the SIGTERM handler Ray
would set is on the main thread, no warning reaches the terminal, and a start that is stopped
before it was used (a refused `execute`) leaves no process of its session."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray

DRIVER = """
import signal, sys, time
from ray_bench.onray.starting import RayStart
from ray_bench.onray.start_watchdog import kill_sessions, own_session_pattern, session_processes

start = RayStart(None)
print("handler", signal.getsignal(signal.SIGTERM).__name__, flush=True)
start.wait()
import ray

time.sleep(2)  # a GCS killed with a returned thread is gone by now

@ray.remote
def answer() -> int:
    return 42

print("answer", ray.get(answer.remote(), timeout=240), flush=True)
start.stop()
print("left", len(session_processes(own_session_pattern())), flush=True)
refused = RayStart(None)
refused.stop()  # refused before it was used: waits for the start, stops it
print("left after a refusal", len(session_processes(own_session_pattern())), flush=True)
kill_sessions()
"""


def test_a_start_on_its_own_thread_runs_tasks_and_leaves_nothing() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "handler _exit_on_sigterm" in done.stdout
    assert "answer 42" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "left 0" in done.stdout and "left after a refusal 0" in done.stdout, done.stdout
    assert "WARNING" not in done.stderr and "SIGTERM handler" not in done.stderr, done.stderr[-3000:]
