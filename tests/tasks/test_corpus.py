"""The task corpus (tests/tasks/corpus): task directories written the way public ones are
(Terminal-Bench 2.x, Harbor's examples and adapter templates, CodeScaleBench benchmark
directories, multi-step tasks, legacy spellings). Every one loads; bad values are errors
that name the file and the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ray_bench.cli import app
from ray_bench.config.tasks import index_tasks, load_task
from ray_bench.errors import MultipleInputErrors, TaskDirError, UserInputError
from ray_bench.models.task import NetworkMode, TaskConfig

CORPUS = Path(__file__).parent / "corpus"


def _task(rel: str) -> TaskConfig:
    return load_task(CORPUS / rel).config


def test_every_corpus_task_validates_and_the_corpus_is_large() -> None:
    index = index_tasks([CORPUS], depth=8)
    assert len(index) >= 40
    for path in index.values():
        load_task(path)  # raises on any error


def test_validate_dir_prints_one_tally_line_and_the_warnings() -> None:
    result = CliRunner().invoke(app, ["validate", str(CORPUS)])
    assert result.exit_code == 0, result.output
    tally = [line for line in result.stdout.splitlines() if "tasks valid" in line]
    assert len(tally) == 1 and tally[0].endswith("with errors)")
    assert " 51 of 51 tasks valid" in tally[0]
    assert "legacy/typo-timeout: unknown keys verifier.timout_sec, agent.timeout_secs, environment.memroy" \
        in result.stdout


def test_legacy_spellings_convert_as_harbor_converts_them() -> None:
    tb2 = _task("terminal-bench-2/sqlite-with-gcov")
    assert tb2.schema_version == "1.0"  # version -> schema_version
    assert tb2.environment.memory_mb == 4096  # memory = "4G"
    assert tb2.environment.storage_mb == 10240  # storage = "10G"
    assert _task("terminal-bench-2/polyglot-c-py").environment.memory_mb == 512
    legacy = _task("legacy/allow-internet-false").environment
    assert legacy.network_mode == NetworkMode.NO_NETWORK and legacy.memory_mb == 1536 and legacy.storage_mb == 2048
    assert _task("legacy/allow-internet-true-workdir").environment.network_mode == NetworkMode.PUBLIC
    assert _task("legacy/allow-internet-true-workdir").schema_version == "1.0"  # version = 1.0 (a float)
    assert _task("harbor-examples/hello-world").environment.network_mode == NetworkMode.PUBLIC  # Harbor's default
    assert _task("harbor-examples/hello-world").environment.workdir is None  # the image's WORKDIR
    servers = {s.name: s.transport for s in _task("harbor-examples/hello-mcp-stdio").environment.mcp_servers}
    assert servers == {"filesystem": "stdio", "search": "sse", "legacy-http": "streamable-http"}
    steps = _task("harbor-examples/example-multi-step")
    assert [s.name for s in steps.steps or []] == ["scaffold", "implement", "document"]
    assert (steps.steps or [])[1].min_reward == {"correctness": 0.5}
    assert _task("refused/windows-task").environment.os == "windows"  # case-insensitive


def test_csb_tasks_load_with_their_own_keys_as_warnings() -> None:
    task = load_task(CORPUS / "codescalebench/benchmarks/csb_sdlc_fix/teleport-users-can-delete-fix-001")
    text = "\n".join(task.warnings)
    for key in ("verification", "resources", "task.id", "environment.setup_scripts"):
        assert key in text
    assert "[task] has no name" in text


@pytest.mark.parametrize(("toml", "key", "needle"), [
    ('[environment]\nmemory = "4X"\n', "environment", "invalid size '4X'"),
    ('[environment]\nmemory = "4G"\nmemory_mb = 100\n', "environment", "disagrees with memory_mb"),
    ('[environment]\ncpus = "two"\n', "environment.cpus", "valid integer"),
    ("[agent]\ntimeout_sec = -5\n", "agent.timeout_sec", "greater than 0"),
    ('[agent]\nnetwork_mode = "private"\n', "agent.network_mode", "'public', 'no-network' or 'allowlist'"),
    ('[agent]\nnetwork_mode = "public"\nallowed_hosts = ["a.com"]\n', "agent", "only valid with network_mode"),
    ('[environment]\nallowed_hosts = ["https://a.com/x"]\n', "environment.allowed_hosts", "URL, port or path"),
    ('artifacts = [{ source = "/app/../etc" }]\n', "artifacts[0].source", "must not contain '..'"),
    ('artifacts = [{ source = "/app", destination = "/abs" }]\n', "artifacts[0].destination", "relative path"),
    ('[[environment.mcp_servers]]\nname = "x"\ntransport = "stdio"\n', "environment.mcp_servers[0]",
     "'command' is required"),
    ('[[environment.mcp_servers]]\nname = "x"\n', "environment.mcp_servers[0]", "'url' is required"),
    ('[task]\nname = "has space/x"\n', "task.name", "must be 'org/name'"),
    ('[environment]\nos = "macos"\n', "environment.os", "'linux' or 'windows'"),
    ('[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ncpus = 1\n', "verifier", "conflicts"),
    ('[environment]\nenv = { PORT = 8080 }\n', "environment.env.PORT", "valid string"),
    ('multi_step_reward_strategy = "max"\n', "multi_step_reward_strategy", "'mean' or 'final'"),
    ('[[steps]]\nname = "a"\n[[steps]]\nname = "a"\n', "task.toml", "step names must be unique"),
    ("[environment.healthcheck]\nretries = 3\n", "environment.healthcheck.command", "Field required"),
])
def test_wrong_types_and_values_are_errors_naming_file_and_key(tmp_path: Path, toml: str, key: str,
                                                                needle: str) -> None:
    task = tmp_path / "bad"
    shutil.copytree(CORPUS / "legacy" / "minimal", task)
    (task / "task.toml").write_text(toml)
    with pytest.raises(UserInputError) as info:
        load_task(task)
    errors = info.value.errors if isinstance(info.value, MultipleInputErrors) else [info.value]
    lines = [e.line() for e in errors]
    assert any(str(task / "task.toml") in line and f": {key}: " in line and needle in line for line in lines), lines


def test_a_name_without_org_and_dockers_none_network_are_warnings_not_refusals(tmp_path: Path) -> None:
    task = tmp_path / "lenient"
    shutil.copytree(CORPUS / "legacy" / "minimal", task)
    (task / "task.toml").write_text('[task]\nname = "viral-vs-bacterial-classifier"\n'
                                    '[environment]\nnetwork_mode = "none"\n[agent]\nnetwork_mode = "none"\n')
    loaded = load_task(task)
    assert loaded.config.environment.network_mode == "no-network"
    assert loaded.config.agent.network_mode == "no-network"
    text = "\n".join(loaded.warnings)
    assert "has no org (Harbor refuses it" in text
    assert 'environment.network_mode = "none" is Docker\'s spelling' in text and "agent.network_mode" in text


def test_a_step_needs_its_instruction_and_some_test(tmp_path: Path) -> None:
    task = tmp_path / "steps"
    shutil.copytree(CORPUS / "harbor-examples" / "example-multi-step", task)
    (task / "steps" / "implement" / "instruction.md").unlink()
    shutil.rmtree(task / "steps" / "document" / "tests")
    with pytest.raises(MultipleInputErrors) as info:
        load_task(task)
    text = "\n".join(info.value.lines())
    assert "steps/implement/instruction.md is missing" in text
    assert "step document: no tests/test.sh" in text


def test_validate_dir_with_a_bad_task_exits_2_with_the_tally(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    shutil.copytree(CORPUS / "terminal-bench-2", root)
    (root / "fix-git" / "task.toml").write_text('[environment]\nmemory = "lots"\n')
    result = CliRunner().invoke(app, ["validate", str(root)])
    assert result.exit_code == 2
    assert "9 of 10 tasks valid (0 with warnings, 1 with errors)" in result.stdout
    assert "fix-git/task.toml: environment: invalid size 'lots'" in result.stderr


def test_two_copies_of_one_task_id_are_an_error(tmp_path: Path) -> None:
    for root in ("a", "b"):
        shutil.copytree(CORPUS / "legacy" / "minimal", tmp_path / root / "bench" / "minimal")
    with pytest.raises(TaskDirError, match="task id 'minimal' is held twice"):
        index_tasks([tmp_path / "a", tmp_path / "b"])


def test_a_misnamed_step_directory_is_named_as_such(tmp_path: Path) -> None:
    task = tmp_path / "steps"
    shutil.copytree(CORPUS / "harbor-examples" / "example-multi-step", task)
    (task / "steps" / "implement").rename(task / "steps" / "implemnt")
    with pytest.raises(UserInputError) as info:
        load_task(task)
    errors = info.value.errors if isinstance(info.value, MultipleInputErrors) else [info.value]
    text = "\n".join(e.line() for e in errors)
    assert "step implement: steps/implement/ does not exist (steps/ holds implemnt" in text
    assert "steps/implement/instruction.md is missing" not in text
