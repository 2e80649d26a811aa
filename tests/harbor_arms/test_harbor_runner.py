"""Harbor's own agents run by the cell runner over ray-bench's sandboxes: the oracle proves the
bridge (Harbor's OracleAgent uploads solution/ through the environment and runs solve.sh)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite
from support.terminus import SOLVE, commands_seen, installs

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.local import LocalBackend

pytestmark = pytest.mark.harbor


def _spec(tmp_path: Path, harbor_agent: str, **kw: Any) -> AttemptSpec:
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    fields: dict[str, Any] = dict(
        run_id="run", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="hb", rep=1,
        account="acct", task_path=str(tmp_path / "suite" / "tasks" / "hello-world"), stage_key=str(tmp_path),
        attempt_dir=str(tmp_path / "attempt"), backend="local", backend_options={},
        agent_command="", agent_env={}, agent_dir=None, route_env={}, route_home=None,
        agent_timeout_sec=60.0, verifier_timeout_sec=30.0, verifier_env={}, image=None,
        build_context=None, workdir="/app", network=False, cpus=None, memory_mb=None, pids=None,
        expose_solution=False, artifact_cap_bytes=1 << 20, seed="s", agent="harbor", harbor_agent=harbor_agent)
    fields.update(kw)
    return AttemptSpec(**fields)


def _run_local(spec: AttemptSpec, root: Path) -> AttemptSummary:
    return asyncio.run(run_attempt(spec, LocalBackend(root)))


def test_harbors_oracle_solves_the_task_through_the_sandbox_bridge_on_local(tmp_path: Path) -> None:
    summary = _run_local(_spec(tmp_path, "oracle"), tmp_path / "sbx")
    assert summary.error is None, summary.error
    assert summary.reward == 1.0
    assert summary.agent is not None and summary.agent.exit_code == 0
    attempt = tmp_path / "attempt"
    # Harbor's own layout under the attempt: the oracle's log came back by download_file
    assert (attempt / "harbor" / "agent" / "oracle.txt").is_file()
    assert json.loads((attempt / "harbor" / "agent-context.json").read_text()) == {}
    assert summary.usage is None  # the oracle calls no model: no usage, and none invented
    assert list((tmp_path / "sbx").iterdir()) == []


def test_a_nop_agent_is_a_valid_zero_and_a_broken_solution_is_the_agents_exit(tmp_path: Path) -> None:
    summary = _run_local(_spec(tmp_path / "nop", "nop"), tmp_path / "sbx")
    assert summary.error is None and summary.reward == 0.0
    task = tmp_path / "bad"
    spec = _spec(task, "oracle")
    (Path(spec.task_path) / "solution" / "solve.sh").write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    bad = _run_local(spec, tmp_path / "sbx2")
    assert bad.agent is not None and bad.agent.exit_code == 3
    assert bad.reward == 0.0


def test_terminus_2_solves_the_task_against_the_fake_provider_and_its_usage_is_what_was_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from support.fake_provider import Answer, FakeProvider

    with FakeProvider(default=Answer(text=SOLVE, input_tokens=300, output_tokens=40, cache_read_tokens=100,
                                     cache_write_tokens=50)) as fake:
        monkeypatch.setenv("RB_HARBOR_KEY", "sk-ant-harbor-test-0123456789")
        monkeypatch.setenv("RB_HARBOR_BASE", fake.url)
        spec = _spec(tmp_path, "terminus-2", model="anthropic/claude-sonnet-4-5",
                     route_env={"ANTHROPIC_API_KEY": "RB_HARBOR_KEY", "ANTHROPIC_BASE_URL": "RB_HARBOR_BASE"},
                     harbor_options={"max_turns": 5})
        summary = _run_local(spec, tmp_path / "sbx")
        served = fake.served
    assert summary.error is None, summary.error
    assert summary.reward == 1.0
    assert served.answers >= 2
    usage = summary.usage
    assert usage is not None
    assert usage.output_tokens == served.output_tokens
    assert usage.cache_read_tokens == served.cache_read_tokens
    # fresh input: Harbor's total (LiteLLM's prompt_tokens) less the cache reads and writes, each
    # its own column (issue 54: the writes were counted as fresh input)
    assert usage.input_tokens == served.input_tokens
    assert usage.cache_write_tokens == served.cache_write_tokens == 50 * served.answers
    assert sorted(usage.request_ids) == sorted(served.request_ids)
    attempt = tmp_path / "attempt"
    assert (attempt / "harbor" / "agent" / "trajectory.json").is_file()  # ATIF, as Harbor writes it
    key = "sk-ant-harbor-test-0123456789"
    assert not [p for p in attempt.rglob("*") if p.is_file() and key in p.read_text(errors="replace")]


#: Terminus 2's answer that types one command and goes on (the task not declared done).
WORK = json.dumps({"analysis": "looking", "plan": "list the files",
                   "commands": [{"keystrokes": "ls\n", "duration": 0.1}], "task_complete": False})


def test_terminus_2_cut_by_its_timeout_with_a_call_in_flight_says_its_usage_is_at_least(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 54 item 3: the third call is taken (and billed) and its answer never comes before the
    agent's timeout. Terminus 2 counts a call only once its answer is back, so the two answered
    are all its context holds: the usage says so (a call started and not ended: at least)."""
    from support.fake_provider import Answer, FakeProvider

    answer = Answer(text=WORK, input_tokens=300, output_tokens=40)
    with FakeProvider() as fake:
        fake.then(answer, answer, Answer(text=WORK, input_tokens=300, output_tokens=40, delay_sec=600))
        monkeypatch.setenv("RB_HARBOR_KEY", "sk-ant-harbor-test-0123456789")
        monkeypatch.setenv("RB_HARBOR_BASE", fake.url)
        spec = _spec(tmp_path, "terminus-2", model="anthropic/claude-sonnet-4-5", agent_timeout_sec=25.0,
                     route_env={"ANTHROPIC_API_KEY": "RB_HARBOR_KEY", "ANTHROPIC_BASE_URL": "RB_HARBOR_BASE"},
                     harbor_options={"max_turns": 10})
        summary = _run_local(spec, tmp_path / "sbx")
        served = fake.served
    assert summary.agent is not None and summary.agent.timed_out, summary.agent
    assert served.answers == 3, served  # billed: the third too
    usage = summary.usage
    assert usage is not None and usage.output_tokens == 80 and usage.input_tokens == 600, usage
    assert len(usage.request_ids) == 2 and set(usage.request_ids) < set(served.request_ids)
    assert usage.calls_unfinished == 1, usage
    assert usage.lower_bound and usage.bound == "lower_bound"  # not "exact": a call's outcome is unknown
    calls = json.loads((tmp_path / "attempt" / "harbor" / "model-calls.json").read_text())
    assert (calls["started"], calls["ended"]) == (3, 2), calls


