"""The Harbor export read by Harbor 0.26's own code: every file through its models, and a
running ``harbor view`` asked for the jobs and a trial. Python 3.12 only (scripts/test.sh runs it
in .venv-harbor)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from support.export_runs import EXCLUDED, EXCLUDED_BY, EXCLUDED_WHY, finished_run
from support.servers import free_port, get_json, viewer

from ray_bench.exports.harbor import export_harbor
from ray_bench.reports.build import build_report
from ray_bench.tasks.rewards import read_rewards

pytestmark = pytest.mark.harbor


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, Path]:
    run = finished_run(tmp_path)
    out = tmp_path / "harbor"
    export_harbor([run], out)
    return run, out


def test_every_file_loads_with_harbors_models_and_means_match_the_report(exported: tuple[Path, Path]) -> None:
    from harbor.models.job.config import JobConfig
    from harbor.models.job.result import JobResult
    from harbor.models.trial.config import TrialConfig
    from harbor.models.trial.result import TrialResult

    run, out = exported
    arms = build_report(run).arms.set_index("arm")
    assert sorted(p.name for p in out.iterdir()) == ["t__baseline", "t__mcp"]
    for job in out.iterdir():
        arm = job.name.split("__")[1]
        config = JobConfig.model_validate_json((job / "config.json").read_text())
        assert config.environment.type is None  # the local backend has no Harbor type: never "docker"
        result = JobResult.model_validate_json((job / "result.json").read_text())
        trials = [TrialResult.model_validate_json((t / "result.json").read_text())
                  for t in sorted(job.iterdir()) if t.is_dir()]
        for t in sorted(job.iterdir()):
            if t.is_dir():
                TrialConfig.model_validate_json((t / "config.json").read_text())
        counted = [next(iter(t.verifier_result.rewards.values())) for t in trials
                   if t.reward_valid and t.verifier_result and t.verifier_result.rewards]
        # Harbor's own reward_valid (its error policy) counts exactly the report's valid rows
        assert len(counted) == arms.loc[arm, "valid_rows"]
        assert math.isclose(sum(counted) / len(counted), arms.loc[arm, "mean_reward"])
        (stats,) = result.stats.evals.values()
        assert math.isclose(stats.metrics[0]["mean"], arms.loc[arm, "mean_reward"])
        assert result.n_total_trials == arms.loc[arm, "cells"] + (1 if arm == EXCLUDED[1] else 0)

    baseline = out / "t__baseline"
    results = {p.name: TrialResult.model_validate_json((p / "result.json").read_text())
               for p in baseline.iterdir() if p.is_dir()}
    # fizzbuzz/baseline/2 failed twice (tool): shown with Harbor's name, not counted, one retry
    failed = next(r for n, r in results.items() if n.startswith("fizzbuzz__r2"))
    assert failed.exception_info is not None
    assert failed.exception_info.exception_type == "NonZeroAgentExitCodeError"
    assert not failed.reward_valid
    assert failed.agent_result is not None and failed.agent_result.metadata is not None
    assert len(failed.agent_result.metadata["earlier_attempts"]) == 1
    excluded = next(r for n, r in results.items() if n.startswith(f"{EXCLUDED[0]}__r{EXCLUDED[2]}"))
    assert excluded.exception_info is not None and not excluded.reward_valid
    assert EXCLUDED_BY in excluded.exception_info.exception_message
    assert EXCLUDED_WHY in excluded.exception_info.exception_message
    assert JobResult.model_validate_json((baseline / "result.json").read_text()).stats.n_retries == 1
    for trial in baseline.iterdir():
        if trial.is_dir() and results[trial.name].reward_valid:
            rewards = results[trial.name].verifier_result.rewards  # type: ignore[union-attr]
            assert read_rewards(trial / "verifier") == (rewards, "reward.txt")  # the file a verifier writes


def test_harbor_view_lists_the_jobs_and_serves_a_trial(exported: tuple[Path, Path], tmp_path: Path) -> None:
    run, out = exported
    arms = build_report(run).arms.set_index("arm")
    port = free_port()
    harbor = Path(sys.executable).parent / "harbor"
    base = f"http://127.0.0.1:{port}"
    with viewer([str(harbor), "view", str(out), "--host", "127.0.0.1", "--port", str(port), "--no-build",
                 "--jobs"], f"{base}/api/health", tmp_path / "harbor-view.log"):
        jobs = {j["name"]: j for j in get_json(f"{base}/api/jobs")["items"]}
        assert sorted(jobs) == ["t__baseline", "t__mcp"]
        for name, job in jobs.items():
            (metrics,) = job["evals"].values()
            assert math.isclose(metrics["metrics"][0]["mean"], arms.loc[name.split("__")[1], "mean_reward"])
        trials = get_json(f"{base}/api/jobs/t__mcp/trials")["items"]
        one = next(t for t in trials if t["task_name"] == "hello-world")
        trial = get_json(f"{base}/api/jobs/t__mcp/trials/{one['name']}")
        assert trial["trial_name"] == one["name"] and trial["reward_valid"] is True
        assert trial["verifier_result"]["rewards"] == {"reward": 1.0}
        assert trial["agent_result"]["n_input_tokens"] == 100
