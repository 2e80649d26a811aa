"""`ray-bench audit` of a run whose driver has gone serves its count and time (scrape job
ray-bench-audit), so RayBenchSandboxResidue follows the newest audit; how long it serves is
execute's linger, and an unreadable linger is bad input before anything is removed."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from support.driver_process import cli_env, run_cli
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.metrics import MetricsExporter
from ray_bench.metrics.targets import audit_target_file


def _planned(tmp_path: Path) -> Path:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], preflight_cells=0,
                                 backends={"local": {"max_sandboxes": 2, "options": {"root": str(tmp_path / "sbx")}}})
    return plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="audited").run_root


def _text(target: Path, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            address = json.loads(target.read_text())[0]["targets"][0]
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=2) as resp:
                return str(resp.read().decode())
        except (OSError, ValueError, IndexError):
            time.sleep(0.2)
    return ""


def test_a_clean_audit_serves_its_count_for_the_linger(tmp_path: Path) -> None:
    run_root, state = _planned(tmp_path), tmp_path / "state"
    with MetricsExporter("audited", state):  # a driver of the run exported here, then went
        pass
    env = cli_env({"RAY_BENCH_STATE_ROOT": str(state), "RAY_BENCH_METRICS_LINGER": "5s"})
    before = time.time()
    done = run_cli("audit", str(run_root), "--cleanup", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    target = audit_target_file(state, "audited")
    text = _text(target)
    assert 'raybench_audit_residue_sandboxes{run="audited"} 0.0' in text, text
    (stamp,) = [line for line in text.splitlines() if line.startswith("raybench_audit_timestamp_seconds{")]
    assert float(stamp.rsplit(" ", 1)[1]) >= before
    deadline = time.monotonic() + 30
    while target.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not target.exists()  # served for the linger, then withdrawn


def test_no_linger_publishes_nothing_and_a_bad_one_is_bad_input(tmp_path: Path) -> None:
    run_root, state = _planned(tmp_path), tmp_path / "state"
    with MetricsExporter("audited", state):
        pass
    done = run_cli("audit", str(run_root), env=cli_env({"RAY_BENCH_STATE_ROOT": str(state)}))  # linger 0
    assert done.returncode == 0, done.stdout + done.stderr
    assert not audit_target_file(state, "audited").exists()
    done = run_cli("audit", str(run_root), "--cleanup",
                   env=cli_env({"RAY_BENCH_STATE_ROOT": str(state), "RAY_BENCH_METRICS_LINGER": "soon"}))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "RAY_BENCH_METRICS_LINGER" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == "" and not audit_target_file(state, "audited").exists()
