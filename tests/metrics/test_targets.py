"""file_sd targets: a dead server's target is pruned, a live one kept; a finished run's final
figures linger on its port for the time asked, then the target goes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ray_bench.metrics import MetricsExporter
from ray_bench.metrics.targets import owner, pid_file, prune_stale_targets, target_file, write_target


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_prune_removes_targets_of_dead_servers_only(tmp_path: Path) -> None:
    write_target(target_file(tmp_path, "dead"), "127.0.0.1:1", "dead", _dead_pid())
    write_target(target_file(tmp_path, "alive"), "127.0.0.1:2", "alive", os.getpid())
    foreign = target_file(tmp_path, "foreign")
    foreign.write_text("[]")  # no pid file: not ours to judge
    assert prune_stale_targets(tmp_path) == ["dead"]
    assert not target_file(tmp_path, "dead").exists() and not pid_file(target_file(tmp_path, "dead")).exists()
    assert target_file(tmp_path, "alive").exists() and foreign.exists()


def test_a_starting_exporter_prunes_dead_targets(tmp_path: Path) -> None:
    write_target(target_file(tmp_path, "dead"), "127.0.0.1:1", "dead", _dead_pid())
    with MetricsExporter("new", tmp_path):
        assert not target_file(tmp_path, "dead").exists()


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def _until(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_final_figures_linger_then_the_target_goes(tmp_path: Path) -> None:
    exporter = MetricsExporter("done", tmp_path, arms=["baseline"])
    exporter.start()
    url, target = exporter.url, exporter.target_file
    exporter.set_cells({"valid": 3})
    exporter.set_finished()
    exporter.stop(linger_sec=4.0)
    # the same address now serves the final figures, from another process
    assert _until(lambda: (_get(url) or "").find('raybench_run_finished{run="done"} 1.0') >= 0, 20)
    assert target.exists()
    assert _until(lambda: owner(target) not in (None, os.getpid()), 10)
    # then the linger ends and withdraws the target
    assert _until(lambda: not target.exists(), 30)
    assert _until(lambda: _get(url) is None, 10)
