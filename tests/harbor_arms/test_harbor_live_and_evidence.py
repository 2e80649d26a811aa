"""Harbor-free pieces of a Harbor arm's evidence (they run on 3.11 too): the commands the
watchdog reads in Terminus 2's answers, and which usage an installed agent's attempt keeps
(Harbor's total of a finished run, or the CLI adapter's reading of one cut short)."""

from __future__ import annotations

import json
from pathlib import Path

from ray_bench.agents.harbor_evidence import CLI_USAGE_FILE, CONTEXT_FILE, REQUEST_IDS_FILE, harbor_report
from ray_bench.harbor.live import TerminusReader, answer_line, commands_of


def test_terminus_answers_name_their_keystrokes_in_either_parser() -> None:
    as_json = json.dumps({"analysis": "a", "commands": [{"keystrokes": "ls\n"}, {"keystrokes": "pwd\n"}]})
    assert commands_of("Here it is:\n" + as_json) == ["ls\n", "pwd\n"]
    as_xml = "<response><commands><keystrokes duration=\"1\">cat x\n</keystrokes></commands></response>"
    assert commands_of(as_xml) == ["cat x"]
    assert commands_of("no commands at all") == [] and commands_of("{not json") == []


def test_the_reader_makes_one_call_of_each_answer_and_counts_its_tokens() -> None:
    reader = TerminusReader()
    text = json.dumps({"commands": [{"keystrokes": "ls\n"}]})
    first = reader.read(answer_line(text, 300, 40, 100, "claude-sonnet-4-5").decode())
    second = reader.read(answer_line(text, 300, 40, 100, None).decode())
    assert first is not None and second is not None
    assert first.tool_calls == second.tool_calls and len(first.tool_calls) == 1
    assert (first.tokens, second.tokens) == (240, 480)  # fresh input + output, cache reads apart
    assert second.usage is not None and second.usage.cache_read_tokens == 200
    assert second.usage.model == "claude-sonnet-4-5"
    assert reader.read("plain output") is None and reader.read('{"kind": "other"}') is None
    done = reader.read(answer_line(json.dumps({"commands": [], "task_complete": True}), 10, 1, 0, None).decode())
    assert done is not None and done.tool_calls == ()


def _trial(tmp_path: Path, context: dict[str, object], cli: dict[str, object] | None, ids: list[str]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / CONTEXT_FILE).write_text(json.dumps(context))
    (tmp_path / REQUEST_IDS_FILE).write_text("".join(f"{i}\n" for i in ids))
    if cli is not None:
        (tmp_path / CLI_USAGE_FILE).write_text(json.dumps(cli))
    return tmp_path


def test_a_finished_installed_agent_keeps_harbors_totals_and_the_clis_request_ids(tmp_path: Path) -> None:
    trial = _trial(tmp_path, {"n_input_tokens": 500, "n_cache_tokens": 100, "n_output_tokens": 33, "cost_usd": 0.0008},
                   {"input_tokens": 400, "output_tokens": 33, "cache_read_tokens": 100, "source": "result",
                    "request_ids": ["resp_1"]}, ["resp_1"])
    usage = harbor_report(trial, "openai/gpt-5").usage
    assert usage is not None and (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (400, 100, 33)
    # the CLI printed no cost of its own (Codex): Harbor's figure is its price-map estimate
    assert usage.cost_usd == 0.0008 and usage.cost_basis == "estimated" and usage.request_ids == ["resp_1"]


def test_a_cut_installed_agent_keeps_the_clis_reading_not_harbors_total(tmp_path: Path) -> None:
    trial = _trial(tmp_path, {"n_input_tokens": 720, "n_cache_tokens": 0, "n_output_tokens": 42},
                   {"input_tokens": 840, "output_tokens": 49, "cache_read_tokens": 0, "source": "session",
                    "unfinished_messages": 1, "request_ids": ["r1", "r2"]}, ["r1", "r2"])
    usage = harbor_report(trial, "anthropic/claude-sonnet-4-5").usage
    assert usage is not None and usage.source == "session" and usage.input_tokens == 840
    assert usage.unfinished_messages == 1 and usage.request_ids == ["r1", "r2"]


def test_a_call_in_flight_at_the_cut_makes_terminus_usage_a_lower_bound_or_unknown(tmp_path: Path) -> None:
    from ray_bench.agents.harbor_evidence import CALLS_FILE
    from ray_bench.agents.prices import with_cost

    # Two calls answered, the third cancelled in flight by the timeout: at least what the two spent.
    trial = _trial(tmp_path / "two", {"n_input_tokens": 600, "n_cache_tokens": 0, "n_output_tokens": 80}, None,
                   ["r1", "r2"])
    (trial / CALLS_FILE).write_text(json.dumps({"started": 3, "ended": 2}))
    usage = with_cost(harbor_report(trial, "anthropic/claude-sonnet-4-5").usage, "anthropic/claude-sonnet-4-5")
    assert usage is not None and usage.calls_unfinished == 1 and usage.bound == "lower_bound"
    assert (usage.input_tokens, usage.output_tokens) == (600, 80)
    # Every call ended: exact, as before.
    (trial / CALLS_FILE).write_text(json.dumps({"started": 2, "ended": 2}))
    usage = with_cost(harbor_report(trial, "anthropic/claude-sonnet-4-5").usage, "anthropic/claude-sonnet-4-5")
    assert usage is not None and usage.calls_unfinished is None and usage.bound == "exact"
    # The first call cut: nothing came back, so nothing says what it spent (never $0).
    first = _trial(tmp_path / "none", {"n_input_tokens": 0, "n_cache_tokens": 0, "n_output_tokens": 0}, None, [])
    (first / CALLS_FILE).write_text(json.dumps({"started": 1, "ended": 0}))
    usage = harbor_report(first, "anthropic/claude-sonnet-4-5").usage
    assert usage is not None and usage.source == "unknown" and usage.cost_usd is None and usage.calls_unfinished == 1


def test_terminus_cache_writes_are_their_own_column_not_fresh_input(tmp_path: Path) -> None:
    from ray_bench.agents.harbor_evidence import CALLS_FILE

    # LiteLLM's prompt_tokens (Harbor's n_input_tokens) = 300 fresh + 100 read + 50 written.
    trial = _trial(tmp_path, {"n_input_tokens": 450, "n_cache_tokens": 100, "n_output_tokens": 40}, None, ["r1"])
    (trial / CALLS_FILE).write_text(json.dumps({"started": 1, "ended": 1, "cache_write_tokens": 50}))
    usage = harbor_report(trial, "anthropic/claude-sonnet-4-5").usage
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (300, 100, 50)
    # A trial kept before the calls file: writes unknown (absent), never taken for 0.
    (trial / CALLS_FILE).unlink()
    usage = harbor_report(trial, "anthropic/claude-sonnet-4-5").usage
    assert usage is not None and usage.cache_write_tokens is None and usage.input_tokens == 350


def test_an_installed_claude_code_s_cache_writes_come_out_of_harbors_input_total(tmp_path: Path) -> None:
    # Harbor's Claude Code context: n_input_tokens = input + cache read + cache creation.
    trial = _trial(tmp_path, {"n_input_tokens": 1450, "n_cache_tokens": 1000, "n_output_tokens": 40,
                              "cost_usd": 0.0021},
                   {"input_tokens": 400, "output_tokens": 40, "cache_read_tokens": 1000, "cache_write_tokens": 50,
                    "cost_usd": 0.0021, "source": "result", "request_ids": ["r1"]}, ["r1"])
    usage = harbor_report(trial, "anthropic/claude-sonnet-4-5").usage
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (400, 1000, 50)
