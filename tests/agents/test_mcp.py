"""A task's MCP servers reach every agent: the gemini-cli adapter merges them into a login's
existing settings.json (read back by the real CLI's `gemini mcp list`), and a `command` agent
finds them in /task/mcp-servers.json, named by RAY_BENCH_MCP_CONFIG."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.agent_clis import bin_dir, missing
from support.suites import make_suite

from ray_bench.agents import adapter
from ray_bench.agents.base import Invocation
from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.models.agent import McpServer
from ray_bench.sandboxes.local import LocalBackend

SERVERS = (McpServer(name="task-docs", transport="stdio", command="docs-mcp", args=["--root", "/app"]),
           McpServer(name="search", transport="streamable-http", url="http://127.0.0.1:9/mcp"))
OWN = {"general": {"vimMode": True}, "security": {"auth": {"selectedType": "oauth-personal"}},
       "mcpServers": {"own": {"command": "own-mcp"}}}


def _run_gemini_setup(tmp_path: Path, gemini: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "logs" / "agent").mkdir(parents=True, exist_ok=True)
    (tmp_path / "instruction.md").write_text("say hi")
    command = adapter("gemini-cli").command(Invocation(model="gemini-2.5-flash", mcp_servers=SERVERS))
    env = {"PATH": f"{gemini.parent}:{os.environ['PATH']}", "HOME": str(tmp_path / "home"),
           "LOGS_DIR": str(tmp_path / "logs"), "INSTRUCTION_FILE": str(tmp_path / "instruction.md")}
    return subprocess.run(["sh", "-c", command], check=False, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def fake_gemini(tmp_path: Path) -> Path:
    """A `gemini` that keeps the settings it started with, in $LOGS_DIR/seen-settings.json."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (gemini-cli is a Node program)")
    path = tmp_path / "bin" / "gemini"
    path.parent.mkdir()
    path.write_text('#!/bin/sh\ncp "$HOME/.gemini/settings.json" "$LOGS_DIR/seen-settings.json"\n'
                    "echo '{\"response\": \"hi\"}'\n")
    path.chmod(0o755)
    return path


def test_gemini_merges_the_servers_into_an_existing_settings_json(tmp_path: Path, fake_gemini: Path) -> None:
    settings = tmp_path / "home" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps(OWN))
    done = _run_gemini_setup(tmp_path, fake_gemini)
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "logs" / "seen-settings.json").read_text())
    assert seen["general"] == OWN["general"] and seen["security"] == OWN["security"]
    assert seen["mcpServers"] == {
        "own": {"command": "own-mcp"},
        "task-docs": {"command": "docs-mcp", "args": ["--root", "/app"]},
        "search": {"httpUrl": "http://127.0.0.1:9/mcp"}}
    # after the CLI the login's file says what it said before (a HOME used in place keeps no task's servers)
    assert json.loads(settings.read_text()) == OWN


def test_gemini_gives_back_an_entry_it_replaced_and_keeps_the_cli_s_exit_code(tmp_path: Path,
                                                                               fake_gemini: Path) -> None:
    settings = tmp_path / "home" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    own = {"mcpServers": {"search": {"url": "http://old"}}}
    settings.write_text(json.dumps(own))
    fake_gemini.write_text(fake_gemini.read_text() + "exit 3\n")
    done = _run_gemini_setup(tmp_path, fake_gemini)
    assert done.returncode == 3
    seen = json.loads((tmp_path / "logs" / "seen-settings.json").read_text())
    assert seen["mcpServers"]["search"] == {"httpUrl": "http://127.0.0.1:9/mcp"}  # the task's wins
    assert json.loads(settings.read_text()) == own


def test_gemini_leaves_a_settings_file_it_cannot_parse_alone(tmp_path: Path, fake_gemini: Path) -> None:
    settings = tmp_path / "home" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{\n  // the CLI allows comments\n  "general": {}\n}\n')
    before = settings.read_text()
    done = _run_gemini_setup(tmp_path, fake_gemini)
    assert done.returncode == 0 and settings.read_text() == before
    assert "not plain JSON: MCP servers not added" in done.stderr


def test_gemini_writes_the_servers_where_the_home_has_no_settings(tmp_path: Path, fake_gemini: Path) -> None:
    done = _run_gemini_setup(tmp_path, fake_gemini)
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "logs" / "seen-settings.json").read_text())
    assert set(seen["mcpServers"]) == {"task-docs", "search"}
    assert "mcpServers" not in json.loads((tmp_path / "home" / ".gemini" / "settings.json").read_text())


@pytest.mark.skipif(missing("gemini") is not None, reason=str(missing("gemini")))
def test_the_real_gemini_cli_lists_the_merged_servers(tmp_path: Path) -> None:
    settings = tmp_path / "home" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({**OWN, "security": {"auth": {"selectedType": "gemini-api-key"}}}))
    # a `gemini` on PATH that asks the real CLI which servers its merged settings give it (no provider)
    wrapper = tmp_path / "bin" / "gemini"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nGEMINI_API_KEY=not-a-key NO_COLOR=1 GEMINI_CLI_TRUST_WORKSPACE=true '
                       f'"{bin_dir() / "gemini"}" mcp list >"$LOGS_DIR/listed.txt" 2>&1\n')
    wrapper.chmod(0o755)
    done = _run_gemini_setup(tmp_path, wrapper)
    listed = (tmp_path / "logs" / "listed.txt").read_text()
    assert "own" in listed and "task-docs" in listed and "search" in listed, (done.stderr, listed)


def test_a_command_agent_reads_the_servers_from_the_documented_file(tmp_path: Path) -> None:
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    servers = tuple(s.model_dump(mode="json") for s in SERVERS)
    spec = AttemptSpec(
        run_id="run", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="baseline", rep=1,
        account="acct", task_path=str(tmp_path / "suite" / "tasks" / "hello-world"), stage_key=str(tmp_path),
        attempt_dir=str(tmp_path / "attempt"), backend="local", backend_options={},
        agent_command='cp "$RAY_BENCH_MCP_CONFIG" "$LOGS_DIR/agent/seen.json"; echo "$RAY_BENCH_MCP_CONFIG"',
        agent_env={}, agent_dir=None, route_env={"API_KEY": "RB_CANARY_KEY_1"}, route_home=None,
        agent_timeout_sec=10.0, verifier_timeout_sec=10.0, verifier_env={}, image=None, build_context=None,
        workdir="/app", network=False, cpus=None, memory_mb=None, pids=None, expose_solution=False,
        artifact_cap_bytes=1 << 20, seed="s", mcp_servers=servers)
    summary = asyncio.run(run_attempt(spec, LocalBackend(tmp_path / "sbx")))
    assert summary.agent is not None and summary.agent.exit_code == 0, summary.agent
    assert summary.agent.output_tail.strip().endswith("/task/mcp-servers.json")
    seen = json.loads((tmp_path / "attempt" / "logs" / "agent" / "seen.json").read_text())
    assert seen["mcpServers"]["task-docs"] == {"type": "stdio", "command": "docs-mcp", "args": ["--root", "/app"]}
    assert seen["mcpServers"]["search"] == {"type": "http", "url": "http://127.0.0.1:9/mcp"}
