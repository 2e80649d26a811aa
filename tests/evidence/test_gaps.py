"""gaps -> selection files -> one-arm plans through the pairing guard, on a ledger made by a
real run (the driver and runner in this process, the local backend, no Ray) in which one arm
fails on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.runs import plan_and_run_here as plan_and_run
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli import app
from ray_bench.config.selection import load_selection
from ray_bench.errors import PairingGuardError
from ray_bench.evidence.decisions import record_exclusion
from ray_bench.evidence.gaps import find_gaps, write_selections
from ray_bench.plan.compile import UNPAIRED_ENV
from ray_bench.plan.store import load_plan_file

pytestmark = [pytest.mark.slow]

SOLVE = 'sh "$SOLUTION_DIR/solve.sh"'


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("gaps")
    suite, accounts = make_suite(
        tmp / "s",
        tasks=["hello-world", "sum-list"],
        reps=1,
        preflight_cells=0,
        max_attempts=1,
        backends={"local": {"max_sandboxes": 4, "options": {"root": str(tmp / "sbx")}}},
        arms=[
            {"name": "baseline", "role": "baseline", "command": SOLVE, "expose_solution": True},
            {"name": "mcp", "role": "variant", "command": "no-such-agent-binary --run"},
        ],
    )
    outcome, _ = plan_and_run(suite, accounts, tmp / "runs")
    assert outcome.counts["valid"] == 2 and outcome.counts["failed"] == 2
    return suite, accounts, tmp / "runs"


def test_gaps_split_both_arm_and_one_arm(world: tuple[Path, Path, Path], tmp_path: Path) -> None:
    suite, _, runs = world
    gaps = find_gaps(suite, [runs], target=2)
    assert gaps.valid == {
        ("hello-world", "baseline"): [1],
        ("hello-world", "mcp"): [],
        ("sum-list", "baseline"): [1],
        ("sum-list", "mcp"): [],
    }
    assert gaps.both == {"hello-world": [2], "sum-list": [2]}
    assert gaps.one_arm == {"mcp": {"hello-world": [1], "sum-list": [1]}}
    written = write_selections(gaps, tmp_path / "sel" / "fill.json")
    assert [p.name for p in written] == ["fill.json", "fill-mcp-only.json"]
    both = load_selection(tmp_path / "sel" / "fill.json")
    assert [(e.task_id, e.reps, e.arms) for e in both.entries] == [
        ("hello-world", (2,), None),
        ("sum-list", (2,), None),
    ]
    one = json.loads((tmp_path / "sel" / "fill-mcp-only.json").read_text())
    assert one["tasks"][0] == {
        "task_id": "hello-world",
        "benchmark": "tasks",
        "task_dir": "tasks/hello-world",
        "reps": [1],
        "arms": ["mcp"],
    }


def test_an_excluded_cell_is_never_proposed(world: tuple[Path, Path, Path], tmp_path: Path) -> None:
    suite, _, runs = world
    record_exclusion(runs / "r1", "hello-world/mcp/1", "the MCP server was down for this cell", by="ana")
    try:
        gaps = find_gaps(suite, [runs], target=2)
        assert gaps.excluded == {("hello-world", "mcp"): [1]}
        # neither the excluded cell nor its repetition's other arm: only sum-list's mcp gap remains
        assert gaps.one_arm == {"mcp": {"sum-list": [1]}}
        assert gaps.both == {"hello-world": [2], "sum-list": [2]}
        written = write_selections(gaps, tmp_path / "sel" / "fill.json")
        one = json.loads((tmp_path / "sel" / "fill-mcp-only.json").read_text())
        assert [t["task_id"] for t in one["tasks"]] == ["sum-list"] and len(written) == 2
        shown = CliRunner().invoke(app, ["gaps", "--suite", str(suite), "--runs", str(runs), "--target", "2",
                                         "--out", str(tmp_path / "cli" / "fill.json")])
        assert shown.exit_code == 0, shown.output
        assert "hello-world: baseline 1/2, mcp 0/2 (excluded, not refilled: mcp rep 1)" in shown.stdout
    finally:
        record_exclusion(runs / "r1", "hello-world/mcp/1", "test done", include=True, by="ana")
    assert find_gaps(suite, [runs], target=2).one_arm == {"mcp": {"hello-world": [1], "sum-list": [1]}}


def test_one_arm_gap_passes_the_guard_and_the_other_is_refused(
    world: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    suite, accounts, runs = world
    gaps = find_gaps(suite, [runs], target=2)
    write_selections(gaps, tmp_path / "fill.json")
    # mcp-only gaps: every task has valid baseline rows in runs/ -> the guard passes
    ok = plan_run(
        suite=suite,
        accounts=accounts,
        runs_dir=tmp_path / "runs",
        run_id="fill-mcp",
        selection=tmp_path / "fill-mcp-only.json",
        arms="full-only",
        counterpart_runs=[runs],
    )
    plan, _ = load_plan_file(ok.run_root / "launch-plan.json")
    assert sorted((c.task, c.arm, c.rep) for c in plan.cells) == [
        ("hello-world", "mcp", 1),
        ("sum-list", "mcp", 1),
    ]
    assert plan.unpaired and not any(UNPAIRED_ENV in w for w in plan.warnings)
    # the same one-arm plan with no counterpart run roots is refused, nothing written
    with pytest.raises(PairingGuardError, match="no valid baseline rows"):
        plan_run(
            suite=suite,
            accounts=accounts,
            runs_dir=tmp_path / "runs",
            run_id="refused",
            selection=tmp_path / "fill-mcp-only.json",
            arms="full-only",
        )
    assert not (tmp_path / "runs" / "refused").exists()
    # a baseline-only plan of the both-arm gaps has no mcp rows to pair with: refused
    with pytest.raises(PairingGuardError, match="no valid mcp rows"):
        plan_run(
            suite=suite,
            accounts=accounts,
            runs_dir=tmp_path / "runs",
            run_id="refused2",
            selection=tmp_path / "fill.json",
            arms="baseline-only",
            counterpart_runs=[runs],
        )


def test_unpaired_bypass_is_a_receipt_warning(
    world: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite, accounts, runs = world
    write_selections(find_gaps(suite, [runs], target=2), tmp_path / "fill.json")
    monkeypatch.setenv(UNPAIRED_ENV, "true")
    result = plan_run(
        suite=suite,
        accounts=accounts,
        runs_dir=tmp_path / "runs",
        run_id="bypass",
        selection=tmp_path / "fill.json",
        arms="baseline-only",
    )
    assert any(UNPAIRED_ENV in w for w in result.warnings)
    receipt = (result.run_root / "receipt.md").read_text()
    assert f"UNPAIRED: {UNPAIRED_ENV}=true bypassed the pairing guard" in receipt


def test_no_gaps_writes_nothing(world: tuple[Path, Path, Path], tmp_path: Path) -> None:
    suite, _, runs = world
    gaps = find_gaps(suite, [runs], target=2)
    gaps.both.clear()
    gaps.one_arm.clear()
    assert gaps.empty and write_selections(gaps, tmp_path / "none.json") == []
    assert list(tmp_path.iterdir()) == []


def test_gaps_reads_a_harbor_job_config_as_plan_does(world: tuple[Path, Path, Path], tmp_path: Path) -> None:
    suite, _, runs = world
    job = suite.parent / "job.yaml"  # Harbor's job config: datasets[].path read against its directory
    job.write_text("datasets:\n  - path: tasks\n    task_names: ['sum-*']\n")
    gaps = find_gaps(suite, [runs], target=2, selection=job)
    assert sorted(gaps.valid) == [("sum-list", "baseline"), ("sum-list", "mcp")]
    assert gaps.both == {"sum-list": [2]} and gaps.one_arm == {"mcp": {"sum-list": [1]}}
    shown = CliRunner().invoke(app, ["gaps", "--suite", str(suite), "--runs", str(runs), "--target", "2",
                                     "--selection-file", str(job), "--out", str(tmp_path / "ok" / "fill.json")])
    assert shown.exit_code == 0, shown.output
    assert "sum-list: baseline 1/2, mcp 0/2" in shown.stdout and "hello-world" not in shown.stdout
    # a task the roots do not hold: one line, exit 2, nothing written
    (tmp_path / "other.txt").write_text("no-such-task\n")
    refused = CliRunner().invoke(app, ["gaps", "--suite", str(suite), "--runs", str(runs), "--target", "2",
                                       "--selection-file", str(tmp_path / "other.txt"),
                                       "--out", str(tmp_path / "no" / "fill.json")])
    assert refused.exit_code == 2 and "'no-such-task' is not under the suite's task roots" in refused.output
    assert not (tmp_path / "no").exists()


def test_gaps_prints_the_plan_commands_that_fill_them(world: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Issue 56: from `gaps` to a plan without a flag the output did not give; the plan's receipt
    names the repetitions it adds."""
    import shlex

    suite, accounts, runs = world
    result = CliRunner().invoke(app, ["gaps", "--suite", str(suite), "--runs", str(runs), "--target", "2",
                                      "--out", str(tmp_path / "sel" / "fill.json")])
    assert result.exit_code == 0, result.output
    commands = [line.removeprefix("next: ") for line in result.stdout.splitlines() if line.startswith("next: ")]
    both, mcp_only = commands
    assert both == shlex.join(["ray-bench", "plan", "--suite", str(suite), "--accounts", str(accounts),
                               "--selection-file", str(tmp_path / "sel" / "fill.json"), "--history", str(runs)])
    assert mcp_only.endswith(f"--full-only --runs {shlex.quote(str(runs))}")
    for run_id, command in (("fill-both", both), ("fill-mcp", mcp_only)):
        planned = CliRunner().invoke(app, [*shlex.split(command)[1:], "--runs-dir", str(tmp_path / "runs"),
                                           "--run-id", run_id])
        assert planned.exit_code == 0, planned.output
    receipt = (tmp_path / "runs" / "fill-both" / "receipt.md").read_text()
    assert "cells: 4 = 2 tasks x 2 arms x 1 reps (adds rep 2)" in receipt
    # rep 1 of mcp is a first repetition: nothing to say
    assert "(adds rep" not in (tmp_path / "runs" / "fill-mcp" / "receipt.md").read_text()