def test_terminus_2_refused_by_the_provider_ends_with_the_auth_error_of_the_cli_adapters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from support.fake_provider import Answer, FakeProvider

    with FakeProvider(default=Answer(kind="unauthorized")) as fake:
        monkeypatch.setenv("RB_HARBOR_KEY", "sk-ant-harbor-refused-0123456789")
        monkeypatch.setenv("RB_HARBOR_BASE", fake.url)
        spec = _spec(tmp_path, "terminus-2", model="anthropic/claude-sonnet-4-5",
                     route_env={"ANTHROPIC_API_KEY": "RB_HARBOR_KEY", "ANTHROPIC_BASE_URL": "RB_HARBOR_BASE"})
        summary = _run_local(spec, tmp_path / "sbx")
        refused = fake.served.errors.get("unauthorized", 0)
    assert refused >= 1 and fake.served.answers == 0
    assert summary.agent is not None and summary.agent.exit_code == 1
    assert summary.agent_error is not None and summary.agent_error.type == "auth"
    assert summary.agent_error.status == 401
    assert summary.reward == 0.0  # the verifier still ran: the task is not solved


def _path_without(monkeypatch: pytest.MonkeyPatch, program: str) -> None:
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / program).exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(dirs))


def test_terminus_2_records_on_local_only_where_its_pane_has_asciinema_and_installs_nothing_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from support.fake_provider import Answer, FakeProvider

    # its pane is `bash --login`, whose profile sets the PATH asciinema is looked up in
    login = subprocess.run(["bash", "--login", "-c", "command -v asciinema"], capture_output=True, check=False)
    can_record = login.returncode == 0
    seen = commands_seen(monkeypatch)
    with FakeProvider(default=Answer(text=SOLVE)) as fake:
        monkeypatch.setenv("RB_HARBOR_KEY", "sk-ant-harbor-test-0123456789")
        monkeypatch.setenv("RB_HARBOR_BASE", fake.url)
        spec = _spec(tmp_path, "terminus-2", model="anthropic/claude-sonnet-4-5",
                     route_env={"ANTHROPIC_API_KEY": "RB_HARBOR_KEY", "ANTHROPIC_BASE_URL": "RB_HARBOR_BASE"},
                     harbor_options={"max_turns": 5, "record_terminal_session": True})
        summary = _run_local(spec, tmp_path / "sbx")
    assert summary.error is None and summary.reward == 1.0, summary.error
    assert installs(seen) == []  # Harbor's tool installer never ran on the host
    assert any("asciinema rec" in c for c in seen) == can_record
    assert (tmp_path / "attempt" / "harbor" / "agent" / "recording.cast").is_file() == can_record
    pane = (tmp_path / "attempt" / "logs" / "agent" / "terminus_2.pane").read_text(errors="replace")
    assert "asciinema: command not found" not in pane and "Hello, world!" in pane


