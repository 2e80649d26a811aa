"""`ray-bench quickstart` runs any number of times on one machine: its demo accounts' spend,
windows and health stay with each quickstart's own state root (ray_bench/cli/quickstart.py), not in
the machine's (~/.ray-bench), where their lifetime budgets (spend_usd: 2.5) ran out after about
five quickstarts and every later one stopped at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.ray_local import TEST_ROUTES, set_test_routes, shared_address

from ray_bench.accounts.core import AccountCore, Admit, Refusal, RefusalReason
from ray_bench.accounts.store import FILE, AccountStore
from ray_bench.cli.quickstart import _run_id, example_dir, state_root
from ray_bench.config.loader import load_accounts
from ray_bench.scheduler.spend import DEFAULT_CELL_USD

#: The most one quickstart can charge an account: 16 of its 32 cells (2 accounts, 2 slots each
#: could take more, so say all 32) at the scripted agent's top price, $0.059 a cell.
MOST_PER_RUN = 32 * 0.059
RAY_BENCH = str(Path(sys.executable).with_name("ray-bench"))


def _quickstart_accounting(state_roots: list[Path]) -> list[bool]:
    """For each run's state root in turn: would the demo accounts admit the run's first cell (as
    a new admission actor restored from that root sees them), then charge the run's most."""
    accounts = load_accounts(example_dir() / "accounts.yaml").accounts
    admitted = []
    for root in state_roots:
        store = AccountStore(root)
        now = time.time()
        ok = True
        for account in accounts:
            core = AccountCore(account.name, account.limits, now=now)
            store.restore(core, now)
            ok &= isinstance(core.can_admit(now, usd=DEFAULT_CELL_USD), Admit)
            store.record_spend(account.name, now, MOST_PER_RUN)
        store.close()
        admitted.append(ok)
    return admitted


def test_ten_quickstarts_in_one_directory_each_start_with_the_demo_budgets_whole(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    roots = []
    for _ in range(10):
        run_id = _run_id(runs)
        (runs / run_id).mkdir(parents=True)  # the run root plan_run makes
        roots.append(state_root(tmp_path, run_id))
    assert len(set(roots)) == 10  # two quickstarts in one second get two ids
    assert _quickstart_accounting(roots) == [True] * 10


def test_on_one_shared_state_root_the_demo_budgets_would_run_out() -> None:
    # the control: what the machine's state root did (the test above could fail)
    with tempfile.TemporaryDirectory() as shared:
        admitted = _quickstart_accounting([Path(shared)] * 10)
    assert admitted[0] and not all(admitted)
    core = AccountCore("demo-a", load_accounts(example_dir() / "accounts.yaml").accounts[0].limits)
    core.spent_usd = 2.5
    assert core.can_admit(0.0) == Refusal(RefusalReason.BUDGET, None)


def _check_end_to_end(stdout: str, workdir: Path, env: dict[str, str]) -> None:
    """The first quickstart end to end: its output, report, receipt and `status --json` (checked
    here rather than in a quickstart of its own: each costs a local Ray start and 32 cells)."""
    assert "plan identity: sha256:" in stdout
    assert "ray-bench execute --plan" in stdout and "--confirm sha256:" in stdout
    assert "| baseline | 16 | 16 |" in stdout.replace("  ", " ") or "baseline" in stdout
    (run_root,) = (workdir / "runs").iterdir()
    summary = json.loads((run_root / "run-summary.json").read_text())
    assert summary["counts"]["valid"] == 32 and summary["exit_code"] == 0
    for name in ("report.md", "report.csv", "report.parquet", "receipt.md", "ledger.sqlite"):
        assert (run_root / name).is_file()
    # the report's record sections: staging, executions, exclusions, settlement, model roles
    report = (run_root / "report.md").read_text()
    assert report.startswith(f"# Report: {run_root.name} (staging)")
    for section in ("## Executions", "## Exclusions", "## Settlement", "## Model roles"):
        assert section in report and section in stdout, section
    assert "| baseline | executor | executor | scripted-demo | accounts | local | 1 |" in report
    assert "| baseline | executor | executor | scripted-demo |" in (run_root / "receipt.md").read_text()
    status = subprocess.run([RAY_BENCH, "status", str(run_root), "--json"], env=env, capture_output=True,
                            text=True, timeout=60, check=True)
    assert json.loads(status.stdout)["counts"]["valid"] == 32


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(1200)  # three whole quickstarts and the end-to-end checks; a loaded host is slow
def test_three_quickstarts_on_one_machine_all_finish(tmp_path: Path) -> None:
    set_test_routes()
    machine = tmp_path / "machine-state"  # the machine's state root, shared by every run
    env = {**os.environ, **TEST_ROUTES, "RAY_BENCH_STATE_ROOT": str(machine)}
    # The first quickstart is the laptop's (a local Ray of its own, checked end to end); the next
    # two join the session's shared Ray, which saves two local starts (~40 s each here). Where Ray
    # runs does not touch what is checked (each run's demo state in its own state root), and on a
    # cluster the detached admission actors outlive each quickstart: named by state root
    # (onray.admission.admission_name), each run still starts from whole demo budgets.
    for n in range(3):
        joined = ["--address", shared_address()] if n else []
        done = subprocess.run([RAY_BENCH, "quickstart", "--workdir", str(tmp_path / "qs"), *joined], env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"quickstart {n + 1}: " + done.stdout[-2000:] + done.stderr[-2000:]
        if n == 0:
            _check_end_to_end(done.stdout, tmp_path / "qs", env)
    runs = sorted((tmp_path / "qs" / "runs").iterdir())
    assert len(runs) == 3
    for run in runs:
        summary = json.loads((run / "run-summary.json").read_text())
        assert summary["counts"]["valid"] == 32 and summary["exit_code"] == 0
        assert (state_root(tmp_path / "qs", run.name) / FILE).is_file()  # the demo spend is here
    assert not (machine / FILE).exists()  # and not on the machine's
