"""The real ``claude`` laid over a task image that has no C library (busybox), run by the cell
runner on docker with `network: public`, answering through the fake provider on the bridge; then
the same CLI against a model that calls one tool forever, stopped live by the watchdog."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import require_service
from support.agent_clis import bin_dir, missing
from support.fake_provider import Answer, FakeProvider
from support.suites import make_suite
from support.watchdog_probe import record_firing

from ray_bench.agents.layer import prepare_layer
from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.suite import Watchdog
from ray_bench.sandboxes.docker import DockerBackend

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _bridge_gateway() -> str:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], check=False, capture_output=True,
                         text=True).stdout.split()
    return out[3].split("/")[0] if len(out) > 3 else "172.17.0.1"


def test_claude_layered_over_busybox_answers_with_usage(tmp_path: Path, docker_client: Any, base_image: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    reason = missing("claude")
    require_service("agent CLI claude", reason is None, reason or "")
    monkeypatch.setenv("RAY_BENCH_AGENT_CLIS", str(bin_dir()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    layer = prepare_layer("claude-code")
    assert layer is not None and (layer / "bin" / "claude").is_file() and (layer / "lib").is_dir()
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    monkeypatch.setenv("RB_LAYER_TEST_KEY", "sk-test-layer-key-0123456789")
    with FakeProvider(host="0.0.0.0") as fake:
        fired = record_firing(monkeypatch, lambda: fake.served.answers - 1)
        fake.then(Answer(input_tokens=77, output_tokens=9))
        spec = AttemptSpec(
            run_id="layerrun", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="a", rep=1,
            account="acct", task_path=str(tmp_path / "suite" / "tasks" / "hello-world"), stage_key=str(tmp_path),
            attempt_dir=str(tmp_path / "attempt"), backend="docker", backend_options={}, agent_command="",
            agent_env={"ANTHROPIC_BASE_URL": f"http://{_bridge_gateway()}:{fake.port}",
                       "CLAUDE_CODE_MAX_RETRIES": "1"},
            agent_dir=None, route_env={"ANTHROPIC_API_KEY": "RB_LAYER_TEST_KEY"}, route_home=None,
            agent_timeout_sec=180, verifier_timeout_sec=60, verifier_env={}, image=base_image, build_context=None,
            workdir="/app", network=True, cpus=None, memory_mb=1024, pids=None, expose_solution=False,
            artifact_cap_bytes=8 << 20, seed="s", agent="claude-code", model="claude-sonnet-4-5")

        async def go() -> AttemptSummary:
            backend = DockerBackend()
            try:
                return await run_attempt(spec, backend)
            finally:
                await backend.close()

        summary = asyncio.run(go())
        first_billed = fake.served.output_tokens
        # The model now answers the same tool call forever: the watchdog stops the real CLI.
        fake.default = Answer(tool="Bash", tool_input={"command": "ls", "description": "List files"})
        spec = dataclasses.replace(spec, attempt_id="c-a2", attempt_dir=str(tmp_path / "looping"),
                                   watchdog=Watchdog(repeats=4))
        looping = asyncio.run(go())
        looped = fake.served.answers - 1
        served_ids = list(fake.served.request_ids)
    assert looping.error is None, looping.error
    assert looping.watchdog is not None and looping.watchdog.rule == "repeated_tool_call", looping.agent
    # The rule fired at the fourth call (the CLI may already have asked for the fifth); the CLI
    # was then killed, long before its timeout. How many more answers it got while docker
    # killed it depends on the host's load (3 idle; more under load), so it is bounded loosely.
    assert looping.verifier is None and len(fired) == 1 and 4 <= fired[0] <= 5, fired
    assert looping.agent is not None and not looping.agent.timed_out
    assert fired[0] <= looped <= fired[0] + 20, (fired, looped)
    assert classify(looping, Catalog.default()).failure_class == "behaviour"
    # Killed before its result line, in a container: the CLI's transcript came back with /logs,
    # and every answer it recorded is counted with its request id, in the order served.
    usage = looping.to_json()["usage"]
    assert usage["source"] == "session", usage
    seen = usage["request_ids"]
    assert seen == served_ids[1:1 + len(seen)] and len(seen) >= fired[0], (usage, served_ids)
    assert usage["input_tokens"] == 120 * len(seen)
    assert usage["output_tokens"] == 7 * (len(seen) - usage["unfinished_messages"]) + usage["unfinished_messages"]
    assert summary.usage is not None and summary.to_json()["usage"]["request_ids"] == served_ids[:1]
    assert summary.error is None, summary.error
    assert summary.agent_error is None, (summary.agent_error, summary.agent)
    assert summary.usage is not None and summary.usage.output_tokens == first_billed == 9
    assert classify(summary, Catalog.default()).valid
