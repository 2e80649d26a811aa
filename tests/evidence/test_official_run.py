"""The evidence contract on a real run (the driver and runner in this process, the local backend,
the scripted agent): execute options recorded per epoch, settlement by the request ids the agent
reported, promotion with a live cleanup audit, `status` saying staging then official, and an
official run refused by execute."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.runs import ledger_rows
from support.runs import plan_and_run_here as plan_and_run
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.cli import app
from ray_bench.evidence.promote import promote_run
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import load_plan_file
from ray_bench.reports.build import build_report, render_markdown, write_report
from ray_bench.scheduler.driver import RunOptions

ROLES = [{"role": "executor", "model": "scripted-demo", "billing": "local", "max_turns": 5},
         {"role": "judge", "model": "claude-haiku-4-5", "route": "acct-a", "billing": "api",
          "max_spend_usd": 0.5}]


@pytest.mark.slow
def test_real_run_settles_promotes_and_becomes_official(tmp_path: Path) -> None:
    fast = {"SCRIPTED_MIN_SEC": "0", "SCRIPTED_MAX_SEC": "0"}
    arms = [
        {"name": "baseline", "role": "baseline", "command": 'sh "$AGENT_DIR/scripted-agent.sh"',
         "agent_dir": "agents", "env": {**fast, "SCRIPTED_SKILL": "50"}, "expose_solution": True,
         "roles": ROLES},
        {"name": "mcp", "role": "variant", "command": 'sh "$AGENT_DIR/scripted-agent.sh"',
         "agent_dir": "agents", "env": {**fast, "SCRIPTED_SKILL": "90"}, "expose_solution": True},
    ]
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "fizzbuzz"], arms=arms)
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs", "real",
                                 options=RunOptions(parallel=3, runners_per_node=1))
    assert outcome.exit_code == 0, outcome.detail
    receipt = (root / "receipt.md").read_text()
    assert "## Model roles" in receipt
    assert "| baseline | judge | judge | claude-haiku-4-5 | acct-a | api | - | - | $0.5 (not enforced) |" in receipt
    assert "| mcp | executor | executor | undeclared | accounts | undeclared |" in receipt

    report = build_report(root)
    assert report.title == "Report: real (staging)"
    execution = report.executions.iloc[0]
    assert (execution.parallel, execution.runners_per_node, execution.backend_pools) == (3, 1, "local 8")
    assert set(report.roles.role) == {"executor", "judge"}

    # the provider's export, from the request ids the agent reported
    attempts, _rows = ledger_rows(root)
    with Ledger.reading(root) as ledger:
        summaries = dict(ledger.summaries())
    records = [{"request_id": rid, "spend": 0.02, "model": "scripted-demo"}
               for a in attempts for rid in _usage(summaries[a.attempt_id])["request_ids"]]
    assert len(records) == len(attempts) == 4
    export = tmp_path / "spend-logs.json"
    export.write_text(json.dumps(records))
    settled = CliRunner().invoke(app, ["settle", str(root), "--usage", str(export), "--by", "fin"])
    assert settled.exit_code == 0, settled.output
    assert "4 settled, 0 missing, 0 disputed" in settled.stdout

    staging = CliRunner().invoke(app, ["status", str(root), "--json"])
    assert staging.exit_code == 0, staging.output
    assert json.loads(staging.stdout)["category"] == "staging" and json.loads(staging.stdout)["promotion"] is None

    result = promote_run(root, reason="preflight suite, all pairs valid", by="ana", require_settlement=True)
    assert result.promoted, result.gates  # the cleanup gate ran a live audit of the local backend
    shown = CliRunner().invoke(app, ["status", str(root)])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith("run real (finished, official): 4 cells")
    assert "official: promoted by ana at " in shown.stdout and "preflight suite, all pairs valid" in shown.stdout
    assert "next:" not in shown.stdout  # an official run is neither resumed nor rerun
    as_json = json.loads(CliRunner().invoke(app, ["status", str(root), "--json"]).stdout)
    assert as_json["category"] == "official" and as_json["promotion"]["by"] == "ana"
    assert as_json["next_action"] is None
    report = write_report(root)
    md = render_markdown(report)
    assert md.startswith("# Report: real (official)") and "promoted by ana" in md
    assert report.arms.settled_usd.sum() == pytest.approx(0.08)

    identity = load_plan_file(root / "launch-plan.json")[1]
    again = CliRunner().invoke(app, ["execute", "--plan", str(root / "launch-plan.json"), "--confirm", identity,
                                     "--no-metrics"])
    assert again.exit_code == 2, again.output
    lines = [line for line in again.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is official" in lines[0] and "cannot be executed again" in lines[0]


def _usage(summary: AttemptSummary) -> dict[str, Any]:
    assert summary.usage is not None
    return summary.usage.model_dump()
