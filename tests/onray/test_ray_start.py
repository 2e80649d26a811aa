"""A Ray instance ray-bench starts runs its workers at nice 0, not Ray's default 15, so that
ordinary busy processes on the host do not starve the cell runners; its raylet does not wait
for slow agents; a local start that fails leaves nothing behind before the next attempt; and
Ray's messages to the driver and its unactionable warnings stay off the operator's terminal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
from support.driver_process import cli_env, run_cli
from support.ray_local import ensure_ray
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.onray.start import RAY_MESSAGES_FILE, START_TIMEOUT, WORKER_NICENESS
from ray_bench.onray.start_watchdog import own_session_pattern, session_processes

pytestmark = pytest.mark.ray


@ray.remote
def _nice() -> int:
    return os.nice(0)


def test_workers_of_a_local_start_are_not_deprioritised() -> None:
    chosen = os.environ.get(WORKER_NICENESS)
    ensure_ray()
    expected = int(chosen) if chosen is not None else 0
    assert os.environ[WORKER_NICENESS] == str(expected)
    assert ray.get(_nice.remote(), timeout=120) == expected



SLOW_AGENTS = """
import os, sys, time
if sys.argv[:1] and sys.argv[0].endswith(("dashboard/agent.py", "runtime_env/agent/main.py")):
    time.sleep({delay})
