from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.suites import make_suite

from ray_bench.config.loader import load_accounts, load_suite
from ray_bench.config.selection import load_selection
from ray_bench.config.tasks import load_task, load_tasks, task_checksum
from ray_bench.errors import ConfigError, MultipleInputErrors, SelectionError, TaskDirError


def test_suite_loads_with_its_arms(tmp_path: Path) -> None:
    suite_path, _ = make_suite(tmp_path)
    suite = load_suite(suite_path)
    assert [a.name for a in suite.arms] == ["baseline", "mcp"]
    assert suite.baseline.name == "baseline"


def test_unknown_key_names_file_field_and_line(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("name: s\ntasks_dir: tasks\narms:\n  - name: a\n    role: baseline\n"
                    "    command: x\n    comand_typo: y\n")
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    line = info.value.line()
    assert f"{path}:7" in line
    assert "arms.0.comand_typo" in line
    assert "remove the key" in line


def test_two_baselines_refused(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("name: s\ntasks_dir: t\narms:\n  - {name: a, role: baseline, command: x}\n"
                    "  - {name: b, role: baseline, command: x}\n")
    with pytest.raises(ConfigError, match="exactly one arm must have role baseline"):
        load_suite(path)


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    path = tmp_path / "accounts.yaml"
    path.write_text("accounts:\n  - name: a\n    route: {env: [\n")
    with pytest.raises(ConfigError) as info:
        load_accounts(path)
    assert "invalid YAML" in info.value.line()
    assert str(path) + ":" in info.value.line()


def test_several_problems_each_on_a_line(tmp_path: Path) -> None:
    path = tmp_path / "accounts.yaml"
    path.write_text("accounts:\n  - name: a\n    route: {env: {K: 'bad name'}}\n    limits: {max_concurrent: 0}\n")
    with pytest.raises(MultipleInputErrors) as info:
        load_accounts(path)
    lines = info.value.lines()
    assert len(lines) == 2
    assert any("max_concurrent" in line and ":4" in line for line in lines)
    assert any("not an environment variable name" in line for line in lines)


def test_accounts_floor_above_ceiling_refused(tmp_path: Path) -> None:
    path = tmp_path / "accounts.yaml"
    path.write_text("accounts:\n  - name: a\n    route: {env: {K: V}}\n"
                    "    limits: {max_concurrent: 2, min_concurrent: 3}\n")
    with pytest.raises(ConfigError, match="min_concurrent is above max_concurrent"):
        load_accounts(path)


@pytest.mark.parametrize(("name", "text"), [
    ("sel.json", json.dumps({"tasks": [{"task_id": "a", "benchmark": "b", "task_dir": "x/a"},
                                       {"task_id": "b", "benchmark": "b", "task_dir": "x/b"}]})),
    ("sel.yaml", "- a\n- b\n"),
    ("sel.txt", "# comment\na\n\nb  # trailing\n"),
])
def test_selection_formats(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert load_selection(path).task_ids == ["a", "b"]


def test_selection_with_reps(tmp_path: Path) -> None:
    path = tmp_path / "gaps.json"
    path.write_text(json.dumps({"tasks": [{"task_id": "a", "reps": [3], "arms": ["mcp"]}]}))
    entry = load_selection(path).entries[0]
    assert entry.reps == (3,)
    assert entry.arms == ("mcp",)


def test_a_selection_entrys_reps_may_be_a_count(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("- {task_id: a, reps: 3}\n- {task_id: b, reps: [2]}\n")
    assert [e.reps for e in load_selection(path).entries] == [(1, 2, 3), (2,)]


@pytest.mark.parametrize(("name", "text", "needle"), [
    ("s.json", '{"tasks": [', "invalid JSON"),
    ("s.json", '{"items": []}', 'no "tasks" list'),
    ("s.txt", "a\nb c\n", ":2"),
    ("s.txt", "a\na\n", "listed twice"),
    # issue 56: ids resolve without regard to case, so two spellings are one task planned twice
    ("s.txt", "hello-world\nsum-list\nHELLO-WORLD\n", "tasks 'hello-world' and 'HELLO-WORLD' are one task"),
    ("s.json", '{"tasks": [{"task_id": "Hello"}, {"task_id": "hello"}]}', "'Hello' and 'hello' are one task"),
    ("s.txt", "\n\n", "empty"),
    ("s.yaml", "- {benchmark: x}\n", "no task_id"),
    ("s.json", '{"tasks": [{"task_id": "a", "reps": [0]}]}', "list of positive repetition numbers"),
    ("s.json", '{"tasks": [{"task_id": "a", "reps": 0}]}', "a positive count"),
    ("s.json", '{"tasks": [{"task_id": "a", "reps": true}]}', "a positive count"),
])
def test_selection_errors(tmp_path: Path, name: str, text: str, needle: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SelectionError) as info:
        load_selection(path)
    assert needle in info.value.line()


def test_a_yaml_selection_of_800000_lines_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """Issue 56: lines that are not `- ` entries (comments here) cost the YAML parser as much;
    the line bound is counted first. Parsed, this file took 3.9 CPU seconds (15 s at load 5)."""
    import time

    from ray_bench.config.selection import MAX_SELECTION_LINES

    path = tmp_path / "big.yaml"
    path.write_text("# a comment\n" * 800_000 + "- hello-world\n")
    started = time.process_time()
    with pytest.raises(SelectionError) as info:
        load_selection(path)
    assert time.process_time() - started < 1.0
    assert f"selection has 800,001 lines, over {MAX_SELECTION_LINES:,}" in info.value.line()
    path.write_text("# a comment\n" * 1000 + "- hello-world\n")  # under the bound: read as before
    assert [e.task_id for e in load_selection(path).entries] == ["hello-world"]


def test_task_directory_problems_listed(tmp_path: Path) -> None:
    task = tmp_path / "broken"
    task.mkdir()
    (task / "task.toml").write_text("[agent]\ntimeout_sec = -1\n")
    with pytest.raises(MultipleInputErrors) as info:
        load_task(task)
    text = "\n".join(info.value.lines())
    assert "agent.timeout_sec" in text
    assert "instruction.md is missing" in text
    assert "tests/test.sh is missing" in text


def test_task_toml_syntax(tmp_path: Path) -> None:
    _suite, _ = make_suite(tmp_path, tasks=["hello-world"])
    toml = tmp_path / "tasks" / "hello-world" / "task.toml"
    toml.write_text("[agent\n")
    with pytest.raises(TaskDirError, match="invalid TOML"):
        load_task(toml.parent)


def test_unknown_task_named(tmp_path: Path) -> None:
    make_suite(tmp_path, tasks=["hello-world"])
    with pytest.raises(TaskDirError, match="task 'nope' not found"):
        load_tasks(tmp_path / "tasks", ["nope"])


def test_checksum_ignores_location_but_not_content(tmp_path: Path) -> None:
    make_suite(tmp_path / "one", tasks=["hello-world"])
    make_suite(tmp_path / "two", tasks=["hello-world"])
    a = tmp_path / "one" / "tasks" / "hello-world"
    b = tmp_path / "two" / "tasks" / "hello-world"
    assert task_checksum(a) == task_checksum(b)
    (b / "tests" / "test.sh").write_text((b / "tests" / "test.sh").read_text() + "\n# edit\n")
    assert task_checksum(a) != task_checksum(b)


def test_accounts_cooldown_s_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "accounts.yaml"
    path.write_text("accounts:\n  - name: a\n    route: {env: {K: V}}\n"
                    "    limits: {max_concurrent: 2, cooldown_s: 2.5}\n")
    assert load_accounts(path).accounts[0].limits.cooldown_s == 2.5
    for bad in ("0", "1000", "soon"):
        path.write_text("accounts:\n  - name: a\n    route: {env: {K: V}}\n"
                        f"    limits: {{max_concurrent: 2, cooldown_s: {bad}}}\n")
        with pytest.raises(ConfigError) as info:
            load_accounts(path)
        line = info.value.line()
        assert f"{path}:4" in line and "cooldown_s" in line, line