def test_terminus_2_on_a_host_without_tmux_is_cli_missing_not_an_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _path_without(monkeypatch, "tmux")
    seen = commands_seen(monkeypatch)
    spec = _spec(tmp_path, "terminus-2", model="anthropic/claude-sonnet-4-5", harbor_options={"max_turns": 1})
    summary = _run_local(spec, tmp_path / "sbx")
    assert summary.agent_error is not None and summary.agent_error.type == "cli_missing"
    assert "apt-get install tmux" in summary.agent_error.message
    assert seen == []  # refused before Harbor's agent ran a command


def test_terminus_2_looping_on_one_command_is_stopped_by_the_watchdog_with_its_usage_so_far(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Terminus 2 types its commands into tmux from the host: the watchdog reads them in each
    model answer as LiteLLM returns it (ray_bench.harbor.live). The model answers the same
    ``ls`` forever: stopped at the 4th repeat, the verifier skipped, a ``behaviour`` failure,
    and the usage of every call served so far recorded with its request id."""
    import json

    from support.fake_provider import Answer, FakeProvider

    from ray_bench.evidence.catalog import Catalog
    from ray_bench.evidence.classify import classify
    from ray_bench.models.suite import Watchdog

    loop = json.dumps({"analysis": "look again", "plan": "list", "commands": [{"keystrokes": "ls\n", "duration": 0.1}],
                       "task_complete": False})
    with FakeProvider(default=Answer(text=loop, input_tokens=200, output_tokens=20)) as fake:
        monkeypatch.setenv("RB_HARBOR_KEY", "sk-ant-harbor-test-0123456789")
        monkeypatch.setenv("RB_HARBOR_BASE", fake.url)
        spec = _spec(tmp_path, "terminus-2", model="anthropic/claude-sonnet-4-5",
                     route_env={"ANTHROPIC_API_KEY": "RB_HARBOR_KEY", "ANTHROPIC_BASE_URL": "RB_HARBOR_BASE"},
                     harbor_options={"max_turns": 40}, watchdog=Watchdog(repeats=4), agent_timeout_sec=120.0)
        summary = _run_local(spec, tmp_path / "sbx")
        served = fake.served
    assert summary.error is None, summary.error
    assert summary.watchdog is not None and summary.watchdog.rule == "repeated_tool_call", (summary.agent, summary)
    assert summary.verifier is None and summary.agent is not None and not summary.agent.timed_out
    assert (summary.agent.stopped or "").startswith("repeated_tool_call"), summary.agent
    assert 4 <= served.answers <= 6, served.answers
    verdict = classify(summary, Catalog.default())
    assert verdict.failure_class == "behaviour" and not verdict.valid, verdict
    usage = summary.usage
    assert usage is not None
    assert usage.output_tokens == served.output_tokens and usage.input_tokens == served.input_tokens, usage
    assert sorted(usage.request_ids) == sorted(served.request_ids)
    assert summary.watchdog.tokens == 4 * 220, summary.watchdog