"""

SLOW_FIRST_AGENT = """
import os, sys, time
if sys.argv[:1] and sys.argv[0].endswith("dashboard/agent.py"):
    try:
        os.close(os.open({marker!r}, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass
    else:
        time.sleep({delay})
"""

DRIVER = """
import logging, os, ray
from ray_bench.onray.start import init_ray
from ray_bench.onray.start_watchdog import own_session_pattern, session_processes
init_ray(None, namespace="slow-agent", log_to_driver=False, logging_level=logging.WARNING)
print("answer", ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=300), flush=True)
live = ray.get_runtime_context().gcs_address
current = os.path.basename(ray._private.worker.global_worker.node.get_session_dir_path())
left = [pid for pid in session_processes(own_session_pattern()) if current not in open(f"/proc/{pid}/cmdline").read()]
print("left from failed starts", len(left), flush=True)
ray.shutdown()
"""


#: ``DRIVER`` whose first start awaits the agents as stock Ray does, and later ones as ray-bench
#: does: once the first attempt has failed (its retry logged), the variable is gone.
DRIVER_AWAITING_ONCE = """
import logging, os, sys
class _AwaitOnce(logging.Handler):  # also says it on stderr, as the last-resort handler did
    def emit(self, record):
        print(record.getMessage(), file=sys.stderr, flush=True)
        if record.getMessage().startswith("Ray did not start (attempt"):
            os.environ.pop("RAY_BENCH_AWAIT_RAY_AGENTS", None)
logging.getLogger("ray_bench.onray.start").addHandler(_AwaitOnce())
""" + DRIVER


def _driver(tmp_path: Path, sitecustomize: str, driver: str = DRIVER, **extra: str) -> subprocess.CompletedProcess[str]:
    """``driver`` in a process whose Python (and so Ray's agents') imports ``sitecustomize``."""
    (tmp_path / "sitecustomize.py").write_text(sitecustomize)
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths)), **extra}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-c", driver], env=env, capture_output=True, text=True, timeout=900,
                          check=False)


def test_a_local_start_does_not_wait_for_slow_agents(tmp_path: Path) -> None:
    """Ray's raylet waits 15 s for its agents' port files and then aborts the node; on a loaded
    host the dashboard agent took 20 s and every start failed. Here both agents of every start
    sleep 25 s before they start (a ``sitecustomize`` their Python picks up): the first start
    runs a task, because the raylet was told the agents' ports and waited for none."""
    done = _driver(tmp_path, SLOW_AGENTS.format(delay=25))
    assert "answer 42" in done.stdout, done.stderr[-3000:]
    assert "did not start" not in done.stderr, done.stderr[-3000:]


def test_a_failed_local_start_leaves_nothing_running_and_the_next_one_runs(tmp_path: Path) -> None:
    """Each failed start left its GCS and agents running, which made the next start slower
    still. With the raylet waiting for its agents as Ray starts it (``RAY_BENCH_AWAIT_RAY_AGENTS``)
    and the first start's dashboard agent sleeping 20 s, the first start fails as on the loaded
    host; its processes are stopped, and the second start (awaiting no agent, as ray-bench's do:
    on a loaded host an agent that does not sleep can still take over the raylet's 15 s) runs a
    task."""
    done = _driver(tmp_path, SLOW_FIRST_AGENT.format(marker=str(tmp_path / "slept"), delay=20),
                   DRIVER_AWAITING_ONCE, RAY_BENCH_AWAIT_RAY_AGENTS="1")
    assert (tmp_path / "slept").exists(), done.stderr[-3000:]
    assert "answer 42" in done.stdout, done.stderr[-3000:]
    assert "Ray did not start (attempt 1 of 3)" in done.stderr
    assert "left from failed starts 0" in done.stdout, done.stdout + done.stderr[-3000:]


WORKER_DIES = """
import logging, os, sys, time, ray
from pathlib import Path
from ray_bench.onray.start import init_ray, send_ray_messages_to
out = Path(sys.argv[1])
send_ray_messages_to(out)
init_ray(None, namespace="dies", log_to_driver=False, logging_level=logging.WARNING)

@ray.remote(max_restarts=0)
class Doomed:
    def die(self) -> None:
        os._exit(1)

try:
    ray.get(Doomed.remote().die.remote(), timeout=120)
except ray.exceptions.RayActorError:
    print("actor died", flush=True)
deadline = time.monotonic() + 120  # the raylet's report arrives asynchronously
while time.monotonic() < deadline and "A worker died" not in (out.read_text() if out.exists() else ""):
    time.sleep(0.5)
ray.shutdown()
"""


def test_rays_messages_to_the_driver_go_to_a_file_not_the_terminal(tmp_path: Path) -> None:
    """A worker killed under the driver: Ray's raylet report (printed on the driver's stdout
    even with log_to_driver=False, as a dead node's is) lands in the file the driver named, and
    neither it nor the token-authentication notice of a local start reaches stdout or stderr."""
    log = tmp_path / "runs" / RAY_MESSAGES_FILE
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", WORKER_DIES, str(log)], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert "actor died" in done.stdout, done.stderr[-3000:]
    assert "A worker died or was killed" in log.read_text(), done.stdout + done.stderr[-3000:]
    assert "(raylet)" in log.read_text()
    terminal = done.stdout + done.stderr
    assert "A worker died" not in terminal and "(raylet)" not in terminal, terminal[-3000:]
    assert "Token authentication" not in terminal, terminal[-3000:]


def test_a_local_execute_prints_no_ray_warning(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], preflight_cells=0)
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="quiet")
    env = cli_env({"RAY_BENCH_STATE_ROOT": str(tmp_path / "state")})
    env.pop("RAY_AUTH_MODE", None)  # Ray notices token authentication only when it chose it
    # -q runs the cells; the second (a resume with nothing left) still starts its own Ray
    for extra in (("-q",), ()):
        done = run_cli("execute", "--plan", str(planned.run_root / "launch-plan.json"), "--confirm",
                       planned.identity, *extra, env=env, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        terminal = done.stdout + done.stderr
        assert "Token authentication" not in terminal, terminal
        assert "WARNING" not in terminal and "(raylet)" not in terminal, terminal
    assert "starting Ray" in done.stderr and "Ray ready" in done.stderr, done.stderr


JOIN = """
import sys
import ray
from ray_bench.onray.start import init_ray
init_ray(sys.argv[1], namespace="ray-bench", log_to_driver=False)
print("joined", int(ray.cluster_resources().get("CPU", 0)) > 0)
"""


def test_a_join_with_the_auth_mode_unset_uses_the_machines_token() -> None:
    """`execute --address` from a shell without RAY_AUTH_MODE (the operator's, after `ray start
    --head`): Ray sent no token and the token-protected cluster refused it (InvalidAuthToken)."""
    ensure_ray()
    address = str(ray.get_runtime_context().gcs_address)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    done = subprocess.run([sys.executable, "-c", JOIN, address], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0 and "joined True" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "Token authentication" not in done.stdout + done.stderr


SLOW_FIRST_WORKER = """
import os, sys, time
if sys.argv[:1] and sys.argv[0].endswith("default_worker.py"):
    try:
        os.close(os.open({marker!r}, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass
    else:
        time.sleep(600)
"""


def test_a_worker_hanging_at_start_does_not_hold_the_driver(tmp_path: Path) -> None:
    """Ray's raylet held the first driver's registration until its prestarted workers had
    registered, and a worker past ``worker_register_timeout_seconds`` is killed, never counted:
    in a loaded CI run ``ray.init`` waited 1,500 s. Here the node's first worker hangs at start
    (the raylet kills it after 45 s; not less: at load 45 a worker that does not hang took longer
    than 5 s, and every retry failed): the driver registers all the same and its task runs on the
    next worker. Were the registration held again, the start's watchdog would end the driver."""
    done = _driver(tmp_path, SLOW_FIRST_WORKER.format(marker=str(tmp_path / "hung")),
                   RAY_worker_register_timeout_seconds="45", RAY_BENCH_RAY_START_TIMEOUT="240")
    assert (tmp_path / "hung").exists(), done.stderr[-3000:]
    assert "answer 42" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "did not start" not in done.stderr, done.stderr[-3000:]


STOPPED_RAYLET = """
import logging, os, signal
from ray._private import ray_constants, worker
from ray_bench.onray.start import init_ray

connect = worker.connect

def raylet_stopped(node, *args, **kwargs):  # the raylet stops answering as the driver connects
    os.kill(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid, signal.SIGSTOP)
    return connect(node, *args, **kwargs)

worker.connect = raylet_stopped
init_ray(None, namespace="stopped", log_to_driver=False, logging_level=logging.WARNING)
print("ray.init returned", flush=True)
"""


def test_a_start_whose_raylet_never_answers_ends_in_one_line_leaving_nothing(tmp_path: Path) -> None:
    """The raylet is stopped (SIGSTOP) as the driver registers with it: the registration, a
    blocking read in Ray's C++ with the GIL held, never returns. The start's watchdog ends it at
    its timeout: one error line that says what to do, no traceback, exit status 1, and no process
    of the driver's Ray sessions left (the stopped raylet included)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", STOPPED_RAYLET], env={**env, "RAY_BENCH_RAY_START_TIMEOUT": "20"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        left = session_processes(own_session_pattern(proc.pid))
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, out + err[-3000:]
    assert "ray.init returned" not in out
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "a local Ray instance did not start" in errors[0], err[-3000:]
    assert START_TIMEOUT in errors[0] and "--address" in errors[0]
    assert "Traceback" not in err, err[-3000:]
    assert left == [], left
    assert elapsed < 20 + 60, elapsed  # its timeout, and the start before it on a loaded host
