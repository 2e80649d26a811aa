"""Each CLI adapter's stdout, recorded from the real CLI against the fake provider
(tests/agents/fixtures: Claude Code 2.1.197, Codex 0.171.0, Gemini CLI 0.61.0), as Inspect
messages that inspect_ai's own writer and reader keep."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ray_bench.exports.transcripts import inspect_messages, turns_of

# Looked up, not imported: importing inspect_ai (its __init__ loads its eval machinery, 3-12 s
# of CPU here) at collection cost every pytest worker that collects this file, not only the
# one that runs it; the tests import what they read.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("inspect_ai") is None,
                                reason="the inspect extra is not installed")

FIXTURES = Path(__file__).parents[1] / "agents" / "fixtures"
#: adapter -> its recorded tool-call stream, the call it made (function, the argument that names
#: the command, its value) and what the command printed.
RECORDED = {
    "claude-code": ("claude-code-2.1.197", "Bash", "echo hi", "hi"),
    "codex": ("codex-0.171.0", "shell", "/bin/bash -lc 'echo hi'", "hi\n"),
    "gemini-cli": ("gemini-cli-0.61.0", "run_shell_command", "echo hi", "hi"),
}


@pytest.mark.parametrize("adapter", sorted(RECORDED))
def test_a_tool_call_stream_is_a_call_its_result_and_the_answer(adapter: str, tmp_path: Path) -> None:
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSample, EvalSpec, read_eval_log, write_eval_log

    folder, function, command, printed = RECORDED[adapter]
    messages = inspect_messages(turns_of(adapter, (FIXTURES / folder / "tool-call.stream.jsonl").read_text()), "m")
    assert [m.role for m in messages] == ["assistant", "tool", "assistant"]
    call = messages[0].tool_calls[0]  # type: ignore[union-attr,index]
    assert (call.function, call.arguments["command"]) == (function, command)
    assert messages[1].tool_call_id == call.id and messages[1].text == printed  # type: ignore[union-attr]
    assert messages[2].text == "Done."
    log = EvalLog(eval=EvalSpec(created="2026-12-02T00:00:00+00:00", task="t/arm", dataset=EvalDataset(name="t"),
                                model="m", config=EvalConfig()),
                  samples=[EvalSample(id="hello-world", epoch=1, input="say hi", target="", messages=messages)])
    write_eval_log(log, str(tmp_path / "x.eval"), format="eval")
    (sample,) = read_eval_log(str(tmp_path / "x.eval")).samples or []
    assert [m.role for m in sample.messages] == ["assistant", "tool", "assistant"]


@pytest.mark.parametrize("adapter", [*sorted(RECORDED), "command", None])
def test_lines_that_are_not_a_transcript_give_no_turns(adapter: str | None) -> None:
    assert turns_of(adapter, "plain text\n{\"type\": \"result\"}\n{\"type\": \"item.completed\"}\n{cut mid-line") == []


def test_a_failed_gemini_tool_and_a_failed_codex_command_say_so() -> None:
    gemini = ('{"type":"tool_use","tool_name":"read_file","tool_id":"t1","parameters":{"path":"x"}}\n'
              '{"type":"tool_result","tool_id":"t1","status":"error","output":"",'
              '"error":{"type":"FILE_NOT_FOUND","message":"File not found: x"}}\n')
    (turn,) = turns_of("gemini-cli", gemini)
    assert turn.results == [("t1", "File not found: x")]
    codex = ('{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"false",'
             '"aggregated_output":"","exit_code":1,"status":"failed"}}\n')
    (turn,) = turns_of("codex", codex)
    assert turn.results == [("item_1", "\n[exit 1]")]
