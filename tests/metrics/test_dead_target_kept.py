"""Issue 56 on a real Prometheus: a driver killed before its first scrape, then another run's
`execute` starting within the alert's two minutes. That start prunes dead targets; it used to
remove this one, so `up` went with it and RayBenchDriverDown never fired. Now the target stays
(DEAD_TARGET_KEEP_SEC) and the alert's expression keeps naming the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.prometheus import PrometheusServer, alert_expr

from ray_bench.metrics import MetricsExporter
from ray_bench.metrics.targets import dead_file, pid_file, target_file

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

DRIVER = """
import sys, time
from ray_bench.metrics import MetricsExporter
exporter = MetricsExporter("killed", sys.argv[1])
exporter.set_cells({"pending": 4})
exporter.start()
time.sleep(600)
"""


def test_a_killed_drivers_target_outlives_another_runs_start(prometheus: PrometheusServer, tmp_path: Path) -> None:
    target = target_file(prometheus.state_root, "killed")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(prometheus.state_root)])
    try:
        deadline = time.monotonic() + 30
        # the target itself, not only its pid file: `write_target` writes the pid file first, and
        # a loaded host (CI under two busy loops) let the kill land between the two
        while not (pid_file(target).exists() and target.exists()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pid_file(target).read_text() == str(driver.pid)
        os.kill(driver.pid, signal.SIGKILL)  # before Prometheus's first scrape, most likely
        driver.wait(timeout=10)
        # Another run's execute starts on the host within the alert's 2 minutes: its exporter
        # prunes dead targets, and keeps this one.
        with MetricsExporter("other", prometheus.state_root):
            assert target.exists() and dead_file(target).exists()
            prometheus.wait_for_target("other")
            down = prometheus.wait_for_data(alert_expr("RayBenchDriverDown"), timeout=30)
            assert {r["metric"]["run"] for r in down} == {"killed"}
        assert target.exists()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
