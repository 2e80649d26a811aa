"""`ray-bench simulate --plan` models every limit of the plan's accounts; dollar limits need a
cost (`--usd-per-hour`), and without one it says which it leaves out."""

from __future__ import annotations

import json
from pathlib import Path

from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli import app


def test_simulate_prices_the_dollar_window_only_with_a_cost(tmp_path: Path) -> None:
    accounts = [{"name": "x", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                 "limits": {"max_concurrent": 8, "window": {"hours": 1, "max_usd": 4.0}}}]
    suite, accounts_file = make_suite(tmp_path / "s", accounts=accounts, spend_limit_usd=1000.0)
    planned = plan_run(suite=suite, accounts=accounts_file, runs_dir=tmp_path / "runs", run_id="r1")
    plan = str(planned.run_root / "launch-plan.json")
    args = ["simulate", "--plan", plan, "--median-min", "10", "--sigma", "0", "--json"]
    runner = CliRunner()
    free = runner.invoke(app, args)
    priced = runner.invoke(app, [*args, "--usd-per-hour", "6"])
    assert free.exit_code == 0 and priced.exit_code == 0, free.output + priced.output
    assert "not modelled without --usd-per-hour: x window $4, run limit $1000" in free.stderr
    assert "not modelled" not in priced.stderr
    hours = {name: json.loads(r.stdout)["policies"]["adaptive"]["makespan_h"] for name, r in
             (("free", free), ("priced", priced))}
    # 16 ten-minute cells ($1 each at $6/h) on 8 slots: two waves, or an hour's wait between them
    assert hours["free"] < 0.5 and hours["priced"] > 1.0
