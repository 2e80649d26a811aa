"""Shapes CodeScaleBench's ``configs/`` really holds (synthetic files written here, not copies):
MCP-unique selections that name the benchmark ``mcp_suite`` and prefix ``task_dir`` with
``benchmarks/``, and the reports, plan summaries and manifests kept beside the selections,
which are refused in one line that says what the file is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.cli import app
from ray_bench.config.selection import load_selection, resolve_selection
from ray_bench.config.tasks import index_tasks
from ray_bench.errors import SelectionError


def _write(tmp_path: Path, data: Any, name: str = "sel.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return path


def _checkout(tmp_path: Path, *task_dirs: str) -> Path:
    root = tmp_path / "checkout"
    for task_dir in task_dirs:
        (root / "benchmarks" / task_dir).mkdir(parents=True)
        (root / "benchmarks" / task_dir / "task.toml").write_text('version = "1.0"\n')
    return root


MCP_UNIQUE = {"description": "MCP-unique tasks", "version": "1.0", "tasks": [
    {"task_id": "CCX-trace-901", "mcp_suite": "org_tracing", "use_case_category": "A",
     "task_dir": "benchmarks/org_tracing/ccx-trace-901", "oracle_check_types": ["file_set_match"]},
    {"task_id": "ccx-trace-902", "benchmark": "org_tracing", "mcp_suite": "org_tracing", "mcp_unique": True,
     "task_dir": "org_tracing/ccx-trace-902"}]}


def test_mcp_suite_names_the_benchmark_of_an_mcp_unique_entry(tmp_path: Path) -> None:
    selection = load_selection(_write(tmp_path, MCP_UNIQUE))
    assert [(e.task_id, e.benchmark) for e in selection.entries] == [
        ("CCX-trace-901", "org_tracing"), ("ccx-trace-902", "org_tracing")]
    root = _checkout(tmp_path, "org_tracing/ccx-trace-901", "org_tracing/ccx-trace-902")
    for given in (root, root / "benchmarks"):
        resolved = resolve_selection(selection, [given], index_tasks([given]))
        assert resolved.task_ids == ["ccx-trace-901", "ccx-trace-902"]
        assert resolved.warnings == ()  # CCX-/ccx- is the same task, compared without case


def test_an_mcp_suite_that_is_not_the_task_dirs_benchmark_is_refused(tmp_path: Path) -> None:
    entry = {"task_id": "ccx-trace-901", "mcp_suite": "org_security", "task_dir": "org_tracing/ccx-trace-901"}
    selection = load_selection(_write(tmp_path, {"tasks": [entry]}))
    root = _checkout(tmp_path, "org_tracing/ccx-trace-901")
    with pytest.raises(SelectionError, match="is not in benchmark 'org_security'"):
        resolve_selection(selection, [root], index_tasks([root]))


def test_an_empty_mcp_suite_is_refused_by_its_name(tmp_path: Path) -> None:
    with pytest.raises(SelectionError, match="mcp_suite must be a non-empty path"):
        load_selection(_write(tmp_path, {"tasks": [{"task_id": "t", "mcp_suite": " ", "task_dir": "b/t"}]}))


REPORTS = {
    "execution report": ({"summary": {"moved": 2}, "moves": [{"source": "runs/a", "dest": "runs/b"}]},
                         'a JSON object with keys moves, summary and no "tasks" list'),
    "plan summary": ({"rerun_needed": 3, "selection_files": [{"file": "configs/x.json", "tasks": 3}]},
                     'a JSON object with keys rerun_needed, selection_files and no "tasks" list'),
    "task keys": ([{"suite": "sdlc_fix", "task": "x-fix-001", "configs": {"baseline": {"valid": 1}}},
                   {"suite": "sdlc_fix", "task": "y-fix-001", "configs": {"mcp": {"valid": 0}}}],
                  "a JSON list of 2 items of objects with keys configs, suite, task"),
    "mirror manifest": ([{"mirror": "org/repo--0123abcd", "commit": "0123abcd" * 5, "instance_ids": ["i1"]}],
                        "a JSON list of 1 items of objects with keys commit, instance_ids, mirror"),
    "instances by hash": ({"ea840a03": {"language": "python"}, "85970e74": {"language": "java"}},
                          'a JSON object with keys 85970e74, ea840a03 and no "tasks" list'),
    "tasks as a mapping": ({"tasks": {"x": {"task_dir": "b/x"}}}, 'its "tasks" is dict, not a list'),
}


@pytest.mark.parametrize("kind", sorted(REPORTS))
def test_a_file_beside_the_selections_is_refused_saying_what_it_is(tmp_path: Path, kind: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    data, shape = REPORTS[kind]
    path = _write(tmp_path, data, "report.json")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert str(path) in lines[0] and f"not a selection: {shape}" in lines[0], lines[0]
    assert '{"tasks": [{"task_id": ..., "task_dir": ...}]}' in lines[0]
    assert list(work.iterdir()) == []


def test_run_paths_and_instance_ids_in_a_csb_entry_are_not_secrets(tmp_path: Path) -> None:
    """CSB entries carry extra keys (receipt paths with Harbor's random trial suffix, mirror
    commits, SWE-bench Pro instance ids): none reaches a command, none is a credential."""
    instance = "instance_acme__widget-" + "5f1e" * 10 + "-v" + "0c3a" * 10
    entry = {"task_id": instance, "benchmark": "swebenchpro", "task_dir": f"swebenchpro/tasks/{instance}",
             "src": "runs/staging/fix_20260303_181304/mcp-remote-direct/mcp_widget-fix-001_b4ma9u__F3hxNnJ",
             "mirror_commit": "9acf8be6d2fd08210665c294830df3c85c014214",
             "verification": {"command": "bash /tests/test.sh"}}
    assert load_selection(_write(tmp_path, {"tasks": [entry]})).task_ids == [instance]
    leaked = {**entry, "notes": "token ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"}
    with pytest.raises(SelectionError, match="entry 1 holds what looks like a credential"):
        load_selection(_write(tmp_path, {"tasks": [leaked]}, "leaked.json"))


def test_plan_with_a_report_for_its_selection_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s")
    report = _write(tmp_path, [{"suite": "sdlc_fix", "task": "x-fix-001", "configs": ["baseline"]}], "keys.json")
    result = CliRunner().invoke(app, ["plan", "--suite", str(suite), "--accounts", str(accounts),
                                      "--selection-file", str(report), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(f"error: {report}: not a selection: a JSON list of 1 items"), lines
    assert not (tmp_path / "runs").exists()


def test_a_gap_fill_selections_lineage_is_read_and_bounded(tmp_path: Path) -> None:
    tasks = [{"task_id": "hello-world", "task_dir": "tasks/hello-world", "reps": [2]}]
    lineage = [str(tmp_path / "runs" / "r1"), str(tmp_path / "runs" / "r2")]
    assert load_selection(_write(tmp_path, {"tasks": tasks, "tops_up": lineage})).tops_up == tuple(lineage)
    assert load_selection(_write(tmp_path, {"tasks": tasks})).tops_up == ()
    with pytest.raises(SelectionError, match="tops_up is not a list of run roots"):
        load_selection(_write(tmp_path, {"tasks": tasks, "tops_up": "runs/r1"}))
    key = "sk-ant-api03-" + "Q7x" * 12
    with pytest.raises(SelectionError) as info:
        load_selection(_write(tmp_path, {"tasks": tasks, "tops_up": [f"runs/{key}"]}))
    assert "tops_up holds what looks like a credential" in info.value.line() and key not in info.value.line()
