"""Harbor's installed agents (its ``claude-code`` and ``codex``) as ``agent: harbor`` arms on the
docker backend, against the fake provider on the docker bridge, offline but for it: the CLI this
node has is laid over the busybox task image (:mod:`ray_bench.agents.layer`, once per content
hash), so Harbor's own ``setup()`` runs in the sandbox and its ``install()`` finds the CLI by its
version command and installs nothing. Then Harbor's ``run()`` drives the real CLI; the usage is
Harbor's ``AgentContext``, every request id the CLI's own record of it, and no key is kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.agent_clis import bin_dir, missing
from support.bridge import bridge_gateway
from support.fake_provider import Answer, FakeProvider
from support.services import require_service
from support.specs import run_on_docker
from support.suites import make_suite

from ray_bench.cells.spec import AttemptSpec
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.models.suite import Watchdog

pytestmark = [pytest.mark.docker, pytest.mark.harbor, pytest.mark.slow]
KEY = "sk-test-harbor-installed-0123456789"


def _spec(tmp: Path, image: str, harbor_agent: str, model: str, env: dict[str, str], route: dict[str, str],
          name: str = "attempt", **kw: Any) -> AttemptSpec:
    return AttemptSpec(
        run_id="hinst", attempt_id=f"c-{name}", cell_id="c", task_id="hello-world", arm="a", rep=1,
        account="acct", task_path=str(tmp / "suite" / "tasks" / "hello-world"), stage_key=str(tmp),
        attempt_dir=str(tmp / name), backend="docker", backend_options={}, agent_command="",
        agent_env=env, agent_dir=None, route_env=route, route_home=None, agent_timeout_sec=180,
        verifier_timeout_sec=60, verifier_env={}, image=image, build_context=None, workdir="/app", network=True,
        agent_network=True, cpus=None, memory_mb=1024, pids=None, expose_solution=False,
        artifact_cap_bytes=8 << 20, seed="s", agent="harbor", harbor_agent=harbor_agent, model=model, **kw)


def _no_key(root: Path) -> None:
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files and not [p for p in files if KEY.encode() in p.read_bytes()]


@pytest.fixture
def clis(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for cli in ("claude", "codex"):
        reason = missing(cli)
        require_service(f"agent CLI {cli}", reason is None, reason or "")
    monkeypatch.setenv("RAY_BENCH_AGENT_CLIS", str(bin_dir()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("RB_HINST_KEY", KEY)


def _served_run(tmp_path: Path, base_image: str, agent: str, model: str, answer: Answer, url_env: str,
                url_path: str, route: dict[str, str]) -> tuple[Any, Any]:
    """One attempt of Harbor's ``agent`` on docker against a fake provider that serves ``answer``
    (reached at the bridge gateway as ``url_env``): its summary, which must carry no error, and
    what the fake served."""
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    with FakeProvider(host=bridge_gateway()) as fake:
        fake.then(answer)
        spec = _spec(tmp_path, base_image, agent, model, {url_env: f"http://{bridge_gateway()}:{fake.port}{url_path}"},
                     route)
        summary = run_on_docker(spec)
        served = fake.served
    assert summary.error is None and summary.agent_error is None, (summary.error, summary.agent_error, summary.agent)
    return summary, served


def test_harbors_claude_code_runs_laid_offline_and_its_usage_settles(tmp_path: Path, base_image: str,
                                                                     clis: None) -> None:
    summary, served = _served_run(tmp_path, base_image, "claude-code", "anthropic/claude-sonnet-4-5",
                                  Answer(input_tokens=77, output_tokens=9, cache_read_tokens=30),
                                  "ANTHROPIC_BASE_URL", "", {"ANTHROPIC_API_KEY": "RB_HINST_KEY"})
    usage = summary.to_json()["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["cache_read_tokens"]) == (
        served.input_tokens, served.output_tokens, served.cache_read_tokens), usage
    assert usage["request_ids"] == served.request_ids, (usage, served.request_ids)
    # the CLI's own cost, which is the fake's bill at Anthropic's list price
    assert usage["cost_basis"] == "reported" and usage["cost_usd"] == pytest.approx(77 * 3e-6 + 30 * 3e-7 + 9 * 1.5e-5)
    assert classify(summary, Catalog.default()).valid
    # Harbor's setup found the laid CLI by its version command
    kept = json.loads((tmp_path / "attempt" / "harbor" / "agent.json").read_text())
    assert kept["agent"] == "claude-code" and kept["version"].startswith("2."), kept
    _no_key(tmp_path / "attempt")


def test_harbors_codex_runs_laid_offline_and_its_usage_settles(tmp_path: Path, base_image: str, clis: None) -> None:
    summary, served = _served_run(tmp_path, base_image, "codex", "openai/gpt-5",
                                  Answer(input_tokens=500, output_tokens=33, cache_read_tokens=100),
                                  "OPENAI_BASE_URL", "/v1", {"OPENAI_API_KEY": "RB_HINST_KEY"})
    usage = summary.to_json()["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["cache_read_tokens"]) == (400, 33, 100), usage
    assert usage["request_ids"] == served.response_ids, (usage, served.response_ids)
    # Codex prints no cost: Harbor priced the fake's tokens at gpt-5's list price, an estimate
    assert usage["cost_basis"] == "estimated" and usage["cost_usd"] == pytest.approx(
        400 * 1.25e-6 + 100 * 0.125e-6 + 33 * 10e-6)
    assert classify(summary, Catalog.default()).valid
    _no_key(tmp_path / "attempt")


def test_a_harbor_claude_code_looping_on_one_command_is_stopped_by_the_watchdog_with_its_usage(
        tmp_path: Path, base_image: str, clis: None) -> None:
    """Harbor's claude-code, its model calling the same tool forever: the agent's commands
    stream through the CLI adapter's live reader, the watchdog stops it at the 4th repeat, the
    verifier is skipped, and the usage of the calls served so far is recorded with their ids."""
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    ls = Answer(tool="Bash", tool_input={"command": "ls", "description": "List"})
    with FakeProvider(host=bridge_gateway(), default=ls) as fake:
        spec = _spec(tmp_path, base_image, "claude-code", "anthropic/claude-sonnet-4-5",
                     {"ANTHROPIC_BASE_URL": f"http://{bridge_gateway()}:{fake.port}", "CLAUDE_CODE_MAX_RETRIES": "1"},
                     {"ANTHROPIC_API_KEY": "RB_HINST_KEY"}, name="looping", watchdog=Watchdog(repeats=4))
        summary = run_on_docker(spec)
        served_ids = list(fake.served.request_ids)
    assert summary.error is None, summary.error
    assert summary.watchdog is not None and summary.watchdog.rule == "repeated_tool_call", (summary.agent, summary)
    assert summary.verifier is None and summary.agent is not None and not summary.agent.timed_out
    assert summary.agent.duration_sec < 120, summary.agent
    verdict = classify(summary, Catalog.default())
    assert verdict.failure_class == "behaviour" and not verdict.valid, verdict
    usage = summary.to_json()["usage"]
    seen = usage["request_ids"]
    # every call the CLI recorded, in the order served, at least the four the rule counted
    assert len(seen) >= 4 and seen == served_ids[:len(seen)], (usage, served_ids)
    assert usage["input_tokens"] == 120 * len(seen), usage
    # the CLI printed no result: its adapter's reading (the session, or the stream with each
    # unfinished call marked), not Harbor's total of a finished run
    assert usage["source"] in ("session", "stream"), usage
    assert usage["cost_basis"] == "estimated" and usage["cost_usd"] == pytest.approx(
        usage["input_tokens"] * 3e-6 + usage["output_tokens"] * 1.5e-5), usage
    assert (tmp_path / "looping" / "watchdog.json").is_file()
    _no_key(tmp_path / "looping")


def test_a_harbor_setup_that_fails_offline_is_a_tool_failure(tmp_path: Path, base_image: str, clis: None) -> None:
    """Pinned to a version the layer does not carry, Harbor's install goes for the network (its
    bootstrap script), which the sandbox has no route to: the setup fails, classed ``tool``
    (``setup``), the agent never runs and no model call is made."""
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    with FakeProvider(host=bridge_gateway()) as fake:
        spec = _spec(tmp_path, base_image, "claude-code", "anthropic/claude-sonnet-4-5",
                     {"ANTHROPIC_BASE_URL": f"http://{bridge_gateway()}:{fake.port}"},
                     {"ANTHROPIC_API_KEY": "RB_HINST_KEY"},
                     name="pinned", harbor_options={"version": "0.0.1"})
        summary = run_on_docker(spec)
        answers = fake.served.answers
    assert summary.error is None, summary.error
    assert summary.agent_error is not None and summary.agent_error.type == "setup", summary.agent_error
    assert "setup of claude-code failed" in (summary.agent_error.message or ""), summary.agent_error
    assert answers == 0
    assert summary.usage is not None and summary.usage.cost_usd == 0.0 and summary.usage.output_tokens == 0
    verdict = classify(summary, Catalog.default())
    assert verdict.failure_class == "tool" and not verdict.valid, verdict
    _no_key(tmp_path / "pinned")


def test_a_harbor_claude_code_refused_429_is_the_cli_adapters_rate_limit_with_its_retry_after(
        tmp_path: Path, base_image: str, clis: None) -> None:
    """Harbor raises its own ``ApiRateLimitError`` from the CLI's wording; the attempt's error is
    what ray-bench's adapter of the same CLI reads (as for a CLI arm): ``rate_limit`` with the
    server's retry-after, so the scheduler cools the account and moves the cell."""
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    with FakeProvider(host=bridge_gateway(), default=Answer(kind="rate_limit", retry_after=7)) as fake:
        spec = _spec(tmp_path, base_image, "claude-code", "anthropic/claude-sonnet-4-5",
                     {"ANTHROPIC_BASE_URL": f"http://{bridge_gateway()}:{fake.port}", "CLAUDE_CODE_MAX_RETRIES": "1"},
                     {"ANTHROPIC_API_KEY": "RB_HINST_KEY"}, name="limited")
        summary = run_on_docker(spec)
        errors = dict(fake.served.errors)
    assert summary.error is None, summary.error
    assert errors.get("rate_limit", 0) >= 1, errors
    err = summary.to_json()["agent_error"]
    assert err is not None and err["type"] == "rate_limit" and err["retry_after"] == 7.0, (err, summary.agent)
    verdict = classify(summary, Catalog.default())
    assert verdict.effect == "rate_limited" and verdict.retry_after == 7.0 and not verdict.valid, verdict
    _no_key(tmp_path / "limited")


