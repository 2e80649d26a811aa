"""The degeneration watchdog: its rules on real-shaped CLI output (pure, clock injected), and
scripted agents run through the cell runner on the local and docker backends: a looping agent
and an idle one are stopped live and classed ``behaviour`` with their evidence, the verifier
skipped; an agent that makes progress is left alone and scored."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from support.suites import make_suite

from ray_bench.agents import adapter
from ray_bench.agents.watchdog import DegenerationWatch, RefusalWatch
from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.suite import Arm, Watchdog
from ray_bench.plan.watchdog import effective, watchdog_lines
from ray_bench.sandboxes import SandboxBackend
from ray_bench.sandboxes.local import LocalBackend

# What the real CLIs print (claude 2.1 stream-json against tests/support/fake_provider.py; codex --json).
_CLAUDE_CALL = ('{"type":"assistant","message":{"id":"%s","type":"message","role":"assistant","model":"m",'
                '"content":[{"type":"tool_use","id":"toolu_%s","name":"Bash","input":{"command":"ls",'
                '"description":"List files"}}],"usage":{"input_tokens":120,"cache_creation_input_tokens":0,'
                '"cache_read_input_tokens":500,"output_tokens":7}},"session_id":"s"}')
_CLAUDE_RESULT = ('{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_%s",'
                  '"type":"tool_result","content":"hello.txt","is_error":false}]},"session_id":"s"}')


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _watch(agent: str = "command", clock: _Clock | None = None, **config: Any) -> DegenerationWatch:
    return DegenerationWatch(Watchdog(**config), adapter(agent).live_reader(), clock or _Clock())


def test_the_same_claude_tool_call_in_a_row_stops_it_and_names_the_call() -> None:
    watch = _watch("claude-code", repeats=4)
    for i in range(3):
        watch.feed("stdout", (_CLAUDE_CALL % (f"msg_{i}", i) + "\n" + _CLAUDE_RESULT % i + "\n").encode())
    assert watch.reason is None  # three: tool results between the calls do not break the run
    watch.feed("stdout", (_CLAUDE_CALL % ("msg_3", 3)).encode())
    assert watch.reason is None  # no newline yet: a line is judged when it is complete
    watch.feed("stdout", b"\n")
    assert watch.reason is not None and watch.reason.startswith("repeated_tool_call")
    assert watch.facts is not None and watch.facts.rule == "repeated_tool_call"
    assert watch.facts.evidence[0] == 'Bash {"command": "ls", "description": "List files"}'
    assert watch.facts.tokens == 4 * 127  # fresh input + output per message; cache reads excluded


def test_a_different_call_between_resets_the_count() -> None:
    watch = _watch("claude-code", repeats=3)
    other = _CLAUDE_CALL.replace('"command":"ls"', '"command":"cat hello.txt"')
    for i, line in enumerate([_CLAUDE_CALL, _CLAUDE_CALL, other, _CLAUDE_CALL, _CLAUDE_CALL]):
        watch.feed("stdout", (line % (f"m{i}", i) + "\n").encode())
    assert watch.reason is None


def test_codex_items_are_tool_calls_and_turn_usage_meets_the_token_bound() -> None:
    watch = _watch("codex", repeats=50, max_tokens=1000)
    item = {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                               "command": "bash -lc ls", "aggregated_output": "", "exit_code": 0}}
    turn = {"type": "turn.completed", "usage": {"input_tokens": 900, "cached_input_tokens": 300,
                                                "output_tokens": 200}}
    watch.feed("stdout", (json.dumps(item) + "\n" + json.dumps(turn) + "\n").encode())
    assert watch.reason is None and watch.tokens == 800
    watch.feed("stdout", (json.dumps(turn) + "\n").encode())
    assert watch.facts is not None and watch.facts.rule == "token_bound"
    assert watch.facts.tokens == 1600 and "past the arm's bound of 1000" in watch.facts.message


def test_plain_output_repeats_and_json_events_do_not_count_as_lines() -> None:
    watch = _watch("command", output_repeats=5)
    watch.feed("stdout", b"checking...\n" * 4 + b"\n\n")  # blank lines neither count nor break the run
    watch.feed("stderr", b"checking...\n" * 10)  # stderr is not read
    assert watch.reason is None
    watch.feed("stdout", b"checking...\n")
    assert watch.facts is not None and watch.facts.rule == "repeated_output"
    assert watch.facts.evidence[0] == "checking..."
    claude = _watch("claude-code", output_repeats=2)
    claude.feed("stdout", b'{"type":"system","subtype":"init"}\n' * 5)
    assert claude.reason is None


def test_idle_workspace_uses_the_clock_and_a_change_resets_it() -> None:
    clock = _Clock()
    watch = _watch(clock=clock, idle_minutes=2, poll_sec=10)
    clock.now += 100
    watch.workspace_changed()
    clock.now += 119
    watch.check_idle()
    assert watch.reason is None
    clock.now += 1
    watch.check_idle()
    assert watch.facts is not None and watch.facts.rule == "idle_workspace" and watch.facts.after_sec == 220


def test_the_executor_roles_spend_bound_stops_a_claude_run_at_list_price() -> None:
    # Each message: 120 fresh input, 500 cache reads, 7 output; at Sonnet's price $0.000615.
    watch = DegenerationWatch(Watchdog(max_spend_usd=0.0015, repeats=50), adapter("claude-code").live_reader(),
                              _Clock(), model="claude-sonnet-4-5")
    for i in range(2):
        watch.feed("stdout", (_CLAUDE_CALL % (f"msg_{i}", i) + "\n").encode())
    assert watch.reason is None and watch.spent_usd == pytest.approx(2 * 0.000615)
    watch.feed("stdout", (_CLAUDE_CALL % ("msg_2", 2) + "\n").encode())
    assert watch.facts is not None and watch.facts.rule == "spend_bound"
    assert watch.facts.spent_usd == pytest.approx(3 * 0.000615) and "max_spend_usd $0.0015" in watch.facts.message
    verdict = classify(AttemptSummary(watchdog=watch.facts), Catalog.default())
    assert verdict.failure_class == "behaviour" and "role_bound" in verdict.flags
    assert "degeneration" not in verdict.flags and verdict.message.startswith("role bound (spend_bound)")
    # The stream's model ("m") has no price, and nor has the arm's: the bound cannot be held.
    unpriced = DegenerationWatch(Watchdog(max_spend_usd=0.0001), adapter("claude-code").live_reader(), _Clock())
    unpriced.feed("stdout", ("\n".join(_CLAUDE_CALL % (f"m{i}", i) for i in range(3)) + "\n").encode())
    assert unpriced.reason is None and unpriced.spent_usd is None


def test_codex_live_usage_meets_the_spend_bound_at_the_arms_model() -> None:
    watch = DegenerationWatch(Watchdog(max_spend_usd=0.004), adapter("codex").live_reader(), _Clock(), model="gpt-5")
    turn = {"type": "turn.completed", "usage": {"input_tokens": 900, "cached_input_tokens": 300,
                                                "output_tokens": 200}}
    watch.feed("stdout", (json.dumps(turn) + "\n").encode())  # 600 * 1.25 + 300 * 0.125 + 200 * 10 µ$
    assert watch.reason is None and watch.spent_usd == pytest.approx(0.0027875)
    watch.feed("stdout", (json.dumps(turn) + "\n").encode())
    assert watch.facts is not None and watch.facts.rule == "spend_bound"


def test_role_bounds_alone_are_held_without_a_watchdog_block() -> None:
    arm = Arm.model_validate({"name": "a", "role": "baseline", "agent": "claude-code", "model": "sonnet",
                              "roles": [{"role": "executor", "model": "sonnet", "billing": "api",
                                         "max_spend_usd": 0.5, "max_tokens": 9000}]})
    w = effective(arm)
    assert w is not None and not w.degeneration and (w.max_tokens, w.max_spend_usd) == (9000, 0.5)
    assert "| a | off | off | off | - | 9000 | $0.5 |" in "\n".join(watchdog_lines([arm]))
    clock = _Clock()
    watch = DegenerationWatch(w, adapter("command").live_reader(), clock)
    watch.feed("stdout", b"same\n" * 500)  # the degeneration rules are off
    clock.now += 10 * 3600
    watch.check_idle()
    assert watch.reason is None


def test_retries_on_stderr_end_a_watched_and_an_unwatched_gemini_run() -> None:
    # Gemini CLI reports its retries on stderr only; stdout's lines still go to the rules
    retry = b"Attempt %d failed with status 429. Retrying with backoff...\n"
    for watch in (_watch("gemini-cli", repeats=50), RefusalWatch(adapter("gemini-cli").live_reader())):
        watch.feed("stderr", retry % 1 + b"Attempt 2 failed with status 4")
        assert watch.reason is None  # one in a row, and half a line
        watch.feed("stderr", b"29. Retrying with backoff...\n")
        assert watch.reason is None
        watch.feed("stderr", retry % 3)
        assert watch.reason is not None and watch.reason.startswith("refused: HTTP 429 on 3 retries"), watch.reason
    claude = _watch("claude-code", repeats=50)  # a CLI whose reader reads no stderr
    for n in range(1, 5):
        claude.feed("stderr", retry % n)
    assert claude.reason is None


def test_the_first_rule_to_fire_stays() -> None:
    watch = _watch(output_repeats=2)
    watch.feed("stdout", b"x\nx\ny\ny\n")
    assert watch.facts is not None and watch.facts.evidence[0] == "x"


def test_watchdog_block_is_validated_and_defaults_come_from_the_executor_role() -> None:
    with pytest.raises(ValidationError, match="idle_minutes"):
        Watchdog(idle_minutes=1, poll_sec=90)
    with pytest.raises(ValidationError, match="extra"):
        Watchdog.model_validate({"repeat": 3})
    with pytest.raises(ValidationError):
        Watchdog(repeats=1)
    arm = Arm.model_validate({"name": "a", "role": "baseline", "agent": "claude-code", "model": "sonnet",
                              "watchdog": {},
                              "roles": [{"role": "executor", "model": "sonnet", "billing": "api", "max_tokens": 5000}]})
    w = effective(arm)
    assert w is not None and w.max_tokens == 5000 and w.repeats == 8
    off = Arm.model_validate({"name": "b", "role": "variant", "command": "true"})
    assert effective(off) is None
    lines = "\n".join(watchdog_lines([arm, off]))
    assert "| a | 8 | 100 | 15 min | 30 s | 5000 |" in lines
    assert "| b | off | off | off | - | off |" in lines


# -- scripted agents through the cell runner ------------------------------------------------

LOOP = 'while :; do echo "checking the build status"; sleep 0.02; done'
IDLE = "sleep 600"
#: Writes to the workspace every half second for 9 s (longer than the 6 s idle bound), then solves.
#: The bound is seconds, not less: on a loaded machine a docker exec takes seconds and busybox's
#: ``find -newer`` sees whole seconds, so a shorter bound would call this agent idle.
WORKS = ('i=0; while [ $i -lt 18 ]; do i=$((i+1)); echo "step $i" > "$APP_DIR/progress.txt"; '
         'echo working; sleep 0.5; done; echo "Hello, world!" > "$APP_DIR/hello.txt"')
FAST = Watchdog(output_repeats=30, idle_minutes=0.1, poll_sec=0.5)


def _spec(tmp: Path, name: str, command: str, backend: str, image: str | None) -> AttemptSpec:
    if not (tmp / "suite").is_dir():
        make_suite(tmp / "suite", tasks=["hello-world"])
    return AttemptSpec(
        run_id="wd", attempt_id=f"{name}-a1", cell_id=name, task_id="hello-world", arm="a", rep=1,
        account="acct", task_path=str(tmp / "suite" / "tasks" / "hello-world"), stage_key=str(tmp),
        attempt_dir=str(tmp / name), backend=backend, backend_options={}, agent_command=command,
        agent_env={}, agent_dir=None, route_env={}, route_home=None, agent_timeout_sec=120.0,
        verifier_timeout_sec=60.0, verifier_env={}, image=image, build_context=None, workdir="/app",
        network=False, cpus=None, memory_mb=None, pids=None, expose_solution=False,
        artifact_cap_bytes=8 << 20, seed="s", watchdog=FAST)


def _three(tmp: Path, backend: SandboxBackend, name: str, image: str | None = None) -> list[AttemptSummary]:
    async def main() -> list[AttemptSummary]:
        try:
            return list(await asyncio.gather(*(run_attempt(_spec(tmp, n, c, name, image), backend)
                                               for n, c in (("loop", LOOP), ("idle", IDLE), ("works", WORKS)))))
        finally:
            await backend.close()
    return asyncio.run(main())


def _check(tmp: Path, summaries: list[AttemptSummary]) -> None:
    catalog = Catalog.default()
    loop, idle, works = summaries
    for summary, rule in ((loop, "repeated_output"), (idle, "idle_workspace")):
        assert summary.error is None, summary.error
        assert summary.watchdog is not None and summary.watchdog.rule == rule, summary.watchdog
        assert summary.watchdog.verifier == "skipped" and summary.verifier is None
        assert summary.agent is not None and summary.agent.stopped is not None and not summary.agent.timed_out
        assert summary.agent.duration_sec < 60  # stopped live, long before its 120 s timeout
        verdict = classify(summary, catalog)
        assert not verdict.valid and verdict.failure_class == "behaviour" and verdict.counts
        assert "degeneration" in verdict.flags
        on_disk = json.loads((tmp / summary.cell_id / "watchdog.json").read_text())
        assert on_disk["rule"] == rule
    assert loop.watchdog is not None and loop.watchdog.evidence[0] == "checking the build status"
    assert idle.watchdog is not None and idle.watchdog.after_sec >= 6
    assert works.watchdog is None and works.agent is not None and works.agent.stopped is None
    assert works.reward == 1.0 and classify(works, catalog).valid


@pytest.mark.slow
def test_scripted_agents_local(tmp_path: Path) -> None:
    _check(tmp_path, _three(tmp_path, LocalBackend(tmp_path / "sbx"), "local"))


@pytest.mark.slow
@pytest.mark.docker
def test_scripted_agents_docker(tmp_path: Path, docker_client: Any, base_image: str) -> None:
    from ray_bench.sandboxes import make_backend

    _check(tmp_path, _three(tmp_path, make_backend("docker"), "docker", base_image))


#: A ``command`` agent that solves the task and reports its usage as it ends (its own usage.json).
def _reporting(output_tokens: int) -> str:
    usage = json.dumps({"input_tokens": 50, "output_tokens": output_tokens, "model": "gpt-5"})
    return f"echo 'Hello, world!' > \"$APP_DIR/hello.txt\"; echo '{usage}' > \"$LOGS_DIR/agent/usage.json\""


def test_a_role_bound_is_held_on_a_command_agents_usage_once_it_ended(tmp_path: Path) -> None:
    """Issue 54 item 12: a ``command`` agent reports its usage only in usage.json at its end, so
    no live reading holds the executor role's bound: past it, the attempt is the same
    role_bound failure as one stopped live (not a valid row), and the receipt says when it is held."""
    from ray_bench.agents.watchdog import bound_after

    bound = Watchdog(degeneration=False, max_tokens=100)
    arm = Arm.model_validate({"name": "a", "role": "baseline", "command": "true", "model": "gpt-5",
                              "roles": [{"role": "executor", "model": "gpt-5", "billing": "api", "max_tokens": 100,
                                         "max_spend_usd": 0.5}]})
    assert "| a | off | off | off | - | 100 (at its end) | $0.5 (at its end) |" in "\n".join(watchdog_lines([arm]))
    catalog = Catalog.default()

    async def main() -> list[AttemptSummary]:
        backend = LocalBackend(tmp_path / "sbx")
        try:
            specs = [dataclasses.replace(_spec(tmp_path, name, _reporting(out), "local", None), watchdog=bound,
                                         model="gpt-5")
                     for name, out in (("over", 266), ("under", 30))]
            return list(await asyncio.gather(*(run_attempt(s, backend) for s in specs)))
        finally:
            await backend.close()
    over, under = asyncio.run(main())
    assert over.watchdog is not None and over.watchdog.rule == "token_bound", over.watchdog
    assert over.watchdog.tokens == 316 and over.watchdog.verifier == "ran" and over.reward == 1.0
    verdict = classify(over, catalog)
    assert not verdict.valid and verdict.failure_class == "behaviour" and "role_bound" in verdict.flags
    assert json.loads((tmp_path / "over" / "watchdog.json").read_text())["rule"] == "token_bound"
    assert under.watchdog is None and classify(under, catalog).valid
    # the same rule on a spend bound, and nothing on unknown usage
    spend = Watchdog(degeneration=False, max_spend_usd=0.001)
    from ray_bench.models.attempt import Usage as AttemptUsage
    usage = AttemptUsage.model_validate({"input_tokens": 400, "output_tokens": 200, "model": "gpt-5"})
    facts = bound_after(spend, usage, "gpt-5")
    assert facts is not None and facts.rule == "spend_bound" and facts.spent_usd == pytest.approx(0.0025)
    assert bound_after(bound, AttemptUsage.model_validate({"source": "unknown"}), "gpt-5") is None
