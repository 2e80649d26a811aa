"""The REAL Gemini CLI (installed from npm by .ci/run) against the fake provider's Gemini API on
loopback, through the cell runner on the local backend: usage.json equals what the fake served
(multi-turn with function calls, killed attempts included), every response id is recorded, each
failure is classed as the scheduler acts on it, the server's 429 delay is honoured, and the
watchdog stops a model that calls the same tool forever."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from support.fake_provider import Answer, FakeProvider
from test_real_clis import _attempt, _needs, _parallel

from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.suite import Watchdog

pytestmark = pytest.mark.slow
MODEL = "gemini-2.5-pro"


def _gemini(tmp: Path, answers: list[Answer], timeout: float = 120.0, watchdog: Watchdog | None = None,
            default: Answer | None = None, max_turns: int | None = None) -> tuple[AttemptSummary, FakeProvider]:
    with FakeProvider(default=default) as fake:
        fake.then(*answers)
        summary = _attempt(tmp, "gemini-cli", MODEL, {"GOOGLE_GEMINI_BASE_URL": fake.url}, timeout,
                           watchdog=watchdog, max_turns=max_turns)
        return summary, fake


def _usage(summary: AttemptSummary) -> dict[str, object]:
    usage = summary.to_json()["usage"]
    assert isinstance(usage, dict), summary.to_json()
    return usage


def _served(fake: FakeProvider) -> tuple[int, int, int]:
    """What the fake billed, as the contract counts it: uncached input, output with thoughts, cache."""
    s = fake.served
    return s.input_tokens, s.output_tokens + s.thoughts_tokens, s.cache_read_tokens


def _telemetry(tmp: Path) -> list[dict[str, object]]:
    path = tmp / "attempt" / "logs" / "agent" / "sessions" / "telemetry.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


SHELL = "run_shell_command"


def test_gemini_cli_multi_turn_usage_and_every_failure_mode(tmp_path: Path) -> None:
    _needs("gemini")
    catalog = Catalog.default()
    work = [Answer(tool=SHELL, tool_input={"command": "echo start"}, input_tokens=310, output_tokens=23,
                   cache_read_tokens=40, thoughts_tokens=11),
            Answer(input_tokens=420, output_tokens=17, thoughts_tokens=4)]
    (ok, fake), (e401, f401), (e403, _), (e429, f429) = _parallel(
        lambda: _gemini(tmp_path / "ok", work),
        lambda: _gemini(tmp_path / "401", [Answer(kind="unauthorized")] * 5),
        lambda: _gemini(tmp_path / "403", [Answer(kind="forbidden")] * 5),
        lambda: _gemini(tmp_path / "429", [Answer(kind="rate_limit", retry_after=8),
                                           Answer(input_tokens=200, output_tokens=9)]))
    usage = _usage(ok)
    assert usage["source"] == "result", usage
    assert (usage["input_tokens"], usage["output_tokens"], usage["cache_read_tokens"]) == _served(fake) == (
        730, 55, 40)
    assert usage["request_ids"] == fake.served.request_ids and len(fake.served.request_ids) == 2, usage
    assert usage["model"] == MODEL and usage["session_id"] and usage["turns"] == 2
    # the CLI reports no cost: its tokens at gemini-2.5-pro's list price (ray_bench.agents.prices)
    assert usage["cost_basis"] == "estimated" and usage["cost_usd"] == pytest.approx(
        (730 * 1.25 + 55 * 10 + 40 * 0.125) / 1e6), usage
    assert ok.agent_error is None and classify(ok, catalog).valid

    # A bad key (the API's 400 API_KEY_INVALID) and a 403 are not retried by the CLI: the attempt
    # ends at once, classed auth.
    for summary, status in ((e401, 400), (e403, 403)):
        err = summary.to_json()["agent_error"]
        assert err["type"] == "auth" and err["status"] == status, err
        assert summary.agent is not None and not summary.agent.timed_out
        verdict = classify(summary, catalog)
        assert verdict.failure_class == "auth" and verdict.effect == "auth_failed", verdict
        assert _usage(summary)["input_tokens"] == 0 and _usage(summary)["source"] == "result"
    assert sum(f401.served.errors.values()) == 1, f401.served.errors

    # The 429's RetryInfo delay (8 s) is honoured: the retry came no sooner, then it answered.
    assert e429.agent_error is None and f429.served.answers == 1 and f429.served.errors == {"rate_limit": 1}
    events = _telemetry(tmp_path / "429")
    failed = next(e for e in events if e["event.name"] == "gemini_cli.api_error")
    answered = next(e for e in events if e["event.name"] == "gemini_cli.api_response")
    gap = (dt.datetime.fromisoformat(str(answered["event.timestamp"]))
           - dt.datetime.fromisoformat(str(failed["event.timestamp"]))).total_seconds()
    assert gap >= 8.0, (failed, answered)
    assert _usage(e429)["request_ids"] == f429.served.request_ids
    for sub in ("ok", "401", "429"):
        for path in (tmp_path / sub / "attempt").rglob("*"):
            if path.is_file():
                assert "sk-test-route-key" not in path.read_text(errors="replace"), path
        assert not (tmp_path / sub / "attempt" / "logs" / "agent" / ".gemini-telemetry.log").exists()


def test_gemini_cli_cut_attempts_record_what_was_served_and_why(tmp_path: Path) -> None:
    """Cut by its timeout in a long tool call (usage from the CLI's chat file, ids from its
    telemetry, equal to what the fake served); cut in the CLI's 5xx and 429 retry loops (classed
    from the retries, the server's delay kept); a stalled provider (unknown, never 0)."""
    _needs("gemini")
    catalog = Catalog.default()
    work = [Answer(tool=SHELL, tool_input={"command": "echo start"}, input_tokens=310, output_tokens=23,
                   cache_read_tokens=40, thoughts_tokens=6),
            Answer(tool=SHELL, tool_input={"command": "sleep 150"}, input_tokens=420, output_tokens=17)]
    # (The shell tool runs its command in a process group of its own: on the local backend the
    # `sleep` outlives the CLI's kill, so it is kept short.) The cut needs the CLI started, both
    # answers served and its telemetry batch written (every 5 s) before the kill: 12.5 s + 5 s
    # from the agent's start at load 10 here, so it is cut at 45 s like the other three (it was
    # 90 s, and the test took 92 s).
    (killed, fake), (e500, _), (e429, _), (stall, _) = _parallel(
        lambda: _gemini(tmp_path / "killed", work, timeout=45.0),
        lambda: _gemini(tmp_path / "500", [Answer(kind="server_error")] * 30, timeout=45.0),
        lambda: _gemini(tmp_path / "429", [Answer(kind="rate_limit", retry_after=20)] * 30, timeout=45.0),
        lambda: _gemini(tmp_path / "stall", [Answer(kind="stall")] * 3, timeout=45.0))
    assert killed.agent is not None and killed.agent.timed_out
    usage = _usage(killed)
    assert usage["source"] == "session", usage
    assert (usage["input_tokens"], usage["output_tokens"], usage["cache_read_tokens"]) == _served(fake) == (
        730, 46, 40)
    assert usage["request_ids"] == fake.served.request_ids and len(usage["request_ids"]) == 2, usage
    # Cut by its timeout in its own tool: a lower bound, and why (a call may follow the SIGTERM, #25).
    assert usage["stopped_in_turn"] is True and usage["bound"] == "lower_bound", usage
    assert list((tmp_path / "killed" / "attempt" / "logs" / "agent" / "sessions").rglob("session-*.jsonl"))
    verdict = classify(killed, catalog)
    assert killed.agent_error is None and verdict.valid and "agent_timeout" in verdict.flags, verdict

    err = e500.to_json()["agent_error"]
    assert err["type"] == "server_error" and err["status"] == 500, err
    assert classify(e500, catalog).failure_class == "provider"
    err = e429.to_json()["agent_error"]
    assert err["type"] == "rate_limit" and err["retry_after"] == 20.0, err
    verdict = classify(e429, catalog)
    assert verdict.effect == "rate_limited" and verdict.retry_after == 20.0
    for summary in (e500, e429):  # refused calls are not billed: known to be nothing
        assert summary.usage is not None and summary.usage.known and summary.usage.output_tokens == 0
    assert stall.to_json()["agent_error"]["type"] == "no_answer"
    assert _usage(stall)["source"] == "unknown" and _usage(stall)["input_tokens"] is None
    written = json.loads((tmp_path / "stall" / "attempt" / "logs" / "agent" / "usage.json").read_text())
    assert written["source"] == "unknown" and "input_tokens" not in written, written  # absent, never 0


