"""Adapters' readings of native output, pure (the real-CLI tests prove these formats)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ray_bench.agents import ADAPTERS, adapter
from ray_bench.agents.base import SESSIONS_DIR, STARTED_MARK, CliRun, Invocation, reset_time, wrap
from ray_bench.agents.prices import estimate_usd, with_cost
from ray_bench.models.agent import Usage

NOW = dt.datetime(2026, 11, 30, 15, 0, tzinfo=dt.UTC).timestamp()


def _run(stdout: str = "", stderr: str = "", code: int | None = 0, timed_out: bool = False) -> CliRun:
    return CliRun(stdout=stdout, stderr=stderr, exit_code=code, timed_out=timed_out, duration_sec=5, now=NOW)


def test_reset_times_as_the_clis_print_them() -> None:
    # The CLI drops the seconds: the window opens at the end of the printed minute.
    assert reset_time("You've hit your session limit · resets 4:18pm (UTC)", NOW) == NOW + 79 * 60
    assert reset_time("Claude AI usage limit reached|1796100000", NOW) == 1796100000
    # A time already past today is tomorrow's.
    assert reset_time("resets 2pm (UTC)", NOW) == NOW + 23 * 3600 + 60
    assert reset_time("resets 9am (Europe/Paris)", NOW) == dt.datetime(
        2026, 12, 1, 8, 1, tzinfo=dt.UTC).timestamp()
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


def test_codex_retry_messages_then_timeout_is_the_trouble_it_was_retrying() -> None:
    # Issue 25: a retry loop cut by the timeout is classed by its status (it was no_answer).
    out = "\n".join(json.dumps(e) for e in [{"type": "thread.started", "thread_id": "t"},
                                             {"type": "error", "message": "Reconnecting... 2/5 (429)"}])
    report = adapter("codex").translate(_run(out, code=None, timed_out=True))
    assert report.error is not None and report.error.type == "rate_limit" and "Reconnecting" in report.error.message
    out = "\n".join(json.dumps(e) for e in [{"type": "thread.started", "thread_id": "t"}, {
        "type": "error", "message": "Reconnecting... waiting for network (Connection failed: error sending request)"}])
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


# -- Claude Code 2.1.197, real output (tests/agents/fixtures/claude-code-2.1.197/README.md) ----------

FIXTURES = Path(__file__).parent / "fixtures" / "claude-code-2.1.197"
SERVED = json.loads((FIXTURES / "served.json").read_text())


def _fixture(name: str, *, cut: bool = False, sessions: bool = True) -> CliRun:
    """A captured run; ``cut``: only the lines before its result (as if killed then)."""
    lines = (FIXTURES / f"{name}.stream.jsonl").read_text().splitlines()
    if cut:
        lines = [ln for ln in lines if '"type":"result"' not in ln and '"<synthetic>"' not in ln]
    session = FIXTURES / f"{name}.session.jsonl"
    kept = (("p/s.jsonl", session.read_text()),) if sessions and session.is_file() else ()
    served = SERVED.get(name, {})
    code = None if cut or served.get("exit_code", 0) < 0 else served.get("exit_code", 0)
    return CliRun(stdout="\n".join(lines), stderr="", exit_code=code, timed_out=cut, duration_sec=40,
                  now=NOW, sessions=kept)


def test_claude_finished_run_records_every_request_id_it_was_served() -> None:
    report = adapter("claude-code").translate(_fixture("tool-call"))
    served = SERVED["tool-call"]
    assert report.error is None and report.usage is not None
    assert report.usage.request_ids == served["request_ids"] and len(served["request_ids"]) == 2
    assert (report.usage.input_tokens, report.usage.output_tokens, report.usage.cache_read_tokens) == (
        served["input_tokens"], served["output_tokens"], served["cache_read_tokens"])
    assert report.usage.source == "result" and report.usage.cost_usd is not None and report.usage.cost_usd > 0


def test_claude_killed_run_takes_its_usage_from_the_session_transcript() -> None:
    served = SERVED["killed"]
    report = adapter("claude-code").translate(_fixture("killed"))
    usage = report.usage
    assert usage is not None and usage.source == "session"
    assert (usage.input_tokens, usage.output_tokens) == (served["input_tokens"], served["output_tokens"]) == (300, 20)
    assert usage.request_ids == served["request_ids"] and usage.session_id
    assert usage.cost_usd is None  # the CLI prints cost only with its result: unknown, not $0
    timed_out = adapter("claude-code").translate(dataclasses.replace(_fixture("killed"), timed_out=True))
    assert timed_out.error is None  # the agent's timeout: scored
    # ... and its usage, stopped in its own tool, a lower bound (a call may follow the SIGTERM).
    assert timed_out.usage == usage.model_copy(update={"stopped_in_turn": True})
    # Without the transcript the stream's per-message usage still says output 1 (not yet final).
    stream_only = adapter("claude-code").translate(_fixture("killed", sessions=False)).usage
    assert stream_only is not None and stream_only.source == "stream" and stream_only.output_tokens == 1
    assert stream_only.request_ids == served["request_ids"]


@pytest.mark.parametrize("how", ["timeout", "watchdog", "cancel"])
def test_claude_stopped_in_its_own_tool_is_a_lower_bound_sigkill_or_not(how: str) -> None:
    """Issue 25: a real Claude Code stopped while its tool ran can die of the SIGTERM itself (exit
    -15) after it sent the killed tool's result, a billed call no record holds. Its usage read
    from the stream and the transcript is then a lower bound, whatever the exit; stopped after its
    final answer (the transcript's last word ``end_turn``), no call could follow: exact."""
    claude = adapter("claude-code")
    stop = {"timeout": {"timed_out": True}, "watchdog": {"stopped": "repeated_tool_call"},
            "cancel": {"stopped": "cancelled"}}[how]
    in_tool = dataclasses.replace(_fixture("killed"), exit_code=-15, **stop)  # type: ignore[arg-type]
    usage = with_cost(claude.translate(in_tool).usage, "claude-sonnet-4-5")
    assert usage is not None and usage.source == "session" and not usage.killed_in_grace
    assert usage.stopped_in_turn is True and usage.bound == "lower_bound", usage
    # The tool-call run cut after its last answer (before its result line): its turn was over.
    answered = dataclasses.replace(_fixture("tool-call", cut=True), **{"timed_out": False, **stop})  # type: ignore[arg-type]
    usage = with_cost(claude.translate(answered).usage, "claude-sonnet-4-5")
    assert usage is not None and usage.source == "session" and usage.turns == 2
    assert usage.stopped_in_turn is None and usage.bound == "exact", usage
    # The same run read from its stream alone: no stop_reason there, so the turn's end is unproven.
    unproven = dataclasses.replace(answered, sessions=())
    usage = claude.translate(unproven).usage
    assert usage is not None and usage.stopped_in_turn is True, usage
    # A transcript whose last word is the tool's result: the next call was to come.
    session = (FIXTURES / "tool-call.session.jsonl").read_text().splitlines()
    cut_at = next(i for i, ln in enumerate(session) if '"tool_result"' in ln)
    mid = dataclasses.replace(answered, sessions=(("p/s.jsonl", "\n".join(session[:cut_at + 1])),))
    usage = claude.translate(mid).usage
    assert usage is not None and usage.source == "session" and usage.stopped_in_turn is True, usage
    # Not stopped by the harness (a crash, the OOM killer): no call follows a SIGKILL it did not send.
    crashed = claude.translate(_fixture("killed")).usage
    assert crashed is not None and crashed.stopped_in_turn is None


def test_claude_run_cut_before_any_answer_has_unknown_usage() -> None:
    report = adapter("claude-code").translate(_fixture("stall", cut=True))
    assert report.usage is not None and report.usage.source == "unknown"
    assert report.usage.input_tokens is None and report.usage.output_tokens is None and report.usage.cost_usd is None
    assert report.error is not None and report.error.type == "no_answer"


@pytest.mark.parametrize(("name", "kind"), [("http-401", "auth"), ("http-429", "rate_limit"),
                                            ("http-529", "overloaded"), ("http-500", "server_error")])
def test_claude_retries_classify_the_attempt_finished_or_cut(name: str, kind: str) -> None:
    retries = [json.loads(ln) for ln in (FIXTURES / f"{name}.stream.jsonl").read_text().splitlines()
               if '"api_retry"' in ln]
    status, delay = retries[-1]["error_status"], retries[-1]["retry_delay_ms"] / 1000
    for cut in (False, True):
        report = adapter("claude-code").translate(_fixture(name, cut=cut))
        error = report.error
        assert error is not None and error.type == kind and error.status == status, (cut, error)
        if kind in ("rate_limit", "overloaded"):
            assert error.retry_after == pytest.approx(delay, abs=1e-3)  # the CLI's own wait, the server's
        # Refused calls are not billed: nothing was spent, and that is known.
        assert report.usage is not None and report.usage.source != "unknown" and report.usage.output_tokens == 0
    # The 429 fake sent retry-after: 2, and the CLI waited exactly that before its first retry.
    if name == "http-429":
        assert retries[0]["retry_delay_ms"] == 2000


def test_claude_live_reader_reports_a_login_refused_through_its_retries() -> None:
    reader = adapter("claude-code").live_reader()
    events = [reader.read(ln) for ln in (FIXTURES / "http-401.stream.jsonl").read_text().splitlines()]
    refused = [e.refused for e in events if e is not None and e.refused]
    assert refused and refused[0].startswith("HTTP 401 authentication_failed on 3 retries"), refused
    reader = adapter("claude-code").live_reader()  # 529s are retried, never refused
    assert not any(e is not None and e.refused for e in
                   (reader.read(ln) for ln in (FIXTURES / "http-529.stream.jsonl").read_text().splitlines()))


def test_claude_weekly_limit_cools_until_the_reset_it_was_sent() -> None:
    run = _fixture("weekly-limit")
    report = adapter("claude-code").translate(run)
    events = [json.loads(ln) for ln in run.stdout.splitlines()]
    resets = next(e["rate_limit_info"]["resetsAt"] for e in events if e["type"] == "rate_limit_event")
    result = events[-1]["result"]
    assert "weekly limit" in result and "resets Dec 4" in result, result
    assert report.error is not None and report.error.type == "usage_limit" and report.error.reset_at == resets
    # The printed text alone says the same, to the end of its minute (it prints "8pm" for 20:00:12).
    printed = reset_time(result, resets - 3 * 86400)
    assert printed is not None and 0 < printed - resets <= 60


def test_claude_max_turns_is_passed_and_reaching_it_is_the_agents_outcome() -> None:
    line = adapter("claude-code").command(Invocation(model="sonnet", max_turns=7))
    assert "--max-turns 7" in line
    assert "--max-turns" not in adapter("claude-code").command(Invocation(model="sonnet"))
    report = adapter("claude-code").translate(_fixture("max-turns"))
    assert report.error is None and report.usage is not None and report.usage.output_tokens == 20


def test_reset_times_in_every_form_the_cli_prints() -> None:
    # 18:33:13 prints "6:33pm": the window is not open before 18:34:00.
    assert reset_time("resets 6:33pm (UTC)", NOW) == dt.datetime(2026, 11, 30, 18, 34, tzinfo=dt.UTC).timestamp()
    assert reset_time("resets Dec 4, 5:56pm (UTC)", NOW) == dt.datetime(
        2026, 12, 4, 17, 57, tzinfo=dt.UTC).timestamp()
    assert reset_time("resets Jan 2, 2027, 6am (America/New_York)", NOW) == dt.datetime(
        2027, 1, 2, 11, 1, tzinfo=dt.UTC).timestamp()
    # A date without a year that has passed is next year's.
    assert reset_time("resets Jan 3, 9am (UTC)", NOW) == dt.datetime(2027, 1, 3, 9, 1, tzinfo=dt.UTC).timestamp()
    assert reset_time("You've hit your fast limit · resets in 2h 5m", NOW) == NOW + 2 * 3600 + 6 * 60
    assert reset_time("resets in 45s", NOW) == NOW + 46
    assert reset_time("resets Feb 30, 1pm (UTC)", NOW) is None


def test_session_files_are_collected_only_for_the_named_session(tmp_path: Path) -> None:
    claude = adapter("claude-code")
    stdout = (FIXTURES / "killed.stream.jsonl").read_text()
    sid = claude.session_ids(stdout)[0]
    home, logs = tmp_path / "home", tmp_path / "logs"
    project = home / ".claude" / "projects" / "-app"
    project.mkdir(parents=True)
    (project / "old-session-0000.jsonl").write_text("{}")
    (logs / "agent").mkdir(parents=True)
    (logs / "agent" / STARTED_MARK).write_text("")
    os.utime(logs / "agent" / STARTED_MARK, (NOW, NOW))
    (project / f"{sid}.jsonl").write_text("{}")
    (project / sid / "subagents").mkdir(parents=True)
    (project / sid / "subagents" / "agent-1.jsonl").write_text("{}")
    (project / "other-attempt-1111.jsonl").write_text("{}")  # a shared HOME: not ours
    for old in (project / "old-session-0000.jsonl",):
        os.utime(old, (NOW - 60, NOW - 60))
    line = claude.collect_sessions(stdout)
    assert line is not None
    subprocess.run(["sh", "-c", line], env={"HOME": str(home), "LOGS_DIR": str(logs), "PATH": os.environ["PATH"]},
                   check=True)
    got = sorted(str(p.relative_to(logs / "agent" / SESSIONS_DIR)) for p in (logs / "agent").rglob("*.jsonl"))
    assert got == [f"-app/{sid}.jsonl", f"-app/{sid}/subagents/agent-1.jsonl"]
    assert claude.collect_sessions('{"type": "system", "session_id": "$(rm -rf /)"}') is None



@pytest.mark.skipif(shutil.which("busybox") is None, reason="busybox is not installed (apt-get install busybox-static)")
def test_a_session_written_in_the_second_the_cli_started_is_collected_under_busybox(tmp_path: Path) -> None:
    """busybox's ``find -newer`` compares whole seconds: a CLI that starts, writes its session and
    ends within one second (Codex on a one-answer task: a landing check lost its response ids
    so) must still have its session collected, in an image whose tools are busybox's alone."""
    applets = tmp_path / "bin"
    applets.mkdir()
    for tool in ("sh", "find", "touch", "date", "cat", "tee", "mkdir", "cp", "rm", "mkfifo"):
        (applets / tool).symlink_to(shutil.which("busybox"))  # type: ignore[arg-type]
    sid = "01a23341-876c-74f0-94af-25192b5c9b5b"
    cli = applets / "codex"
    cli.write_text(f'#!/bin/sh\nd="$HOME/.codex/sessions/2026/12/07"; mkdir -p "$d"\n'
                   f'echo "{{}}" >"$d/rollout-{sid}.jsonl"\necho \'{{"type":"thread.started","thread_id":"{sid}"}}\'\n')
    cli.chmod(0o755)
    home, logs = tmp_path / "home", tmp_path / "logs"
    (logs / "agent").mkdir(parents=True)
    env = {"HOME": str(home), "LOGS_DIR": str(logs), "PATH": str(applets)}
    codex = adapter("codex")
    for _ in range(3):  # each run lands within one second of its mark more often than not
        started = subprocess.run([str(applets / "sh"), "-c", wrap("codex")], env=env, capture_output=True,
                                 text=True, check=True)
        line = codex.collect_sessions(started.stdout)
        assert line is not None, started
        subprocess.run([str(applets / "sh"), "-c", line], env=env, check=True)
        assert (logs / "agent" / SESSIONS_DIR / "2026/12/07" / f"rollout-{sid}.jsonl").is_file()
        shutil.rmtree(logs / "agent" / SESSIONS_DIR)


# -- Codex CLI 0.171.0, real output (tests/agents/fixtures/codex-0.171.0/README.md) -----------------

CODEX = Path(__file__).parent / "fixtures" / "codex-0.171.0"
SERVED_CODEX = json.loads((CODEX / "served.json").read_text())


def _codex(name: str, *, cut: bool = False, rollout: bool = True) -> CliRun:
    lines = (CODEX / f"{name}.stream.jsonl").read_text().splitlines()
    if cut:  # as if killed before the turn ended
        lines = [ln for ln in lines if '"turn.completed"' not in ln and '"turn.failed"' not in ln]
    session = CODEX / f"{name}.rollout.jsonl"
    kept = (("2026/12/01/rollout.jsonl", session.read_text()),) if rollout and session.is_file() else ()
    return CliRun(stdout="\n".join(lines), stderr="", exit_code=None if cut else 0, timed_out=cut, duration_sec=40,
                  now=NOW, sessions=kept)


def test_codex_records_the_response_ids_of_its_session_file_finished_or_cut() -> None:
    rollout = [json.loads(ln) for ln in (CODEX / "ok.rollout.jsonl").read_text().splitlines()]
    ids = [r["payload"]["response_id"] for r in rollout if r["type"] == "token_usage_record"]
    assert len(ids) == 1 and ids[0].startswith("resp_")
    for cut in (False, True):
        report = adapter("codex").translate(_codex("ok", cut=cut))
        usage = report.usage
        assert usage is not None and usage.request_ids == ids, cut
        # 500 input of which 100 cached, 33 output: from the turn, or from the session file when cut.
        assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (400, 100, 33), cut
        assert usage.source == ("session" if cut else "result")
    report = adapter("codex").translate(_codex("ok", cut=True, rollout=False))
    assert report.usage is not None and report.usage.source == "unknown" and report.usage.output_tokens is None


@pytest.mark.parametrize(("name", "kind"), [("401", "auth"), ("429", "rate_limit"), ("500", "server_error")])
def test_codex_retries_classify_a_cut_attempt(name: str, kind: str) -> None:
    lines = (CODEX / f"{name}.stream.jsonl").read_text().splitlines()
    if name == "500":  # cut while it was still retrying, before the answer that came
        lines = lines[: next(n for n, ln in enumerate(lines) if '"agent_message"' in ln)]
    run = CliRun(stdout="\n".join(lines), stderr="", exit_code=None, timed_out=True, duration_sec=40, now=NOW)
    report = adapter("codex").translate(run if name == "500" else _codex(name, cut=True))
    assert report.error is not None and report.error.type == kind, report.error
    assert report.usage is not None and report.usage.source == "stream" and report.usage.output_tokens == 0
    if name != "500":  # and the finished run says the same
        assert adapter("codex").translate(_codex(name)).error.type == kind  # type: ignore[union-attr]


def test_codex_stalled_provider_is_no_answer_with_unknown_usage() -> None:
    report = adapter("codex").translate(_codex("stall", cut=True))
    assert report.error is not None and report.error.type == "no_answer"
    assert "waiting for network" in report.error.message
    assert report.usage is not None and report.usage.source == "unknown"


def test_codex_live_reader_ends_a_run_whose_key_is_refused_through_its_retries() -> None:
    """Codex 0.171.0 retries a 401 five times with backoff, then fails the turn: the third
    refusal in a row ends it live, and the cut run is classed ``auth`` from the same lines."""
    reader = adapter("codex").live_reader()
    lines = (CODEX / "401.stream.jsonl").read_text().splitlines()
    events = [(n, reader.read(line)) for n, line in enumerate(lines)]
    refused = [(n, e.refused) for n, e in events if e is not None and e.refused]
    assert refused and refused[0][1] == "HTTP 401 on 3 retries in a row", refused
    stop = refused[0][0]
    assert "Reconnecting... 3/5 (unexpected status 401" in lines[stop]
    cut = CliRun(stdout="\n".join(lines[:stop + 1]), stderr="", exit_code=None, timed_out=False, duration_sec=3,
                 now=NOW, stopped=f"refused: {refused[0][1]}")
    report = adapter("codex").translate(cut)
    assert report.error is not None and report.error.type == "auth" and report.error.status == 401, report.error
    assert report.usage is not None and report.usage.source != "unknown" and report.usage.output_tokens == 0
    # Retries of another kind (429, 500) are not a refused login.
    other = adapter("codex").live_reader()
    assert not any((e := other.read(line)) is not None and e.refused
                   for line in (CODEX / "429.stream.jsonl").read_text().splitlines())


def _with_writes(text: str, writes: int) -> str:
    """A captured Codex 0.171.0 output whose usage says ``writes`` of its input went to the cache."""
    return text.replace('"cache_write_input_tokens":0', f'"cache_write_input_tokens":{writes}')


def test_codex_cache_writes_are_read_from_the_turn_and_the_session_file_finished_or_cut() -> None:
    """Codex 0.171.0 writes ``cache_write_input_tokens`` beside ``cached_input_tokens`` (both
    inside ``input_tokens``): 500 input = 100 cached + 60 written + 340 fresh."""
    stream = _with_writes((CODEX / "ok.stream.jsonl").read_text(), 60)
    rollout = _with_writes((CODEX / "ok.rollout.jsonl").read_text(), 60)
    assert stream.count('"cache_write_input_tokens":60') == 1 and '"cache_write_input_tokens":60' in rollout
    sessions = (("2026/12/01/rollout.jsonl", rollout),)
    finished = CliRun(stdout=stream, stderr="", exit_code=0, timed_out=False, duration_sec=40, now=NOW,
                      sessions=sessions)
    cut_lines = [ln for ln in stream.splitlines() if '"turn.completed"' not in ln]
    cut = CliRun(stdout="\n".join(cut_lines), stderr="", exit_code=None, timed_out=True, duration_sec=40, now=NOW,
                 sessions=sessions)
    for run in (finished, cut):
        usage = adapter("codex").translate(run).usage
        assert usage is not None
        assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (
            340, 100, 60, 33), run.cut
    live = adapter("codex").live_reader()
    events = [e for e in (live.read(ln) for ln in stream.splitlines()) if e is not None and e.usage is not None]
    assert events[-1].usage is not None and events[-1].usage.cache_write_tokens == 60
    assert events[-1].tokens == 340 + 60 + 33  # cache writes are billed as input


def test_codex_without_cache_writes_in_its_usage_counts_them_as_input_and_prices_writes_as_input() -> None:
    old = (CODEX / "ok.stream.jsonl").read_text().replace('"cache_write_input_tokens":0,', "")
    assert "cache_write_input_tokens" not in old  # as Codex versions before the field print it
    usage = adapter("codex").translate(CliRun(stdout=old, stderr="", exit_code=0, timed_out=False,
                                              duration_sec=40, now=NOW)).usage
    assert usage is not None and (usage.input_tokens, usage.cache_write_tokens) == (400, 0)
    assert estimate_usd(usage, "gpt-5") is not None  # its cost stays known
    written = Usage(input_tokens=340, cache_read_tokens=100, cache_write_tokens=60, output_tokens=33)
    fresh = Usage(input_tokens=400, cache_read_tokens=100, cache_write_tokens=0, output_tokens=33)
    assert estimate_usd(written, "gpt-5") == pytest.approx(estimate_usd(fresh, "gpt-5"))  # no surcharge


def test_codex_websocket_fallback_is_never_the_attempts_last_error() -> None:
    """Codex 0.171.0 first tries a WebSocket (404 on ws://, five "Reconnecting..." lines), then
    prints its fallback to HTTPS: a run cut or crashed after that says nothing of the WebSocket."""
    lines = (CODEX / "ok.stream.jsonl").read_text().splitlines()
    fallback = next(n for n, ln in enumerate(lines) if "Falling back from WebSockets" in ln)
    assert any("url: ws://" in ln and '"type":"error"' in ln for ln in lines[:fallback])
    after = "\n".join(lines[:fallback + 1])
    for run in (CliRun(stdout=after, stderr="", exit_code=None, timed_out=True, duration_sec=40, now=NOW),
                CliRun(stdout=after, stderr="", exit_code=1, timed_out=False, duration_sec=40, now=NOW)):
        report = adapter("codex").translate(run)
        assert report.error is not None
        assert "ws://" not in report.error.message and "WebSocket" not in report.error.message, report.error
        assert "last:" not in report.error.message, report.error
    # Another reason that came later is the one said: the 429s on HTTPS, cut before the turn failed.
    limited = [ln for ln in (CODEX / "429.stream.jsonl").read_text().splitlines()
               if '"turn.failed"' not in ln]
    cut = CliRun(stdout="\n".join(limited), stderr="", exit_code=None, timed_out=True, duration_sec=40, now=NOW)
    report = adapter("codex").translate(cut)
    assert report.error is not None and report.error.type == "rate_limit" and "ws://" not in report.error.message
    # Still retrying the WebSocket when cut (no fallback yet): that is all it said, and it is kept.
    early = "\n".join(lines[:fallback])
    report = adapter("codex").translate(CliRun(stdout=early, stderr="", exit_code=None, timed_out=True,
                                               duration_sec=40, now=NOW))
    assert report.error is not None and "last: Reconnecting... 5/5" in report.error.message


def _classify_cut(report: object, agent_kind: str) -> object:
    """The verdict on a cut run the verifier scored (reward 0), with ``report``'s usage and error."""
    from ray_bench.evidence.catalog import Catalog
    from ray_bench.evidence.classify import classify
    from ray_bench.models.attempt import AttemptSummary, ExecFacts
    usage, error = report.usage, report.error  # type: ignore[attr-defined]
    summary = AttemptSummary.model_validate({
        "agent": ExecFacts(exit_code=None, timed_out=True), "verifier": ExecFacts(exit_code=0), "reward": 0.0,
        "usage": usage.bounded().model_dump() if usage is not None else None,
        "agent_error": error.model_dump() if error is not None else None, "agent_kind": agent_kind,
        "model": "gpt-5"})
    return classify(summary, Catalog.default())


def test_codex_cut_by_its_timeout_while_working_is_a_valid_row_flagged_agent_timeout() -> None:
    """Issue 54 item 1: Codex killed mid-turn prints nothing more (its JSON processor emits no
    event for an interrupted turn: codex-rs/exec/src/event_processor_with_jsonl_output.rs,
    ``TurnStatus::Interrupted``), so a turn cut while its tool ran or its next call was under way
    has no ``turn.completed`` and no error. That is the agent's outcome: a valid row flagged
    ``agent_timeout``, as Claude Code and Gemini CLI give (one rule: base.working_when_cut)."""
    lines = (CODEX / "tool-call.stream.jsonl").read_text().splitlines()
    started = next(n for n, ln in enumerate(lines) if '"item.started"' in ln)
    completed = next(n for n, ln in enumerate(lines) if '"item.completed"' in ln and "command_execution" in ln)
    # The rollout file the runner collects after the kill: the first response's usage record.
    record = next(ln for ln in (CODEX / "ok.rollout.jsonl").read_text().splitlines() if "token_usage_record" in ln)
    rollout = (("2026/12/02/rollout.jsonl", record),)
    for cut_at in (started, completed):  # its command running; its next call under way
        run = CliRun(stdout="\n".join(lines[:cut_at + 1]), stderr="", exit_code=None, timed_out=True,
                     duration_sec=40, now=NOW, sessions=rollout)
        report = adapter("codex").translate(run)
        assert report.error is None, (cut_at, report.error)
        verdict = _classify_cut(report, "codex")
        assert verdict.valid and "agent_timeout" in verdict.flags, verdict  # type: ignore[attr-defined]
    # Its answer arrived and then a retry loop began: cut in it, the provider's trouble, not a row.
    retry = json.dumps({"type": "error", "message": "Reconnecting... 1/5 (exceeded retry limit, last status: "
                        "429 Too Many Requests, request id: req_1)"})
    run = CliRun(stdout="\n".join([*lines[:completed + 1], retry]), stderr="", exit_code=None, timed_out=True,
                 duration_sec=40, now=NOW)
    report = adapter("codex").translate(run)
    assert report.error is not None and report.error.type == "rate_limit"
    assert not _classify_cut(report, "codex").valid  # type: ignore[attr-defined]
    # Never answered at all: still no_answer (a provider that went silent).
    assert adapter("codex").translate(_codex("stall", cut=True)).error.type == "no_answer"  # type: ignore[union-attr]


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_a_cut_with_a_call_under_way_after_an_answer_is_the_agents_outcome(agent: str) -> None:
    """The same rule on every adapter: answered, not retrying, a call under way at the cut: a
    valid row (its usage a lower bound), never no_answer."""
    if agent == "claude-code":
        lines = (FIXTURES / "tool-call.stream.jsonl").read_text().splitlines()
        cut_at = next(n for n, ln in enumerate(lines) if '"type":"user"' in ln)  # the tool's result went back
        run = CliRun(stdout="\n".join(lines[:cut_at + 1]), stderr="", exit_code=None, timed_out=True,
                     duration_sec=40, now=NOW)
    else:
        lines = (CODEX / "tool-call.stream.jsonl").read_text().splitlines()
        cut_at = next(n for n, ln in enumerate(lines) if '"item.completed"' in ln and "command_execution" in ln)
        record = next(ln for ln in (CODEX / "ok.rollout.jsonl").read_text().splitlines() if "token_usage_record" in ln)
        run = CliRun(stdout="\n".join(lines[:cut_at + 1]), stderr="", exit_code=None, timed_out=True,
                     duration_sec=40, now=NOW, sessions=(("2026/12/02/rollout.jsonl", record),))
    report = adapter(agent).translate(run)
    assert report.error is None, report.error
    assert report.usage is not None and report.usage.bounded().bound == "lower_bound", report.usage


@pytest.mark.parametrize(("name", "status", "kind"), [("401", 401, "auth"), ("429", 429, "rate_limit")])
def test_codex_keeps_each_refused_call_with_its_id_and_class_apart_from_the_billed(
        name: str, status: int, kind: str) -> None:
    """Codex 0.171.0 prints each refused call's request id ("..., request id: req_..."; its
    UnexpectedResponseError / RetryLimitReachedError): the six refusals the fake served are kept,
    each once, as refused (not billed), and settle needs nothing of such an attempt (n/a)."""
    from ray_bench.evidence.settle import reconcile
    from ray_bench.evidence.usage_export import Charge, UsageExport
    from ray_bench.ledger.store import AttemptRow
    from ray_bench.models.attempt import AttemptSummary

    text = (CODEX / f"{name}.stream.jsonl").read_text()
    printed = list(dict.fromkeys(re.findall(r"request id: (req_[0-9a-f]+)", text)))
    assert len(printed) == SERVED_CODEX[name]["errors"][next(iter(SERVED_CODEX[name]["errors"]))] == 6
    for run in (_codex(name), _codex(name, cut=True)):
        usage = adapter("codex").translate(run).usage
        assert usage is not None and usage.request_ids == []
        assert [(r.request_id, r.status, r.type) for r in usage.refused] == [(i, status, kind) for i in printed]
    summary = AttemptSummary.parse({"usage": adapter("codex").translate(_codex(name)).usage.model_dump()})  # type: ignore[union-attr]
    row = AttemptRow("a", "a", "t", "c", "a", 1, 1, "acc", "local", "e", False, 1.0, "finished", 2.0, True, 1.0,
                     cost_usd=0.0)
    out, _, _ = reconcile([row], {"a": summary}, UsageExport("csv", (Charge(("req_other",), 0.01),)))
    assert out["a"].status == "n/a", out["a"]
    # the WebSocket's 404s (no request id) and the "high demand" 500s (none printed) add nothing
    assert adapter("codex").translate(_codex("500")).usage.refused == []  # type: ignore[union-attr]


def test_codex_usage_limit_reset_times_as_it_prints_them() -> None:
    """Codex prints a usage limit's reset in its local zone, unnamed (codex-rs/core/src/error.rs,
    ``format_retry_timestamp``): "%-I:%M %p" the same day, "%b %-d<suffix>, %Y %-I:%M %p" another."""
    plus = ("You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing), visit "
            "https://chatgpt.com/codex/settings/usage to purchase more credits or try again at 6:54 PM.")
    assert reset_time(plus, NOW) == dt.datetime(2026, 11, 30, 18, 55, tzinfo=dt.UTC).timestamp()
    other = "You've hit your usage limit. Try again at Jul 9th, 2027 1:47 AM."
    assert reset_time(other, NOW) == dt.datetime(2027, 7, 9, 1, 48, tzinfo=dt.UTC).timestamp()
    for day, suffix in ((1, "st"), (2, "nd"), (3, "rd"), (11, "th"), (22, "nd")):
        text = f"You've hit your usage limit. Try again at Dec {day}{suffix}, 2026 12:05 AM."
        assert reset_time(text, NOW) == dt.datetime(2026, 12, day, 0, 6, tzinfo=dt.UTC).timestamp(), text
    # In the CLI's own zone, where its rollout says it (the model is told "<timezone>...</timezone>").
    assert reset_time(plus, NOW, "Europe/Paris") == dt.datetime(2026, 11, 30, 17, 55, tzinfo=dt.UTC).timestamp()
    assert reset_time("You've hit your usage limit. Try again later.", NOW) is None


def _usage_limit_run(message: str, rollout: str = "") -> CliRun:
    lines = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
             {"type": "error", "message": message}, {"type": "turn.failed", "error": {"message": message}}]
    return CliRun(stdout="\n".join(json.dumps(e) for e in lines), stderr="", exit_code=1, timed_out=False,
                  duration_sec=3, now=NOW, sessions=(("2026/11/30/rollout.jsonl", rollout),) if rollout else ())


