"""Harbor's own selection files (``dataset.toml`` manifests and job configs, the fixtures in
``harbor_selections/``) through ``validate``, ``plan --selection-file`` and ``execute``'s plan
check: the same selection model as a CodeScaleBench JSON. ``test_selection_harbor_models.py``
reads the same fixtures with Harbor's own models."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from support.ray_local import TEST_ROUTES
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.cli import app
from ray_bench.config.selection import load_selection, resolve_selection
from ray_bench.config.tasks import index_tasks
from ray_bench.errors import SelectionError
from ray_bench.plan.compile import PlanRequest, compile_plan

FIXTURES = Path(__file__).parent / "harbor_selections"


@pytest.fixture
def suite(tmp_path: Path) -> tuple[Path, Path]:
    """The quickstart suite under ``tmp_path`` with the Harbor fixtures beside its ``tasks/``;
    each task's task.toml names its package (``[task] name``) as a published task does."""
    paths = make_suite(tmp_path, reps=1)
    for task in (tmp_path / "tasks").iterdir():
        toml = task / "task.toml"
        toml.write_text(f'[task]\nname = "ray-bench/{task.name}"\n\n' + toml.read_text())
    for fixture in FIXTURES.iterdir():
        shutil.copy(fixture, tmp_path / fixture.name)
    return paths


def _plan(suite: tuple[Path, Path], selection: Path):  # type: ignore[no-untyped-def]
    return compile_plan(PlanRequest(suite=suite[0], accounts=suite[1], run_id="r1", selection=selection,
                                    environ=dict(TEST_ROUTES)))


def _cli(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, list(args), env=dict(TEST_ROUTES))
    return result.exit_code, [line for line in result.stderr.splitlines() if line.strip()]


def test_a_dataset_manifest_plans_its_tasks_by_package_name(suite: tuple[Path, Path], tmp_path: Path) -> None:
    selection = load_selection(tmp_path / "dataset.toml")
    # a (name, digest) repeated counts once, as Harbor's get_unique_tasks
    assert [e.package for e in selection.entries] == ["ray-bench/hello-world", "ray-bench/count-words"]
    plan = _plan(suite, tmp_path / "dataset.toml")
    assert sorted(t.id for t in plan.tasks) == ["count-words", "hello-world"]
    assert len(plan.cells) == 4  # two arms, the suite's one repetition


def test_a_manifest_task_found_by_its_directory_name_when_task_toml_names_no_package(tmp_path: Path) -> None:
    make_suite(tmp_path)  # no [task] name: harbor download's layout, <dir>/<task-name>
    shutil.copy(FIXTURES / "dataset.toml", tmp_path / "dataset.toml")
    roots = [tmp_path / "tasks"]
    resolved = resolve_selection(load_selection(tmp_path / "dataset.toml"), roots, index_tasks(roots))
    assert resolved.task_ids == ["hello-world", "count-words"]


