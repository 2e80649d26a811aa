"""scripts/selection-tally.py on a small directory shaped like CodeScaleBench's configs/: a
selection, an MCP-unique selection, and a report beside them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "selection-tally.py"


def test_the_tally_counts_parsed_refused_and_resolved(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    (configs / "coverage_gap_x").mkdir(parents=True)
    (configs / "wave1.json").write_text(json.dumps({"metadata": {"mode": "both"}, "tasks": [
        {"task_id": "a-fix-001", "benchmark": "sdlc_fix", "task_dir": "sdlc_fix/a-fix-001"},
        {"task_id": "b-fix-001", "benchmark": "sdlc_fix", "task_dir": "sdlc_fix/tasks/b-fix-001"}]}))
    (configs / "coverage_gap_x" / "mcp.json").write_text(json.dumps({"tasks": [
        {"task_id": "CCX-x-1", "mcp_suite": "org_x", "task_dir": "benchmarks/org_x/ccx-x-1"}]}))
    (configs / "coverage_gap_x" / "plan_summary.json").write_text(json.dumps({"rerun_needed": 1}))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(configs), "--json"], capture_output=True,
                          text=True, check=False, env={"PYTHONPATH": str(SCRIPT.parents[1])}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["files"], result["entries"], result["parsed"], result["refused"], result["crashed"],
            result["resolved"], result["secret_hits"]) == (3, 3, 2, 1, 0, 2, 0)
    refused = next(r for r in result["rows"] if r["status"] == "refused")
    assert refused["file"] == "coverage_gap_x/plan_summary.json"
    assert "not a selection: a JSON object with keys rerun_needed" in refused["reason"]
