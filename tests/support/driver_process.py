"""``ray-bench`` run as a subprocess, the way an operator runs it: for tests that kill the
driver, read its real stderr, or need a fresh process (its own Ray instance).

Every process is started in its own process group; :meth:`DriverProcess.reap` kills only that
group (the driver and the Ray instance it started), never anything by name."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from support.ray_local import TEST_ROUTES

BIN = Path(sys.executable).parent / "ray-bench"


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI subprocess: the test routes set, no inherited Ray address."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env.update(TEST_ROUTES)
    # A finished run's metrics would linger 15 minutes in a process of its own; tests that
    # want the linger ask for it.
    env.setdefault("RAY_BENCH_METRICS_LINGER", "0")
    # Without a linger a driver waits up to 30 s for a final scrape that no test's Prometheus
    # makes: 30 s at the end of every subprocess driver (4 of them in the signals test).
    env.setdefault("RAY_BENCH_METRICS_FINAL_SCRAPE", "0")
    env.update(extra or {})
    return env


def run_cli(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], cwd=cwd, env=dict(env or cli_env()),
                          capture_output=True, text=True, timeout=timeout, start_new_session=True,
                          check=False)


class DriverProcess:
    """``ray-bench execute`` in its own process group, output to files under ``log_dir``."""

    def __init__(self, plan: Path, identity: str, log_dir: Path, *,
                 env: Mapping[str, str] | None = None, extra_args: tuple[str, ...] = (),
                 name: str = "driver") -> None:
        self.args = [str(BIN), "execute", "--plan", str(plan), "--confirm", identity, *extra_args]
        self.env = dict(env or cli_env())
        # the metrics exporter's file_sd target stays inside the test's directory
        self.env.setdefault("RAY_BENCH_STATE_ROOT", str(log_dir / "state"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = log_dir / f"{name}.stdout"
        self.stderr_path = log_dir / f"{name}.stderr"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DriverProcess:
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(self.args, env=self.env, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait(self, timeout: float = 300) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the driver process alone, as a crash or the OOM killer would."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def reap(self) -> None:
        """Kill what is left of this driver's process group (the Ray it started)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=30)

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def ledger_query(run_root: Path, sql: str) -> list[tuple[object, ...]]:
    """Read the live ledger of a running driver (read-only; empty before it exists)."""
    path = run_root / "ledger.sqlite"
    if not path.exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return []  # created but no schema yet


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.02,
             alive: DriverProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if alive is not None and alive.proc is not None and alive.proc.poll() is not None:
            raise AssertionError(f"driver exited ({alive.proc.returncode}) before {what}:\n"
                                 f"{alive.stderr[-3000:]}")
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def pgrep(pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False)
    return [int(p) for p in found.stdout.split()]
