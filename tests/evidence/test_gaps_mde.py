"""``gaps --target-mde D``: the repetitions a paired delta needs, from the rows already there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.earlier_runs import earlier_rewards
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli import app
from ray_bench.errors import SelectionError
from ray_bench.evidence.gaps import target_for_mde
from ray_bench.plan.power import ASSUMED, plan_power, reps_needed

TASKS = ["hello-world", "sum-list", "fizzbuzz"]


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS, reps=2)
    first = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="first")
    # the variant solves what the baseline fails, but one repetition each of two tasks ties
    rewards = {(t, arm, rep): (1.0 if arm == "mcp" else 0.0) for t in TASKS for arm in ("baseline", "mcp")
               for rep in (1, 2)}
    rewards[("sum-list", "baseline", 2)] = rewards[("fizzbuzz", "baseline", 1)] = 1.0
    earlier_rewards(first.run_root, rewards)
    return suite, tmp_path / "runs"


def test_target_mde_uses_the_runs_spread(world: tuple[Path, Path]) -> None:
    suite, runs = world
    mde = target_for_mde(suite, [runs], 0.5)
    assert mde.spread is not None and mde.spread.pairs == 6 and mde.tasks == 3
    assert mde.reps == reps_needed(mde.spread, 3, 0.5)
    assert plan_power(mde.spread, 3, mde.reps).mde <= 0.5
    # the measured spread is narrower than the assumed one: fewer repetitions
    assumed = reps_needed(ASSUMED, 3, 0.5)
    assert assumed is not None and mde.reps < assumed


def test_gaps_cli_plans_the_repetitions_of_a_target_mde(world: tuple[Path, Path], tmp_path: Path) -> None:
    suite, runs = world
    out = tmp_path / "sel" / "mde.json"
    result = CliRunner().invoke(app, ["gaps", "--suite", str(suite), "--runs", str(runs), "--target-mde", "0.5",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    reps = target_for_mde(suite, [runs], 0.5).reps
    assert f"--target-mde 0.5: {reps} repetitions per task and arm over 3 tasks" in result.output
    doc = json.loads(out.read_text())
    assert doc["target_reps"] == reps and doc["tasks"][0]["reps"] == list(range(3, reps + 1))


@pytest.mark.parametrize(("args", "message"), [
    (["--target", "3", "--target-mde", "0.5"], "exactly one of --target and --target-mde"),
    ([], "exactly one of --target and --target-mde"),
    (["--target-mde", "0"], "is not a delta in reward"),
    (["--target-mde", "0.000001"], "out of reach with 3 tasks"),
])
def test_gaps_target_mde_bad_input_is_one_line_and_writes_nothing(
        world: tuple[Path, Path], tmp_path: Path, args: list[str], message: str) -> None:
    suite, runs = world
    out = tmp_path / "sel" / "mde.json"
    result = CliRunner().invoke(app, ["gaps", "--suite", str(suite), "--runs", str(runs), *args,
                                      "--out", str(out)])
    assert result.exit_code == 2 and message in result.output
    assert not out.parent.exists()


def test_target_mde_refuses_a_delta_outside_reward(world: tuple[Path, Path]) -> None:
    suite, runs = world
    with pytest.raises(SelectionError, match=r"not a delta in reward: a mean paired delta lies within \+-1 "
                       r"\(the rewards range 0 to 1\)"):
        target_for_mde(suite, [runs], 1.5)
