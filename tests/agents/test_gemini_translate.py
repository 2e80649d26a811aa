"""The gemini-cli adapter's reading of Gemini CLI 0.61.0's record, pure: the stream-json events,
the chat file and the distilled telemetry, in the shapes the real CLI wrote them against the fake
provider (tests/agents/test_gemini_cli.py runs the real CLI)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ray_bench.agents import adapter
from ray_bench.agents.base import CliRun, Invocation
from ray_bench.agents.gemini import TELEMETRY_FILE

GEMINI = adapter("gemini-cli")
SID = "7a023fd9-9d7e-4707-98d2-06ef647d2e0d"
NOW = 1_796_000_000.0


def _lines(*events: dict[str, object]) -> str:
    return "\n".join(json.dumps(e) for e in events) + "\n"


INIT = {"type": "init", "session_id": SID, "model": "gemini-2.5-pro"}
PROMPT = {"type": "message", "role": "user", "content": "say hi"}
TOOL = {"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "t1", "parameters": {"command": "echo hi"}}
TOOL_DONE = {"type": "tool_result", "tool_id": "t1", "status": "success", "output": "hi"}
RESULT = {"type": "result", "status": "success", "stats": {
    "total_tokens": 805, "input_tokens": 750, "output_tokens": 50, "cached": 50, "input": 700, "duration_ms": 668,
    "tool_calls": 1, "models": {"gemini-2.5-pro": {"total_tokens": 805, "input_tokens": 750, "output_tokens": 50,
                                                    "cached": 50, "input": 700}}}}
#: The chat file: a function-call answer is appended twice (its tool calls added), same id.
CHAT = _lines(
    {"sessionId": SID, "projectHash": "c6", "kind": "main"},
    {"id": "u1", "type": "user", "content": [{"text": "say hi"}]},
    {"id": "g1", "type": "gemini", "content": "", "tokens": {"input": 350, "output": 20, "cached": 50, "thoughts": 5,
                                                             "tool": 0, "total": 375}, "model": "gemini-2.5-pro"},
    {"$set": {"lastUpdated": "2026-12-01T23:34:42.962Z"}},
    {"id": "g1", "type": "gemini", "content": "", "tokens": {"input": 350, "output": 20, "cached": 50, "thoughts": 5,
                                                             "tool": 0, "total": 375}, "model": "gemini-2.5-pro",
     "toolCalls": [{"id": "t1", "name": "run_shell_command"}]})


def _response(rid: str, prompt: int, output: int, cached: int = 0) -> list[dict[str, object]]:
    return [{"event.name": "gemini_cli.api_response", "model": "gemini-2.5-pro", "status_code": 200,
             "input_token_count": prompt, "output_token_count": output, "cached_content_token_count": cached,
             "thoughts_token_count": 0},
            {"event.name": "gen_ai.client.inference.operation.details", "gen_ai.response.id": rid}]


def _error(status: int, body: str) -> dict[str, object]:
    return {"event.name": "gemini_cli.api_error", "model": "gemini-2.5-pro", "status_code": status, "error": body}


QUOTA = json.dumps({"error": {"code": 429, "message": "You exceeded your current quota. Please retry in 7s.",
                              "status": "RESOURCE_EXHAUSTED", "details": [
                                  {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]}})


def _run(stdout: str, *, telemetry: list[dict[str, object]] | None = None, chat: str | None = CHAT,
         code: int | None = 0, timed_out: bool = False, stderr: str = "") -> CliRun:
    sessions = []
    if chat is not None:
        sessions.append(("work/chats/session-2026-12-01T23-34-7a023fd9.jsonl", chat))
    if telemetry is not None:
        sessions.append((TELEMETRY_FILE, _lines(*telemetry) if telemetry else ""))
    return CliRun(stdout=stdout, stderr=stderr, exit_code=code, timed_out=timed_out, duration_sec=30, now=NOW,
                  sessions=tuple(sessions))


def test_a_finished_run_is_the_cli_s_totals_with_every_response_id() -> None:
    telemetry = [*_response("req_a", 350, 20, 50), *_response("req_b", 400, 30)]
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, TOOL, TOOL_DONE, RESULT), telemetry=telemetry))
    usage = report.usage
    assert report.error is None and usage is not None and usage.source == "result"
    # thoughts (5) are billed as output; the CLI's output_tokens leaves them out, its total does not
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (700, 55, 50)
    assert usage.request_ids == ["req_a", "req_b"] and usage.session_id == SID and usage.model == "gemini-2.5-pro"
    assert usage.cost_usd is None


def _request() -> dict[str, object]:
    return {"event.name": "gemini_cli.api_request", "model": "gemini-2.5-pro"}


def test_a_loop_the_cli_stopped_itself_is_degenerate_and_at_least_what_its_totals_say() -> None:
    # Gemini CLI 0.61.0 against a model calling one tool forever: 4 calls read to their end, the
    # 5th and 6th broken off by its loop detection (strikes 1 and 2), then "success".
    warning = {"type": "error", "severity": "warning", "message": "Loop detected, stopping execution"}
    telemetry = [*[e for n in range(4) for e in (_request(), *_response(f"req_{n}", 120, 7))],
                 _request(), {"event.name": "loop_detected", "loop_type": "consecutive_identical_tool_calls",
                              "count": 1},
                 _request(), {"event.name": "loop_detected", "loop_type": "consecutive_identical_tool_calls",
                              "count": 2}]
    stats = {"total_tokens": 508, "input_tokens": 480, "output_tokens": 28, "cached": 0, "input": 480}
    stdout = _lines(INIT, PROMPT, *[TOOL, TOOL_DONE] * 4, warning, {"type": "result", "status": "success",
                                                                   "stats": stats})
    report = GEMINI.translate(_run(stdout, telemetry=telemetry, chat=None))
    usage = report.usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (480, 28)
    assert usage.calls_unfinished == 2 and usage.bounded().bound == "lower_bound"
    assert usage.request_ids == [f"req_{n}" for n in range(4)]
    assert report.error is not None and report.error.type == "loop", report.error
    assert "2 of its 6 calls" in report.error.message and "consecutive_identical_tool_calls" in report.error.message
    # Without its telemetry (a kill of the node one-liner, a read-only LOGS_DIR), the calls it broke
    # off cannot be counted: still a lower bound, never exact.
    blind = GEMINI.translate(_run(stdout, chat=None))
    assert blind.error is not None and blind.error.type == "loop" and blind.usage is not None
    assert blind.usage.calls_unfinished is None and blind.usage.bounded().bound == "lower_bound"
    # The same run without the loop: every call sent ended, exact.
    clean = GEMINI.translate(_run(_lines(INIT, PROMPT, TOOL, TOOL_DONE, RESULT),
                                  telemetry=[_request(), *_response("req_a", 350, 20, 50)]))
    assert clean.error is None and clean.usage is not None and clean.usage.calls_unfinished is None
    assert clean.usage.bounded().bound == "exact"


def test_a_run_killed_in_its_tool_counts_every_answer_from_the_chat_file_and_telemetry() -> None:
    # The second answer's tool was running at the kill: the chat file has not written its tokens
    # yet, the telemetry has.
    telemetry = [*_response("req_a", 350, 20, 50), *_response("req_b", 420, 17)]
    second = {**TOOL, "tool_id": "t2", "parameters": {"command": "sleep 300"}}
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, TOOL, TOOL_DONE, second), telemetry=telemetry,
                                   code=None, timed_out=True))
    usage = report.usage
    assert usage is not None and usage.source == "session" and not usage.call_under_way
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (720, 37, 50)
    assert usage.request_ids == ["req_a", "req_b"] and usage.request_ids_missing is None  # every id
    assert report.error is None  # its own tool ran into the timeout: the verifier scores it
    # the telemetry alone (no chat file came back) says the same
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, TOOL, TOOL_DONE, second), telemetry=telemetry, chat=None,
                                   code=None, timed_out=True))
    assert report.error is None and report.usage is not None and report.usage.input_tokens == 720


def test_the_chat_file_alone_still_gives_the_usage_of_a_killed_run() -> None:
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, TOOL), code=None, timed_out=True))
    usage = report.usage
    assert usage is not None and usage.source == "session" and usage.turns == 1  # the twice-written answer once
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (300, 25, 50)
    assert usage.request_ids == []  # no telemetry: no id is known, none is made up
    assert usage.request_ids_missing == 1  # and settle is told the ids are partial
    assert not usage.call_under_way
    # A second answer the stream showed (its tool call) that no record holds: said, not hidden.
    second = {**TOOL, "tool_id": "t2", "parameters": {"command": "sleep 300"}}
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, TOOL, TOOL_DONE, second), code=None, timed_out=True))
    assert report.usage is not None and report.usage.turns == 1 and report.usage.call_under_way


def test_cut_in_a_429_retry_loop_is_a_rate_limit_with_the_server_s_delay() -> None:
    report = GEMINI.translate(_run(_lines(INIT, PROMPT), telemetry=[_error(429, QUOTA)] * 3, chat=None,
                                   code=None, timed_out=True))
    assert report.error is not None and report.error.type == "rate_limit" and report.error.status == 429
    assert report.error.retry_after == 7.0
    # every call was refused: known to be nothing, not unknown
    assert report.usage is not None and report.usage.source == "stream" and report.usage.output_tokens == 0


def test_cut_in_a_5xx_retry_loop_after_an_answer_is_a_server_error() -> None:
    telemetry = [*_response("req_a", 350, 20), _error(500, '{"error":{"code":500,"status":"INTERNAL"}}')]
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, TOOL, TOOL_DONE), telemetry=telemetry, code=None,
                                   timed_out=True))
    assert report.error is not None and report.error.type == "server_error" and report.error.status == 500
    assert report.usage is not None and report.usage.request_ids == ["req_a"]


def test_retries_on_stderr_classify_a_cut_run_without_telemetry() -> None:
    stderr = ("Attempt 1 failed with status 503. Retrying with backoff... ApiError\n"
              "Attempt 2 failed with status 503. Retrying with backoff...\n")
    report = GEMINI.translate(_run(_lines(INIT, PROMPT), chat=None, code=None, timed_out=True, stderr=stderr))
    assert report.error is not None and report.error.type == "overloaded" and report.error.status == 503


def test_refusals_from_the_result_error() -> None:
    for status, grpc, kind in ((401, "UNAUTHENTICATED", "auth"), (403, "PERMISSION_DENIED", "auth"),
                               (429, "RESOURCE_EXHAUSTED", "rate_limit"), (503, "UNAVAILABLE", "overloaded"),
                               (500, "INTERNAL", "server_error")):
        body = json.dumps({"error": {"code": status, "message": "no", "status": grpc}})
        result = {"type": "result", "status": "error", "error": {"type": "unknown", "message": f"[API Error: {body}]"},
                  "stats": {"total_tokens": 0, "input_tokens": 0, "output_tokens": 0, "cached": 0, "input": 0}}
        report = GEMINI.translate(_run(_lines(INIT, PROMPT, result), chat=None, code=1))
        assert report.error is not None and (report.error.type, report.error.status) == (kind, status), report
        assert report.usage is not None and report.usage.input_tokens == 0 and report.usage.source == "result"


def test_a_bad_key_is_the_api_s_400_api_key_invalid_and_classed_auth() -> None:
    # The Gemini API's answer to a bad key, as Gemini CLI 0.61.0 prints it in its result error.
    body = json.dumps({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                                 "status": "INVALID_ARGUMENT", "details": [
                                     {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                                      "domain": "googleapis.com"}]}})
    for message in (f"[API Error: {body}]", '[API Error: {"error":{"code":400,"status":"INVALID_ARGUMENT",'
                                            '"details":[{"reason":"API_KEY_INVALID"}]}}]'):
        result = {"type": "result", "status": "error", "error": {"type": "unknown", "message": message},
                  "stats": {"total_tokens": 0, "input_tokens": 0, "output_tokens": 0, "cached": 0, "input": 0}}
        report = GEMINI.translate(_run(_lines(INIT, PROMPT, result), chat=None, code=1))
        assert report.error is not None and (report.error.type, report.error.status) == ("auth", 400), report
    # another 400 (a malformed request) is no refused login
    body = json.dumps({"error": {"code": 400, "message": "Invalid JSON payload", "status": "INVALID_ARGUMENT"}})
    result = {"type": "result", "status": "error", "error": {"type": "unknown", "message": f"[API Error: {body}]"},
              "stats": {}}
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, result), chat=None, code=1))
    assert report.error is not None and report.error.type == "agent", report.error


def test_the_daily_quota_is_a_usage_limit_until_midnight_pacific() -> None:
    result = {"type": "result", "status": "error", "error": {
        "type": "unknown", "message": "[API Error: You have exhausted your daily quota on this model.]"}, "stats": {}}
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, result), chat=None, code=1))
    assert report.error is not None and report.error.type == "usage_limit", report.error
    reset = dt.datetime.fromtimestamp(report.error.reset_at or 0, ZoneInfo("America/Los_Angeles"))
    assert (reset.hour, reset.minute) == (0, 0) and 0 < (report.error.reset_at or 0) - NOW <= 86400


def test_a_stalled_provider_is_no_answer_and_unknown_usage() -> None:
    report = GEMINI.translate(_run(_lines(INIT, PROMPT), telemetry=[], chat=None, code=None, timed_out=True))
    assert report.error is not None and report.error.type == "no_answer"
    assert report.usage is not None and report.usage.source == "unknown" and report.usage.input_tokens is None


def test_the_turn_bound_reached_is_the_agent_s_outcome() -> None:
    result = {"type": "result", "status": "error", "error": {
        "type": "FatalTurnLimitedError", "message": "Reached max session turns for this session."}, "stats": {}}
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, result), code=53))
    assert report.error is None and report.usage is not None


def test_the_command_streams_keeps_telemetry_and_passes_max_turns() -> None:
    line = GEMINI.command(Invocation(model="gemini-2.5-pro", max_turns=3))
    assert "--output-format stream-json" in line and "GEMINI_TELEMETRY_LOG_PROMPTS=false" in line
    assert '"maxSessionTurns": 3' in line
    assert "maxSessionTurns" not in GEMINI.command(Invocation(model="gemini-2.5-pro"))


def test_the_live_reader_sees_tool_calls_and_the_result_s_tokens() -> None:
    live = GEMINI.live_reader()
    event = live.read(json.dumps(TOOL))
    assert event is not None and event.tool_calls == ('run_shell_command {"command": "echo hi"}',)
    done = live.read(json.dumps(RESULT))
    assert done is not None and done.tokens == 700 + 55
    assert live.read("YOLO mode is enabled.") is None


#: Gemini CLI 0.61.0's retry lines on stderr (``retryWithBackoff``: ``debugLogger.warn``).
RETRY_500 = "Attempt {n} failed with status 500. Retrying with backoff... ApiError: got status: 500"
RETRY_QUOTA = "Attempt {n} failed: You exceeded your current quota, please check your plan. Please retry in 3s."


def test_the_live_reader_ends_a_run_refused_three_times_in_a_row_on_stderr() -> None:
    live = GEMINI.live_reader()
    assert live.read_stderr("Loaded cached credentials.") is None
    assert live.read_stderr("Attempt 1 failed. Retrying with backoff...") is None  # no status: a network error
    first, second = live.read_stderr(RETRY_500.format(n=1)), live.read_stderr(RETRY_QUOTA.format(n=2))
    assert first is not None and first.refused is None and second is not None and second.refused is None
    third = live.read_stderr(RETRY_QUOTA.format(n=3))
    assert third is not None and third.refused is not None and third.refused.startswith("HTTP 429 on 3 retries")
    # an answer in between resets the count: the CLI got past its retries
    live = GEMINI.live_reader()
    for n in (1, 2):
        live.read_stderr(RETRY_500.format(n=n))
    live.read(json.dumps(TOOL))
    event = live.read_stderr(RETRY_500.format(n=1))
    assert event is not None and event.refused is None
    assert live.read_stderr("Attempt 10 failed: boom. Max attempts reached") is None  # it gives up itself


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (gemini-cli is a Node program)")
def test_collecting_distills_the_telemetry_and_copies_this_session_s_chat_file(tmp_path: Path) -> None:
    logs, home = tmp_path / "logs", tmp_path / "home"
    (logs / "agent").mkdir(parents=True)
    (logs / "agent" / ".started").touch()
    chats = home / ".gemini" / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    (chats / "session-2026-12-01T23-34-7a023fd9.jsonl").write_text(CHAT)
    (chats / "session-2026-12-01T23-30-0badcafe.jsonl").write_text(CHAT)  # another attempt's
    # The raw file as the CLI's FileExporter writes it: pretty-printed records, one cut by a kill.
    records = [{"attributes": {"event.name": "gemini_cli.api_response", "input_token_count": 350,
                               "session.id": SID, "installation.id": "i"}},
               {"attributes": {"event.name": "gen_ai.client.inference.operation.details",
                               "gen_ai.response.id": "req_a", "gen_ai.input.messages": "the prompt"}},
               {"attributes": {"event.name": "gemini_cli.user_prompt", "prompt": "the prompt"}},
               {"attributes": {"event.name": "gemini_cli.api_request", "model": "gemini-2.5-pro",
                               "request_text": "the prompt"}},
               {"attributes": {"event.name": "loop_detected", "loop_type": "llm_detected_loop", "count": 2,
                               "analysis": "the prompt"}}]
    raw = "".join(json.dumps(r, indent=2) + "\n" for r in records) + '{\n  "attributes": {\n    "event.na'
    (logs / "agent" / ".gemini-telemetry.log").write_text(raw)
    # Its own error report in its TMPDIR (reportError, 0.61.0), the request's contents in its context.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    report = tmp / "gemini-client-error-Turn.run-sendMessageStream-2026-12-01T23-34-42-962Z.json"
    report.write_text(json.dumps({"error": {"message": "exception TypeError: fetch failed", "stack": "at x"},
                                  "context": [{"role": "user", "parts": [{"text": "the prompt"}]}]}))
    os.utime(logs / "agent" / ".started", (0, 0))  # the run started before it was written
    line = GEMINI.collect_sessions(_lines(INIT))
    assert line is not None
    env = {"HOME": str(home), "LOGS_DIR": str(logs), "PATH": os.environ["PATH"], "TMPDIR": str(tmp)}
    done = subprocess.run(["sh", "-c", line], check=False, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    kept = logs / "agent" / "sessions"
    assert [p.name for p in kept.rglob("session-*.jsonl")] == ["session-2026-12-01T23-34-7a023fd9.jsonl"]
    events = [json.loads(x) for x in (kept / TELEMETRY_FILE).read_text().splitlines()]
    assert events == [{"event.name": "gemini_cli.api_response", "input_token_count": 350},
                      {"event.name": "gen_ai.client.inference.operation.details", "gen_ai.response.id": "req_a"},
                      {"event.name": "gemini_cli.api_request", "model": "gemini-2.5-pro"},
                      {"event.name": "loop_detected", "loop_type": "llm_detected_loop", "count": 2}]
    assert not (logs / "agent" / ".gemini-telemetry.log").exists()  # no prompt kept in the artifacts
    kept_errors = [json.loads(x) for x in (logs / "agent" / "gemini-client-errors.jsonl").read_text().splitlines()]
    assert kept_errors == [{"file": report.name, "message": "exception TypeError: fetch failed", "stack": "at x"}]
    assert list(tmp.iterdir()) == []  # nothing left in the temporary directory


def test_each_call_is_priced_at_its_own_model_and_prompt_tier() -> None:
    """``auto`` routes turns to a pro or a flash model, and a pro call whose prompt is over 200k
    tokens is billed at the long-prompt rate: priced per call, not the totals at one price."""
    long_pro = {"event.name": "gemini_cli.api_response", "model": "gemini-2.5-pro", "input_token_count": 250_000,
                "output_token_count": 100, "cached_content_token_count": 200_000, "thoughts_token_count": 20}
    flash = {"event.name": "gemini_cli.api_response", "model": "gemini-3-flash-preview", "input_token_count": 1_000,
             "output_token_count": 10, "cached_content_token_count": 0, "thoughts_token_count": 0}
    stats = {"total_tokens": 251_130, "input_tokens": 251_000, "output_tokens": 110, "cached": 200_000,
             "input": 51_000, "models": {"gemini-2.5-pro": {"output_tokens": 100}}}
    result = {"type": "result", "status": "success", "stats": stats}
    report = GEMINI.translate(_run(_lines(INIT, PROMPT, TOOL, TOOL_DONE, result), chat=None,
                                   telemetry=[long_pro, flash]))
    usage = report.usage
    assert usage is not None and usage.cost_basis == "estimated"
    pro = (50_000 * 2.50 + 120 * 15.0 + 200_000 * 0.25) / 1e6  # over 200k: the long-prompt rate
    assert usage.cost_usd == pytest.approx(pro + (1_000 * 0.50 + 10 * 3.0) / 1e6)
    # the same tokens at the totals' one price would have been less than half of it
    assert usage.cost_usd > 1.9 * (51_000 * 1.25 + 130 * 10.0 + 200_000 * 0.125) / 1e6