#: A degenerate model: the same shell call, forever.
LOOP = Answer(tool=SHELL, tool_input={"command": "ls"}, input_tokens=120, output_tokens=7)


def test_gemini_cli_calling_one_tool_forever_is_stopped_live_and_max_turns_reaches_it(tmp_path: Path) -> None:
    _needs("gemini")
    # repeats=3: the CLI's own loop detection ends a run at the 5th identical call (exit 0).
    (loop, fake), (bounded, bfake), (own, ofake) = _parallel(
        lambda: _gemini(tmp_path / "loop", [], timeout=150.0, watchdog=Watchdog(repeats=3), default=LOOP),
        lambda: _gemini(tmp_path / "turns", [], timeout=150.0, default=LOOP, max_turns=3),
        lambda: _gemini(tmp_path / "own", [], timeout=150.0, default=LOOP))
    # No watchdog: the CLI's own loop detection stops it. Its 5th identical call is broken off
    # (strike 1: the model is told), the next one too (strike 2: the run ends, "success"). Both were
    # served and billed; its totals hold the 4 it read to their end, its telemetry shows all 6 sent.
    assert own.watchdog is None and own.agent is not None and own.agent.exit_code == 0, own.to_json()
    assert ofake.served.answers == 6, ofake.served
    usage = _usage(own)
    assert usage["source"] == "result" and usage["turns"] == 4, usage
    assert usage["input_tokens"] == 120 * 4 and usage["output_tokens"] == 7 * 4, usage
    assert usage["calls_unfinished"] == 2 and usage["bound"] == "lower_bound", usage  # at least, not exact
    assert usage["request_ids"] == ofake.served.request_ids[:4], usage
    err = own.to_json()["agent_error"]
    assert err["type"] == "loop" and "consecutive_identical_tool_calls" in err["message"], err
    verdict = classify(own, Catalog.default())
    assert verdict.failure_class == "behaviour" and "degeneration" in verdict.flags and not verdict.valid
    assert loop.watchdog is not None and loop.watchdog.rule == "repeated_tool_call", (loop.watchdog, loop.agent)
    assert loop.watchdog.evidence[0] == f'{SHELL} {{"command": "ls"}}'
    verdict = classify(loop, Catalog.default())
    assert verdict.failure_class == "behaviour" and not verdict.valid
    assert 3 <= fake.served.answers <= 5, fake.served.answers
    # Stopped before its result line: every answer the chat file (or the telemetry) holds is
    # counted; the ids are those whose telemetry batch was written before the kill (every 5 s);
    # an answer the stream showed but no record holds says so (call_under_way).
    usage = _usage(loop)
    assert usage["source"] == "session", usage
    ids = usage["request_ids"]
    assert isinstance(ids, list) and ids == fake.served.request_ids[:len(ids)], (usage, fake.served.request_ids)
    turns = usage["turns"]
    assert isinstance(turns, int) and 1 <= turns <= fake.served.answers, usage
    assert usage["input_tokens"] == 120 * turns and usage["output_tokens"] == 7 * turns, usage
    assert turns == fake.served.answers or usage["call_under_way"], usage
    assert usage["stopped_in_turn"] is True and usage["bound"] == "lower_bound", usage
    # The role's max_turns reached the CLI (model.maxSessionTurns): it stopped itself after 3
    # answers, the agent's outcome, with the CLI's own totals.
    assert bounded.agent_error is None and bounded.watchdog is None, bounded.to_json()
    assert bfake.served.answers == 3, bfake.served
    usage = _usage(bounded)
    assert usage["source"] == "result" and usage["input_tokens"] == 360 and usage["output_tokens"] == 21, usage
    ids = usage["request_ids"]
    assert isinstance(ids, list) and ids == bfake.served.request_ids[:len(ids)], usage


