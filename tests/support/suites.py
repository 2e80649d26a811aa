"""Suites made in a temporary directory for tests: the quickstart tasks with a fast scripted
agent, or tasks and agents written by the test itself (agents that misbehave on purpose)."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path
from typing import Any

import yaml

from ray_bench.cli.quickstart import example_dir
from support.ray_local import set_test_routes

# Suites made here name the test routes; every test process that builds one has them set.
set_test_routes()


def write_agent(directory: Path, name: str, script: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + script.lstrip())
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def make_suite(root: Path, *, tasks: list[str] | None = None, reps: int = 1,
               arms: list[dict[str, Any]] | None = None, accounts: list[dict[str, Any]] | None = None,
               **suite_fields: Any) -> tuple[Path, Path]:
    """Copy the quickstart tasks (or a subset) under ``root`` and write suite.yaml and
    accounts.yaml. The default arms run the scripted agent with no sleep."""
    root.mkdir(parents=True, exist_ok=True)
    src = example_dir()
    shutil.copytree(src / "agents", root / "agents", dirs_exist_ok=True)
    (root / "tasks").mkdir(exist_ok=True)
    for task in sorted(p.name for p in (src / "tasks").iterdir()):
        if tasks is None or task in tasks:
            shutil.copytree(src / "tasks" / task, root / "tasks" / task, dirs_exist_ok=True)
    fast = {"SCRIPTED_MIN_SEC": "0", "SCRIPTED_MAX_SEC": "0"}
    suite: dict[str, Any] = {
        "name": "t", "tasks_dir": "tasks", "reps": reps, "backend": "local",
        "backends": {"local": {"max_sandboxes": 8}},
        "arms": arms or [
            {"name": "baseline", "role": "baseline", "command": 'sh "$AGENT_DIR/scripted-agent.sh"',
             "agent_dir": "agents", "env": {**fast, "SCRIPTED_SKILL": "50"}, "expose_solution": True},
            {"name": "mcp", "role": "variant", "command": 'sh "$AGENT_DIR/scripted-agent.sh"',
             "agent_dir": "agents", "env": {**fast, "SCRIPTED_SKILL": "90"}, "expose_solution": True},
        ],
        "preflight_cells": 1, "max_attempts": 2,
    }
    suite.update(suite_fields)
    accounts_doc = {"accounts": accounts or [
        {"name": "acct-a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}, "limits": {"max_concurrent": 3}},
        {"name": "acct-b", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_B"}}, "limits": {"max_concurrent": 3}},
    ]}
    (root / "suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    (root / "accounts.yaml").write_text(yaml.safe_dump(accounts_doc, sort_keys=False))
    return root / "suite.yaml", root / "accounts.yaml"