def test_gaps_out_under_the_runs_directory_is_refused(world: tuple[Path, Path, Path]) -> None:
    suite, _, runs = world
    for out in (runs / "NEW" / "launch-plan.json", runs / "gaps.json"):
        result = CliRunner().invoke(app, ["gaps", "--suite", str(suite), "--runs", str(runs), "--target", "2",
                                          "--out", str(out)])
        assert result.exit_code == 2 and result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1 and "under the runs directory" in result.stderr
        assert not out.exists() and not (runs / "NEW").exists()


def test_a_gap_fill_plan_names_the_runs_it_tops_up_and_takes_their_history(
    world: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Issue 56: the gap-fill receipt said "no history" though its lineage ran those tasks
    (`--history` had to be given), and named no run it tops up."""
    from ray_bench.commands.verify import verify_plan

    suite, accounts, runs = world
    write_selections(find_gaps(suite, [runs], target=2), tmp_path / "sel" / "fill.json")
    lineage = json.loads((tmp_path / "sel" / "fill.json").read_text())["tops_up"]
    assert lineage == [str((runs / "r1").resolve())]
    assert load_selection(tmp_path / "sel" / "fill.json").tops_up == tuple(lineage)
    # no --history: the lineage is the history
    planned = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts), "--selection-file",
                                       str(tmp_path / "sel" / "fill.json"), "--runs-dir", str(tmp_path / "runs"),
                                       "--run-id", "fill"])
    assert planned.exit_code == 0, planned.output
    plan, identity = load_plan_file(tmp_path / "runs" / "fill" / "launch-plan.json")
    assert plan.tops_up == lineage and plan.history_from == lineage
    # only the baseline's rows were valid in the lineage: both tasks have its durations
    assert all(t.expected_sec is not None for t in plan.tasks)
    receipt = (tmp_path / "runs" / "fill" / "receipt.md").read_text()
    assert "- tops up 1 run (the lineage `ray-bench gaps` read; " in receipt and f"`{lineage[0]}`" in receipt
    assert f"- history read from 1 earlier run (the lineage it tops up): `{lineage[0]}`" in receipt
    assert "no history" not in receipt and "- history: durations of 2 of 2 tasks" in receipt
    verify_plan(plan, identity, tmp_path / "runs" / "fill" / "launch-plan.json")
    # --history names others: they are read instead of the lineage (here: none of these tasks)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts), "--selection-file",
                                     str(tmp_path / "sel" / "fill.json"), "--runs-dir", str(tmp_path / "runs"),
                                     "--run-id", "fill2", "--history", str(elsewhere)])
    assert other.exit_code == 0, other.output
    receipt = (tmp_path / "runs" / "fill2" / "receipt.md").read_text()
    assert "- tops up 1 run" in receipt and "history read from" not in receipt and "- no history" in receipt
    # a lineage that is gone: one line, exit 2, nothing written
    doc = json.loads((tmp_path / "sel" / "fill.json").read_text())
    (tmp_path / "sel" / "gone.json").write_text(json.dumps({**doc, "tops_up": [str(tmp_path / "no-such-run")]}))
    gone = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts), "--selection-file",
                                    str(tmp_path / "sel" / "gone.json"), "--runs-dir", str(tmp_path / "runs"),
                                    "--run-id", "gone"])
    assert gone.exit_code == 2 and "this gap-fill tops up (its tops_up) is gone" in gone.output
    assert len(gone.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs" / "gone").exists()
