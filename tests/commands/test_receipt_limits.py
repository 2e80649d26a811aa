"""The receipt models every limit the simulator models (issue 56): the dollar windows priced by
the costs earlier runs recorded, an account whose login has already expired left out of capacity
with a warning, and (tests/plan/test_daytona_pool.py) the backend limit that binds."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from support.earlier_runs import earlier_rows
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli.app import app
from ray_bench.commands.verify import verify_plan
from ray_bench.plan.history import costs_from_runs
from ray_bench.plan.store import PLAN_FILE, load_plan_file
from ray_bench.sim.from_plan import estimate_makespan_h, spec_from_plan

TASKS = ["hello-world", "sum-list", "fizzbuzz"]
#: One account, two cells at once, $2 per rolling hour: at $6 per cell-hour a 10-minute cell is $1.
WINDOWED = [{"name": "acct-a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
             "limits": {"max_concurrent": 2, "window": {"hours": 1, "max_usd": 2.0}}}]


def _estimate(receipt: str) -> str:
    return receipt.split("## Estimate\n", 1)[1].split("\n## ", 1)[0]


def test_costs_recorded_by_history_runs_price_the_dollar_window(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS, accounts=WINDOWED)
    runs = tmp_path / "runs"
    first = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="first")
    earlier_rows(first.run_root, {(t, arm): [600.0] for t in TASKS for arm in ("baseline", "mcp")}, usd_per_hour=6.0)
    assert sorted(set(costs_from_runs([runs]).values())) == [1.0]

    # `plan --history` reads durations and costs from the same runs
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts), "--runs-dir",
                                      str(runs), "--run-id", "second", "--history", str(runs / "first")])
    assert result.exit_code == 0, result.output
    plan, identity = load_plan_file(runs / "second" / PLAN_FILE)
    assert {t.expected_usd for t in plan.tasks} == {1.0}
    estimate = _estimate((runs / "second" / "receipt.md").read_text())
    assert "no cost history" not in estimate and "leaves out" not in estimate
    found = re.search(r"- estimated cost: \$([0-9.]+) at \$6\.00 per running cell-hour", estimate)
    assert found and float(found.group(1)) == 6.0, estimate  # six $1 cells
    assert "acct-a window $2 modelled at that price" in estimate
    # the window binds: two cells ($2) per rolling hour, so three hour-long waits, not 3 x 10 min
    hours = float(re.search(r"estimated makespan: ([0-9.]+) h", estimate).group(1))  # type: ignore[union-attr]
    unpriced = estimate_makespan_h(plan, usd_per_hour=0.0)
    assert unpriced is not None and unpriced <= 0.55 and hours >= 2.0
    verify_plan(plan, identity, runs / "second" / PLAN_FILE)  # execute re-renders the same receipt


def test_history_without_recorded_costs_says_so(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS, accounts=WINDOWED)
    runs = tmp_path / "runs"
    first = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="first")
    earlier_rows(first.run_root, {(t, "baseline"): [600.0] for t in TASKS})
    ledger_costs = costs_from_runs([runs])
    assert set(ledger_costs.values()) == {0.0}  # recorded, and zero: a scripted agent's
    second = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="second",
                      history={t: 600.0 for t in TASKS})  # durations only (the API's task-id history)
    estimate = _estimate((second.run_root / "receipt.md").read_text())
    assert "- the estimate leaves out acct-a window $2: no cost history" in estimate
    assert "- estimated cost: no cost history" in estimate


def _home(root: Path, expires_in_sec: float, refresh: bool = False) -> str:
    home = root / "home-b"
    (home / ".claude").mkdir(parents=True)
    oauth: dict[str, Any] = {"accessToken": "x" * 20, "expiresAt": int((time.time() + expires_in_sec) * 1000)}
    if refresh:
        oauth["refreshToken"] = "y" * 20
    (home / ".claude" / ".credentials.json").write_text(json.dumps({"claudeAiOauth": oauth}))
    return str(home)


def _two_accounts(home: str) -> list[dict[str, Any]]:
    return [{"name": "acct-a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}, "limits": {"max_concurrent": 3}},
            {"name": "acct-b", "route": {"home": home}, "limits": {"max_concurrent": 4}}]


def test_an_expired_login_is_left_out_of_capacity_with_one_warning(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS, accounts=_two_accounts(_home(tmp_path, -3600)))
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1",
                       history={t: 600.0 for t in TASKS})
    plan, identity = load_plan_file(planned.run_root / PLAN_FILE)
    assert plan.capacity.accounts_concurrency == 3 and plan.capacity.effective == 3
    assert set(plan.capacity.left_out) == {"acct-b"}
    warned = [w for w in planned.warnings if "login" in w]
    assert len(warned) == 1 and "login expired at" in warned[0] and "left out of capacity" in warned[0]
    receipt = (planned.run_root / "receipt.md").read_text()
    assert "- accounts: acct-a 3 = 3 concurrent sessions" in receipt
    assert "- account acct-b left out: its HOME login expired at" in receipt
    assert "at capacity 3 (acct-b left out)" in _estimate(receipt)
    # the simulator's spec is the receipt's: no cell runs on the expired account
    spec = spec_from_plan(plan, durations={"lognormal": {"median_s": 60, "sigma": 0}})
    assert [a["name"] for a in spec["accounts"]] == ["acct-a"]
    verify_plan(plan, identity, planned.run_root / PLAN_FILE)


def test_a_login_that_refreshes_or_has_not_expired_counts(tmp_path: Path) -> None:
    for name, home in (("refresh", _home(tmp_path / "a", -3600, refresh=True)), ("later", _home(tmp_path / "b", 3600))):
        suite, accounts = make_suite(tmp_path / name, tasks=TASKS, accounts=_two_accounts(home))
        planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / name / "runs", run_id="r1")
        plan, _ = load_plan_file(planned.run_root / PLAN_FILE)
        assert plan.capacity.accounts_concurrency == 7 and not plan.capacity.left_out
        assert not [w for w in planned.warnings if "login" in w]
