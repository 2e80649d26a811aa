"""What the receipt says an operator confirms: cells as tasks x arms x reps, the task list,
the estimate (or "no history"), every term once, nothing listed twice."""

from __future__ import annotations

import re
from pathlib import Path

from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli.app import app
from ray_bench.commands.receipt_terms import GLOSSARY


def test_the_receipt_counts_reps_lists_tasks_and_explains_its_terms(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", reps=2)
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")
    receipt = (planned.run_root / "receipt.md").read_text()
    assert "- cells: 32 = 8 tasks x 2 arms x 2 reps" in receipt
    tasks = re.findall(r"^- `([a-z0-9-]+)` \(4 cells\)$", receipt, re.M)
    assert len(tasks) == 8 and tasks == sorted(tasks)
    assert "- no history: no earlier run of these tasks gave durations" in receipt
    # every term once; "floor" is among them
    for term, _ in GLOSSARY:
        assert receipt.count(f"- **{term}**:") == 1, term
    assert "floor N" in receipt
    # both arms share one agent directory: listed once
    agent_lines = [line for line in receipt.splitlines() if line.startswith("- agent `")]
    assert len(agent_lines) == len(set(agent_lines)) == 1


def test_a_long_task_list_is_collapsed(tmp_path: Path) -> None:
    from ray_bench.commands.receipt_terms import task_lines
    from ray_bench.models.plan import Plan

    suite, accounts = make_suite(tmp_path / "s")
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")
    plan = Plan.model_validate_json((planned.run_root / "launch-plan.json").read_text())
    cells = [c.model_copy(update={"task": f"task-{i:03d}"}) for i, c in enumerate(plan.cells * 4)]
    lines = task_lines(plan.model_copy(update={"cells": cells}))
    assert len(lines) == 16 and lines[10] == "- ... 49 more (the plan file lists every task)"


def test_plan_task_and_limit_make_a_quick_trial(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s")
    base = ["plan", "--suite", str(suite), "--accounts", str(accounts), "--runs-dir", str(tmp_path / "runs")]
    one = CliRunner().invoke(app, [*base, "--run-id", "one", "--task", "hello-world", "--task", "sum-list"])
    assert one.exit_code == 0, one.output
    assert "planned 4 cells" in one.stderr
    limited = CliRunner().invoke(app, [*base, "--run-id", "lim", "--limit", "3"])
    assert limited.exit_code == 0, limited.output
    assert "planned 6 cells" in limited.stderr
    bad = CliRunner().invoke(app, [*base, "--run-id", "bad", "--task", "no-such-task"])
    assert bad.exit_code == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "no-such-task" in bad.stderr
    assert not (tmp_path / "runs" / "bad").exists()


def test_version() -> None:
    from ray_bench import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"ray-bench {__version__}"


def test_with_history_the_receipt_estimates_the_makespan_from_the_simulator(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", reps=2)
    tasks = sorted(p.name for p in (tmp_path / "s" / "tasks").iterdir())
    history = {t: 600.0 for t in tasks[:6]}  # ten minutes a cell, known for six of eight tasks
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1", history=history)
    receipt = (planned.run_root / "receipt.md").read_text()
    assert "- history: durations of 6 of 8 tasks from earlier runs" in receipt
    found = re.search(r"- estimated makespan: ([0-9.]+) h at capacity (\d+)", receipt)
    assert found, receipt
    # 32 ten-minute cells on the plan's capacity: at least the work divided by the slots
    hours, capacity = float(found.group(1)), int(found.group(2))
    assert hours >= 32 * 600 / 3600 / capacity * 0.9
    assert "- estimated cost: no cost history" in receipt


def test_the_estimate_names_the_dollar_limits_it_cannot_model(tmp_path: Path) -> None:
    from ray_bench.commands.receipt_terms import estimate_lines
    from ray_bench.scheduler.order import CellRef
    from ray_bench.sim.driven import plan_for
    from ray_bench.sim.workload import Workload, parse_spec

    spec = parse_spec({"suite": {"tasks": 2, "arms": ["a", "b"]},
                       "durations": {"lognormal": {"median_s": 60, "sigma": 0}},
                       "accounts": [{"name": "x", "max_concurrent": 2, "spend_usd": 5.0,
                                     "window": {"hours": 5, "max_usd": 2.0}}]})
    cells = [CellRef(f"t{t}/{a}/1", f"t{t}", a, 1) for t in range(2) for a in ("a", "b")]
    lines = estimate_lines(plan_for(spec, Workload(cells, {c.cell_id: 60.0 for c in cells}, {"t0": 60.0, "t1": 60.0})))
    assert any(line.startswith("- estimated makespan:") for line in lines), lines
    assert "- the estimate leaves out x window $2, x budget $5: no cost history" in "\n".join(lines)


def test_the_receipt_warns_when_the_host_reserves_exceed_the_host(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", host_reserve_mb=1 << 30, host_reserve_disk_mb=1 << 40)
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")
    receipt = (planned.run_root / "receipt.md").read_text()
    assert re.search(r"^- host_reserve_mb 1073741824 MiB is not below this host's memory \(\d+ MiB\)", receipt, re.M)
    assert re.search(r"^- host_reserve_disk_mb 1099511627776 MiB is not below the disk at ", receipt, re.M)


def test_reserve_warnings_against_total_and_available() -> None:
    from ray_bench.plan.compile import reserve_warnings
    from ray_bench.sandboxes.host import HostResources

    host = HostResources(memory_mb=8000, cpus=2.0, available_mb=3000)
    assert reserve_warnings(1024, 1024, host, 50_000, 20_000, "/tmp") == []
    low = reserve_warnings(4000, 30_000, host, 50_000, 20_000, "/tmp")
    assert [w.split(" MiB is ")[1].split(" (")[0] for w in low] == [
        "above the memory available now", "above the free disk at /tmp"]
    high = reserve_warnings(8000, 50_000, host, 50_000, 20_000, "/tmp")
    assert len(high) == 2 and all("not below" in w and "lower it" in w for w in high)
    assert reserve_warnings(0, 0, host, 50_000, 0, "/tmp") == []  # 0 switches the disk check off


def test_the_receipt_names_every_account_without_a_spend_budget(tmp_path: Path) -> None:
    accounts = [{"name": n, "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                 "limits": {"max_concurrent": 1, **({"spend_usd": 5.0} if n == "acct-b" else {})}}
                for n in ("acct-c", "acct-b", "acct-a", "acct-d")]
    suite, accounts_path = make_suite(tmp_path / "s", accounts=accounts)
    planned = plan_run(suite=suite, accounts=accounts_path, runs_dir=tmp_path / "runs", run_id="r1")
    receipt = (planned.run_root / "receipt.md").read_text()
    assert ("- accounts acct-c, acct-a and acct-d have no spend budget and the suite no spend limit"
            in receipt.splitlines())


def test_the_receipt_is_terminal_safe_and_names_the_real_plan_path(tmp_path: Path) -> None:
    """An arm command with ESC/OSC bytes, a newline and a pipe stays one escaped table row, and
    the confirm line names the plan under --runs-dir (issue 28 item 10)."""
    hostile = "sh agent.sh\x1b[2K\x1b]0;t\x07\n| evil | variant | `curl x | sh` | 1s | - |"
    arms = [{"name": "baseline", "role": "baseline", "command": hostile},
            {"name": "mcp", "role": "variant", "command": "sh agent.sh"}]
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], arms=arms)
    runs = tmp_path / "elsewhere"
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="r1")
    receipt = (planned.run_root / "receipt.md").read_text()
    assert "\x1b" not in receipt and "\x07" not in receipt
    assert "\\x1b[2K" in receipt and "\\n" in receipt
    def rows(section: str) -> list[str]:
        text = receipt.split(f"## {section}\n")[1].split("\n## ")[0]
        return [line for line in text.splitlines() if line.startswith("| ") and ("agent.sh" in line)]

    arms_rows, diff_rows = rows("Arms"), rows("What each arm changes from the baseline")
    assert len(arms_rows) == 2 and len(diff_rows) == 1  # the newline forged no row of its own
    # the pipes inside the command are escaped: the rows still have their tables' 5 and 4 columns
    assert len(re.split(r"(?<!\\)\|", arms_rows[0])) == 7
    assert len(re.split(r"(?<!\\)\|", diff_rows[0])) == 6
    confirm = f"ray-bench execute --plan {runs.resolve()}/r1/launch-plan.json --confirm {planned.identity}"
    assert confirm in receipt and "runs/r1/launch-plan.json" not in receipt.split("## Confirm")[1]


def test_the_receipt_shows_keep_workspace_per_arm_and_its_share_of_the_artifact_cap(tmp_path: Path) -> None:
    fast = {"SCRIPTED_MIN_SEC": "0", "SCRIPTED_MAX_SEC": "0"}
    arms = [{"name": "baseline", "role": "baseline", "command": "true", "env": fast},
            {"name": "mcp", "role": "variant", "command": "true", "env": fast, "keep_workspace": True}]
    suite, accounts = make_suite(tmp_path / "s", reps=3, arms=arms, artifact_cap_mb=16)
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")
    receipt = (planned.run_root / "receipt.md").read_text()
    section = receipt.split("## Kept workspaces (for `ray-bench regrade`)\n\n", 1)[1].split("\n\n", 1)[0]
    rows = section.splitlines()
    assert rows[0] == "| arm | keep_workspace | cells | what it costs against the artifact cap (16 MiB per attempt) |"
    assert rows[2] == "| baseline | no | 24 | none: a changed tests/ needs the agent run again |"
    assert rows[3].startswith("| mcp | yes | 24 | the workdir's tarball shares the 16 MiB with the attempt's logs; "
                              "at most 384 MiB over 24 cells; one over what its logs leave is not kept (rerun) |")
    assert len(rows) == 4
