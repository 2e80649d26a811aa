"""A Harbor arm at plan time: Harbor's own registry and option models decide, bad input is one
line and exit 2 with nothing written, and the receipt shows what Harbor reports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.cli.app import app


def _suite(tmp_path: Path, backend: str = "local", **variant: Any) -> tuple[Path, Path]:
    arms = [{"name": "baseline", "role": "baseline", "command": "true"},
            {"name": "hb", "role": "variant", "agent": "harbor", **variant}]
    # the baseline arm names no image and the task none either: a docker suite gives one
    image = {"image": "busybox:latest"} if backend == "docker" else {}
    return make_suite(tmp_path / "s", tasks=["hello-world"], arms=arms, backend=backend,
                      backends={backend: {"max_sandboxes": 2, **image}})


def _plan(tmp_path: Path, backend: str = "local", **variant: Any) -> Any:
    suite, accounts = _suite(tmp_path, backend, **variant)
    return CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                    "--runs-dir", str(tmp_path / "runs"), "--run-id", "r"])


def _refused(result: Any, tmp_path: Path, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (tmp_path / "runs" / "r").exists()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the refusal of an interpreter older than 3.12")
def test_an_old_interpreter_refuses_a_harbor_arm_and_says_how_to_get_one(tmp_path: Path) -> None:
    result = _plan(tmp_path, harbor_agent="oracle")
    _refused(result, tmp_path, "arms.hb: agent harbor needs Python 3.12", sys.version.split()[0],
             "scripts/harbor-env.sh", "ray-bench[harbor]")


def test_harbor_fields_belong_to_a_harbor_arm(tmp_path: Path) -> None:
    _refused(_plan(tmp_path, harbor_agent=None), tmp_path, "needs `harbor_agent`")
    suite, accounts = make_suite(tmp_path / "t", tasks=["hello-world"], arms=[
        {"name": "baseline", "role": "baseline", "command": "true", "harbor_agent": "oracle"}])
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--runs-dir", str(tmp_path / "runs"), "--run-id", "r"])
    _refused(result, tmp_path, "for agent: harbor only")


@pytest.mark.harbor
@pytest.mark.parametrize(("variant", "needles"), [
    ({"harbor_agent": "terminus-3", "model": "anthropic/x"}, ("unknown Harbor agent 'terminus-3'", "terminus-2")),
    ({"harbor_agent": "terminus-2", "model": "anthropic/x", "harbor_options": {"max_turnz": 3}},
     ("harbor_options: Invalid kwargs for agent 'terminus-2'", "Unknown option 'max_turnz'")),
    ({"harbor_agent": "terminus-2", "model": "anthropic/x", "harbor_options": {"temperature": "hot"}},
     ("temperature",)),
    ({"harbor_agent": "terminus-2"}, ("calls a model",)),
    ({"harbor_agent": "terminus-2", "model": "anthropic/x", "harbor_options": {"llm_api_key": "sk-x"}},
     ("harbor_options.llm_api_key would put a credential in the suite", "account's route")),
])
def test_bad_harbor_arms_are_refused_by_harbors_own_models(tmp_path: Path, variant: dict[str, Any],
                                                           needles: tuple[str, ...]) -> None:
    _refused(_plan(tmp_path, **variant), tmp_path, "arms.hb.harbor_agent", *needles)


@pytest.mark.harbor
def test_the_receipt_shows_the_harbor_agent_version_options_roles_and_image(tmp_path: Path) -> None:
    result = _plan(tmp_path, backend="docker", harbor_agent="terminus-2", model="anthropic/claude-sonnet-4-5",
                   harbor_options={"max_turns": 7}, image="busybox:latest")
    assert result.exit_code == 0, result.output
    receipt = (tmp_path / "runs" / "r" / "receipt.md").read_text()
    row = next(line for line in receipt.splitlines() if line.startswith("| hb | terminus-2 |"))
    assert "2.0.0 (Harbor 0.26.0)" in row
    assert '"max_turns":7' in row and '"enable_summarize":true' in row  # Harbor's defaults filled
    assert "executor: anthropic/claude-sonnet-4-5" in row and "summariser" in row
    assert "busybox:latest" in row and "tmux" in row
    off = _plan(tmp_path / "off", harbor_agent="terminus-2", model="anthropic/m",
                harbor_options={"enable_summarize": False})
    assert off.exit_code == 0, off.output
    assert "summariser" not in (tmp_path / "off" / "runs" / "r" / "receipt.md").read_text()


@pytest.mark.harbor
def test_an_oracle_arm_calls_no_model_and_its_options_enter_the_cell_ids(tmp_path: Path) -> None:
    assert _plan(tmp_path / "a", harbor_agent="oracle").exit_code == 0
    receipt = (tmp_path / "a" / "runs" / "r" / "receipt.md").read_text()
    assert "| hb | oracle | 1.0.0 (Harbor 0.26.0) |" in receipt and "none (no model)" in receipt
    assert _plan(tmp_path / "b", harbor_agent="nop").exit_code == 0
    ids = [{line for line in (tmp_path / d / "runs" / "r" / "launch-plan.json").read_text().splitlines()
            if '"id"' in line} for d in ("a", "b")]
    assert ids[0] != ids[1]


@pytest.mark.harbor
def test_the_receipt_shows_an_installed_harbor_agent_its_laid_cli_version_options_and_roles(
        tmp_path: Path) -> None:
    """Harbor's claude-code on docker: the version is the CLI this node lays (Harbor reports an
    installed agent's version only after its setup), the options with Harbor's defaults, the
    model it calls in the sandbox, and the image with the agent layer Harbor's setup finds."""
    from ray_bench.harbor.arms import _host_cli_version

    laid = _host_cli_version("claude-code")
    if laid is None:
        pytest.skip("no claude-code CLI on this node to lay")
    result = _plan(tmp_path, backend="docker", harbor_agent="claude-code", model="anthropic/claude-sonnet-4-5",
                   harbor_options={"max_turns": 9}, image="busybox:latest", network="public")
    assert result.exit_code == 0, result.output
    receipt = (tmp_path / "runs" / "r" / "receipt.md").read_text()
    row = next(line for line in receipt.splitlines() if line.startswith("| hb | claude-code |"))
    assert f"| {laid} (this node's CLI, laid on docker" in row and "(Harbor 0.26.0)" in row, row
    assert '"max_turns":9' in row, row
    assert "executor: anthropic/claude-sonnet-4-5 (claude-code in the sandbox)" in row, row
    assert "sandbox (installed by its setup)" in row, row
    assert "busybox:latest" in row and "agent layer: `claude`" in row and "installs nothing" in row, row
    pinned = _plan(tmp_path / "p", backend="docker", harbor_agent="codex", model="openai/gpt-5",
                   harbor_options={"version": "0.1.0"}, image="busybox:latest", network="public")
    assert pinned.exit_code == 0, pinned.output
    row = next(line for line in (tmp_path / "p" / "runs" / "r" / "receipt.md").read_text().splitlines()
               if line.startswith("| hb | codex |"))
    assert "| 0.1.0 (pinned" in row and "agent layer: `codex`" in row, row


@pytest.mark.harbor
def test_an_installed_harbor_agent_on_a_closed_backend_needs_network_public(tmp_path: Path) -> None:
    _refused(_plan(tmp_path, backend="docker", harbor_agent="codex", model="openai/gpt-5", image="busybox:latest"),
             tmp_path, "arms.hb: Harbor agent codex runs in the sandbox", "network: public")
