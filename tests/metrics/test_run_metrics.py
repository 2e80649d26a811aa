"""A real small run, scraped by a real Prometheus that finds it through the file_sd target."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from support.prometheus import PrometheusServer, alert_rules, dashboard_exprs
from support.ray_local import ensure_ray
from support.runs import ledger_rows
from support.suites import make_suite

from ray_bench.api import MetricsSettings, execute_run, plan_run
from ray_bench.metrics.pace import MIN_ROWS
from ray_bench.scheduler.driver import RunOptions

pytestmark = [pytest.mark.prometheus, pytest.mark.ray, pytest.mark.slow]


#: Agents that start after this many others wait until the probe below has read the dashboard:
#: the first ones give the pace estimate its MIN_ROWS rows, the rest keep the run going through
#: the probe. (Every agent slept 3 s, so that the run outlasted the probe: 39 s a run.)
HELD_AFTER = MIN_ROWS + 3


def test_pace_and_dashboard_from_a_real_run(tmp_path: Path, prometheus: PrometheusServer) -> None:
    ensure_ray()
    started, probed = tmp_path / "started", tmp_path / "probed"
    started.mkdir()
    # held until the probe is done (it touches ``probed`` whatever its outcome), at most until
    # a deadline; done.wait below says whether it read the dashboard
    agent = (f'n=$(ls {started} | wc -l); mktemp -p {started} >/dev/null; '
             f'if [ "$n" -ge {HELD_AFTER} ]; then '
             f'until [ -e {probed} ] || [ "$(date +%s)" -ge {int(time.time()) + 600} ]; do sleep 0.1; done; fi; '
             'sleep 0.5; sh "$SOLUTION_DIR/solve.sh"')
    suite, accounts = make_suite(
        tmp_path / "s", reps=2, preflight_cells=0,
        backends={"local": {"max_sandboxes": 3, "options": {"root": str(tmp_path / "sbx")}}},
        arms=[{"name": "baseline", "role": "baseline", "command": agent, "expose_solution": True},
              {"name": "mcp", "role": "variant", "command": agent, "expose_solution": True}])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="metrics-run")
    seen: list[str] = []
    empty: dict[str, list[str]] = {}
    done = threading.Event()

    def probe_while_running() -> None:
        try:
            # Instant queries only see a target while it is up: probe mid-run, once rows flow.
            prometheus.wait_for_target("metrics-run", timeout=60)
            # enough rows for a pace estimate (the estimate series is absent before)
            prometheus.wait_for_data(f'sum(raybench_valid_rows_total{{run="metrics-run"}}) > {MIN_ROWS}', timeout=90)
            time.sleep(3)  # a few scrapes, so rate() and increase() have two points
            empty["dashboard"] = [e for e in dashboard_exprs(run="metrics-run") if not prometheus.query(e)]
            empty["debug"] = [str(prometheus.query(
                '{__name__=~"raybench_(remaining_cells|pace_rows_per_minute|finish_estimate_seconds)"}'))]
            done.set()
        finally:
            probed.touch()

    def during(exporter: object) -> None:
        seen.append(str(exporter.url))
        threading.Thread(target=probe_while_running, daemon=True).start()

    outcome = execute_run(
        plan_path=planned.run_root / "launch-plan.json", confirm=planned.identity,
        options=RunOptions(tick_sec=0.1),
        metrics=MetricsSettings(state_root=prometheus.state_root, deadline=time.time() + 3600,
                                final_scrape_sec=4.0),
        on_metrics=during)
    assert outcome.exit_code == 0 and seen
    assert done.wait(30)
    # Panels about things that did not happen in this run (open circuits, halts, spend on a
    # free agent) still answer with zeros: every panel returns data.
    assert empty["dashboard"] == [], "\n".join(empty["dashboard"] + empty["debug"])
    attempts, rows = ledger_rows(planned.run_root)
    # Prometheus keeps the last scraped samples; the exporter waited for a final scrape.
    total = prometheus.scalar('sum(max_over_time(raybench_valid_rows_total{run="metrics-run"}[5m]))')
    assert total == len(rows) == 32
    pace = prometheus.scalar('max(max_over_time(raybench_pace_rows_per_minute{run="metrics-run",window="5m"}[5m]))')
    assert pace is not None and pace > 0
    for expr in dashboard_exprs(run="metrics-run"):
        # every panel's query parses; the run's series exist over the run's lifetime
        prometheus.query(expr)
    for rule in alert_rules():
        prometheus.query(rule["expr"])
    assert prometheus.query('max_over_time(raybench_account_inflight{account="acct-a"}[5m])')
    assert not (prometheus.state_root / "prometheus" / "targets" / "metrics-run.json").exists()
    assert len(attempts) == 32
