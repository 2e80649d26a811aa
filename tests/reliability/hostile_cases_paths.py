"""Hostile paths and sizes (issue 28, the last of items 8 and 11), registered into
hostile_corpus.CASES: a suite's tasks_dir or an arm's agent_dir that is a symlink loop or a
dangling link, a NUL byte in a path read from a file, an instruction too large for the one
command-line argument an adapter passes it as, and a damaged ledger under ``status``."""

from __future__ import annotations

import json
from pathlib import Path

from hostile_corpus import Case, Env, case

#: The base suite's arms.
ARMS = ("baseline", "mcp")


def _loop(e: Env, name: str) -> Path:
    link = e.suite.parent / name
    link.symlink_to(link.parent / f"{name}-b")
    (link.parent / f"{name}-b").symlink_to(link)
    return link


def _dangling(e: Env, name: str) -> Path:
    link = e.suite.parent / name
    link.symlink_to(e.root / "nowhere")
    return link


def _agent_dir(e: Env, value: str) -> None:
    def change(d: dict[str, object]) -> None:
        arms = d["arms"]
        assert isinstance(arms, list)
        for arm in arms:
            arm["agent_dir"] = value
    e.edit_yaml(e.suite, change)


@case("suite-tasks-dir-symlink-loop")
def _(e: Env) -> Case:
    _loop(e, "looped")
    e.edit_yaml(e.suite, lambda d: d.update(tasks_dir="looped"))
    return Case(e.plan_args(), ["tasks_dir: looped is a symlink loop"])


@case("suite-tasks-dir-dangling-link")
def _(e: Env) -> Case:
    _dangling(e, "gone")
    e.edit_yaml(e.suite, lambda d: d.update(tasks_dir="gone"))
    return Case(e.plan_args(), ["tasks_dir: gone is a dangling symlink"])


@case("suite-tasks-dir-with-nul")
def _(e: Env) -> Case:
    e.edit_yaml(e.suite, lambda d: d.update(tasks_dir="tasks\0/../tasks"))
    return Case(e.plan_args(), ["tasks_dir: holds a NUL byte"])


@case("arm-agent-dir-symlink-loop")
def _(e: Env) -> Case:
    _loop(e, "agent-loop")
    _agent_dir(e, "agent-loop")
    return Case(e.plan_args(), [f"arms.{a}.agent_dir: agent-loop is a symlink loop" for a in ARMS])


@case("arm-agent-dir-dangling-link")
def _(e: Env) -> Case:
    _dangling(e, "agent-gone")
    _agent_dir(e, "agent-gone")
    return Case(e.plan_args(), [f"arms.{a}.agent_dir: agent-gone is a dangling symlink" for a in ARMS])


@case("arm-agent-dir-with-nul")
def _(e: Env) -> Case:
    _agent_dir(e, "agents\0x")
    return Case(e.plan_args(), [f"arms.{n}.agent_dir: holds a NUL byte" for n in (0, 1)])


@case("selection-task-dir-with-nul")
def _(e: Env) -> Case:
    sel = e.file("sel.json", json.dumps({"tasks": [{"task_id": "sum-list", "task_dir": "sum-list\0x"}]}))
    return Case(e.plan_args("--selection-file", str(sel)), ["entry 1: task_dir holds a NUL byte"])


def _ledger(e: Env) -> Path:
    """A real ledger beside the plan, written and closed as the driver would."""
    from ray_bench.ledger import Ledger

    ledger = Ledger.create(e.plan.parent, run_id="ok", plan_identity=e.identity)
    ledger.event("run_started", {})
    ledger.close()
    return e.plan.parent / "ledger.sqlite"


@case("status-ledger-truncated")
def _(e: Env) -> Case:
    path = _ledger(e)
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size // 2)
    return Case(["status", str(e.plan.parent)], [str(path)])


@case("status-ledger-garbage")
def _(e: Env) -> Case:
    path = _ledger(e)
    path.write_bytes(b"SQLite format 3\0" + bytes(range(256)) * 64)
    return Case(["status", str(e.plan.parent)], [str(path)])


@case("status-json-ledger-garbage")
def _(e: Env) -> Case:
    path = _ledger(e)
    path.write_bytes(b"not a database at all\n" * 200)
    return Case(["status", str(e.plan.parent), "--json"], [str(path)])


@case("status-ledger-empty")
def _(e: Env) -> Case:
    path = _ledger(e)
    path.write_bytes(b"")
    return Case(["status", str(e.plan.parent)], [str(path)])


def _cli_arm(e: Env, agent: str, model: str) -> None:
    def change(d: dict[str, object]) -> None:
        arms = d["arms"]
        assert isinstance(arms, list)
        arms[1] = {"name": arms[1]["name"], "role": arms[1]["role"], "agent": agent, "model": model}
    e.edit_yaml(e.suite, change)


@case("task-instruction-over-claude-code-argument")
def _(e: Env) -> Case:
    _cli_arm(e, "claude-code", "sonnet")
    (e.tasks / "sum-list" / "instruction.md").write_text("Sum the list.\n" + "x" * (200 * 1024) + "\n")
    return Case(e.plan_args(), ["task sum-list: instruction.md is 204,815 bytes, over the 131,071"])


@case("task-instruction-over-codex-argument")
def _(e: Env) -> Case:
    _cli_arm(e, "codex", "gpt-5")
    (e.tasks / "hello-world" / "instruction.md").write_bytes(b"y" * (128 * 1024))
    return Case(e.plan_args(), ["task hello-world: instruction.md is 131,072 bytes"])
