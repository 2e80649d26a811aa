"""A CLI stopped mid-turn, or one whose stop needed the SIGKILL, leaves usage a lower bound
(issue 25). A CLI stopped by its timeout, the watchdog or a cancellation gets SIGTERM, then
SIGKILL after the grace. A real Claude Code can then make one more call no record holds: killed
after its grace, the call it was serving in it; or dying of the SIGTERM itself (exit -15, no
SIGKILL) after it ended the tool it was running and sent the tool's result. So usage read from
the CLI's messages is ``lower_bound`` when the stop needed the SIGKILL (``killed_in_grace``) or
came before its records show its turn over (``stopped_in_turn``); a CLI stopped after its final
answer that exits on its SIGTERM keeps ``exact``."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from cells.test_runner_cancel_cost import _cancel_when
from support.specs import local_spec

from ray_bench.cells.runner import run_attempt
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.local import LocalBackend

SESSION = "sess-kill-0001"


def _message(n: int, *, tool: bool, final: bool) -> dict[str, object]:
    """Assistant message ``n`` (150 input / 20 output): a tool call, or text; ``final``: with
    its ``stop_reason`` (the transcript's last line of it; the stream prints it null)."""
    content = ({"type": "tool_use", "id": f"tu_{n}", "name": "Bash", "input": {"command": "sleep 300"}} if tool
               else {"type": "text", "text": f"done {n}"})
    return {"id": f"msg_k_{n}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "stop_reason": ("tool_use" if tool else "end_turn") if final else None, "content": [content],
            "usage": {"input_tokens": 150, "output_tokens": 20, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0}}


def _fake_claude(bin_dir: Path, marker: Path, *, ignores_sigterm: bool, in_tool: bool) -> Path:
    """A ``claude`` that prints two whole messages in its stream and writes them to its session
    transcript (the first a tool call and its result; the second the final answer, or, ``in_tool``,
    another tool call, whose tool it then runs), says it runs (``marker``) and works on forever,
    ignoring SIGTERM or not."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    result = {"type": "user", "session_id": SESSION, "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu_1", "content": "ok"}]}}
    stream = [{"type": "system", "subtype": "init", "session_id": SESSION}]
    transcript = []
    for n, tool in ((1, True), (2, in_tool)):
        stream.append({"type": "assistant", "request_id": f"req_k_{n}", "session_id": SESSION,
                       "message": _message(n, tool=tool, final=False)})
        transcript.append({"type": "assistant", "requestId": f"req_k_{n}", "sessionId": SESSION,
                           "message": _message(n, tool=tool, final=True)})
        if n == 1:
            stream.append(result)
            transcript.append(result)
    trap = "trap '' TERM\n" if ignores_sigterm else ""
    lines = "\n".join(json.dumps(e) for e in stream)
    kept = "\n".join(json.dumps(e) for e in transcript)
    script = bin_dir / "claude"
    script.write_text(
        f"#!/bin/sh\n{trap}cat <<'EOF'\n{lines}\nEOF\nsleep 0.1\n"
        f'd="$CLAUDE_CONFIG_DIR/projects/p"; mkdir -p "$d"\ncat >"$d/{SESSION}.jsonl" <<\'EOF\'\n{kept}\nEOF\n'
        f"touch {marker}\nwhile :; do sleep 0.1; done\n")
    script.chmod(0o755)
    return bin_dir


def _env(tmp_path: Path, bin_dir: Path) -> dict[str, str]:
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config")}


def _check(summary: AttemptSummary, tmp_path: Path, ignores_sigterm: bool, in_tool: bool) -> None:
    usage = summary.usage
    assert usage is not None and usage.source == "session", usage
    assert (usage.input_tokens, usage.output_tokens) == (300, 40)
    assert usage.request_ids == ["req_k_1", "req_k_2"]  # type: ignore[attr-defined]
    lower = ignores_sigterm or in_tool
    assert usage.bound == ("lower_bound" if lower else "exact"), usage
    assert summary.usage_lower_bound is lower
    written = json.loads((tmp_path / "attempt" / "logs" / "agent" / "usage.json").read_text())
    assert written["bound"] == usage.bound
    assert written.get("killed_in_grace", False) is ignores_sigterm, written
    assert written.get("stopped_in_turn", False) is in_tool, written


CASES = pytest.mark.parametrize(("ignores_sigterm", "in_tool"), [(True, False), (False, False), (False, True)],
                                ids=["ignores SIGTERM", "exits on SIGTERM after its answer",
                                     "exits on SIGTERM in its tool"])


@CASES
def test_a_cli_cut_by_its_timeout_is_a_lower_bound_when_killed_or_in_its_turn(
        tmp_path: Path, ignores_sigterm: bool, in_tool: bool) -> None:
    marker = tmp_path / "claude-running"
    bin_dir = _fake_claude(tmp_path / "bin", marker, ignores_sigterm=ignores_sigterm, in_tool=in_tool)
    spec = local_spec(tmp_path, "", agent="claude-code", model="claude-sonnet-4-5", agent_timeout_sec=5.0,
                      agent_env=_env(tmp_path, bin_dir))
    summary = asyncio.run(run_attempt(spec, LocalBackend(tmp_path / "sbx")))
    assert marker.exists() and summary.agent is not None and summary.agent.timed_out
    _check(summary, tmp_path, ignores_sigterm, in_tool)


@CASES
def test_a_cancelled_cli_is_a_lower_bound_when_killed_or_in_its_turn(
        tmp_path: Path, ignores_sigterm: bool, in_tool: bool) -> None:
    marker = tmp_path / "claude-running"
    bin_dir = _fake_claude(tmp_path / "bin", marker, ignores_sigterm=ignores_sigterm, in_tool=in_tool)
    summary = _cancel_when(marker, tmp_path, "", agent="claude-code", model="claude-sonnet-4-5",
                           agent_timeout_sec=300.0, agent_env=_env(tmp_path, bin_dir))
    assert marker.exists() and summary.cancelled
    _check(summary, tmp_path, ignores_sigterm, in_tool)
    assert list((tmp_path / "sbx").iterdir()) == []  # its sandbox still removed
