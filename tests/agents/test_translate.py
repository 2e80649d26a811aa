"""Adapters' readings of native output, pure (the real-CLI tests prove these formats)."""

from __future__ import annotations

import datetime as dt
import json

from ray_bench.agents import ADAPTERS, adapter
from ray_bench.agents.base import CliRun, reset_time

NOW = dt.datetime(2026, 11, 30, 15, 0, tzinfo=dt.UTC).timestamp()


def _run(stdout: str = "", stderr: str = "", code: int | None = 0, timed_out: bool = False) -> CliRun:
    return CliRun(stdout=stdout, stderr=stderr, exit_code=code, timed_out=timed_out, duration_sec=5, now=NOW)


def test_reset_times_as_the_clis_print_them() -> None:
    assert reset_time("You've hit your session limit · resets 4:18pm (UTC)", NOW) == NOW + 78 * 60
    assert reset_time("Claude AI usage limit reached|1796100000", NOW) == 1796100000
    # A time already past today is tomorrow's.
    assert reset_time("resets 2pm (UTC)", NOW) == NOW + 23 * 3600
    assert reset_time("resets 9am (Europe/Paris)", NOW) == dt.datetime(
        2026, 12, 1, 8, 0, tzinfo=dt.UTC).timestamp()
    assert reset_time("no time here", NOW) is None


def test_claude_result_with_an_expired_oauth_token_is_expired() -> None:
    out = json.dumps({"type": "result", "is_error": True, "api_error_status": 401,
                      "result": "Failed to authenticate. API Error: 401 OAuth token has expired."})
    report = adapter("claude-code").translate(_run(out, code=1))
    assert report.error is not None and report.error.type == "expired"


def test_claude_stream_json_last_result_line_is_read() -> None:
    lines = [json.dumps({"type": "system"}), json.dumps({"type": "result", "subtype": "success", "is_error": False,
                                                         "usage": {"input_tokens": 3, "output_tokens": 4},
                                                         "total_cost_usd": 0.01})]
    report = adapter("claude-code").translate(_run("\n".join(lines)))
    assert report.error is None and report.usage is not None and report.usage.output_tokens == 4


def test_codex_retry_messages_then_timeout_is_no_answer() -> None:
    out = "\n".join(json.dumps(e) for e in [{"type": "thread.started", "thread_id": "t"},
                                             {"type": "error", "message": "Reconnecting... 2/5 (429)"}])
    report = adapter("codex").translate(_run(out, code=None, timed_out=True))
    assert report.error is not None and report.error.type == "no_answer" and "Reconnecting" in report.error.message


def test_gemini_error_on_stderr() -> None:
    err = 'warning line\n' + json.dumps({"session_id": "s", "error": {
        "type": "Error", "message": "[429] RESOURCE_EXHAUSTED quota", "code": 1}})
    report = adapter("gemini-cli").translate(_run("", err, code=1))
    assert report.error is not None and report.error.type == "rate_limit" and report.error.status == 429


def test_models_each_adapter_refuses() -> None:
    assert adapter("claude-code").refuse_model("gpt-5") is not None
    assert adapter("claude-code").refuse_model("sonnet") is None
    assert adapter("codex").refuse_model("claude-opus-4-1") is not None
    assert adapter("gemini-cli").refuse_model("gemini-2.5-pro") is None
    assert adapter("claude-code").refuse_model(None) is not None
    assert ADAPTERS["command"].refuse_model(None) is None
