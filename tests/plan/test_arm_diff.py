"""Each arm's whole difference from the baseline, from the arm models (issue 56)."""

from __future__ import annotations

from pathlib import Path

from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.models.suite import Arm
from ray_bench.plan.arm_diff import arm_differences, render_differences

BASE = {"name": "baseline", "role": "baseline", "agent": "claude-code", "model": "claude-sonnet-4-5",
        "env": {"MODE": "plain"}, "agent_args": ["--max-turns", "30"]}


def _diff(**changes: object) -> dict[str, tuple[str, str]]:
    arm = Arm.model_validate({**BASE, "name": "mcp", "role": "variant", **changes})
    return {d.field: (d.baseline, d.value) for d in arm_differences(Arm.model_validate(BASE), arm)}


def test_an_identical_arm_differs_in_nothing_but_its_name() -> None:
    assert _diff() == {}


def test_every_kind_of_field_is_shown_with_both_values() -> None:
    found = _diff(model="claude-opus-4-1", image="ghcr.io/x/agent:2", agent_timeout_sec=900, network="public",
                  agent_args=["--max-turns", "60"], resources={"memory_mb": 4096},
                  mcp_servers=[{"name": "github", "command": "npx", "args": ["-y", "@mcp/server-github"]},
                               {"name": "docs", "transport": "sse", "url": "https://mcp.example.com/sse"}],
                  watchdog={})
    assert found["model"] == ("claude-sonnet-4-5", "claude-opus-4-1")
    assert found["image"] == ("-", "ghcr.io/x/agent:2")
    assert found["agent_timeout_sec"] == ("-", "900.0")
    assert found["network"] == ("-", "public")
    assert found["agent_args"] == ("--max-turns 30", "--max-turns 60")
    assert found["resources.memory_mb"] == ("-", "4096")
    # an MCP server by its name, with its command and arguments or its URL
    assert found["mcp_servers[github].command"] == ("-", "npx")
    assert found["mcp_servers[github].args"] == ("-", "-y @mcp/server-github")
    assert found["mcp_servers[docs].url"] == ("-", "https://mcp.example.com/sse")
    # a block turned on with its defaults is a difference in each of its limits
    assert found["watchdog.repeats"] == ("-", "8")
    assert "agent" not in found and "name" not in found and "role" not in found


def test_a_field_added_to_the_model_is_covered_without_editing_the_diff() -> None:
    # every field of the dump is compared: none is listed by hand
    fields = set(Arm.model_fields) - {"name", "role", "mcp_servers", "resources", "roles", "watchdog", "env",
                                      "harbor_options"}
    assert {"keep_workspace", "expose_solution", "verifier_timeout_sec"} <= fields
    found = _diff(keep_workspace=True, expose_solution=True, verifier_timeout_sec=60)
    assert {"keep_workspace", "expose_solution", "verifier_timeout_sec"} <= set(found)


def test_env_shows_names_never_values_and_a_secret_shape_is_fingerprinted() -> None:
    found = _diff(env={"MODE": "mcp-on", "EXTRA": "1"}, roles=[
        {"role": "executor", "model": "claude-opus-4-1", "billing": "api", "max_turns": 40}])
    assert found["env.MODE"] == ("set", "set, another value")
    assert found["env.EXTRA"] == ("-", "set")
    assert found["roles[executor].max_turns"] == ("-", "40")
    assert all("mcp-on" not in v for pair in found.values() for v in pair)
    # a credential shape in a shown field (refused at load, so built past validation here)
    key = "sk-ant-api03-" + "Zx9" * 12
    arm = Arm.model_construct(**{**Arm.model_validate(BASE).__dict__, "name": "v", "image": key})
    shown = {d.field: d.value for d in arm_differences(Arm.model_validate(BASE), arm)}
    assert shown["image"].startswith("<sk-a...") and key not in shown["image"]


def test_the_receipt_shows_the_mcp_arms_server(tmp_path: Path) -> None:
    arms = [{"name": "baseline", "role": "baseline", "command": 'sh "$AGENT_DIR/scripted-agent.sh"',
             "agent_dir": "agents", "expose_solution": True},
            {"name": "mcp", "role": "variant", "command": 'sh "$AGENT_DIR/scripted-agent.sh"',
             "agent_dir": "agents", "expose_solution": True, "agent_timeout_sec": 120,
             "mcp_servers": [{"name": "search", "command": "search-mcp", "args": ["--stdio"]}]}]
    suite, accounts = make_suite(tmp_path / "s", arms=arms, tasks=["hello-world", "sum-list"])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1")
    receipt = (planned.run_root / "receipt.md").read_text()
    assert "| mcp | `mcp_servers[search].command` | `-` | `search-mcp` |" in receipt
    assert "| mcp | `agent_timeout_sec` | `-` | `120.0` |" in receipt


def test_a_one_arm_plan_has_nothing_to_compare() -> None:
    assert render_differences([Arm.model_validate(BASE)])[-1].startswith("- one arm in this plan")
