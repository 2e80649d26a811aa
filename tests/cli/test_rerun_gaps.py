"""`ray-bench rerun` and `ray-bench gaps` through the CLI, on ledgers made by real runs (local
backend, the driver and runner in this process) with an agent that fails on purpose until its
missing dependency appears."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.runs import execute_here as execute
from support.runs import plan_and_run_here as plan_and_run
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.cli import app
from ray_bench.ledger import Ledger

pytestmark = [pytest.mark.slow]


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_rerun_failed_refused_then_planned_with_hypothesis(tmp_path: Path) -> None:
    flag = tmp_path / "mcp-server-up"
    flaky = (
        f'[ -f "{flag}" ] || {{ echo \'{{"type": "tool", "message": "mcp server not reachable"}}\' '
        f'> "$LOGS_DIR/agent/error.json"; exit 2; }}; sh "$SOLUTION_DIR/solve.sh"'
    )
    suite, accounts = make_suite(
        tmp_path / "s",
        tasks=["hello-world", "sum-list"],
        reps=1,
        preflight_cells=0,
        max_attempts=1,
        backends={"local": {"max_sandboxes": 4, "options": {"root": str(tmp_path / "sbx")}}},
        arms=[
            {
                "name": "baseline",
                "role": "baseline",
                "command": 'sh "$SOLUTION_DIR/solve.sh"',
                "expose_solution": True,
            },
            {"name": "mcp", "role": "variant", "command": flaky, "expose_solution": True},
        ],
    )
    runs = tmp_path / "runs"
    outcome, root = plan_and_run(suite, accounts, runs)
    assert outcome.counts["failed"] == 2

    code, _, err = _invoke("rerun", str(root), "--failed")
    assert code == 2 and "rerun refused" in err and "mcp server not reachable" in err
    assert "--hypothesis" in err and "Traceback" not in err
    assert not (runs / "r1-rerun-1").exists()
    code, _, err = _invoke("rerun", str(root), "--failed", "--class", "auth")
    assert code == 2 and "nothing to rerun" in err
    code, _, err = _invoke("rerun", str(root))
    assert code == 2 and "--failed" in err

    code, out, err = _invoke(
        "rerun", str(root), "--failed", "--class", "tool", "--hypothesis", "started the mcp server"
    )
    assert code == 0, err
    identity = out.strip()
    assert identity.startswith("sha256:") and len(identity) == 71
    new_root = runs / "r1-rerun-1"
    receipt = (new_root / "receipt.md").read_text()
    assert identity in receipt and "started the mcp server" in receipt
    assert "| tool |" in receipt and "mcp server not reachable" in receipt
    selection = json.loads((new_root / "rerun-selection.json").read_text())
    assert selection["hypothesis"] == "started the mcp server"
    assert selection["signatures"][0]["attempts"] == 2 and selection["signatures"][0]["cells"] == 2

    flag.write_text("up\n")
    assert execute(new_root, identity).exit_code == 0
    code, out, err = _invoke("report", str(root))
    assert code == 0, err
    assert "| mcp | 2 | 2 | 0 | 2 |" in out  # both mcp cells recovered by the rerun's epoch
    assert Ledger.open_readonly(new_root).meta()["plan_identity"] in out
    code, _, err = _invoke("rerun", str(root), "--failed")
    assert code == 2 and "nothing to rerun" in err

    # gaps over both epochs: target 2 leaves rep 2 of both arms, nothing one-armed
    code, out, err = _invoke(
        "gaps",
        "--suite",
        str(suite),
        "--runs",
        str(runs),
        "--target",
        "2",
        "--out",
        str(tmp_path / "sel" / "more.json"),
    )
    assert code == 0, err
    assert "hello-world: baseline 1/2, mcp 1/2" in out
    assert sorted(p.name for p in (tmp_path / "sel").iterdir()) == ["more.json"]


def test_gaps_bad_input_exits_2(tmp_path: Path) -> None:
    suite, _ = make_suite(tmp_path / "s", tasks=["hello-world"])
    code, _, err = _invoke(
        "gaps",
        "--suite",
        str(suite),
        "--runs",
        str(tmp_path / "nope"),
        "--target",
        "2",
        "--out",
        str(tmp_path / "x.json"),
    )
    assert code == 2 and "not a run root" in err
    assert not (tmp_path / "x.json").exists()
