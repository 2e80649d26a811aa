"""The gate's pure parts: which accounts a login's expiry rules out, and why a run that can
admit nothing without an operator says so (the driver stops on it instead of idling)."""

from __future__ import annotations

import json
from pathlib import Path

from ray_bench.models.accounts import Account
from ray_bench.models.plan import PlanCell
from ray_bench.scheduler.admission import CoreGate, ExpiryWatch
from ray_bench.scheduler.core import LeaseRequest

NOW = 1_800_000_000.0


def _login(tmp_path: Path, name: str, expires_in_sec: float) -> Path:
    home = tmp_path / name
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(json.dumps(
        {"claudeAiOauth": {"accessToken": "x" * 20, "expiresAt": int((NOW + expires_in_sec) * 1000)}}))
    return home


def _account(name: str, home: Path | None = None) -> Account:
    route = {"home": str(home)} if home else {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}
    return Account.model_validate({"name": name, "route": route, "limits": {"max_concurrent": 2}})


def test_expiry_refuses_cells_that_would_outlive_the_login(tmp_path: Path) -> None:
    accounts = [_account("soon", _login(tmp_path, "soon", 600)), _account("gone", _login(tmp_path, "gone", -60)),
                _account("key")]
    watch = ExpiryWatch(accounts, clock=lambda: NOW)

    assert watch.refusal("soon", 300, NOW) is None  # a 5-minute cell still fits
    assert watch.refusal("soon", 3600, NOW) == "login expires in 10 min, within a cell's 1.0 h limit"
    assert watch.refusal("gone", 0, NOW) == "login expired"
    assert watch.refusal("key", 10 * 3600, NOW) is None  # no HOME login, nothing expires
    assert not watch.admits("soon", 3600, NOW) and watch.admits("soon", 300, NOW)


def test_a_run_whose_logins_expire_before_a_cell_could_finish_is_stalled(tmp_path: Path) -> None:
    gate = CoreGate([_account("soon", _login(tmp_path, "soon", 600))], now=NOW)

    assert gate.stalled(NOW, horizon_sec=2 * 3600) == "soon login expires in 10 min, within a cell's 2.0 h limit"
    assert gate.stalled(NOW, horizon_sec=60) is None  # short cells can still start


def test_one_usable_account_is_not_a_stall(tmp_path: Path) -> None:
    gate = CoreGate([_account("soon", _login(tmp_path, "soon", 600)), _account("key")], now=NOW)
    assert gate.stalled(NOW, horizon_sec=2 * 3600) is None


def test_an_unjudged_attempt_charges_its_account_and_teaches_its_health_nothing() -> None:
    gate = CoreGate([_account("key")], now=NOW)
    cell = PlanCell(id="c", task="t", arm="a", rep=0, backend="local")
    for lease in ("cancelled", "never-started"):
        assert gate.acquire_many([LeaseRequest(lease, cell, horizon_sec=60)], NOW) == {lease: "key"}
    core = gate.cores["key"]
    before = core.health.state
    gate.release("key", "cancelled", None, 0.3, NOW + 1)  # a cancelled attempt's spend (issue 25)
    gate.release("key", "never-started", None, 0.0, NOW + 1)
    assert core.spent_usd == 0.3 and core.leases() == [] and core.health.state is before