def test_a_job_config_takes_its_datasets_globs_and_n_attempts_as_reps(suite: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    plan = _plan(suite, tmp_path / "job.yaml")
    # task_names ["*-words", "hello-*"] less exclude_task_names ["sort-*"]
    assert sorted(t.id for t in plan.tasks) == ["count-words", "hello-world"]
    assert sorted({c.rep for c in plan.cells}) == [1, 2]  # n_attempts: 2
    assert len(plan.cells) == 2 * 2 * 2


def test_a_json_job_config_takes_its_task_paths(suite: tuple[Path, Path], tmp_path: Path) -> None:
    plan = _plan(suite, tmp_path / "job.json")
    assert sorted(t.id for t in plan.tasks) == ["fizzbuzz", "hello-world"]
    assert {c.rep for c in plan.cells} == {1}  # no n_attempts: the suite's repetitions


def test_a_job_config_is_read_against_its_own_directory_wherever_plan_runs(
        suite: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir("/")
    assert load_selection(tmp_path / "job.json").entries[0].path == str(tmp_path / "tasks" / "hello-world")


def test_a_job_configs_plan_passes_executes_check(suite: tuple[Path, Path], tmp_path: Path) -> None:
    """execute re-reads the selection (a YAML or TOML one was refused as "no longer loads")."""
    from ray_bench.commands.verify import verify_plan
    from ray_bench.plan.store import load_plan_file

    code, lines = _cli("plan", "--suite", str(suite[0]), "--accounts", str(suite[1]), "--run-id", "r1",
                       "--runs-dir", str(tmp_path / "runs"), "--selection-file", str(tmp_path / "job.yaml"))
    assert code == 0, lines
    plan_path = tmp_path / "runs" / "r1" / "launch-plan.json"
    verify_plan(*load_plan_file(plan_path), plan_path)


def test_a_registry_dataset_not_on_disk_is_one_line_naming_how_to_fetch_it(suite: tuple[Path, Path],
                                                                           tmp_path: Path) -> None:
    code, lines = _cli("validate", str(tmp_path / "job-registry.yaml"))
    assert code == 2 and len(lines) == 1, lines
    assert "'terminal-bench@2.0' is a registry dataset, not on disk" in lines[0]
    assert "harbor download terminal-bench@2.0 -o DIR" in lines[0]


def test_a_manifest_task_not_on_disk_names_its_harbor_download_line(suite: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    shutil.rmtree(tmp_path / "tasks" / "count-words")
    code, lines = _cli("plan", "--suite", str(suite[0]), "--accounts", str(suite[1]), "--run-id", "r1",
                       "--runs-dir", str(tmp_path / "runs"), "--selection-file", str(tmp_path / "dataset.toml"))
    assert code == 2 and len(lines) == 1, lines
    assert "'ray-bench/count-words' is not on disk" in lines[0]
    assert re.search(r"harbor download ray-bench/count-words@sha256:171d08ab\w+ -o \S+/tasks", lines[0]), lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("text", "says"), [
    ('[dataset]\nname = "ray-bench/quickstart"\n[[tasks]]\nname = "x"\n', "task name 'x' is not 'org/name'"),
    ('[dataset]\nname = "ray-bench/q"\n[[tasks]]\nname = "a/b"\ndigest = "md5:1"\n', "not 'sha256:<64 hex>'"),
    ('[[tasks]]\nname = "a/b"\n', "no [dataset] name"),
    ('[dataset\nname = "a/b"\n', "not a dataset manifest"),
], ids=["task-name", "digest", "no-dataset", "not-toml"])
def test_a_malformed_manifest_is_one_line_exit_2_and_nothing_written(suite: tuple[Path, Path], tmp_path: Path,
                                                                    text: str, says: str) -> None:
    manifest = tmp_path / "bad" / "dataset.toml"
    manifest.parent.mkdir()
    manifest.write_text(text)
    for command in (["validate", str(manifest)],
                    ["plan", "--suite", str(suite[0]), "--accounts", str(suite[1]), "--run-id", "r1",
                     "--runs-dir", str(tmp_path / "runs"), "--selection-file", str(manifest)]):
        code, lines = _cli(*command)
        assert code == 2 and len(lines) == 1 and says in lines[0], (command[0], lines)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("name", "text"), [
    ("selection.txt", "a task with spaces\n"),
    ("selection.json", '{"jobs": []}'),
    ("selection.yaml", "name: x\n"),
], ids=["text", "json", "yaml"])
def test_an_unknown_shape_names_every_accepted_shape(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(SelectionError) as caught:
        load_selection(tmp_path / name)
    assert "a Harbor dataset.toml or a Harbor job config" in caught.value.line()
    assert "CodeScaleBench JSON" in caught.value.line()


@pytest.mark.parametrize(("doc", "says"), [
    ({"datasets": [{"path": "tasks", "task_names": ["nothing-*"]}]}, "no tasks matched the filter(s) ['nothing-*']"),
    ({"datasets": [{"path": "missing"}]}, "dataset path 'missing' is not a directory"),
    ({"tasks": [{"path": "tasks/hello-world"}], "n_attempts": 0}, "n_attempts is 0"),
    ({"tasks": [{"name": "ray-bench/x", "git_url": "https://example.org/r.git"}]}, "is in git repository"),
    ({"datasets": [{"name": "org/bench", "ref": "latest"}]}, "harbor download org/bench@latest -o DIR"),
    ({"agents": [{"name": "oracle"}]}, "job config names no tasks"),
], ids=["glob-matches-nothing", "missing-path", "n-attempts", "git-task", "package-dataset", "no-tasks"])
def test_job_config_problems_are_one_line(suite: tuple[Path, Path], tmp_path: Path, doc: dict[str, object],
                                          says: str) -> None:
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(doc))
    code, lines = _cli("validate", str(tmp_path / "bad.yaml"))
    assert code == 2 and len(lines) == 1 and says in lines[0], lines


def test_a_job_task_outside_the_suites_roots_is_refused(suite: tuple[Path, Path], tmp_path: Path) -> None:
    shutil.copytree(tmp_path / "tasks" / "hello-world", tmp_path / "elsewhere" / "hello-2")
    (tmp_path / "out.json").write_text('{"tasks": [{"path": "elsewhere/hello-2"}]}')
    with pytest.raises(SelectionError, match="is not under the suite's task roots"):
        _plan(suite, tmp_path / "out.json")