def test_a_harbor_codex_looping_is_stopped_by_the_watchdog_and_harbors_clean_up_keeps_its_session(
        tmp_path: Path, base_image: str, clis: None) -> None:
    """The same through Harbor's codex: the watched ``codex exec`` is ended, Harbor's own clean-up
    then copies the CLI's rollout session into ``/logs/agent`` (it runs unwatched), and the usage
    so far comes from that session with every response id, in the order served."""
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    loop = Answer(tool="exec_command", tool_input={"cmd": "ls"}, input_tokens=640, output_tokens=21,
                  cache_read_tokens=128)
    with FakeProvider(host=bridge_gateway(), default=loop) as fake:
        spec = _spec(tmp_path, base_image, "codex", "openai/gpt-5",
                     {"OPENAI_BASE_URL": f"http://{bridge_gateway()}:{fake.port}/v1"},
                     {"OPENAI_API_KEY": "RB_HINST_KEY"},
                     name="looping", watchdog=Watchdog(repeats=4))
        summary = run_on_docker(spec)
        served_ids = list(fake.served.response_ids)
    assert summary.error is None, summary.error
    assert summary.watchdog is not None and summary.watchdog.rule == "repeated_tool_call", (summary.agent, summary)
    assert summary.verifier is None and summary.agent is not None and not summary.agent.timed_out
    assert classify(summary, Catalog.default()).failure_class == "behaviour"
    usage = summary.to_json()["usage"]
    seen = usage["request_ids"]
    assert len(seen) >= 4 and seen == served_ids[:len(seen)], (usage, served_ids)
    assert usage["source"] == "session", usage
    assert (usage["input_tokens"], usage["cache_read_tokens"], usage["output_tokens"]) == (
        512 * len(seen), 128 * len(seen), 21 * len(seen)), usage
    assert list((tmp_path / "looping" / "logs" / "agent" / "sessions").rglob("rollout-*.jsonl"))
    _no_key(tmp_path / "looping")
