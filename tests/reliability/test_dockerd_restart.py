"""A private dockerd SIGKILLed mid-run, kept down until the recovery circuit stops the run,
then restarted on the same data root and the run resumed with ``--hypothesis``.

The daemon is this test's own (own socket, data root, exec root, pidfile, cgroup parent,
containerd namespace, no bridge, no iptables), so that the shared system dockerd is never
touched. SIGKILL is the crash case: dockerd's managed containerd dies with it, the containers'
shims and processes live on, and the restarted daemon (no live-restore) kills and keeps them as
exited containers. What the test observes:

- the two attempts whose agents were running: their exec stream ends at EOF, the next call
  (``exec_inspect``) is refused -> ``SandboxUnavailableError`` -> ``stack``, not ``executor``:
  the container did not vanish (it lives on in its shim), its daemon did. Their containers
  cannot be deleted (``cleanup_error``) and are left behind in the daemon;
- new attempts fail at their first call (``inspect_image``) -> ``stack``, same fingerprint;
- no ``stack`` row counts against its cell; after three identical ones the circuit opens for
  ``backend:docker`` and ``run`` and the driver stops with ``stopped == "circuit"``, exit 1;
- ``execute --hypothesis "dockerd restarted"`` reopens it, runs the rest, and its final audit
  removes the containers the crash left: every cell has exactly one valid row, none failed,
  and no labelled container remains in the private daemon.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from support.driver_process import DriverProcess, ledger_query, pgrep, wait_for
from support.images import build_base_image
from support.ray_local import shared_address
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptError
from ray_bench.sandboxes.base import LABEL_MANAGED, LABEL_RUN

# serial: alone on the machine (scripts/test.sh's last pass). The daemon is private, but a
# dockerd acts on the host as well as on its own root: it deleted the host's docker0 once (see
# argv), it adopts a system containerd when one answers, and SIGKILLed it leaves shims and
# cgroups the test sweeps by /proc and /sys scans; no other test's containers beside that.
pytestmark = [pytest.mark.docker, pytest.mark.ray, pytest.mark.slow, pytest.mark.serial]

TASKS = ["hello-world", "sum-list", "fizzbuzz", "count-words"]
CELLS = len(TASKS) * 2  # tasks x arms, one rep
#: The agents' sleep, recognisable in the host's process table (pgrep -x, whole command line).
MARKER = "sleep 3.0417"
MARKER_RE = r"^sleep 3\.0417$"


def require_service(name: str, available: bool, reason: str) -> None:
    """tests/conftest.py's rule (not importable here: every conftest module is ``conftest``):
    under CI=true a missing service fails the test, elsewhere it skips it."""
    if available:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{name} is required under CI=true but unavailable: {reason}", pytrace=False)
    pytest.skip(f"{name} unavailable: {reason}")


class PrivateDockerd:
    """A dockerd of this test alone, under ``root`` (short: unix socket paths below it, such
    as ``x/containerd/containerd-debug.sock``, must stay under ~100 characters)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sock = root / "d.sock"
        self.url = f"unix://{self.sock}"
        self.data_root = root / "data"
        self.exec_root = root / "x"
        self.pidfile = root / "d.pid"
        self.config = root / "daemon.json"
        self.tag = root.name  # unique: names the cgroup parent and the containerd namespace
        self.cgroup_parent = f"/{self.tag}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        # an empty config: a host /etc/docker/daemon.json (hosts, data-root...) must not apply
        self.config.write_text("{}\n")

    def argv(self) -> list[str]:
        dockerd = shutil.which("dockerd")
        assert dockerd is not None
        # A network namespace of its own: a dockerd started with --bridge=none deletes the
        # host's docker0 interface on start-up (it "removes the default bridge"), which broke
        # the shared system daemon's bridge networking for every later test. unshare execs
        # dockerd in place, so self.proc's pid is dockerd's.
        return [
            "unshare", "--net", "--",
            dockerd, "-H", self.url, "--config-file", str(self.config),
            "--data-root", str(self.data_root), "--exec-root", str(self.exec_root),
            "--pidfile", str(self.pidfile),
            # no default bridge, no iptables/NAT rules: nothing shared with the system daemon's
            # docker0 and its chains (cells run with network "none")
            "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
            "--userland-proxy=false",
            # containers under a cgroup of their own; if a system containerd answers on
            # /run/containerd/containerd.sock dockerd uses it, so a namespace of its own too
            "--cgroup-parent", self.cgroup_parent,
            "--containerd-namespace", self.tag, "--containerd-plugins-namespace", f"{self.tag}-p",
            "--log-level", "info",
        ]

    @property
    def log(self) -> Path:
        return self.root / f"dockerd-{self.starts}.log"

    def start(self, timeout: float = 90) -> None:
        self._wait_old_containerd_reaped()
        self.starts += 1
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"private dockerd exited ({self.proc.returncode}):\n"
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            if self.ping():
                return
            time.sleep(0.2)
        raise RuntimeError(f"private dockerd not answering after {timeout}s:\n"
                           f"{self.log.read_text(errors='replace')[-3000:]}")

    def _wait_old_containerd_reaped(self, timeout: float = 30) -> None:
        """A SIGKILLed dockerd's containerd dies with it (parent-death signal) but stays a
        zombie until init reaps it (here ~1-2 s later). dockerd takes the pid in
        ``x/containerd/containerd.pid`` for a live containerd while it exists, adopts it, and
        exits ("timeout waiting for containerd to start"): restart only once it is gone."""
        try:
            pid = int((self.exec_root / "containerd" / "containerd.pid").read_text().strip())
        except (OSError, ValueError):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                return  # gone
            if state != "Z":
                return  # alive: dockerd adopts it
            time.sleep(0.1)

    def ping(self) -> bool:
        try:
            client = docker.DockerClient(base_url=self.url, timeout=5)
        except docker.errors.DockerException:
            return False
        try:
            return bool(client.ping())
        except Exception:  # refused, missing socket, still starting
            return False
        finally:
            client.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        self.proc.wait(timeout=60)

    def client(self) -> Any:
        return docker.DockerClient(base_url=self.url, timeout=120)

    def containers(self, **filters: Any) -> list[dict[str, Any]]:
        client = self.client()
        try:
            found: list[dict[str, Any]] = client.api.containers(all=True, filters=filters)
            return found
        finally:
            client.close()

    # -- teardown -------------------------------------------------------------------------

    def teardown(self) -> None:
        """Remove the daemon's containers, stop it and what it started, remove its files.
        A daemon that is down is started again first (no live-restore: it kills what it
        finds running), so that its containers are removed through it."""
        if self.proc is not None and not self.alive:
            with contextlib.suppress(Exception):
                self.start(timeout=60)
        if self.alive:
            with contextlib.suppress(Exception):
                client = self.client()
                try:
                    for c in client.api.containers(all=True):
                        with contextlib.suppress(docker.errors.APIError):
                            client.api.remove_container(c["Id"], force=True, v=True)
                finally:
                    client.close()
            with contextlib.suppress(ProcessLookupError):
                self.kill(signal.SIGTERM)
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.kill(signal.SIGKILL)
        # What survives the daemon: its containerd and shims (their command lines name this
        # root), and container processes (in this daemon's cgroup parent). Ours alone.
        for pid in self._our_pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        self._remove_cgroups()
        self._unmount_below_root()
        shutil.rmtree(self.root, ignore_errors=True)

    def _our_pids(self) -> set[int]:
        pids: set[int] = set()
        marker = str(self.root).encode()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if marker in (entry / "cmdline").read_bytes():
                        pids.add(int(entry.name))
        for procs in Path("/sys/fs/cgroup").glob(f"**/{self.tag}/**/cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in procs.read_text().split())
        pids.discard(os.getpid())
        return pids

    def _remove_cgroups(self) -> None:
        base = Path("/sys/fs/cgroup")
        dirs = [p for p in base.glob(f"*/{self.tag}") if p.is_dir()] + \
               [p for p in base.glob(self.tag) if p.is_dir()]
        for top in dirs:
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    def _unmount_below_root(self) -> None:
        prefix = str(self.root) + "/"
        mounts = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].encode().decode("unicode_escape")
                if point.startswith(prefix):
                    mounts.append(point)
        for point in sorted(set(mounts), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


@pytest.fixture
def private_dockerd() -> Iterator[PrivateDockerd]:
    require_service("dockerd", shutil.which("dockerd") is not None, "no dockerd binary on PATH")
    require_service("dockerd", os.geteuid() == 0, "a private dockerd needs root")
    # not tmp_path: pytest's directories are too deep for the daemon's unix sockets
    # (the name is also a containerd namespace: letters, digits and [._-] between them only)
    root = Path("/tmp") / f"rbd-{uuid.uuid4().hex[:10]}"
    root.mkdir(mode=0o700)
    daemon = PrivateDockerd(root)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.teardown()


def _open_attempts(root: Path) -> list[str]:
    return [r[0] for r in ledger_query(root, "SELECT a.attempt_id FROM attempts a LEFT JOIN results r "
                                             "USING (attempt_id) WHERE r.attempt_id IS NULL")]


def _fanned_out(root: Path) -> bool:
    """Preflight passed and both sandboxes' agents are in their sleep."""
    passed = ledger_query(root, "SELECT 1 FROM events WHERE kind = 'preflight_passed'")
    return bool(passed) and len(_open_attempts(root)) >= 2 and len(pgrep(MARKER_RE)) >= 2


def _read(root: Path) -> tuple[list[Any], dict[str, dict[str, Any]], list[Any]]:
    with Ledger.reading(root) as ledger:
        return ledger.attempts(), dict(ledger.summaries()), ledger.events()


def test_dockerd_killed_mid_run_opens_circuit_then_resumes(
        tmp_path: Path, private_dockerd: PrivateDockerd) -> None:
    daemon = private_dockerd
    client = daemon.client()
    try:
        try:
            image = build_base_image(client)
        except RuntimeError as exc:
            require_service("busybox", False, str(exc))
            raise
    finally:
        client.close()

    arm = {"command": f'{MARKER}; sh "$SOLUTION_DIR/solve.sh"', "agent_dir": "agents",
           "expose_solution": True}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=TASKS, reps=1, preflight_cells=1, max_attempts=3, backend="docker",
        backends={"docker": {"options": {"base_url": daemon.url}, "image": image, "max_sandboxes": 2,
                             "resources": {"cpus": 0.5, "memory_mb": 128, "pids": 128}}},
        arms=[{"name": "baseline", "role": "baseline", **arm},
              {"name": "mcp", "role": "variant", **arm}])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="dockerd")
    root = planned.run_root
    assert planned.cells == CELLS
    run_filter = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_RUN}=dockerd"]}

    plan, logs = root / "launch-plan.json", tmp_path / "logs"
    # Both drivers join the session's shared Ray: what is checked here is the docker backend's
    # crash, circuit and recovery, which do not depend on where Ray runs (the cell runners talk
    # to the private daemon by its socket either way); a driver's own local start is checked by
    # the signals, driver-crash and quickstart tests. The first driver's local start (30-70 s here)
    # is saved, as the resume's was.
    joined = ("--address", shared_address())
    first = DriverProcess(plan, planned.identity, logs, name="first", extra_args=joined)
    second = DriverProcess(plan, planned.identity, logs, name="second",
                           extra_args=("--hypothesis", "dockerd restarted", *joined))
    try:
        # -- the crash ---------------------------------------------------------------------
        first.start()
        wait_for(lambda: _fanned_out(root), 240, "two agents running after preflight", alive=first)
        in_flight = set(_open_attempts(root))
        killed_at = time.time()
        daemon.kill(signal.SIGKILL)
        assert not daemon.ping()
        rc = first.wait(timeout=240)
        assert rc == 1, first.stderr[-3000:]
        assert "Traceback" not in first.stderr, first.stderr[-3000:]
        first.reap()

        before, summaries, events = _read(root)
        stopped = [e.data for e in events if e.kind == "run_finished"][-1]
        assert stopped["stopped"] == "circuit", stopped
        assert stopped["exit_code"] == 1
        assert stopped["counts"]["failed"] == 0
        assert all(a.terminal for a in before)

        by_id = {a.attempt_id: a for a in before}
        assert len(in_flight) == 2, in_flight
        failed = [a for a in before if not a.valid]
        new = [a for a in failed if a.attempt_id not in in_flight]
        # valid rows all finished before the kill; every other attempt failed
        assert all(a.finished_at is not None and a.finished_at < killed_at for a in before if a.valid)
        assert {a.attempt_id for a in failed} >= in_flight
        # in flight: the exec stream ended at EOF, exec_inspect was refused -> stack; the
        # container could not be deleted and is still in the (dead) daemon
        for attempt_id in in_flight:
            row, summary = by_id[attempt_id], summaries[attempt_id]
            assert row.failure_class == "stack", (row, summary.error)
            assert summary.error is not None and summary.error.type == "SandboxUnavailableError", summary.error
            assert summary.sandbox_id, summary
            assert summary.cleanup_error is not None, summary
        # new cells after the kill: refused at their first call -> stack
        assert len(new) >= 1
        for row in new:
            error = summaries[row.attempt_id].error
            assert row.failure_class == "stack", (row, error)
            assert error is not None and error.type == "SandboxUnavailableError", error
            assert "docker daemon unreachable" in error.message
            assert summaries[row.attempt_id].sandbox_id is None
        # stack failures never count against their cell
        assert not [a for a in failed if a.counts]
        # one signature, three times, opened the circuit for the backend and the run
        opened = [e.data for e in events if e.kind == "circuit_open"]
        assert {d["scope"] for d in opened} == {"backend:docker", "run"}, opened
        assert {d["class"] for d in opened} == {"stack"}
        signature = opened[0]["fingerprint"]
        assert {a.fingerprint for a in new} == {signature}
        assert len(failed) >= 3
        stops = [e.data for e in events if e.kind == "stop"]
        assert stops, events
        assert stops[-1]["reason"] == "circuit", stops
        assert "--hypothesis" in stops[-1]["detail"]
        valid_before = {a.cell_id for a in before if a.valid}
        assert 1 <= len(valid_before) < CELLS

        # -- the restart ---------------------------------------------------------------------
        daemon.start()
        left = daemon.containers(**run_filter)
        crashed = {summaries[a].sandbox_id for a in in_flight}
        # the crash's containers survived it; the restarted daemon (no live-restore) killed them
        assert {c["Id"] for c in left} == crashed, left
        assert {c["State"] for c in left} == {"exited"}, left

        rc = second.start().wait(timeout=300)
        assert rc == 0, second.stderr[-3000:]
        assert "Traceback" not in second.stderr, second.stderr[-3000:]
    finally:
        first.reap()
        second.reap()

    after, summaries, events = _read(root)
    hypotheses = [e for e in events if e.kind == "hypothesis"]
    assert [e.data["text"] for e in hypotheses] == ["dockerd restarted"]
    # nothing opened again after the hypothesis, and the resumed run finished cleanly
    assert not [e for e in events if e.kind == "circuit_open" and e.seq > hypotheses[0].seq]
    finished = [e.data for e in events if e.kind == "run_finished"]
    assert len(finished) == 2
    assert finished[-1]["exit_code"] == 0, finished[-1]
    assert finished[-1]["stopped"] is None, finished[-1]
    assert finished[-1]["stale_recovered"] == 0
    assert finished[-1]["counts"] == {"pending": 0, "running": 0, "valid": CELLS, "failed": 0}
    # every cell: exactly one valid row; cells valid before the crash got no new attempt
    valid_per_cell: dict[str, int] = {}
    for a in after:
        valid_per_cell[a.cell_id] = valid_per_cell.get(a.cell_id, 0) + int(a.valid)
    assert len(valid_per_cell) == CELLS, valid_per_cell
    assert set(valid_per_cell.values()) == {1}, valid_per_cell
    old_ids = {a.attempt_id for a in before}
    assert not [a for a in after if a.cell_id in valid_before and a.attempt_id not in old_ids]
    assert all(a.terminal for a in after)
    assert not [a for a in after if a.attempt_id not in old_ids and not a.valid]
    # the resumed run's final audit removed what the crash left; nothing labelled remains
    audits = [e.data for e in events if e.kind == "audit"]
    assert audits[-1] == {"removed": len(crashed), "residue": 0}, audits
    assert daemon.containers(label=f"{LABEL_MANAGED}=true") == []
    print(json.dumps({"in_flight": {a: (summaries[a].error or AttemptError()).message for a in sorted(in_flight)},
                      "new_failures": len(new), "attempts": len(after), "signature": signature,
                      "fingerprints": sorted({a.fingerprint or "" for a in failed})}))
