"""The Inspect export read by inspect_ai's own code: ``read_eval_log`` on every log, and a running
``inspect view`` asked for the listing and a log."""

from __future__ import annotations

import importlib.util
import math
import sys
import urllib.parse
from pathlib import Path

import pytest
from support.export_runs import EXCLUDED, EXCLUDED_BY, EXCLUDED_WHY, finished_run
from support.servers import free_port, get_json, viewer

from ray_bench.exports.inspect import export_inspect
from ray_bench.reports.build import build_report

# Looked up, not imported: importing inspect_ai (its __init__ loads its eval machinery, 3-12 s
# of CPU here) at collection cost every pytest worker that collects this file, not only the
# one that runs it; the tests import what they read.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("inspect_ai") is None,
                                reason="the inspect extra is not installed")


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, Path]:
    run = finished_run(tmp_path)
    out = tmp_path / "inspect"
    export_inspect([run], out)
    return run, out


def test_read_eval_log_sees_cells_scores_errors_retries_and_exclusions(exported: tuple[Path, Path]) -> None:
    from inspect_ai.log import read_eval_log

    run, out = exported
    arms = build_report(run).arms.set_index("arm")
    logs = {p.name: read_eval_log(str(p)) for p in sorted(out.iterdir())}
    assert sorted(logs) == ["t__baseline.eval", "t__mcp.eval"]
    assert len({log.eval.eval_set_id for log in logs.values()}) == 1
    for name, log in logs.items():
        arm = name.removesuffix(".eval").split("__")[1]
        assert log.results is not None
        (score,) = log.results.scores
        assert math.isclose(score.metrics["mean"].value, arms.loc[arm, "mean_reward"])
        assert log.samples is not None
        scored = [s for s in log.samples if s.scores and s.invalidation is None]
        assert len(scored) == arms.loc[arm, "valid_rows"]
        assert math.isclose(sum(float(s.scores["reward"].value) for s in scored) / len(scored),  # type: ignore[index, arg-type]
                            arms.loc[arm, "mean_reward"])
        assert len({(s.id, s.epoch) for s in log.samples}) == len(log.samples)
    base = {(s.id, s.epoch): s for s in logs["t__baseline.eval"].samples or []}
    failed = base[("fizzbuzz", 2)]
    assert failed.error is not None and "tool" in failed.error.message and not failed.scores
    assert failed.error_retries is not None and len(failed.error_retries) == 1
    excluded = base[(EXCLUDED[0], EXCLUDED[2])]
    assert excluded.invalidation is not None
    assert (excluded.invalidation.author, excluded.invalidation.reason) == (EXCLUDED_BY, EXCLUDED_WHY)
    ok = base[("hello-world", 1)]
    assert ok.model_usage and next(iter(ok.model_usage.values())).input_tokens == 100
    mcp = {(s.id, s.epoch): s for s in logs["t__mcp.eval"].samples or []}
    # hello-world/mcp/1: a stale attempt first, then the accepted row
    assert mcp[("hello-world", 1)].error_retries and mcp[("hello-world", 1)].error is None


def test_inspect_view_lists_and_serves_the_logs(exported: tuple[Path, Path], tmp_path: Path) -> None:
    run, out = exported
    arms = build_report(run).arms.set_index("arm")
    port = free_port()
    inspect = Path(sys.executable).parent / "inspect"
    base = f"http://127.0.0.1:{port}/api"
    with viewer([str(inspect), "view", "--log-dir", str(out), "--host", "127.0.0.1", "--port", str(port)],
                f"{base}/log-files", tmp_path / "inspect-view.log"):
        files = get_json(f"{base}/log-files")["files"]
        assert sorted(f["task"] for f in files) == ["t/baseline", "t/mcp"]
        for f in files:
            log = get_json(f"{base}/logs/{urllib.parse.quote(f['name'], safe='')}")
            arm = f["task"].split("/")[1]
            assert math.isclose(log["results"]["scores"][0]["metrics"]["mean"]["value"], arms.loc[arm, "mean_reward"])
            # baseline: its 7 cells and the excluded one; mcp: its 8 but count-words, which never ran
            assert len(log["samples"]) == {"baseline": 8, "mcp": 6}[arm]
