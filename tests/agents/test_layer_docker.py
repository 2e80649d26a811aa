"""The real ``claude`` laid over a task image that has no C library (busybox), run by the cell
runner on docker with `network: public`, answering through the fake provider on the bridge; then
the same CLI against a model that calls one tool forever, stopped live by the watchdog."""

from __future__ import annotations

import dataclasses
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
from support.watchdog_probe import record_firing

from ray_bench.agents.layer import prepare_layer
from ray_bench.cells.spec import AttemptSpec
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.evidence.settle import reconcile
from ray_bench.evidence.usage_export import read_usage_export
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.suite import Watchdog

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KEY = "sk-test-layer-key-0123456789"
TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cost_usd", "request_ids", "source")


def _spec(tmp: Path, image: str, agent: str, model: str, env: dict[str, str], route: dict[str, str]) -> AttemptSpec:
    return AttemptSpec(
        run_id="layerrun", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="a", rep=1,
        account="acct", task_path=str(tmp / "suite" / "tasks" / "hello-world"), stage_key=str(tmp),
        attempt_dir=str(tmp / "attempt"), backend="docker", backend_options={}, agent_command="",
        agent_env=env, agent_dir=None, route_env=route, route_home=None, agent_timeout_sec=180,
        verifier_timeout_sec=60, verifier_env={}, image=image, build_context=None, workdir="/app", network=True,
        cpus=None, memory_mb=1024, pids=None, expose_solution=False, artifact_cap_bytes=8 << 20, seed="s",
        agent=agent, model=model)


def _run(spec: AttemptSpec) -> AttemptSummary:
    return run_on_docker(spec)


def _settles_and_keeps_no_key(tmp: Path, summaries: dict[str, AttemptSummary], charged: list[str],
                              cut: str | None = "looping") -> None:
    """What came back with ``/logs``: each attempt's ``usage.json`` is its summary's usage, the
    ``cut`` one's from the CLI's session file (collected too); ``settle`` against the fake's
    charges (one per id it served) settles every attempt that recorded ids, each at what its own
    calls were charged, and needs nothing of one refused throughout; no attempt directory holds
    the key."""
    for name, summary in summaries.items():
        on_disk = json.loads((tmp / name / "logs" / "agent" / "usage.json").read_text())
        usage = summary.to_json()["usage"]
        assert {k: on_disk.get(k) for k in TOKENS} == {k: usage[k] for k in TOKENS}, (name, on_disk)
    assert cut is None or list((tmp / cut / "logs" / "agent" / "sessions").rglob("*.jsonl"))
    export = tmp / "charges.csv"
    export.write_text("request_id,cost_usd\n" + "".join(f"{r},0.004\n" for r in charged))
    rows = [AttemptRow(attempt_id=n, cell_id=n, task="hello-world", task_checksum="", arm="a", rep=1, seq=1,
                       account="acct", backend="docker", epoch="e", preflight=False, started_at=0.0,
                       status="finished") for n in summaries]
    settled, unmatched, _ = reconcile(rows, summaries, read_usage_export(export))
    recorded = 0
    for name, summary in summaries.items():
        ids = summary.to_json()["usage"]["request_ids"]
        recorded += len(ids)
        assert settled[name].status == ("settled" if ids else "n/a"), (name, settled[name])
        assert settled[name].settled_usd == (pytest.approx(0.004 * len(ids)) if ids else None), (name, settled[name])
    assert unmatched == len(charged) - recorded  # only calls served as a kill came, in no record
    for name in summaries:
        files = [p for p in (tmp / name).rglob("*") if p.is_file()]
        assert files and not [p for p in files if KEY.encode() in p.read_bytes()], name


