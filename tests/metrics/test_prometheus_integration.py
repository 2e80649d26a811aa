"""Against a real Prometheus: the exporter is discovered through its file_sd file and
scraped, and every dashboard and alert expression parses and returns data."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from support.prometheus import (
    PrometheusServer,
    alert_expr,
    alert_rules,
    dashboard,
    dashboard_exprs,
)

from ray_bench.metrics import AccountView, MetricsExporter
from ray_bench.metrics.linger import publish_audit

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

RUN = "it-run"
VALID_ROWS = 8


def feed_small_run(exporter: MetricsExporter) -> None:
    """A small run over a few seconds: valid rows, rate-limited attempts, a cooling account."""
    total = 20
    exporter.set_deadline(time.time() + 120)  # needs ~10 rows/min; the run does far less
    exporter.set_accounts(
        [
            AccountView("acct-a", "healthy", 2, 4),
            AccountView("acct-b", "cooling", 0, 2),
            AccountView("acct-c", "disabled", 0, 2),
        ]
    )
    exporter.set_healthy_capacity(4)
    exporter.set_sandboxes("docker", {"running": 2})
    exporter.set_circuit("backend:docker", True)
    exporter.set_halted(True)
    for i in range(VALID_ROWS):
        arm = ("baseline", "mcp")[i % 2]
        exporter.attempt_started(arm, "acct-b", "docker")
        exporter.rate_limited("acct-b")
        exporter.attempt_finished(
            arm, "acct-b", "docker", outcome="failed", failure_class="capacity", valid=False,
            reward=None, phase_seconds={"sandbox_create": 0.5, "total": 0.7}, cost_usd=0.0,
            finished_at=time.time(),
        )  # fmt: skip
        exporter.attempt_started(arm, "acct-a", "docker")
        exporter.attempt_finished(
            arm, "acct-a", "docker", outcome="valid", failure_class=None, valid=True,
            reward=float(i % 2), cost_usd=0.02, finished_at=time.time(),
            phase_seconds={"sandbox_create": 1.5, "agent": 40.0, "verifier": 5.0,
                           "collect": 0.5, "total": 47.5},
        )  # fmt: skip
        exporter.set_cells({"pending": total - i - 3, "running": 2, "valid": i + 1})
        time.sleep(0.4)  # spread over several 1s scrapes so rate() has points to work with


@pytest.fixture
def exporter(prometheus: PrometheusServer) -> Iterator[MetricsExporter]:
    with MetricsExporter(RUN, prometheus.state_root, arms=["baseline", "mcp"]) as exp:
        yield exp


def test_a_small_run_end_to_end(prometheus: PrometheusServer, exporter: MetricsExporter) -> None:
    feed_small_run(exporter)

    # Discovered through the file_sd file (no static target anywhere), and scraped.
    target = prometheus.wait_for_target(RUN)
    assert target["labels"]["job"] == "ray-bench"
    assert target["scrapeUrl"] == exporter.url
    # Every valid row fed in is counted; `run` is the target's (the exported duplicate is dropped).
    prometheus.wait_for_value(f'sum(raybench_valid_rows_total{{run="{RUN}"}})', VALID_ROWS)
    assert prometheus.query("count({exported_run!=''})") == []
    # The dashboard's run variable lists this run.
    assert RUN in prometheus.label_values("run", "raybench_cells")

    # Every dashboard expression parses and returns data (rate() and increase() need two
    # scrapes after the events, so wait rather than query once).
    assert dashboard()["panels"]
    for expr in dashboard_exprs(run=RUN):
        prometheus.wait_for_data(expr, timeout=20)

    # Alert expressions whose condition the run above makes true: each returns data now.
    # (`for:` only delays firing; the expression itself answers at once.)
    prometheus.wait_for_data(alert_expr("RayBenchPaceBelowRequired"))
    prometheus.wait_for_data(alert_expr("RayBenchAccountDisabled"))
    prometheus.wait_for_data(alert_expr("RayBenchCircuitOpen"))
    prometheus.wait_for_data(alert_expr("RayBenchHalted"))
    # acct-a is still healthy, so some account can admit a cell.
    assert prometheus.query(alert_expr("RayBenchNoUsableAccount")) == []
    # The run is seconds old, so the stall guard holds it off.
    assert prometheus.query(alert_expr("RayBenchRunStalled")) == []
    # The rules file is loaded and evaluated: the alerts without `for:` are firing.
    firing = prometheus.wait_for(
        lambda: (
            {a["labels"]["alertname"] for a in prometheus.alerts() if a["state"] == "firing"}
            >= {"RayBenchHalted", "RayBenchCircuitOpen"}
        ),
        "RayBenchHalted and RayBenchCircuitOpen firing",
    )
    assert firing

    # No account usable (cooling, held, unknown): now the expression returns data.
    exporter.set_accounts(
        [AccountView("acct-a", "cooling", 0, 4), AccountView("acct-b", "held", 0, 2),
         AccountView("acct-c", "unknown", 0, 2)]
    )  # fmt: skip
    result = prometheus.wait_for_data(alert_expr("RayBenchNoUsableAccount"))
    assert [r["metric"]["run"] for r in result] == [RUN]

    # The end-of-run audit could not remove two sandboxes: residue (first branch of the rule).
    exporter.lasting.audit(2, time.time())
    exporter.set_finished()
    result = prometheus.wait_for_data(alert_expr("RayBenchSandboxResidue"))
    assert {r["metric"]["run"] for r in result} == {RUN}

    # Every alert expression parses (status success) whatever its value.
    for alert in alert_rules():
        prometheus.query(alert["expr"])


def test_residue_after_the_exporter_went_away(prometheus: PrometheusServer) -> None:
    # Second branch of RayBenchSandboxResidue: the driver stopped (or died) while its last
    # report counted live sandboxes.
    with MetricsExporter("gone-run", prometheus.state_root) as exporter:
        exporter.set_sandboxes("daytona", {"running": 1, "deleting": 1})
        prometheus.wait_for_target("gone-run")
        prometheus.wait_for_value('sum(raybench_sandboxes{run="gone-run"})', 2)
    assert not exporter.target_file.exists()
    prometheus.wait_for_target_gone("gone-run")
    result = prometheus.wait_for_data(alert_expr("RayBenchSandboxResidue"))
    assert {(r["metric"]["run"], r["metric"]["backend"]) for r in result} == {
        ("gone-run", "daytona")
    }
    assert float(result[0]["value"][1]) == 2

    # A clean run that reported zero live sandboxes before stopping is not residue.
    with MetricsExporter("clean-run", prometheus.state_root) as exporter:
        exporter.set_sandboxes("daytona", {"running": 1})
        prometheus.wait_for_value('sum(raybench_sandboxes{run="clean-run"})', 1)
        exporter.set_sandboxes("daytona", {})
        exporter.set_finished()
        exporter.stop(final_scrape_timeout=10)
    prometheus.wait_for_target_gone("clean-run")
    time.sleep(2)
    runs = {r["metric"]["run"] for r in prometheus.query(alert_expr("RayBenchSandboxResidue"))}
    assert "clean-run" not in runs


def test_a_clean_audit_after_the_driver_went_clears_residue(prometheus: PrometheusServer) -> None:
    """The issue's case on a real Prometheus: the end-of-run audit left 2 sandboxes and the
    driver (and its exporter) went; a later clean `audit --cleanup` publishes its count
    through the ray-bench-audit job and the residue alert's expression goes quiet, and stays
    quiet after that server goes too."""
    with MetricsExporter("residue-run", prometheus.state_root) as exporter:
        exporter.lasting.audit(2, time.time())
        exporter.set_finished()
        prometheus.wait_for_value('max(raybench_audit_residue_sandboxes{run="residue-run"})', 2)
        exporter.stop(final_scrape_timeout=10)
    prometheus.wait_for_target_gone("residue-run")
    expr = alert_expr("RayBenchSandboxResidue")
    fired = prometheus.wait_for_data(expr)
    assert "residue-run" in {r["metric"]["run"] for r in fired}

    publish_audit(prometheus.state_root, "residue-run", residue=0, at=time.time(), linger_sec=6.0)
    prometheus.wait_for(lambda: "residue-run" not in {r["metric"]["run"] for r in prometheus.query(expr)},
                        "the residue alert's expression quiet after the clean audit", timeout=30)
    job = {t["labels"]["job"] for t in prometheus.targets() if t["labels"].get("run") == "residue-run"}
    assert job <= {"ray-bench-audit"}
    prometheus.wait_for_target_gone("residue-run")
    time.sleep(2)
    assert "residue-run" not in {r["metric"]["run"] for r in prometheus.query(expr)}


def test_a_linger_ends_once_prometheus_has_its_final_figures_and_the_alert_holds(
        prometheus: PrometheusServer) -> None:
    """A finished run's linger asked for 5 minutes ends at Prometheus's first scrape of the final
    figures (its scrapes carry X-Prometheus-Scrape-Timeout-Seconds), and RayBenchHalted, which
    reads the last of them, still fires once the target is gone."""
    exporter = MetricsExporter("halted-run", prometheus.state_root)
    exporter.start()
    prometheus.wait_for_target("halted-run")
    exporter.set_halted(True)
    exporter.set_finished()
    exporter.stop(linger_sec=300.0)
    began = time.monotonic()
    prometheus.wait_for_target_gone("halted-run", timeout=60)
    assert time.monotonic() - began < 60
    assert not exporter.target_file.exists()
    fired = prometheus.wait_for_data(alert_expr("RayBenchHalted"))
    assert "halted-run" in {r["metric"]["run"] for r in fired}


def test_stalled_run_expression(prometheus: PrometheusServer) -> None:
    # RayBenchRunStalled needs 30 minutes of silence in a run older than 30 minutes. The
    # rule's own expression is checked to parse above; here the same expression with its
    # two durations shrunk to seconds shows the logic: data once rows stop, none before.
    expr = alert_expr("RayBenchRunStalled")
    assert "[30m]" in expr
    assert "> 1800" in expr
    shrunk = expr.replace("[30m]", "[4s]").replace("> 1800", "> 1")
    with MetricsExporter("stall-run", prometheus.state_root, arms=["baseline"]) as exporter:
        exporter.set_cells({"pending": 5})
        prometheus.wait_for_target("stall-run")
        for _ in range(4):  # rows keep coming: not stalled
            exporter.attempt_started("baseline", "a", "local")
            exporter.attempt_finished(
                "baseline", "a", "local", outcome="valid", failure_class=None, valid=True,
                reward=1.0, phase_seconds={}, cost_usd=0.0, finished_at=time.time(),
            )  # fmt: skip
            time.sleep(1.0)
        assert "stall-run" not in {r["metric"]["run"] for r in prometheus.query(shrunk)}
        result = prometheus.wait_for_data(shrunk, timeout=20)  # rows stopped, cells remain
        assert [r["metric"]["run"] for r in result] == ["stall-run"]
        assert prometheus.query(expr) == []  # the real rule: the run is only seconds old
