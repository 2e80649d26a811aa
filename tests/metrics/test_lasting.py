"""The ledger-backed gauges a resumed driver starts from: the dashboard's mean reward by arm
spans every session, and the last audit carries its time."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest

from ray_bench.ledger import Ledger
from ray_bench.metrics import MetricsExporter
from ray_bench.metrics.lasting import ledger_totals
from ray_bench.models.attempt import AttemptSummary


def _row(ledger: Ledger, cell: str, arm: str, reward: float | None, valid: bool = True) -> None:
    row = ledger.start_attempt(cell_id=cell, task="t", task_checksum="c", arm=arm, rep=1, account="acc",
                               backend="local", epoch="sha256:e", preflight=False, now=1.0)
    ledger.finish_attempt(row.attempt_id, status="finished", valid=valid, reward=reward,
                          failure_class=None if valid else "stack", fingerprint=None if valid else "fp",
                          counts=valid, cost_usd=0.0, summary=AttemptSummary(reward=reward), now=2.0)


def _value(exporter: MetricsExporter, sample: str) -> float:
    for line in generate_latest(exporter.registry).decode().splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{sample} not exported")


def test_a_resumed_session_reports_the_mean_reward_of_every_session(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    _row(ledger, "c1", "baseline", 1.0)
    _row(ledger, "c2", "baseline", 0.0)
    _row(ledger, "c3", "mcp", 1.0)
    _row(ledger, "c4", "mcp", None, valid=False)  # a failed attempt is no row and no reward
    ledger.event("audit", {"removed": 0, "residue": 2}, now=500.0)
    ledger.close()

    exporter = MetricsExporter("r", tmp_path / "state", arms=["baseline", "mcp"])
    exporter.lasting.load(ledger_totals(tmp_path), ["baseline", "mcp"], ["acc"])
    assert _value(exporter, 'raybench_run_reward{arm="baseline",run="r"}') == 1.0
    assert _value(exporter, 'raybench_run_valid_rows{arm="baseline",run="r"}') == 2.0
    assert _value(exporter, 'raybench_run_reward{arm="mcp",run="r"}') == 1.0
    assert _value(exporter, 'raybench_run_valid_rows{arm="mcp",run="r"}') == 1.0
    assert _value(exporter, 'raybench_audit_residue_sandboxes{run="r"}') == 2.0
    assert _value(exporter, 'raybench_audit_timestamp_seconds{run="r"}') == 500.0

    # this session's row adds to the run's totals; the session counter starts at 0
    exporter.attempt_finished("baseline", "acc", "local", outcome="valid", failure_class=None, valid=True,
                              reward=1.0, phase_seconds={}, cost_usd=0.0, finished_at=3.0)
    reward = _value(exporter, 'raybench_run_reward{arm="baseline",run="r"}')
    rows = _value(exporter, 'raybench_run_valid_rows{arm="baseline",run="r"}')
    assert reward / rows == 2.0 / 3.0
    assert _value(exporter, 'raybench_reward_total{arm="baseline",run="r"}') == 1.0


def test_no_audit_yet_exports_no_audit_time(tmp_path: Path) -> None:
    exporter = MetricsExporter("fresh", tmp_path, arms=["baseline"])
    exporter.lasting.load(ledger_totals(tmp_path), ["baseline"], [])
    text = generate_latest(exporter.registry).decode()
    assert "raybench_audit_timestamp_seconds{" not in text


def test_an_unknown_cost_is_counted_apart_from_the_spend_never_as_zero(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    for cell, cost in (("c1", 0.25), ("c2", None)):
        row = ledger.start_attempt(cell_id=cell, task="t", task_checksum="c", arm="baseline", rep=1,
                                   account="acc", backend="local", epoch="sha256:e", preflight=False, now=1.0)
        ledger.finish_attempt(row.attempt_id, status="finished", valid=True, reward=1.0, failure_class=None,
                              fingerprint=None, counts=True, cost_usd=cost, charged_usd=0.6,
                              summary=AttemptSummary(reward=1.0), now=2.0)
    ledger.close()
    exporter = MetricsExporter("r", tmp_path / "state", arms=["baseline"])
    exporter.lasting.load(ledger_totals(tmp_path), ["baseline"], ["acc"])
    assert _value(exporter, 'raybench_run_spend_usd{account="acc",run="r"}') == 0.25  # a lower bound
    assert _value(exporter, 'raybench_run_unknown_cost_attempts{account="acc",run="r"}') == 1.0
    exporter.attempt_finished("baseline", "acc", "local", outcome="valid", failure_class=None, valid=True,
                              reward=1.0, phase_seconds={}, cost_usd=None, finished_at=3.0)
    assert _value(exporter, 'raybench_run_unknown_cost_attempts{account="acc",run="r"}') == 2.0
    assert _value(exporter, 'raybench_run_spend_usd{account="acc",run="r"}') == 0.25


def test_every_stop_reason_the_driver_records_is_a_stopped_label(tmp_path: Path) -> None:
    """A run stopped by a signal (or lost nodes, a full disk, Ray) set no label to 1, so the
    stop alert (ops/prometheus/alerts.yml: raybench_run_stopped == 1) never fired for it."""
    from ray_bench.ledger.events import StopReason

    exporter = MetricsExporter("r", tmp_path, arms=["baseline"])
    for reason in StopReason:
        exporter.lasting.stop(reason.value)
        assert _value(exporter, f'raybench_run_stopped{{reason="{reason.value}",run="r"}}') == 1.0, reason
    exporter.lasting.stop(None)  # a clean finish: every label 0
    assert _value(exporter, 'raybench_run_stopped{reason="signal",run="r"}') == 0.0


def test_a_resumed_exporter_serves_the_ledgers_run_before_the_drivers_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the exporter's start and the driver's ``run_started`` (a resume's Ray start, 48 s
    at load) a scrape read 0 cells remaining and the last session's heartbeat: primed, it reads
    the cells by state from the ledger, and this driver beats while it starts."""
    import time

    from support.suites import make_suite

    from ray_bench.api import plan_run
    from ray_bench.metrics import observer as observer_module
    from ray_bench.metrics.observer import MetricsObserver
    from ray_bench.plan.store import confirm_plan

    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], reps=3, preflight_cells=0)
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r")
    plan, _ = confirm_plan(planned.run_root / "launch-plan.json", planned.identity)
    assert len(plan.cells) == 6
    ledger = Ledger.create(planned.run_root, run_id="r", plan_identity=planned.identity)
    for cell in plan.cells[:2]:
        row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum="c", arm=cell.arm,
                                   rep=cell.rep, account="acct-a", backend="local", epoch="sha256:e",
                                   preflight=False, now=1.0)
        ledger.finish_attempt(row.attempt_id, status="finished", valid=True, reward=1.0, failure_class=None,
                              fingerprint=None, counts=True, cost_usd=0.0,
                              summary=AttemptSummary(reward=1.0), now=2.0)
    ledger.close()

    exporter = MetricsExporter("r", tmp_path / "state", arms=[a.name for a in plan.arms])
    monkeypatch.setattr(observer_module, "START_BEAT_SEC", 0.05)
    beat = 'raybench_driver_heartbeat_timestamp_seconds{run="r"}'
    before = time.time()
    primed = MetricsObserver(exporter, plan, planned.run_root)
    primed.prime()
    try:
        assert _value(exporter, 'raybench_cells{run="r",state="valid"}') == 2.0
        assert _value(exporter, 'raybench_cells{run="r",state="pending"}') == 4.0
        assert exporter.refresh().remaining_cells == 4
        assert _value(exporter, 'raybench_run_valid_rows{arm="baseline",run="r"}') == 1.0
        first = _value(exporter, beat)
        assert first >= before
        deadline = time.monotonic() + 60  # bounded: the beat thread must move the heartbeat on
        while _value(exporter, beat) == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _value(exporter, beat) > first
    finally:
        primed.start_ended()
    stopped = _value(exporter, beat)  # none after start_ended
    time.sleep(0.3)
    assert _value(exporter, beat) == stopped
