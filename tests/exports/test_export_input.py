"""Bad input to ``ray-bench export``: one line, exit 2, nothing written."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from support.export_runs import finished_run, unfinished_run
from typer.testing import CliRunner

from ray_bench.cli import app

FORMATS = ["harbor", "inspect"]


def _refused(args: list[str], out: Path, expect: str) -> None:
    before = sorted(out.parent.iterdir()) if out.parent.exists() else []
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and expect in lines[0], result.output
    assert (sorted(out.parent.iterdir()) if out.parent.exists() else []) == before  # nothing written


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_unfinished_run_is_refused(tmp_path: Path, fmt: str) -> None:
    run = unfinished_run(tmp_path)
    out = tmp_path / "exports" / "x"
    (tmp_path / "exports").mkdir()
    _refused(["export", fmt, str(run), "--out", str(out)], out, "not finished")


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_existing_out_directory_is_refused(tmp_path: Path, fmt: str) -> None:
    run = finished_run(tmp_path)
    out = tmp_path / "exports"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    _refused(["export", fmt, str(run), "--out", str(out)], out, "exists")
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_unknown_ledger_format_is_refused(tmp_path: Path, fmt: str) -> None:
    run = finished_run(tmp_path)
    with sqlite3.connect(run / "ledger.sqlite") as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    conn.close()
    out = tmp_path / "exports" / "x"
    (tmp_path / "exports").mkdir()
    _refused(["export", fmt, str(run), "--out", str(out)], out, "ledger format '99'")


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_unknown_plan_format_is_refused(tmp_path: Path, fmt: str) -> None:
    run = finished_run(tmp_path)
    plan = json.loads((run / "launch-plan.json").read_text())
    plan["format"] = "ray-bench/plan/v99"
    (run / "launch-plan.json").write_text(json.dumps(plan))
    out = tmp_path / "exports" / "x"
    (tmp_path / "exports").mkdir()
    _refused(["export", fmt, str(run), "--out", str(out)], out, "plan")


def test_inspect_without_its_extra_names_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = finished_run(tmp_path)
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # what a base install without the extra sees
    out = tmp_path / "exports" / "x"
    (tmp_path / "exports").mkdir()
    _refused(["export", "inspect", str(run), "--out", str(out)], out, "pip install 'ray-bench[inspect]'")


def test_harbor_export_writes_one_job_per_arm(tmp_path: Path) -> None:
    """The 3.11 side of the Harbor export (its peer test needs Python 3.12)."""
    run = finished_run(tmp_path)
    out = tmp_path / "exports" / "h"
    result = CliRunner().invoke(app, ["export", "harbor", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["t__baseline", "t__mcp"]
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no staging left behind
    job = json.loads((out / "t__mcp" / "result.json").read_text())
    # hello-world/1's stale attempt and sum-list/2's evaluator failure came before their accepted
    # rows; sum-list/2's later attempt (reward 1) is neither shown nor a retry
    assert job["stats"]["n_retries"] == 2


def _spent_run(tmp_path: Path) -> Path:
    """A finished run whose attempts read and write the cache, one cell retried (issue 54 item 10)."""
    from support.export_runs import _report_ledgers
    from support.suites import make_suite

    from ray_bench.api import plan_run
    from ray_bench.ledger import events as ev

    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "fizzbuzz"], reps=1)
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="spent").run_root
    w = _report_ledgers().Writer(root)  # type: ignore[attr-defined]

    def usage(n: int, cost: float) -> dict[str, object]:
        return {"input_tokens": 100 * n, "output_tokens": 10 * n, "cache_read_tokens": 1000 * n,
                "cache_write_tokens": 50 * n, "cost_usd": cost, "request_ids": [f"req_{n}_{cost}"]}
    w.attempt("hello-world", "baseline", 1, 100, reward=1.0, usage=usage(1, 0.0125))
    w.attempt("fizzbuzz", "baseline", 1, 101, fail=("tool", "tool-1"), usage=usage(2, 0.0216))  # retried
    w.attempt("fizzbuzz", "baseline", 1, 102, reward=0.0, usage=usage(3, 0.0329))
    w.attempt("hello-world", "mcp", 1, 103, reward=1.0, usage=usage(4, 0.0431))
    w.attempt("fizzbuzz", "mcp", 1, 104, reward=1.0, usage={"source": "unknown"})  # unknown: never 0
    w.ledger.append(ev.RunStarted(identity=w.identity, run_id=w.plan.run_id), now=99.0)
    w.ledger.append(ev.RunFinished(run_id=w.plan.run_id, exit_code=0, stopped=None), now=200.0)
    w.ledger.close()
    return root


def test_both_exports_carry_the_ledgers_tokens_and_cost_retries_and_cache_included(tmp_path: Path) -> None:
    """Harbor's job stats and Inspect's stats equal the report's usage of every attempt of the
    arm (the retried one's included), cache reads and writes apart; a trial or sample is its own
    attempt's usage (Harbor: input counting the cached tokens, as its AgentContext does)."""
    from ray_bench.reports.build import build_report

    run = _spent_run(tmp_path)
    usage = build_report(run).usage.groupby("arm").sum(numeric_only=True)
    out = tmp_path / "h"
    assert CliRunner().invoke(app, ["export", "harbor", str(run), "--out", str(out)]).exit_code == 0
    for arm in ("baseline", "mcp"):
        stats = json.loads((out / f"t__{arm}" / "result.json").read_text())["stats"]
        u = usage.loc[arm]
        assert stats["n_input_tokens"] == u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
        assert stats["n_cache_tokens"] == u.cache_read_tokens and stats["n_output_tokens"] == u.output_tokens
        assert stats["cost_usd"] == pytest.approx(u.cost_usd, rel=1e-12)
    assert json.loads((out / "t__baseline" / "result.json").read_text())["stats"]["cost_usd"] == pytest.approx(
        0.0125 + 0.0216 + 0.0329)  # the retried attempt's $0.0216 too (it was left out)
    trial = json.loads(next((out / "t__baseline").glob("fizzbuzz__*/result.json")).read_text())["agent_result"]
    assert (trial["n_input_tokens"], trial["n_cache_tokens"], trial["cost_usd"]) == (3 * 1150, 3000, 0.0329)
    assert trial["metadata"]["cell_spend"]["cost_usd"] == pytest.approx(0.0216 + 0.0329)

    pytest.importorskip("inspect_ai")
    from inspect_ai.log import read_eval_log

    out = tmp_path / "i"
    assert CliRunner().invoke(app, ["export", "inspect", str(run), "--out", str(out)]).exit_code == 0
    for arm in ("baseline", "mcp"):
        log = read_eval_log(str(out / f"t__{arm}.eval"))
        (total,) = log.stats.model_usage.values()
        u = usage.loc[arm]
        assert (total.input_tokens, total.output_tokens) == (u.input_tokens, u.output_tokens)
        assert (total.input_tokens_cache_read, total.input_tokens_cache_write) == (u.cache_read_tokens,
                                                                                  u.cache_write_tokens)
        assert total.total_cost == pytest.approx(u.cost_usd, rel=1e-12)
        if arm == "mcp":  # the unknown attempt is absent from its sample, not zero tokens
            assert sum(1 for s in log.samples or [] if not s.model_usage) == 1