def _rate_limits(primary: tuple[float, float], secondary: tuple[float, float] | None = None) -> str:
    """A rollout's ``token_count`` event with Codex's rate-limit snapshot (codex-rs/codex-api/src/
    rate_limits.rs: ``RateLimitWindow {used_percent, window_minutes, resets_at}``)."""
    def window(w: tuple[float, float], minutes: int) -> dict[str, object]:
        return {"used_percent": w[0], "window_minutes": minutes, "resets_at": int(w[1])}
    limits: dict[str, object] = {"primary": window(primary, 300)}
    if secondary is not None:
        limits["secondary"] = window(secondary, 10080)
    told = "<environment_context>\n  <timezone>Etc/UTC</timezone>\n</environment_context>"
    context = {"type": "response_item", "payload": {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": told}]}}
    event = {"timestamp": "2026-11-30T15:00:00.000Z", "type": "event_msg",
             "payload": {"type": "token_count", "info": None, "rate_limits": limits}}
    return "\n".join(json.dumps(e) for e in (context, event))


def test_codex_usage_limit_is_read_from_the_message_and_the_exact_second_from_its_session() -> None:
    """Issue 54 item 2: the account cools until the reset, not 60 s; the rollout's snapshot gives
    the second (the printed time drops it), and the window it used up wins over the other."""
    at = dt.datetime(2026, 11, 30, 18, 54, 37, tzinfo=dt.UTC).timestamp()
    message = "You've hit your usage limit. Try again at 6:54 PM."
    error = adapter("codex").translate(_usage_limit_run(message)).error
    assert error is not None and error.type == "usage_limit" and error.reset_at == at - 37 + 60
    assert error.retry_after == pytest.approx(at - 37 + 60 - NOW)
    # the snapshot's window that resets in the printed minute: its exact second
    error = adapter("codex").translate(_usage_limit_run(message, _rate_limits((80, at), (40, at + 86400)))).error
    assert error is not None and error.reset_at == at and error.retry_after == pytest.approx(at - NOW)
    # the weekly window used up: its reset, days later than the 5-hour one the message may name
    week = at + 3 * 86400
    error = adapter("codex").translate(_usage_limit_run(message, _rate_limits((80, at), (100, week)))).error
    assert error is not None and error.reset_at == week
    # "Try again later." (no time printed): the latest window reset ahead
    error = adapter("codex").translate(_usage_limit_run("You've hit your usage limit. Try again later.",
                                                        _rate_limits((99, at), (50, week)))).error
    assert error is not None and error.type == "usage_limit" and error.reset_at == week
    # what the account learns from it: cooled until the reset
    from ray_bench.evidence.catalog import Catalog
    from ray_bench.evidence.classify import classify
    from ray_bench.models.attempt import AttemptSummary
    error = adapter("codex").translate(_usage_limit_run(message, _rate_limits((100, at)))).error
    summary = AttemptSummary.model_validate({"agent_error": error.model_dump(), "agent_kind": "codex",  # type: ignore[union-attr]
                                             "finished_at": NOW, "started_at": NOW - 3})
    verdict = classify(summary, Catalog.default())
    assert verdict.effect == "rate_limited" and verdict.retry_after == pytest.approx(at - NOW)


@pytest.mark.parametrize("delay", ["Infinity", "1e400", "-2000", "NaN"])
def test_claude_retry_delay_that_is_no_duration_is_no_wait(delay: str) -> None:
    """Issue 58: ``retry_delay_ms`` is the CLI's number; ``Infinity`` (JSON as Python reads it)
    would cool the account for good. It is unknown: the default wait."""
    text = (FIXTURES / "http-429.stream.jsonl").read_text()
    text = re.sub(r'"retry_delay_ms":\s*[0-9.]+', f'"retry_delay_ms": {delay}', text)
    assert delay in text
    report = adapter("claude-code").translate(_run(text, code=1))
    assert report.error is not None and report.error.type == "rate_limit" and report.error.retry_after is None


def test_claude_live_tokens_that_are_no_count_neither_crash_nor_subtract() -> None:
    """Issue 58: the watchdog's live count from the stream: ``Infinity`` made ``int()`` raise,
    a negative count lowered the total under the bound."""
    reader = adapter("claude-code").live_reader()
    line = '{"type": "assistant", "message": {"id": "m1", "usage": {"input_tokens": %s, "output_tokens": 5}}}'
    for bad in ("Infinity", "NaN", "-1000000", "1e400"):
        event = reader.read(line % bad)
        assert event is not None and event.tokens == 5, (bad, event)


def test_gemini_retry_delay_of_400_digits_is_no_wait() -> None:
    from ray_bench.agents.gemini.errors import delay_of

    assert delay_of('"retryDelay": "7s"') == 7.0
    assert delay_of('"retryDelay": "%ss"' % ("9" * 400)) is None
    assert delay_of("Please retry in 1.2.3s") is None
