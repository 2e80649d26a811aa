"""A 429 to Terminus 2's model call: a long retry-after (over LONG_RETRY_AFTER_SEC) stops the agent
at the first refusal with the server's retry-after in its error and the failed call's request id
in its usage, instead of sleeping through Harbor's nine tries; a short one is left to Harbor's
own retries, and the cell still solves its task."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.fake_provider import Answer, FakeProvider
from support.suites import make_suite
from support.terminus import SOLVE

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.local import LocalBackend

pytestmark = pytest.mark.harbor
KEY = "sk-ant-harbor-limited-0123456789"


def _run(tmp_path: Path, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> AttemptSummary:
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    monkeypatch.setenv("RB_HARBOR_LIMITED_KEY", KEY)
    monkeypatch.setenv("RB_HARBOR_LIMITED_BASE", fake.url)
    fields: dict[str, Any] = dict(
        run_id="run", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="t2", rep=1, account="acct",
        task_path=str(tmp_path / "suite" / "tasks" / "hello-world"), stage_key=str(tmp_path),
        attempt_dir=str(tmp_path / "attempt"), backend="local", backend_options={}, agent_command="",
        agent_env={}, agent_dir=None, route_home=None,
        route_env={"ANTHROPIC_API_KEY": "RB_HARBOR_LIMITED_KEY", "ANTHROPIC_BASE_URL": "RB_HARBOR_LIMITED_BASE"},
        agent_timeout_sec=300.0, verifier_timeout_sec=30.0, verifier_env={}, image=None, build_context=None,
        workdir="/app", network=False, cpus=None, memory_mb=None, pids=None, expose_solution=False,
        artifact_cap_bytes=1 << 20, seed="s", agent="harbor", harbor_agent="terminus-2",
        model="anthropic/claude-sonnet-4-5", harbor_options={"max_turns": 5})
    return asyncio.run(run_attempt(AttemptSpec(**fields), LocalBackend(tmp_path / "sbx")))


def test_a_long_retry_after_stops_terminus_2_at_the_first_refusal(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from ray_bench.harbor.llm import LONG_RETRY_AFTER_SEC

    with FakeProvider(default=Answer(text=SOLVE)) as fake:
        fake.limited_keys[KEY] = 90
        summary = _run(tmp_path, fake, monkeypatch)
        served = fake.served
    assert LONG_RETRY_AFTER_SEC < 90
    assert served.errors == {"rate_limit": 1} and served.answers == 0  # no second try: Harbor would make nine
    error = summary.agent_error
    assert error is not None and error.type == "rate_limit" and error.status == 429
    assert error.retry_after == 90.0  # the server's, from LiteLLM's response headers
    # The refused call is kept with its id and class, apart from the billed ones (there are none).
    assert summary.usage is not None and summary.usage.request_ids == []
    refused = summary.usage.model_dump()["refused"]
    assert [(r["request_id"], r["status"], r["type"]) for r in refused] == [
        (served.failed_request_ids[0], 429, "rate_limit")]
    assert summary.usage.output_tokens == 0 and summary.usage.cost_usd == 0.0  # nothing was billed
    assert summary.phases["agent"] < 60  # not Harbor's ~45 s of retries, nor the retry-after
    assert summary.reward == 0.0


def test_a_short_retry_after_is_left_to_harbors_own_retry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider(default=Answer(text=SOLVE, input_tokens=200, output_tokens=30)) as fake:
        fake.then(Answer(kind="rate_limit", retry_after=2))
        summary = _run(tmp_path, fake, monkeypatch)
        served = fake.served
    assert served.errors == {"rate_limit": 1} and served.answers >= 2
    assert summary.agent_error is None and summary.reward == 1.0
    assert summary.usage is not None and summary.usage.output_tokens == served.output_tokens
    # the answered calls' ids are the billed ones; the refused call's is kept apart, with its class
    assert sorted(summary.usage.request_ids) == sorted(served.request_ids)
    assert [r["request_id"] for r in summary.usage.model_dump()["refused"]] == served.failed_request_ids
