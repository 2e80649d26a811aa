"""Every ray-bench failure class, exported, is one Harbor's own error policy does not count; an
accepted row (an agent timeout among them) is one it does. Python 3.12 (Harbor's models)."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from support.export_runs import finished_run

from ray_bench.exports.harbor import EXCEPTION_OF_CLASS, trial_result
from ray_bench.exports.source import export_roots, load_suites
from ray_bench.models.attempt import AttemptSummary

pytestmark = pytest.mark.harbor


def test_harbors_policy_counts_exactly_the_accepted_rows(tmp_path: Path) -> None:
    from harbor.models.trial.result import TrialResult

    (suite,) = load_suites(export_roots([finished_run(tmp_path)]))
    accepted = next(c for c in suite.cells if c.accepted and c.excluded is None)
    agent = {"name": "command", "model_name": None}
    paths = {t.id: t.path for t in suite.plan.tasks}

    def harbor(cell: object) -> TrialResult:
        data = trial_result(cell, suite, agent, paths, job_id=uuid.uuid4(), trial_dir=tmp_path / "t")  # type: ignore[arg-type]
        return TrialResult.model_validate(data)

    assert harbor(accepted).reward_valid and harbor(accepted).exception_info is None
    timed_out = dataclasses.replace(accepted, summary=AttemptSummary.parse(
        {"reward": 1.0, "verdict": {"valid": True, "flags": ["agent_timeout"]}}))
    result = harbor(timed_out)
    # Harbor, like ray-bench, counts the reward of an agent that timed out but was verified
    assert result.exception_info is not None and result.exception_info.exception_type == "AgentTimeoutError"
    assert result.reward_valid
    for failure_class in [*EXCEPTION_OF_CLASS, "some-future-class"]:
        row = dataclasses.replace(accepted.shown, valid=False, failure_class=failure_class)  # type: ignore[type-var]
        invalid = dataclasses.replace(accepted, shown=row, accepted=False)
        result = harbor(invalid)
        assert result.verifier_result is not None  # the reward it wrote is shown ...
        assert not result.reward_valid, failure_class  # ... and not counted
    cancelled = dataclasses.replace(accepted, accepted=False,
                                    shown=dataclasses.replace(accepted.shown, status="cancelled"))  # type: ignore[type-var]
    assert harbor(cancelled).exception_info.exception_type == "CancelledError"  # type: ignore[union-attr]
    assert not harbor(cancelled).reward_valid


@pytest.mark.parametrize(("adapter", "folder", "function", "printed"), [
    ("claude-code", "claude-code-2.1.197", "Bash", "hi"),
    ("codex", "codex-0.171.0", "shell", "hi\n"),
    ("gemini-cli", "gemini-cli-0.61.0", "run_shell_command", "hi"),
])
def test_each_cli_stream_is_a_trajectory_harbors_model_reads(adapter: str, folder: str, function: str,
                                                              printed: str) -> None:
    from harbor.models.trajectories import Trajectory

    from ray_bench.exports.transcripts import atif_trajectory, turns_of

    stream = Path(__file__).parents[1] / "agents" / "fixtures" / folder / "tool-call.stream.jsonl"
    data = atif_trajectory(turns_of(adapter, stream.read_text()), agent=adapter, model="m", session="s1")
    trajectory = Trajectory.model_validate(data)
    assert [s.source for s in trajectory.steps] == ["agent", "agent"]
    first = trajectory.steps[0]
    assert first.tool_calls is not None and first.tool_calls[0].function_name == function
    assert first.observation is not None and first.observation.results[0].content == printed
    assert first.observation.results[0].source_call_id == first.tool_calls[0].tool_call_id
    assert trajectory.steps[1].message == "Done."
