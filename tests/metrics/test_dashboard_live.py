"""The dashboard's live panels with "All" runs, on a real Prometheus (issue 56): a finished run's
last report (served by its linger) neither shows an account disabled that a newer run has
healthy nor a red heartbeat age, and a paused run keeps no finish estimate."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from support.prometheus import PrometheusServer, dashboard

from ray_bench.metrics import AccountView, MetricsExporter
from ray_bench.metrics.exporter import ACCOUNT_STATES
from ray_bench.metrics.pace import MIN_ROWS

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

ALL = ".*"  # the run variable's "All" value


def panel_expr(title: str) -> str:
    (panel,) = [p for p in dashboard()["panels"] if p["title"] == title]
    return str(panel["targets"][0]["expr"]).replace("$run", ALL)


def by(prometheus: PrometheusServer, expr: str, label: str) -> dict[str, float]:
    return {r["metric"][label]: float(r["value"][1]) for r in prometheus.query(expr)}


@pytest.fixture
def exporters(prometheus: PrometheusServer) -> Iterator[dict[str, MetricsExporter]]:
    with ExitStack() as stack:
        yield {run: stack.enter_context(MetricsExporter(run, prometheus.state_root, arms=["baseline"]))
               for run in ("old-run", "paused-run", "new-run")}


def test_live_panels_leave_finished_and_paused_runs_out(
        prometheus: PrometheusServer, exporters: dict[str, MetricsExporter]) -> None:
    old, paused, new = exporters["old-run"], exporters["paused-run"], exporters["new-run"]
    # The old run met a 401 on acct-a and finished ten minutes ago (its linger serves its last
    # report: the exporter kept serving after set_finished is the same exposition).
    old.set_accounts([AccountView("acct-a", "disabled", 0, 2, "401 invalid api key")])
    old.lasting.beat(time.time() - 600)
    old.set_finished(True, "finished")
    # The newer run has acct-a healthy again (`accounts enable`), and beats.
    new.set_accounts([AccountView("acct-a", "healthy", 1, 2)])
    # The paused run had a finish estimate while it ran.
    paused.set_deadline(time.time() + 3600)
    paused.set_cells({"pending": 10})
    for _ in range(MIN_ROWS):
        paused.attempt_started("baseline", "acct-b", "local")
        paused.attempt_finished("baseline", "acct-b", "local", outcome="valid", failure_class=None, valid=True,
                                reward=1.0, phase_seconds={}, cost_usd=0.0, finished_at=time.time())
    for run in exporters:
        prometheus.wait_for_target(run)
    estimate = panel_expr("Finish estimate")
    running = prometheus.wait_for(lambda: by(prometheus, estimate, "run").get("paused-run", -1) > 0,
                                  "the running run's finish estimate")
    assert running

    paused.set_finished(True, "paused")
    assert paused.refresh().finish_estimate_seconds is None  # nor in the linger's exposition
    prometheus.wait_for(lambda: by(prometheus, estimate, "run").get("paused-run") == -2,
                        "the paused run's finish estimate gone ('not running')")

    states = by(prometheus, panel_expr("Account state"), "account")
    assert states["acct-a"] == ACCOUNT_STATES.index("healthy") + 1, states
    # without the live filter the old run's report wins: what the panel showed before
    everyone = prometheus.query('max(raybench_account_state{account="acct-a",state="disabled"})')
    assert float(everyone[0]["value"][1]) == 1

    ages = by(prometheus, panel_expr("Driver heartbeat age"), "run")
    assert ages["old-run"] == -2 and ages["paused-run"] == -2, ages  # "not running", not red
    assert 0 <= ages["new-run"] < 60, ages
    assert "paused-run" not in by(prometheus, panel_expr("Pace against required pace"), "run")
