"""A cancelled attempt's cost evidence from the cell runner (issue 25): whether its agent was
launched, and the usage of an agent that had ended by itself, read from its stdout alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

from support.specs import local_spec

from ray_bench.cells.runner import run_attempt, usage_of_finished
from ray_bench.ledger.cost import attempt_cost
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.base import ExecResult
from ray_bench.sandboxes.local import LocalBackend

CODEX = Path(__file__).parent.parent / "agents" / "fixtures" / "codex-0.171.0"


def _cancel_when(path: Path, spec_dir: Path, command: str) -> AttemptSummary:
    """Run ``command`` as the agent and cancel the attempt once ``path`` exists."""
    spec = local_spec(spec_dir, command)

    async def go() -> None:
        task = asyncio.ensure_future(run_attempt(spec, LocalBackend(spec_dir / "sbx")))
        deadline = time.monotonic() + 60
        while not path.exists() and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # polling for the agent's own marker, not a fixed wait
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    return AttemptSummary.loads((spec_dir / "attempt" / "result.json").read_text())


def test_an_attempt_cancelled_mid_agent_is_of_unknown_cost_never_zero(tmp_path: Path) -> None:
    marker = tmp_path / "agent-running"
    summary = _cancel_when(marker, tmp_path, f"touch {marker}; sleep 30")
    assert marker.exists() and summary.cancelled
    assert summary.agent_started is True and summary.usage is None
    assert attempt_cost(summary) is None


def test_a_finished_codex_run_is_read_from_its_stdout_but_a_cut_one_is_not(tmp_path: Path) -> None:
    spec = local_spec(tmp_path, "true", agent="codex", model="gpt-5")
    stdout = (CODEX / "ok.stream.jsonl").read_text()
    usage = usage_of_finished(spec, ExecResult(exit_code=0, stdout=stdout, stderr="", duration_sec=40))
    assert usage is not None and usage.known
    assert (usage.input_tokens, usage.output_tokens) == (400, 33)
    cut = [ln for ln in stdout.splitlines() if '"turn.completed"' not in ln]
    for result in (ExecResult(exit_code=0, stdout="\n".join(cut), stderr="", timed_out=True),
                   ExecResult(exit_code=-9, stdout=stdout, stderr=""),
                   ExecResult(exit_code=0, stdout=stdout, stderr="", stopped="watchdog")):
        assert usage_of_finished(spec, result) is None  # its totals may be partial: unknown
    assert usage_of_finished(local_spec(tmp_path / "cmd", "true"), ExecResult(0, "{}", "")) is None  # command
    assert json.loads(usage.model_dump_json())["output_tokens"] == 33
