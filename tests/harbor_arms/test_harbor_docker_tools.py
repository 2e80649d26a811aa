"""Terminus 2's tools in an offline docker sandbox: in the tmux image the recording is off (no
asciinema there, and Harbor could not install it offline) and no installer runs; in an image
without tmux the attempt is ``cli_missing`` at once, not Harbor's 240 s of failing installs."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fake_provider import Answer, FakeProvider
from support.specs import run_on_docker
from support.suites import make_suite
from support.terminus import SOLVE, commands_seen, installs

from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.attempt import AttemptSummary

pytestmark = [pytest.mark.docker, pytest.mark.harbor]


def _run(tmp: Path, image: str, url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[AttemptSummary, list[str]]:
    seen = commands_seen(monkeypatch)
    monkeypatch.setenv("RB_HARBOR_TOOLS_KEY", "sk-ant-harbor-tools-0123456789")
    monkeypatch.setenv("RB_HARBOR_TOOLS_BASE", url)
    make_suite(tmp / "suite", tasks=["hello-world"])
    spec = AttemptSpec(
        run_id="tools", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="t2", rep=1, account="acct",
        task_path=str(tmp / "suite" / "tasks" / "hello-world"), stage_key=str(tmp), attempt_dir=str(tmp / "attempt"),
        backend="docker", backend_options={}, agent_command="", agent_env={}, agent_dir=None, route_home=None,
        route_env={"ANTHROPIC_API_KEY": "RB_HARBOR_TOOLS_KEY", "ANTHROPIC_BASE_URL": "RB_HARBOR_TOOLS_BASE"},
        agent_timeout_sec=120.0, verifier_timeout_sec=60.0, verifier_env={}, image=image, build_context=None,
        workdir="/app", network=False, cpus=None, memory_mb=512, pids=None, expose_solution=False,
        artifact_cap_bytes=8 << 20, seed="s", agent="harbor", harbor_agent="terminus-2",
        model="anthropic/claude-sonnet-4-5", harbor_options={"max_turns": 3})

    return run_on_docker(spec), seen


def test_offline_in_the_tmux_image_terminus_2_records_nothing_and_installs_nothing(
        tmp_path: Path, tmux_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider(default=Answer(text=SOLVE)) as fake:
        summary, seen = _run(tmp_path, tmux_image, fake.url, monkeypatch)
    assert summary.error is None and summary.reward == 1.0, summary.agent_error
    assert installs(seen) == []
    assert not any("asciinema" in c for c in seen)
    assert not (tmp_path / "attempt" / "harbor" / "agent" / "recording.cast").exists()


def test_offline_in_an_image_without_tmux_terminus_2_is_cli_missing_at_once(
        tmp_path: Path, base_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider(default=Answer(text=SOLVE)) as fake:
        summary, seen = _run(tmp_path, base_image, fake.url, monkeypatch)
        asked = fake.served.answers + sum(fake.served.errors.values())
    assert summary.agent_error is not None and summary.agent_error.type == "cli_missing"
    assert "image has none and the sandbox is offline" in summary.agent_error.message
    assert seen == [] and asked == 0  # refused before Harbor's agent ran a command or called the model
