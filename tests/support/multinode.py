"""A local multi-node Ray cluster (``cluster/local-multinode.sh``) as a pytest fixture: a
head and two worker raylets advertising ``{"docker": 1}``, each a separate Ray node.

Only what the script started is torn down (``stop`` kills processes whose command line names
this cluster's state directory). Starting it costs ~15-20 s on two cores, so it is
module-scoped and used by few tests."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ray_bench.onray.start import WORKER_NICENESS

SCRIPT = Path(__file__).resolve().parents[2] / "cluster" / "local-multinode.sh"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


#: Marks the line of ``ray.nodes()`` in the client's output.
NODES_MARK = "ray-bench-nodes: "


@dataclass
class MultiNode:
    state: Path
    address: str
    #: ``http://127.0.0.1:PORT`` of the head's dashboard (the Jobs API), when started with one.
    dashboard: str | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a client (``ray-bench execute --address``) needs to join: the cluster's token."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.state / "auth_token")}

    def nodes(self) -> list[dict[str, object]]:
        """``ray.nodes()`` as seen by a fresh client process (this one may hold another Ray)."""
        keys = ("NodeID", "Alive", "Resources", "RayletSocketName")
        code = (f"import json, ray; ray.init(address={self.address!r}, log_to_driver=False); "
                f"print({NODES_MARK!r} + json.dumps([{{k: n[k] for k in {keys!r}}} for n in ray.nodes()]))")
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **self.env},
                             capture_output=True, text=True, timeout=120, check=True)
        # Ray may print after it (a raylet's "lagging heartbeats" notice under load, seen in CI).
        line = next(x for x in reversed(out.stdout.splitlines()) if x.startswith(NODES_MARK))
        nodes: list[dict[str, object]] = json.loads(line[len(NODES_MARK):])
        return nodes

    def raylet_pid(self, node: dict[str, object]) -> int:
        socket_name = str(node["RayletSocketName"])
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"/raylet") and any(
                    a == f"--raylet_socket_name={socket_name}".encode() for a in argv):
                return int(entry.name)
        raise LookupError(f"no raylet process for {socket_name}")

    def add_worker(self, name: str, env: dict[str, str], unset: tuple[str, ...] = (),
                   resources: str = '{"docker": 1}') -> None:
        """One more worker node whose raylet (and so every worker process on it) has ``env``
        on top of this process's and lacks ``unset``: a node configured unlike the others. Its
        temp dir is under the state directory, so ``stop`` finds it with the rest."""
        ray_bin = Path(sys.executable).parent / "ray"
        node_env = {**os.environ, **env, "RAY_TMPDIR": str(self.state), "RAY_USAGE_STATS_ENABLED": "0",
                    WORKER_NICENESS: os.environ.get(WORKER_NICENESS, "0"), **self.env}
        for key in unset:
            node_env.pop(key, None)
        error = ""
        for attempt in range(START_ATTEMPTS):
            temp = self.state / name / str(attempt)  # the node's name stays in its socket paths
            started = subprocess.run([str(ray_bin), "start", "--address", self.address, "--num-cpus", "1",
                                      "--resources", resources, "--temp-dir", str(temp),
                                      "--dashboard-agent-listen-port", str(_free_port()),
                                      "--object-store-memory", "200000000", "--disable-usage-stats"],
                                     env=node_env, capture_output=True, text=True, timeout=240, check=False)
            if started.returncode == 0:
                return
            error = started.stderr[-1500:]
            _kill_under(temp)  # what the failed start left, before trying again
        raise RuntimeError(f"worker {name} did not start: {error}")

    def kill_raylet(self, node: dict[str, object]) -> int:
        pid = self.raylet_pid(node)
        os.kill(pid, signal.SIGKILL)
        return pid


#: Tries at starting a node: Ray waits a fixed 30 s for a new raylet to register, and on two
#: cores at load average ~30 that ran out ("Failed to get node info: Deadline Exceeded").
START_ATTEMPTS = 3


def _kill_under(path: Path) -> None:
    """SIGKILL the processes whose command line names ``path`` (one node's temp dir: ours)."""
    needle = f"{path}/".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def start_cluster(workers: int = 2, dashboard: bool = False, private: tuple[Path, ...] = ()) -> MultiNode:
    """``private``: directories the worker nodes see as empty (``--worker-private``)."""
    error = ""
    for _ in range(START_ATTEMPTS):
        try:
            return _start_cluster(workers, dashboard, private)
        except RuntimeError as exc:
            error = str(exc)
    raise RuntimeError(error)


def _start_cluster(workers: int, dashboard: bool, private: tuple[Path, ...]) -> MultiNode:
    # short: Ray's socket paths must stay under ~107 bytes
    state = Path("/tmp") / f"rbmn-{secrets.token_hex(3)}"
    port = _free_port()
    args = ["bash", str(SCRIPT), "start", "--state", str(state), "--port", str(port),
            "--head-cpus", "1", "--worker-cpus", "1", "--workers", str(workers)]
    dashboard_port = _free_port() if dashboard else None
    if dashboard_port is not None:
        # the jobs API runs jobs through the head's agent: its port must be its own (the
        # default 52365 may belong to another Ray instance on this machine)
        args += ["--dashboard", "--dashboard-port", str(dashboard_port),
                 "--dashboard-agent-port", str(_free_port())]
    for directory in private:
        args += ["--worker-private", str(directory)]
    env = {**os.environ, "RAY_BIN": str(Path(sys.executable).parent / "ray")}
    started = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240,
                             check=False)
    if started.returncode != 0:
        stop_cluster(state)
        subprocess.run(["rm", "-rf", str(state)], check=False)
        raise RuntimeError(f"local multi-node cluster did not start: {started.stderr[-2000:]}")
    return MultiNode(state, f"127.0.0.1:{port}",
                     f"http://127.0.0.1:{dashboard_port}" if dashboard_port is not None else None)


def wait_for_nodes(cluster: MultiNode, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len([n for n in cluster.nodes() if n["Alive"]]) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} nodes joined within {timeout:g}s")
        time.sleep(1)


def stop_cluster(state: Path) -> None:
    subprocess.run(["bash", str(SCRIPT), "stop", "--state", str(state)], capture_output=True,
                   timeout=120, check=False)


@contextlib.contextmanager
def running_cluster(workers: int = 2, private: tuple[Path, ...] = ()) -> Iterator[MultiNode]:
    """A cluster whose workers have all joined; stopped and removed after."""
    cluster = start_cluster(workers, private=private)
    try:
        wait_for_nodes(cluster, workers + 1)
        yield cluster
    finally:
        stop_cluster(cluster.state)
        subprocess.run(["rm", "-rf", str(cluster.state)], check=False)


@pytest.fixture(scope="module")
def multinode() -> Iterator[MultiNode]:
    cluster = start_cluster()
    try:
        wait_for_nodes(cluster, 3)
        yield cluster
    finally:
        stop_cluster(cluster.state)
        subprocess.run(["rm", "-rf", str(cluster.state)], check=False)
