"""A cancelled attempt's cost evidence from the cell runner (issue 25): whether its agent was
launched, and the usage of an agent that had ended by itself, read from its stdout alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import pytest
from support.specs import local_spec

from ray_bench.cells.runner import run_attempt, usage_of_finished
from ray_bench.ledger.cost import attempt_cost
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.base import ExecResult
from ray_bench.sandboxes.local import LocalBackend

CODEX = Path(__file__).parent.parent / "agents" / "fixtures" / "codex-0.171.0"


def _cancel_when(path: Path, spec_dir: Path, command: str, **kw: object) -> AttemptSummary:
    """Run ``command`` as the agent and cancel the attempt once ``path`` exists (``kw``: spec fields)."""
    spec = local_spec(spec_dir, command, **kw)

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


def _message(n: int, *, input_tokens: int = 150, output_tokens: int = 1) -> str:
    """One ``stream-json`` assistant event as Claude Code 2.1.197 prints it while the message
    streams: its usage so far (output 1), ``stop_reason`` null, the provider's request id."""
    return json.dumps({"type": "assistant", "request_id": f"req_fake_{n}", "session_id": "s-1",
                       "message": {"id": f"msg_fake_{n}", "type": "message", "role": "assistant",
                                   "model": "claude-sonnet-4-5", "stop_reason": None,
                                   "content": [{"type": "tool_use", "id": f"tu_{n}", "name": "Bash",
                                                "input": {"command": f"step {n}"}}],
                                   "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                                             "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}})


#: Two messages of 150 input, 1 output (so far) at Sonnet's list price ($3 / $15 per million).
FAKE_CLAUDE_USD = 2 * (150 * 3.0 + 1 * 15.0) / 1e6


def fake_claude(bin_dir: Path, marker: Path) -> Path:
    """A ``claude`` that streams two assistant messages, says it is running (``marker``) and
    then works forever: a CLI cut mid-run, with usage in its stream and no transcript."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(["{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s-1\"}", _message(1),
                       "{\"type\":\"user\",\"session_id\":\"s-1\",\"message\":{\"role\":\"user\"}}", _message(2)])
    script = bin_dir / "claude"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{lines}\nEOF\ntouch {marker}\nexec sleep 600\n")
    script.chmod(0o755)
    return bin_dir


def test_a_cli_cancelled_mid_run_keeps_its_stream_usage_as_a_lower_bound(tmp_path: Path) -> None:
    import os

    from ray_bench.cells.runner import cancelled_summary
    from ray_bench.ledger.cost import cost_is_lower_bound

    marker = tmp_path / "claude-running"
    bin_dir = fake_claude(tmp_path / "bin", marker)
    spec = local_spec(tmp_path, "", agent="claude-code", model="claude-sonnet-4-5", agent_timeout_sec=120.0,
                      agent_env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})

    async def go() -> None:
        task = asyncio.ensure_future(run_attempt(spec, LocalBackend(tmp_path / "sbx")))
        deadline = time.monotonic() + 60
        while not marker.exists() and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the stream's last lines reach the runner
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    written = AttemptSummary.loads((tmp_path / "attempt" / "result.json").read_text())
    kept = cancelled_summary("c-a1")  # what the runner hands the driver for a cancelled Ray task
    assert kept is not None and cancelled_summary("c-a1") is None  # handed over once
    for summary in (written, kept):
        assert marker.exists() and summary.cancelled and summary.agent_started is True
        usage = summary.usage
        assert usage is not None and usage.source == "stream"
        assert (usage.input_tokens, usage.output_tokens) == (300, 2)
        assert usage.request_ids == ["req_fake_1", "req_fake_2"]  # type: ignore[attr-defined]
        assert usage.bound == "lower_bound" and cost_is_lower_bound(summary)
        assert attempt_cost(summary) == pytest.approx(FAKE_CLAUDE_USD)  # known, a lower bound, not $0
    assert json.loads((tmp_path / "attempt" / "logs" / "agent" / "usage.json").read_text())["bound"] == "lower_bound"
    assert list((tmp_path / "sbx").iterdir()) == []  # its sandbox still removed


def test_a_command_agent_cancelled_mid_run_keeps_the_usage_it_wrote(tmp_path: Path) -> None:
    marker = tmp_path / "agent-running"
    usage = '{"input_tokens": 1000, "output_tokens": 40, "cost_usd": 0.07, "request_ids": ["req_c1"]}'
    summary = _cancel_when(marker, tmp_path, f"echo '{usage}' > \"$LOGS_DIR/agent/usage.json\"; "
                                             f"touch {marker}; sleep 30")
    assert summary.cancelled and summary.agent_started is True and summary.usage is not None
    assert summary.usage.request_ids == ["req_c1"]  # type: ignore[attr-defined]
    assert attempt_cost(summary) == pytest.approx(0.07)
    assert summary.usage_lower_bound  # what it had written when it was cut: at least that
