"""Terminus 2 in tests: the fake model's answer that solves hello-world, and a spy on the commands
Harbor's code runs through ray-bench's SandboxEnvironment (Terminus 2's tool checks and installs
among them). Import only where Harbor is (tests marked ``harbor``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

#: Terminus 2's JSON answer: one command typed into its tmux pane, then the task declared done
#: (Terminus 2 asks once more before it believes it, so the same answer twice).
SOLVE = json.dumps({"analysis": "the file is missing", "plan": "write it",
                    "commands": [{"keystrokes": "echo 'Hello, world!' > hello.txt\n", "duration": 0.5}],
                    "task_complete": True})
#: How Harbor's TmuxSession installs a missing tmux or asciinema (harbor/agents/terminus_2/tmux_session.py).
INSTALLERS = ("apt-get", "pip install", "pip3 install", "apk add", "yum install", "dnf install", "./configure")


def commands_seen(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every command run through the environment from now on (this test only)."""
    from ray_bench.harbor.environment import SandboxEnvironment

    seen: list[str] = []
    original = SandboxEnvironment.exec

    async def spy(self: SandboxEnvironment, command: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(command)
        return await original(self, command, *args, **kwargs)

    monkeypatch.setattr(SandboxEnvironment, "exec", spy)
    return seen


def installs(seen: list[str]) -> list[str]:
    """The commands among ``seen`` that install a package."""
    return [c for c in seen if any(w in c for w in INSTALLERS)]
