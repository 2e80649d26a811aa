"""The shipped ops/ files: promtool accepts them, the dashboard is a Grafana dashboard,
every runbook exists, and every series they name is one the exporter serves."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from support.prometheus import (
    ALERT_RULES,
    REPO_ROOT,
    SCRAPE_CONFIG,
    alert_rules,
    dashboard,
    dashboard_exprs,
    require_binary,
)

from ray_bench.metrics import AccountView, MetricsExporter
from ray_bench.metrics.pace import MIN_ROWS

OPS = REPO_ROOT / "ops"
# a series name (not the middle of a recording rule's name like run:raybench_x:rate5m)
METRIC = re.compile(r"(?<![:\w])raybench_[a-z_]+")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = require_binary("promtool")
    return subprocess.run([binary, *args], check=False, capture_output=True, text=True, timeout=60)


@pytest.mark.prometheus
def test_promtool_accepts_the_scrape_config() -> None:
    result = promtool("check", "config", str(SCRAPE_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr


@pytest.mark.prometheus
def test_promtool_accepts_the_alert_rules() -> None:
    result = promtool("check", "rules", str(ALERT_RULES))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.prometheus
def test_alerts_fire_as_their_unit_tests_say() -> None:
    """ops/prometheus/alerts_test.yml: series in, the alerts (labels, annotations) out."""
    result = promtool("test", "rules", str(OPS / "prometheus" / "alerts_test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_scrape_config_finds_runs_through_file_sd() -> None:
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"ray-bench", "ray-bench-audit"}
    # the runs' targets, and those of the audits that publish a count after a driver has gone
    for name, folder in (("ray-bench", "targets"), ("ray-bench-audit", "audits")):
        job = jobs[name]
        # target labels win (no honor_labels); the exporter's duplicate `run` is dropped
        assert "honor_labels" not in job
        assert {"action": "labeldrop", "regex": "exported_run"} in job["metric_relabel_configs"]
        (sd,) = job["file_sd_configs"]
        (pattern,) = sd["files"]
        assert pattern.endswith(f"/prometheus/{folder}/*.json")
    assert config["rule_files"] == ["alerts.yml"]


def test_every_alert_has_a_runbook_and_a_severity() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} >= {
        "RayBenchDriverDown",
        "RayBenchRunVanished",
        "RayBenchPaceBelowRequired",
        "RayBenchNoUsableAccount",
        "RayBenchAccountDisabled",
        "RayBenchCircuitOpen",
        "RayBenchHalted",
        "RayBenchRunStopped",
        "RayBenchSpendNearLimit",
        "RayBenchSpendBreachPredicted",
        "RayBenchSandboxResidue",
        "RayBenchRunStalled",
    }
    used: set[str] = set()
    for rule in rules:
        # one configurable base (the external label runbook_base), else relative to the repository
        template = rule["annotations"]["runbook_url"]
        found = re.fullmatch(r'\{\{ or \$externalLabels\.runbook_base "ops/runbooks" \}\}/(RayBench[A-Za-z]+\.md)',
                             template)
        assert found, template
        url = f"ops/runbooks/{found.group(1)}"
        text = (REPO_ROOT / url).read_text()
        assert text.startswith("# RayBench")
        # a runbook shared by related alerts names each of them (in its title or text)
        assert rule["alert"] in text or Path(url).stem == rule["alert"], rule["alert"]
        assert "ray-bench " in text  # it names commands to run
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        used.add(Path(url).stem)
    assert {p.stem for p in (OPS / "runbooks").glob("*.md")} == used  # no orphan runbook


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    tests = yaml.safe_load((OPS / "prometheus" / "alerts_test.yml").read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])
             if case["exp_alerts"]}
    quiet = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])
             if not case["exp_alerts"]}
    names = {r["alert"] for r in alert_rules()}
    assert names - fired == set(), "alerts no unit test fires"
    # most alerts also have a moment where they must not fire yet (for:, or a quiet case)
    assert len(quiet & names) >= len(names) // 2


def test_the_dashboard_json_is_what_its_builder_writes() -> None:
    """ops/grafana/ray-bench.json comes from grafana-foundation-sdk's typed builders
    (ops/grafana/dashboard.py): regenerate it after changing the builder."""
    spec = importlib.util.spec_from_file_location("ops_dashboard", OPS / "grafana" / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (OPS / "grafana" / "ray-bench.json").read_text() == module.render(), (
        "stale dashboard: .venv/bin/python ops/grafana/dashboard.py > ops/grafana/ray-bench.json")


def test_dashboard_panels_have_units_runbooks_and_rate_intervals() -> None:
    dash = dashboard()
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time", "refresh"):
        assert key in dash, key
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["run"]["query"] == "label_values(raybench_cells, run)"
    assert variables["run"]["multi"] is True and variables["run"]["includeAll"] is True
    assert variables["datasource"]["type"] == "datasource"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    linked = set()
    for panel in dash["panels"]:
        assert panel["title"] and panel["type"] in {"stat", "timeseries", "state-timeline"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["datasource"]["type"] == "prometheus"
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert 'run=~"$run"' in expr, (panel["title"], expr)
            # rates follow Grafana's interval, never a fixed window
            for window in re.findall(r"\[([^\]]+)\]", expr):
                assert window == "$__rate_interval", (panel["title"], expr)
        for link in panel.get("links", []):
            linked.add(link["url"].rsplit("/", 1)[-1].removesuffix(".md"))
        if panel["type"] == "state-timeline" or panel["title"] in ("Halted", "Stopped"):
            assert panel["fieldConfig"]["defaults"]["mappings"], panel["title"]
    assert (OPS / "runbooks").is_dir()
    assert linked >= {"RayBenchDriverDown", "RayBenchHalted", "RayBenchPaceBelowRequired",
                      "RayBenchNoUsableAccount", "RayBenchSandboxResidue", "RayBenchCircuitOpen"}
    assert all((OPS / "runbooks" / f"{name}.md").exists() for name in linked)
    # USD and USD/h are on panels of their own
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in dash["panels"]}
    assert units["Spend"] == "currencyUSD" and units["Spend rate"] == "suffix: USD/h"


def test_the_dashboard_covers_the_operator_questions() -> None:
    exprs = "\n".join(dashboard_exprs())
    for metric in (
        "raybench_pace_rows_per_minute",
        "raybench_required_pace_rows_per_minute",
        "raybench_cells",
        "raybench_account_inflight",
        "raybench_account_limit",
        "raybench_account_state",
        "raybench_rate_limit_signals_total",
        "raybench_attempts_total",
        "raybench_sandboxes",
        "raybench_spend_usd_total",
        "raybench_run_spend_usd",
        "raybench_circuit_open",
        "raybench_halted",
        "raybench_driver_heartbeat_timestamp_seconds",
        "raybench_account_cooldown_end_timestamp_seconds",
        "raybench_account_login_expiry_timestamp_seconds",
    ):
        assert metric in exprs, metric


def test_every_series_named_in_ops_is_exported(tmp_path: Path) -> None:
    with MetricsExporter("r", tmp_path, arms=["baseline"]) as exporter:
        exporter.set_accounts([AccountView("a", "healthy", 0, 1), AccountView("b", "disabled", 0, 1, "401 bad key")])
        exporter.lasting.limits(10.0, {"a": 5.0})
        exporter.lasting.row("baseline", "a", 0.1, valid=True)
        exporter.lasting.beat(1e9)
        exporter.lasting.accounts({"a": 2e9}, {"a": 2e9})
        exporter.set_sandboxes("docker", {})
        exporter.set_circuit("run", False)
        exporter.set_deadline(2e9)
        exporter.rate_limited("a")
        for _ in range(MIN_ROWS):  # enough rows for an estimate
            exporter.attempt_started("baseline", "a", "docker")
            exporter.attempt_finished(
                "baseline", "a", "docker", outcome="valid", failure_class=None, valid=True,
                reward=1.0, phase_seconds={"total": 1.0}, cost_usd=0.1, finished_at=time.time(),
            )  # fmt: skip
        with urllib.request.urlopen(exporter.url, timeout=5) as resp:
            exported = set(METRIC.findall(resp.read().decode()))
    named = set(METRIC.findall("\n".join(dashboard_exprs())))
    named |= set(METRIC.findall("\n".join(r["expr"] for r in alert_rules())))
    named |= set(METRIC.findall("\n".join(str(r.get("annotations", {})) for r in alert_rules())))
    assert named - exported == set()
