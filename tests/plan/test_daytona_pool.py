"""``plan`` with the Daytona organisation pool: the pool binds under a ``max_sandboxes``, a pool
missing a field and a task bigger than one sandbox may be are bad input at plan time (one
line), and the task's disk (``storage_mb``) counts. No SDK, no service: plan is model-free."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.errors import ConfigError

POOL = {"vcpu": 8, "memory_gib": 64, "disk_gib": 300, "creates_per_minute": 60}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RB_TEST_KEY_A", "x")
    monkeypatch.setenv("RB_TEST_KEY_B", "x")


def _plan(tmp_path: Path, daytona: dict[str, Any], storage_mb: int | None = None) -> dict[str, Any]:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], backend="daytona",
                                 backends={"daytona": daytona})
    if storage_mb is not None:
        toml = tmp_path / "s" / "tasks" / "hello-world" / "task.toml"
        toml.write_text(toml.read_text().replace('workdir = "/app"', f'workdir = "/app"\nstorage_mb = {storage_mb}'))
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="p")
    plan: dict[str, Any] = json.loads((result.run_root / "launch-plan.json").read_text())
    plan["receipt"] = (result.run_root / "receipt.md").read_text()
    return plan


def test_a_vcpu_pool_binds_under_a_larger_max_sandboxes(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"max_sandboxes": 50, "options": {"pool": POOL}, "resources": {"cpus": 2}})
    assert plan["capacity"]["backend_pools"] == {"daytona": 4}  # 8 vCPU / 2, not 50


def test_a_pool_without_creates_per_minute_is_refused_at_plan_time(tmp_path: Path) -> None:
    pool = {k: v for k, v in POOL.items() if k != "creates_per_minute"}
    with pytest.raises(ConfigError) as info:
        _plan(tmp_path, {"max_sandboxes": 5, "options": {"pool": pool}})
    assert "backends.daytona.options.pool.creates_per_minute: Field required" in info.value.line()
    assert "\n" not in info.value.line()


def test_the_tasks_disk_counts_against_the_pool(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"options": {"pool": POOL}}, storage_mb=30 * 1024)
    assert plan["capacity"]["backend_pools"] == {"daytona": 8}  # the 8 vCPU bind before 300 / 30 GiB
    assert "/ 30 GiB disk" in plan["receipt"]
    plan = _plan(tmp_path / "b", {"options": {"pool": {**POOL, "disk_gib": 90}}}, storage_mb=30 * 1024)
    assert plan["capacity"]["backend_pools"] == {"daytona": 3}  # 90 GiB of disk / 30 GiB each


def test_a_task_bigger_than_one_sandbox_may_be_is_refused_in_one_line(tmp_path: Path) -> None:
    pool = {**POOL, "max_sandbox_disk_gib": 10}
    with pytest.raises(ConfigError) as info:
        _plan(tmp_path, {"options": {"pool": pool}}, storage_mb=20 * 1024)
    line = info.value.line()
    assert "task hello-world: asks 20 GiB disk per sandbox; Daytona allows at most 10" in line
    assert "\n" not in line


def test_the_receipt_shows_the_limit_that_binds_not_max_sandboxes(tmp_path: Path) -> None:
    # issue 56: max_sandboxes 8 was shown where the organisation pool's 3 bound
    plan = _plan(tmp_path, {"max_sandboxes": 8, "options": {"pool": {**POOL, "vcpu": 3}}})
    assert plan["capacity"]["backend_pools"] == {"daytona": 3}
    assert plan["capacity"]["backend_binds"] == {"daytona": "organisation pool"}
    receipt = plan["receipt"]
    assert "- `daytona`: pool 3 (organisation pool binds), options pool" in receipt
    assert "fits 3 sandboxes of 1 vCPU / 1024 MiB / 3 GiB disk (its vCPU binds)" in receipt
    assert ("- backend daytona: 3 sandboxes at once, organisation pool binds "
            "(min of organisation pool 3, max_sandboxes 8)") in receipt
    # the other way round: max_sandboxes binds under a larger pool
    plan = _plan(tmp_path / "b", {"max_sandboxes": 2, "options": {"pool": POOL}})
    assert plan["capacity"]["backend_binds"] == {"daytona": "max_sandboxes"}
    assert "- `daytona`: pool 2 (max_sandboxes binds)" in plan["receipt"]
