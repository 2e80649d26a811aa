"""MetricsExporter on its own: scraped over HTTP and parsed like Prometheus would."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from ray_bench.errors import UserInputError
from ray_bench.metrics import (
    ACCOUNT_STATES,
    CELL_STATES,
    AccountView,
    MetricsExporter,
    target_file,
)
from ray_bench.metrics.exporter import RUN_PHASES
from ray_bench.metrics.pace import MIN_ROWS

T0 = 1_700_000_000.0
RUN = "run-1"

#: The fixed contract of DESIGN.md plus the two derived gauges; names as scraped.
CONTRACT = {
    "raybench_cells",
    "raybench_attempts_total",
    "raybench_valid_rows_total",
    "raybench_pace_rows_per_minute",
    "raybench_required_pace_rows_per_minute",
    "raybench_remaining_cells",
    "raybench_account_state",
    "raybench_account_inflight",
    "raybench_account_limit",
    "raybench_healthy_capacity",
    "raybench_sandboxes",
    "raybench_cell_seconds_bucket",
    "raybench_spend_usd_total",
    "raybench_circuit_open",
    "raybench_halted",
    "raybench_deadline_gap_rows",
    "raybench_finish_estimate_seconds",
}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def scrape(exporter: MetricsExporter) -> Samples:
    with urllib.request.urlopen(exporter.url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def exporter(tmp_path: Path, clock: FakeClock) -> Iterator[MetricsExporter]:
    with MetricsExporter(RUN, tmp_path, arms=["baseline", "mcp"], clock=clock) as exp:
        yield exp


def finish(
    exporter: MetricsExporter,
    *,
    arm: str = "baseline",
    account: str = "acct-a",
    valid: bool = True,
    outcome: str = "valid",
    failure_class: str | None = None,
    at: float = T0,
    cost: float = 0.0,
    phases: dict[str, float] | None = None,
) -> None:
    exporter.attempt_started(arm, account, "docker")
    exporter.attempt_finished(
        arm,
        account,
        "docker",
        outcome=outcome,
        failure_class=failure_class,
        valid=valid,
        reward=1.0 if valid else None,
        phase_seconds=phases or {},
        cost_usd=cost,
        finished_at=at,
    )


# -- lifecycle ----------------------------------------------------------------------------


def test_start_serves_and_writes_the_file_sd_target(tmp_path: Path) -> None:
    exporter = MetricsExporter(RUN, tmp_path)
    exporter.start()
    try:
        assert exporter.port != 0
        assert exporter.url == f"http://127.0.0.1:{exporter.port}/metrics"
        path = tmp_path / "prometheus" / "targets" / f"{RUN}.json"
        assert exporter.target_file == path == target_file(tmp_path, RUN)
        assert json.loads(path.read_text()) == [
            {"targets": [f"127.0.0.1:{exporter.port}"], "labels": {"run": RUN}}
        ]
        # no temp left; the pid beside the target says who serves it, and the bound host
        # (which outlives the target) where a later audit publishes its count
        assert sorted(p.name for p in path.parent.iterdir()) == [f"{RUN}.host", f"{RUN}.json", f"{RUN}.pid"]
        assert (path.parent / f"{RUN}.pid").read_text() == str(os.getpid())
        assert (path.parent / f"{RUN}.host").read_text() == "127.0.0.1"
        assert "raybench_cells" in names(scrape(exporter))
    finally:
        exporter.stop()
    assert not path.exists()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(exporter.url, timeout=2)
    exporter.stop()  # twice is fine


def test_a_taken_port_is_a_user_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        exporter = MetricsExporter(RUN, tmp_path, port=port)
        with pytest.raises(UserInputError, match=f"cannot listen on 127.0.0.1:{port}"):
            exporter.start()
    assert not exporter.target_file.exists()


def test_run_id_must_be_a_file_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="file name"):
        MetricsExporter("../evil", tmp_path)


def test_each_exporter_has_its_own_registry(tmp_path: Path) -> None:
    with (
        MetricsExporter("run-a", tmp_path) as a,
        MetricsExporter("run-b", tmp_path) as b,
    ):
        finish(a)
        assert value(scrape(a), "raybench_valid_rows_total", run="run-a", arm="baseline") == 1
        assert value(scrape(b), "raybench_valid_rows_total", run="run-a", arm="baseline") is None
        assert a.port != b.port
        assert sorted(p.name for p in (tmp_path / "prometheus" / "targets").glob("*.json")) == [
            "run-a.json",
            "run-b.json",
        ]
    assert REGISTRY.get_sample_value("raybench_valid_rows_total") is None
    assert not any(m.name.startswith("raybench") for m in REGISTRY.collect())


def test_stop_can_wait_for_a_final_scrape(exporter: MetricsExporter) -> None:
    url = exporter.url
    timer = threading.Timer(0.3, lambda: urllib.request.urlopen(url, timeout=5).read())
    timer.start()
    started = time.monotonic()
    exporter.stop(final_scrape_timeout=120)
    timer.join()
    # it waited for the scrape, and returned with it, long before its timeout (loaded machine)
    assert 0.2 < time.monotonic() - started < 60


def test_stop_does_not_wait_forever_without_prometheus(tmp_path: Path) -> None:
    exporter = MetricsExporter(RUN, tmp_path)
    exporter.start()
    started = time.monotonic()
    exporter.stop(final_scrape_timeout=0.3)
    assert 0.25 < time.monotonic() - started < 30  # bounded; generous for a loaded machine


# -- the metric contract ------------------------------------------------------------------


def test_every_contract_metric_is_exported(exporter: MetricsExporter, clock: FakeClock) -> None:
    exporter.set_cells({"pending": 3, "running": 1})
    exporter.set_accounts([AccountView("acct-a", "healthy", 1, 4)])
    exporter.set_sandboxes("docker", {"running": 1})
    exporter.set_circuit("run", False)
    exporter.set_deadline(clock.now + 3600)
    for _ in range(MIN_ROWS):  # estimates (finish, deadline gap) need this many rows
        finish(exporter, at=clock.now, cost=0.5, phases={"total": 3.0})
    assert not CONTRACT - names(scrape(exporter))
    # no `_created` twin of any counter or histogram
    assert not {n for n in names(scrape(exporter)) if n.endswith("_created")}


def test_fresh_exporter_reports_zeros_not_nothing(exporter: MetricsExporter) -> None:
    s = scrape(exporter)
    for state in CELL_STATES:
        assert value(s, "raybench_cells", run=RUN, state=state) == 0
    # Counters of declared arms exist at 0 so that rate() sees the very first row.
    assert value(s, "raybench_valid_rows_total", run=RUN, arm="mcp") == 0
    assert value(s, "raybench_halted", run=RUN) == 0
    assert value(s, "raybench_healthy_capacity", run=RUN) == 0
    assert value(s, "raybench_remaining_cells", run=RUN) == 0
    assert value(s, "raybench_run_started_timestamp_seconds", run=RUN) == T0
    # Without a deadline or a pace these are absent rather than misleading.
    for absent in (
        "raybench_required_pace_rows_per_minute",
        "raybench_deadline_gap_rows",
        "raybench_finish_estimate_seconds",
    ):
        assert absent not in names(s)


def test_the_session_start_the_rules_read_is_the_one_pace_counts_from(exporter: MetricsExporter) -> None:
    # The recording rules divide by the age of raybench_run_started_timestamp_seconds: it must
    # move with the ledger's run_started, as the exporter's own pace does (it kept the
    # exporter's construction, a Ray start earlier).
    exporter.session_started(T0 + 48)
    assert value(scrape(exporter), "raybench_run_started_timestamp_seconds", run=RUN) == T0 + 48
    assert exporter.refresh(T0 + 108).started_at == T0 + 48


def test_attempts_rows_reward_spend_and_phases(exporter: MetricsExporter) -> None:
    finish(exporter, cost=0.25, phases={"agent": 100.0, "total": 130.0})
    finish(exporter, arm="mcp", account="acct-b", cost=0.5)
    finish(
        exporter,
        valid=False,
        outcome="failed",
        failure_class="capacity",
        cost=0.1,
        phases={"sandbox_create": 2.0},
    )
    s = scrape(exporter)
    attempts = "raybench_attempts_total"
    assert value(s, attempts, run=RUN, arm="baseline", account="acct-a", outcome="valid",
                 failure_class="none") == 1  # fmt: skip
    assert value(s, attempts, run=RUN, arm="baseline", account="acct-a", outcome="failed",
                 failure_class="capacity") == 1  # fmt: skip
    assert value(s, attempts, run=RUN, arm="mcp", account="acct-b", outcome="valid",
                 failure_class="none") == 1  # fmt: skip
    assert value(s, "raybench_valid_rows_total", run=RUN, arm="baseline") == 1
    assert value(s, "raybench_valid_rows_total", run=RUN, arm="mcp") == 1
    assert value(s, "raybench_reward_total", run=RUN, arm="baseline") == 1.0
    assert value(s, "raybench_spend_usd_total", account="acct-a") == pytest.approx(0.35)
    assert value(s, "raybench_spend_usd_total", account="acct-b") == pytest.approx(0.5)
    assert value(s, "raybench_cell_seconds_count", arm="baseline", phase="agent") == 1
    assert value(s, "raybench_cell_seconds_sum", arm="baseline", phase="total") == 130.0
    assert value(s, "raybench_cell_seconds_bucket", arm="baseline", phase="total", le="120.0") == 0
    assert value(s, "raybench_cell_seconds_bucket", arm="baseline", phase="total", le="300.0") == 1
    assert (
        value(s, "raybench_cell_seconds_bucket", arm="baseline", phase="total", le="28800.0") == 1
    )
    assert value(s, "raybench_attempts_started_total", run=RUN, arm="baseline", account="acct-a",
                 backend="docker") == 2  # fmt: skip
    assert value(s, "raybench_attempts_inflight", run=RUN, arm="baseline", backend="docker") == 0


def test_inflight_attempts(exporter: MetricsExporter) -> None:
    exporter.attempt_started("baseline", "acct-a", "daytona")
    exporter.attempt_started("baseline", "acct-b", "daytona")
    s = scrape(exporter)
    assert value(s, "raybench_attempts_inflight", run=RUN, arm="baseline", backend="daytona") == 2


def test_unknown_phase_is_rejected(exporter: MetricsExporter) -> None:
    with pytest.raises(ValueError, match="unknown phases"):
        finish(exporter, phases={"thinking": 1.0})


def test_cells_and_remaining(exporter: MetricsExporter) -> None:
    exporter.set_cells({"pending": 5, "running": 2, "valid": 3, "failed": 1})
    s = scrape(exporter)
    assert value(s, "raybench_cells", run=RUN, state="pending") == 5
    assert value(s, "raybench_cells", run=RUN, state="cancelled") == 0
    assert value(s, "raybench_remaining_cells", run=RUN) == 7
    with pytest.raises(ValueError, match="unknown cell states"):
        exporter.set_cells({"stale": 1})


def test_account_state_is_one_hot_and_withdrawn_accounts_disappear(
    exporter: MetricsExporter,
) -> None:
    exporter.set_accounts(
        [AccountView("acct-a", "cooling", 2, 4), AccountView("acct-b", "healthy", 3, 8)]
    )
    s = scrape(exporter)
    for state in ACCOUNT_STATES:
        assert value(s, "raybench_account_state", account="acct-a", state=state) == (
            state == "cooling"
        )
    assert value(s, "raybench_account_inflight", account="acct-b") == 3
    assert value(s, "raybench_account_limit", account="acct-b") == 8
    assert value(s, "raybench_spend_usd_total", account="acct-b") == 0

    exporter.set_accounts([AccountView("acct-b", "disabled", 0, 8)])
    s = scrape(exporter)
    assert value(s, "raybench_account_state", account="acct-a", state="cooling") is None
    assert value(s, "raybench_account_inflight", account="acct-a") is None
    assert value(s, "raybench_account_state", account="acct-b", state="disabled") == 1
    assert value(s, "raybench_account_state", account="acct-b", state="healthy") == 0


def test_an_account_out_of_the_pool_reports_its_reason_folded(exporter: MetricsExporter) -> None:
    """Issue 56: the alert carries the reason; the label holds the fingerprint's folded form, so a
    key pasted into an error or a request id is never a label and a repeat is one series."""
    key = "sk-ant-api03-Zq8XbV2mN4pL7rT1yU6wE3sD9fG5hJ0k"
    reasons = lambda: {labels: v for (name, labels), v in scrape(exporter).items()  # noqa: E731
                       if name == "raybench_account_reason_info"}
    exporter.set_accounts([AccountView("a", "disabled", 0, 2, f"401 invalid x-api-key {key} req_011CXyZ12345678ab"),
                           AccountView("b", "healthy", 0, 2, "cooldown ended early: the probe passed")])
    (labels,) = reasons()
    assert dict(labels) == {"account": "a", "reason_class": "auth", "reason": "N invalid x-api-key ID ID"}
    # the same failure naming another request: the same series, not a second one
    exporter.set_accounts([AccountView("a", "disabled", 0, 2, f"401 invalid x-api-key {key} req_011CAbC98765432zz")])
    assert list(reasons()) == [labels]
    exporter.set_accounts([AccountView("a", "cooling", 0, 2, "rate_limited (retry_after=60s): usage limit")])
    assert [dict(x)["reason_class"] for x in reasons()] == ["rate_limited"]
    exporter.set_accounts([AccountView("a", "healthy", 0, 2, "enabled by ops: new key")])
    assert reasons() == {}


def test_an_open_circuit_reports_the_failure_that_opened_it(exporter: MetricsExporter) -> None:
    reasons = lambda: [dict(labels) for (name, labels), _ in scrape(exporter).items()  # noqa: E731
                       if name == "raybench_circuit_reason_info"]
    exporter.set_circuit("backend:daytona", True, "capacity",
                         "Daytona sandbox 3f2a9c1e-beef-4c2d-9a1b-0123456789ab still creating after 15s")
    assert reasons() == [{"run": exporter.run_id, "scope": "backend:daytona", "failure_class": "capacity",
                          "reason": "daytona sandbox ID still creating after Ns"}]
    exporter.set_circuit("backend:daytona", False)
    assert reasons() == [] and value(scrape(exporter), "raybench_circuit_open", run=exporter.run_id,
                                     scope="backend:daytona") == 0


def test_unknown_account_state_is_rejected(exporter: MetricsExporter) -> None:
    with pytest.raises(ValueError, match="unknown state"):
        exporter.set_accounts([AccountView("acct-a", "asleep", 0, 1)])  # type: ignore[arg-type]


def test_gauges_set_by_the_driver(exporter: MetricsExporter) -> None:
    exporter.set_healthy_capacity(12)
    exporter.set_sandboxes("docker", {"running": 3, "creating": 1})
    exporter.set_circuit("account:acct-a", True)
    exporter.set_circuit("backend:docker", False)
    exporter.set_halted(True)
    exporter.set_finished()
    exporter.rate_limited("acct-a")
    exporter.rate_limited("acct-a", source="sandbox")
    s = scrape(exporter)
    assert value(s, "raybench_healthy_capacity", run=RUN) == 12
    assert value(s, "raybench_sandboxes", backend="docker", state="running") == 3
    assert value(s, "raybench_sandboxes", backend="docker", state="deleting") == 0
    assert value(s, "raybench_circuit_open", run=RUN, scope="account:acct-a") == 1
    assert value(s, "raybench_circuit_open", run=RUN, scope="backend:docker") == 0
    assert value(s, "raybench_halted", run=RUN) == 1
    assert value(s, "raybench_run_finished", run=RUN) == 1
    assert value(s, "raybench_rate_limit_signals_total", account="acct-a", source="provider") == 1
    assert value(s, "raybench_rate_limit_signals_total", account="acct-a", source="sandbox") == 1
    exporter.set_halted(False)
    exporter.set_circuit("account:acct-a", False)
    s = scrape(exporter)
    assert value(s, "raybench_halted", run=RUN) == 0
    assert value(s, "raybench_circuit_open", run=RUN, scope="account:acct-a") == 0


# -- pace, computed at scrape time ---------------------------------------------------------


def test_pace_comes_from_valid_rows_only(exporter: MetricsExporter, clock: FakeClock) -> None:
    clock.now = T0 + 600
    for i in range(1, 11):  # one a minute, the last one now
        finish(exporter, at=T0 + 60 * i)
    for i in range(20):  # failures and running cells never count
        finish(exporter, valid=False, outcome="failed", failure_class="provider", at=T0 + i)
        exporter.attempt_started("baseline", "acct-a", "docker")
    s = scrape(exporter)
    assert value(s, "raybench_pace_rows_per_minute", run=RUN, window="5m") == pytest.approx(1.0)
    assert value(s, "raybench_pace_rows_per_minute", run=RUN, window="15m") == pytest.approx(1.0)
    assert value(s, "raybench_pace_rows_per_minute", run=RUN, window="60m") == pytest.approx(1.0)


def test_pace_decays_between_events(exporter: MetricsExporter, clock: FakeClock) -> None:
    # The driver reports nothing for an hour; the scrape still shows the pace falling.
    clock.now = T0 + 600
    for i in range(10):
        finish(exporter, at=T0 + 60 * i)
    clock.now += 3600
    s = scrape(exporter)
    for window in ("5m", "15m", "60m"):
        assert value(s, "raybench_pace_rows_per_minute", run=RUN, window=window) == 0


def test_a_closed_session_has_a_phase_and_no_estimate(exporter: MetricsExporter, clock: FakeClock) -> None:
    # A paused run's final figures (served by its linger) keep the pace it had and drop the
    # finish estimate and deadline gap, as `status` does: one rule, PaceSnapshot.history.
    exporter.set_cells({"pending": 10})
    exporter.set_deadline(clock.now + 3600)
    for _ in range(10):
        clock.now += 30
        finish(exporter, at=clock.now)
    s = scrape(exporter)
    assert value(s, "raybench_run_phase", run=RUN, phase="running") == 1
    assert value(s, "raybench_finish_estimate_seconds", run=RUN) is not None
    exporter.set_finished(True, "paused")
    s = scrape(exporter)
    assert {p: value(s, "raybench_run_phase", run=RUN, phase=p) for p in RUN_PHASES} == {
        "running": 0, "paused": 1, "stopped": 0, "finished": 0}
    assert value(s, "raybench_pace_rows_per_minute", run=RUN, window="5m") == pytest.approx(2.0)
    assert "raybench_finish_estimate_seconds" not in names(s)
    assert "raybench_deadline_gap_rows" not in names(s)


def test_deadline_gauges(exporter: MetricsExporter, clock: FakeClock) -> None:
    exporter.set_cells({"pending": 38, "running": 2, "valid": 30})
    for _ in range(30):  # 2 rows/minute for 15 minutes
        clock.now += 30
        finish(exporter, at=clock.now)
    exporter.set_deadline(clock.now + 600)
    s = scrape(exporter)
    assert value(s, "raybench_required_pace_rows_per_minute", run=RUN) == pytest.approx(4.0)
    assert value(s, "raybench_finish_estimate_seconds", run=RUN) == pytest.approx(1200)
    assert value(s, "raybench_deadline_gap_rows", run=RUN) == 20

    snap = exporter.refresh()
    assert snap.deadline_gap_rows == 20
    assert snap.rows_per_minute["15m"] == pytest.approx(2.0)
    # Past the deadline no pace meets it: no required pace (never +Inf); the gap says it all.
    late = exporter.refresh(clock.now + 600)
    assert late.required_rows_per_minute is None and late.deadline_gap_rows == 40

    exporter.set_deadline(None)
    s = scrape(exporter)
    assert "raybench_required_pace_rows_per_minute" not in names(s)
    assert "raybench_deadline_gap_rows" not in names(s)
    assert value(s, "raybench_finish_estimate_seconds", run=RUN) == pytest.approx(1200)


def test_scrapes_and_events_from_many_threads(exporter: MetricsExporter, clock: FakeClock) -> None:
    def feed() -> None:
        for _ in range(200):
            finish(exporter, at=clock.now)

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        scrape(exporter)
    for t in threads:
        t.join()
    s = scrape(exporter)
    assert value(s, "raybench_valid_rows_total", run=RUN, arm="baseline") == 800
    assert exporter.refresh().rows_per_minute["5m"] == pytest.approx(800)