def test_gemini_cli_refused_again_and_again_is_stopped_live_from_its_stderr(tmp_path: Path) -> None:
    """The CLI retries a 429 and a 5xx ten times (minutes); its retries are on stderr only. Three
    in a row end the run live, classed from those retries with the server's delay, well before
    the agent's timeout."""
    _needs("gemini")
    catalog = Catalog.default()
    (e429, f429), (e500, f500) = _parallel(
        lambda: _gemini(tmp_path / "429", [Answer(kind="rate_limit", retry_after=3)] * 30, timeout=150.0),
        lambda: _gemini(tmp_path / "500", [Answer(kind="server_error")] * 30, timeout=150.0))
    for summary, fake in ((e429, f429), (e500, f500)):
        assert summary.agent is not None and not summary.agent.timed_out, summary.to_json()
        assert summary.agent.stopped is not None and "retries in a row" in summary.agent.stopped, summary.agent
        assert sum(fake.served.errors.values()) == 3, fake.served.errors  # stopped at the third refusal
    err = e429.to_json()["agent_error"]
    assert err["type"] == "rate_limit" and err["retry_after"] == 3.0, err
    verdict = classify(e429, catalog)
    assert verdict.effect == "rate_limited" and verdict.retry_after == 3.0
    err = e500.to_json()["agent_error"]
    assert err["type"] == "server_error" and err["status"] == 500, err