def test_claude_layered_over_busybox_answers_with_usage(tmp_path: Path, docker_client: Any, base_image: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    reason = missing("claude")
    require_service("agent CLI claude", reason is None, reason or "")
    monkeypatch.setenv("RAY_BENCH_AGENT_CLIS", str(bin_dir()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    layer = prepare_layer("claude-code")
    assert layer is not None and (layer / "bin" / "claude").is_file() and (layer / "lib").is_dir()
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    monkeypatch.setenv("RB_LAYER_TEST_KEY", KEY)
    with FakeProvider(host=bridge_gateway()) as fake:
        fired = record_firing(monkeypatch, lambda: fake.served.answers - 1)
        fake.then(Answer(input_tokens=77, output_tokens=9))
        spec = _spec(tmp_path, base_image, "claude-code", "claude-sonnet-4-5",
                     {"ANTHROPIC_BASE_URL": f"http://{bridge_gateway()}:{fake.port}", "CLAUDE_CODE_MAX_RETRIES": "1"},
                     {"ANTHROPIC_API_KEY": "RB_LAYER_TEST_KEY"})
        summary = _run(spec)
        first_billed = fake.served.output_tokens
        # The model now answers the same tool call forever: the watchdog stops the real CLI.
        fake.default = Answer(tool="Bash", tool_input={"command": "ls", "description": "List files"})
        spec = dataclasses.replace(spec, attempt_id="c-a2", attempt_dir=str(tmp_path / "looping"),
                                   watchdog=Watchdog(repeats=4))
        looping = _run(spec)
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
    # Stopped about a second in (SIGTERM, then SIGKILL), the CLI has usually written its
    # transcript; under load it sometimes has not (measured: 1 run in 5 here, SIGTERM or not).
    # Then the stream holds every call (Codex's stream has no per-message finality: the ids,
    # tokens and cost below are what is checked either way).
    assert usage["source"] in ("session", "stream"), usage
    seen = usage["request_ids"]
    assert seen == served_ids[1:1 + len(seen)] and len(seen) >= fired[0], (usage, served_ids)
    assert usage["input_tokens"] == 120 * len(seen)
    assert usage["output_tokens"] == 7 * (len(seen) - usage["unfinished_messages"]) + usage["unfinished_messages"]
    assert summary.usage is not None and summary.to_json()["usage"]["request_ids"] == served_ids[:1]
    assert summary.error is None, summary.error
    assert summary.agent_error is None, (summary.agent_error, summary.agent)
    assert summary.usage is not None and summary.usage.output_tokens == first_billed == 9
    assert classify(summary, Catalog.default()).valid
    _settles_and_keeps_no_key(tmp_path, {"attempt": summary, "looping": looping}, served_ids,
                              cut="looping" if usage["source"] == "session" else None)


def test_codex_layered_over_busybox_answers_with_usage_and_its_cut_attempt_keeps_its_session(
        tmp_path: Path, docker_client: Any, base_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real ``codex`` (a static musl binary: laid with no libraries) in the same busybox
    image: an attempt that finishes, then one stopped by the watchdog before its turn completed,
    whose usage and response ids come from the CLI's rollout session file."""
    reason = missing("codex")
    require_service("agent CLI codex", reason is None, reason or "")
    monkeypatch.setenv("RAY_BENCH_AGENT_CLIS", str(bin_dir()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    layer = prepare_layer("codex")
    assert layer is not None and (layer / "bin" / "codex").is_file() and not (layer / "lib").exists()
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    monkeypatch.setenv("RB_LAYER_TEST_KEY", KEY)
    with FakeProvider(host=bridge_gateway()) as fake:
        fired = record_firing(monkeypatch, lambda: fake.served.answers - 1)
        fake.then(Answer(input_tokens=500, output_tokens=33, cache_read_tokens=100))
        spec = _spec(tmp_path, base_image, "codex", "gpt-5",
                     {"OPENAI_BASE_URL": f"http://{bridge_gateway()}:{fake.port}/v1"},
                     {"CODEX_API_KEY": "RB_LAYER_TEST_KEY"})
        ok = _run(spec)
        fake.default = Answer(tool="exec_command", tool_input={"cmd": "ls"}, input_tokens=640, output_tokens=21,
                              cache_read_tokens=128)
        looping = _run(dataclasses.replace(spec, attempt_id="c-a2", attempt_dir=str(tmp_path / "looping"),
                                           watchdog=Watchdog(repeats=4)))
        served_ids = list(fake.served.response_ids)
        looped = fake.served.answers - 1
    usage = ok.to_json()["usage"]
    assert ok.error is None and ok.agent_error is None, (ok.error, ok.agent_error, ok.agent)
    # The Responses API counts cached tokens inside input_tokens; the contract keeps them apart.
    assert (usage["input_tokens"], usage["cache_read_tokens"], usage["output_tokens"]) == (400, 100, 33), usage
    assert usage["source"] == "result" and usage["request_ids"] == served_ids[:1], (usage, served_ids)
    assert usage["cost_basis"] == "estimated" and usage["cost_usd"] == pytest.approx(_gpt5_usd(400, 100, 33))
    assert classify(ok, Catalog.default()).valid

    assert looping.error is None, looping.error
    assert looping.watchdog is not None and looping.watchdog.rule == "repeated_tool_call", looping.agent
    # The rule fired at the fourth call; the static codex runs its `ls` calls faster than the
    # watchdog reads its output under load (a CI run: six calls done when the stop landed), so
    # the answers served by then are bounded by what was recorded (below), not by 5.
    assert looping.verifier is None and len(fired) == 1 and fired[0] >= 4, fired
    assert looping.agent is not None and not looping.agent.timed_out
    assert classify(looping, Catalog.default()).failure_class == "behaviour"
    # No turn completed (no turn.completed line): every response the rollout file recorded, with
    # its id, in the order served; a response served as the kill came may be in no record.
    usage = looping.to_json()["usage"]
    # Stopped about a second in (SIGTERM, then SIGKILL), the CLI has usually written its
    # transcript; under load it sometimes has not (measured: 1 run in 5 here, SIGTERM or not).
    # Then the stream holds every call (Codex's stream has no per-message finality: the ids,
    # tokens and cost below are what is checked either way).
    assert usage["source"] in ("session", "stream"), usage
    seen = usage["request_ids"]
    assert seen == served_ids[1:1 + len(seen)] and fired[0] <= len(seen) and looped - 1 <= len(seen) <= looped, (
        usage, served_ids, fired)
    assert (usage["input_tokens"], usage["cache_read_tokens"], usage["output_tokens"]) == (
        512 * len(seen), 128 * len(seen), 21 * len(seen)), usage
    assert usage["cost_basis"] == "estimated" and usage["cost_usd"] == pytest.approx(
        _gpt5_usd(512, 128, 21) * len(seen)), usage
    _settles_and_keeps_no_key(tmp_path, {"attempt": ok, "looping": looping}, served_ids)


def _gpt5_usd(fresh: int, cached: int, output: int) -> float:
    """gpt-5's list price: $1.25 / $0.125 cached / $10 a million."""
    return fresh * 1.25e-6 + cached * 0.125e-6 + output * 10e-6


def test_gemini_cli_laid_with_node_over_busybox_is_stopped_live_by_its_429_retries(
        tmp_path: Path, docker_client: Any, base_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real ``gemini`` (a Node program) laid with the node binary of this host into the same
    busybox image: an attempt that finishes with the fake's usage and response id, then one
    refused 429 on every call, whose retries the CLI prints on stderr alone: streamed out of the
    container as they come, three in a row end it live, classed rate_limit with the server's delay."""
    reason = missing("gemini")
    require_service("agent CLI gemini", reason is None, reason or "")
    monkeypatch.setenv("RAY_BENCH_AGENT_CLIS", str(bin_dir()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    layer = prepare_layer("gemini-cli")
    assert layer is not None and (layer / "bin" / "node").is_file() and (layer / "pkg" / "package.json").is_file()
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    monkeypatch.setenv("RB_LAYER_TEST_KEY", KEY)
    with FakeProvider(host=bridge_gateway()) as fake:
        fake.then(Answer(input_tokens=210, output_tokens=21))
        spec = _spec(tmp_path, base_image, "gemini-cli", "gemini-2.5-pro",
                     {"GOOGLE_GEMINI_BASE_URL": f"http://{bridge_gateway()}:{fake.port}"},
                     {"GEMINI_API_KEY": "RB_LAYER_TEST_KEY"})
        ok = _run(spec)
        ok_ids = list(fake.served.request_ids)
        fake.default = Answer(kind="rate_limit", retry_after=3)
        refused = _run(dataclasses.replace(spec, attempt_id="c-a2", attempt_dir=str(tmp_path / "refused"),
                                           agent_timeout_sec=150))
        errors = dict(fake.served.errors)
    usage = ok.to_json()["usage"]
    assert ok.error is None and ok.agent_error is None, (ok.error, ok.agent_error, ok.agent)
    assert (usage["input_tokens"], usage["output_tokens"], usage["source"]) == (210, 21, "result"), usage
    # The response id is in the CLI's telemetry alone, distilled in the container by the layer's node.
    assert usage["request_ids"] == ok_ids and len(ok_ids) == 1, (usage, ok_ids)
    assert usage["model"] == "gemini-2.5-pro" and classify(ok, Catalog.default()).valid

    assert refused.error is None and refused.agent is not None and not refused.agent.timed_out, refused.agent
    assert (refused.agent.stopped or "").startswith("refused: HTTP 429 on 3 retries in a row"), refused.agent
    assert errors == {"rate_limit": 3}, errors  # stopped at the third refusal, not after its ten
    err = refused.to_json()["agent_error"]
    assert err["type"] == "rate_limit" and err["retry_after"] == 3.0, err
    verdict = classify(refused, Catalog.default())
    assert verdict.effect == "rate_limited" and verdict.retry_after == 3.0 and not verdict.valid, verdict
    assert refused.usage is not None and refused.usage.known and refused.usage.output_tokens == 0
    _settles_and_keeps_no_key(tmp_path, {"attempt": ok, "refused": refused}, ok_ids, cut=None)
