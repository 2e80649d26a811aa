"""A SIGKILLed driver against the real Prometheus: RayBenchDriverDown's expression answers,
`status` says the driver died, and `ray-bench audit` removes the dead target so the run
then reads as vanished (not down forever)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.driver_process import DriverProcess, cli_env, run_cli
from support.prometheus import PrometheusServer, alert_expr
from support.ray_local import shared_address
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.metrics.targets import pid_file, target_file
from ray_bench.status.read import read_status

pytestmark = [pytest.mark.prometheus, pytest.mark.ray, pytest.mark.slow]


def test_a_killed_driver_pages_and_its_target_is_pruned(tmp_path: Path, prometheus: PrometheusServer) -> None:
    arm = {"command": 'sleep 20; sh "$SOLUTION_DIR/solve.sh"', "expose_solution": True}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list"], preflight_cells=0,
        backends={"local": {"max_sandboxes": 4, "options": {"root": str(tmp_path / "sbx")}}},
        arms=[{"name": "baseline", "role": "baseline", **arm}, {"name": "mcp", "role": "variant", **arm}])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="killed")
    env = cli_env({"RAY_BENCH_STATE_ROOT": str(prometheus.state_root)})
    # The driver joins the session's shared Ray: what is checked is its exporter's target, its
    # ledger and the audit, not Ray's start (a local one cost 10-40 s here). Its SIGKILL ends
    # its Ray job, whose runner actors Ray then ends; the admission actors are its state root's.
    driver = DriverProcess(planned.run_root / "launch-plan.json", planned.identity, tmp_path / "logs", env=env,
                           extra_args=("--address", shared_address()))
    target = target_file(prometheus.state_root, "killed")
    try:
        driver.start()
        prometheus.wait_for_target("killed", timeout=240)
        # the exporter serves the run's cells from its start, before Ray's (MetricsObserver.prime);
        # the loop's ticks then count its running cells
        prometheus.wait_for_data('raybench_remaining_cells{run="killed"} > 0', timeout=240)
        prometheus.wait_for_data('raybench_cells{run="killed",state="running"} > 0', timeout=240)
        assert pid_file(target).read_text() == str(driver.pid)
        driver.kill()

        # The dead driver's target stays behind and answers no more: the alert's expression
        # (its `for: 2m` only delays the page) names the run.
        assert target.exists()
        down = prometheus.wait_for_data(alert_expr("RayBenchDriverDown"), timeout=60)
        assert {r["metric"]["run"] for r in down} == {"killed"}
        status = read_status(planned.run_root)
        assert status.state == "stopped" and "driver died" in (status.reason or "")
        assert status.next_action is not None and "execute --plan" in status.next_action

        # `audit` prunes targets whose process is gone; the run then reads as vanished.
        result = run_cli("audit", str(planned.run_root), "--cleanup", env=env)
        assert "removed the metrics target of run killed" in result.stderr, result.stderr
        assert not target.exists() and not pid_file(target).exists()
        prometheus.wait_for_target_gone("killed")
        gone = prometheus.wait_for_data(alert_expr("RayBenchRunVanished"), timeout=60)
        assert {r["metric"]["run"] for r in gone} == {"killed"}
        assert prometheus.query(alert_expr("RayBenchDriverDown")) == []
    finally:
        driver.reap()
