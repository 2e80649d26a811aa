"""file_sd targets: a dead server's target is pruned, a live one kept; a finished run's final
figures linger on its port for the time asked, then the target goes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ray_bench.metrics import MetricsExporter
from ray_bench.metrics.linger import publish_audit
from ray_bench.metrics.targets import audit_target_file, owner, pid_file, prune_stale_targets, target_file, write_target


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_prune_removes_targets_of_dead_servers_only(tmp_path: Path) -> None:
    write_target(target_file(tmp_path, "dead"), "127.0.0.1:1", "dead", _dead_pid())
    write_target(target_file(tmp_path, "alive"), "127.0.0.1:2", "alive", os.getpid())
    foreign = target_file(tmp_path, "foreign")
    foreign.write_text("[]")  # no pid file: not ours to judge
    audit = audit_target_file(tmp_path, "audited")
    write_target(audit, "127.0.0.1:3", "audited", _dead_pid())  # an audit's server that died
    assert prune_stale_targets(tmp_path) == ["dead"]  # only runs are reported
    assert not audit.exists() and not pid_file(audit).exists()
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


def _served(target: Path) -> str:
    address = json.loads(target.read_text())[0]["targets"][0]
    return _get(f"http://{address}/metrics") or ""


def test_an_audit_publishes_its_count_and_time_beside_the_runs_target(tmp_path: Path) -> None:
    """The issue's case: the end-of-run audit left 2 sandboxes, `audit --cleanup` removed
    them later. Its clean count and time are served through a target of their own (the
    ray-bench-audit job), so RayBenchSandboxResidue follows the newest audit
    (ops/prometheus/alerts_test.yml) and the run's own target is left as it was."""
    exporter = MetricsExporter("left", tmp_path, arms=["baseline"])
    exporter.start()
    run_target = exporter.target_file
    exporter.lasting.audit(2, 1000.0)
    exporter.set_finished()
    exporter.stop(linger_sec=30.0)
    assert _until(lambda: 'raybench_audit_residue_sandboxes{run="left"} 2.0' in _served(run_target), 20)
    lingering = owner(run_target)

    pid = publish_audit(tmp_path, "left", residue=0, at=2000.0, linger_sec=4.0)
    target = audit_target_file(tmp_path, "left")
    assert pid is not None and owner(target) == pid and owner(run_target) == lingering
    assert json.loads(target.read_text())[0]["labels"] == {"run": "left"}
    assert _until(lambda: 'raybench_audit_timestamp_seconds{run="left"} 2000.0' in _served(target), 20)
    assert 'raybench_audit_residue_sandboxes{run="left"} 0.0' in _served(target)
    assert _until(lambda: not target.exists(), 30)  # its server ends; its target goes

    # a second audit replaces the first one's server
    first = publish_audit(tmp_path, "left", residue=1, at=3000.0, linger_sec=30.0)
    second = publish_audit(tmp_path, "left", residue=0, at=3001.0, linger_sec=4.0)
    assert first is not None and second is not None and owner(target) == second
    assert _until(lambda: 'raybench_audit_timestamp_seconds{run="left"} 3001.0' in _served(target), 20)
    assert _until(lambda: not target.exists(), 30)


def test_an_audit_publishes_nothing_while_the_driver_serves_or_for_a_run_never_exported(
        tmp_path: Path) -> None:
    assert publish_audit(tmp_path, "never", residue=0, at=1.0) is None
    assert not audit_target_file(tmp_path, "never").exists()
    with MetricsExporter("live", tmp_path):
        assert publish_audit(tmp_path, "live", residue=0, at=1.0) is None
        assert not audit_target_file(tmp_path, "live").exists()


def test_an_audit_of_a_dead_drivers_run_publishes(tmp_path: Path) -> None:
    with MetricsExporter("killed", tmp_path) as exporter:
        run_target = exporter.target_file
    write_target(run_target, "127.0.0.1:1", "killed", _dead_pid())  # what a SIGKILL leaves
    pid = publish_audit(tmp_path, "killed", residue=1, at=3000.0, linger_sec=4.0)
    target = audit_target_file(tmp_path, "killed")
    assert pid is not None and owner(target) == pid
    assert _until(lambda: 'raybench_audit_residue_sandboxes{run="killed"} 1.0' in _served(target), 20)
    assert _until(lambda: not target.exists(), 30)
