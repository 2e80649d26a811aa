"""The degeneration watchdog on a real run (plan, the driver and runner in this process, the local
backend): the receipt shows each arm's thresholds; a looping arm's attempts are stopped live,
classed ``behaviour`` with their evidence in the ledger's summaries, use up the cell's attempts
(``max_attempts``) and leave no row; the arm beside it, watched too, is scored as usual."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.runs import ledger_rows
from support.runs import plan_and_run_here as plan_and_run
from support.suites import make_suite

from ray_bench.ledger import Ledger
from ray_bench.runroot import RunPaths
from ray_bench.scheduler.driver import RunOptions

WATCH = {"output_repeats": 25, "idle_minutes": 1, "poll_sec": 1}


@pytest.mark.slow
def test_a_looping_arm_fails_its_cells_as_behaviour_after_max_attempts(tmp_path: Path) -> None:
    arms = [
        {"name": "baseline", "role": "baseline", "command": 'while :; do echo "retrying the same fix"; done',
         "watchdog": WATCH},
        {"name": "mcp", "role": "variant", "command": 'sh "$AGENT_DIR/scripted-agent.sh"', "agent_dir": "agents",
         "env": {"SCRIPTED_MIN_SEC": "0", "SCRIPTED_MAX_SEC": "0", "SCRIPTED_SKILL": "100"},
         "expose_solution": True, "watchdog": WATCH},
    ]
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], arms=arms, preflight_cells=0,
                                 max_attempts=2)
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs", "wd", options=RunOptions(parallel=2))
    receipt = (root / "receipt.md").read_text()
    assert "## Degeneration watchdog" in receipt
    assert "| baseline | 8 | 25 | 1 min | 1 s | none |" in receipt

    attempts, rows = ledger_rows(root)
    looping = [a for a in attempts if a.arm == "baseline"]
    assert len(looping) == 2, looping  # max_attempts, then the cell is failed: not retried forever
    assert {a.failure_class for a in looping} == {"behaviour"} and not any(a.valid for a in looping)
    assert all(a.counts for a in looping)
    assert [k for k in rows if "baseline" in str(k)] == []
    scored = [a for a in attempts if a.arm == "mcp"]
    assert len(scored) == 1 and scored[0].valid and scored[0].reward == 1.0

    with Ledger.reading(root) as ledger:
        summaries = dict(ledger.summaries())
    for attempt in looping:
        summary = summaries[attempt.attempt_id]
        assert summary.watchdog is not None and summary.watchdog.rule == "repeated_output"
        assert summary.watchdog.evidence[0] == "retrying the same fix"
        assert summary.verifier is None
        assert (RunPaths(root).attempt(attempt) / "watchdog.json").is_file()
    assert outcome.counts.get("failed") == 1, outcome
