"""Harbor task directories: one task, a root of tasks, or a root of benchmark directories."""

from __future__ import annotations

import hashlib
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ray_bench.config.bounded import read_text_bounded
from ray_bench.errors import MultipleInputErrors, TaskDirError, UserInputError
from ray_bench.models.task import TaskConfig, TaskRef, unknown_keys

_SKIP = {"__pycache__", ".git", ".DS_Store", ".pytest_cache"}
_FIX = "see docs/tasks.md (Harbor's task.toml schema)"


def iter_task_files(task_dir: Path) -> list[Path]:
    files: list[Path] = []
    for root, dirs, names in os.walk(task_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        files.extend(Path(root) / n for n in sorted(names) if n not in _SKIP)
    return files


def task_checksum(task_dir: Path) -> str:
    """sha256 over each file's relative path, executable bit and bytes. Paths above the task
    directory never enter it, so moving a suite changes no checksum."""
    outer = hashlib.sha256(b"ray-bench/task/v1\0")
    for path in iter_task_files(task_dir):
        rel = path.relative_to(task_dir).as_posix()
        executable = b"x" if os.access(path, os.X_OK) else b"-"
        outer.update(rel.encode() + b"\0" + executable + hashlib.sha256(path.read_bytes()).digest())
    return outer.hexdigest()


def _key(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]" if parts else f"[{item}]"]
        elif item not in ("str", "float", "int", "bool", "dict[str,float]", "ArtifactConfig",
                          "function-after[_fields(), MCPServerConfig]"):
            parts.append(str(item))
    return ".".join(parts)


def _config(toml_path: Path, errors: list[UserInputError]) -> TaskConfig:
    try:
        data = tomllib.loads(read_text_bounded(toml_path, TaskDirError))
        return TaskConfig.model_validate(data)
    except UserInputError as exc:
        errors.append(exc)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        errors.append(TaskDirError(f"invalid TOML: {exc}", where=str(toml_path), fix="fix the syntax"))
    except ValidationError as exc:
        seen: set[str] = set()
        items = exc.errors()
        for item in items:
            loc = tuple(item["loc"])
            if loc and loc[-1] == "str" and any(o is not item and tuple(o["loc"])[:len(loc) - 1] == loc[:-1]
                                                 for o in items):
                continue  # `str | ArtifactConfig`: the table branch says what is wrong
            key = _key(loc) or "task.toml"
            msg = str(item["msg"]).removeprefix("Value error, ")
            line = f"{key}: {msg}"
            if line not in seen:  # a union reports each branch; one line per key and message
                seen.add(line)
                errors.append(TaskDirError(line, where=str(toml_path), fix=_FIX))
    return TaskConfig()


def _layout(task_dir: Path, config: TaskConfig, errors: list[UserInputError]) -> None:
    def need(path: Path, what: str, fix: str) -> None:
        if not path.is_file() or (path.suffix == ".md" and not path.read_text(
                encoding="utf-8", errors="replace").strip()):
            errors.append(TaskDirError(f"{what} is missing or empty", where=str(task_dir), fix=fix))

    if not config.steps:
        need(task_dir / "instruction.md", "instruction.md", "write the task's prompt in instruction.md")
        need(task_dir / "tests" / "test.sh", "tests/test.sh", "add the verifier tests/test.sh")
        return
    for step in config.steps:
        step_dir = task_dir / "steps" / step.name
        need(step_dir / "instruction.md", f"steps/{step.name}/instruction.md", "write the step's prompt")
        if not (step_dir / "tests" / "test.sh").is_file() and not (task_dir / "tests" / "test.sh").is_file():
            errors.append(TaskDirError(f"step {step.name}: no tests/test.sh in the step or the task",
                                       where=str(task_dir), fix=f"add steps/{step.name}/tests/test.sh"))


def task_warnings(config: TaskConfig) -> list[str]:
    """What Harbor accepts but ray-bench reports: keys its schema does not define."""
    unknown = unknown_keys(config)
    warned = [f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
              "(not in Harbor's task.toml schema; ignored)"] if unknown else []
    if config.task is not None and config.task.name is None:
        warned.append("[task] has no name (Harbor wants 'org/name'); the directory name is the task id")
    return warned


def load_task(task_dir: Path) -> TaskRef:
    errors: list[UserInputError] = []
    toml_path = task_dir / "task.toml"
    config = TaskConfig()
    if not toml_path.is_file():
        errors.append(TaskDirError("task.toml is missing", where=str(task_dir), fix="add task.toml"))
    else:
        config = _config(toml_path, errors)
    _layout(task_dir, config, errors)
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise MultipleInputErrors(errors)
    env_dir = task_dir / "environment"
    return TaskRef(
        id=task_dir.name,
        path=str(task_dir.resolve()),
        checksum=task_checksum(task_dir),
        config=config,
        has_dockerfile=(env_dir / "Dockerfile").is_file(),
        has_compose=any((env_dir / n).is_file() for n in ("docker-compose.yaml", "docker-compose.yml")),
        has_solution=(task_dir / "solution" / "solve.sh").is_file(),
        warnings=tuple(task_warnings(config)),
    )


def is_task_dir(path: Path) -> bool:
    return path.is_dir() and (path / "task.toml").is_file()


def _below(directory: Path, depth: int) -> list[Path]:
    """Task directories under ``directory``, looking ``depth`` levels down (not into tasks)."""
    found: list[Path] = []
    for child in sorted(p for p in directory.iterdir() if p.is_dir() and p.name not in _SKIP):
        if is_task_dir(child):
            found.append(child)
        elif depth > 1:
            found.extend(_below(child, depth - 1))
    return found


def index_tasks(roots: list[Path], depth: int = 3) -> dict[str, Path]:
    """Every task id below the roots -> its directory. A root holds task directories, or
    benchmark directories that hold them, up to ``<root>/benchmarks/<benchmark>/<task>``;
    ``validate`` looks deeper. An id found twice is an error naming both places."""
    index: dict[str, Path] = {}
    errors: list[UserInputError] = []
    for root in roots:
        if not root.is_dir():
            errors.append(TaskDirError("task root not found", where=str(root),
                                       fix="fix tasks_dir / task_roots (relative to the suite file)"))
            continue
        for task in _below(root, depth):
            if task.name in index and index[task.name].resolve() != task.resolve():
                errors.append(TaskDirError(
                    f"task id {task.name!r} is held twice: {index[task.name]} and {task}",
                    where=str(root), fix="remove one copy or name only one of the roots"))
                continue
            index[task.name] = task
    if errors:
        raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)
    return index


def load_tasks(roots: Path | list[Path], only: list[str] | None = None,
               index: dict[str, Path] | None = None) -> list[TaskRef]:
    """Every task below the roots (or the ones named), each problem on its own line."""
    roots = [roots] if isinstance(roots, Path) else roots
    index = index_tasks(roots) if index is None else index
    where = ", ".join(str(r) for r in roots)
    errors: list[UserInputError] = []
    names = sorted(index) if only is None else only
    tasks: list[TaskRef] = []
    for name in names:
        if name not in index:
            errors.append(TaskDirError(f"task {name!r} not found", where=where, fix="check the task id"))
            continue
        try:
            tasks.append(load_task(index[name]))
        except MultipleInputErrors as exc:
            errors.extend(exc.errors)
        except UserInputError as exc:
            errors.append(exc)
    if not names:
        errors.append(TaskDirError("no task directories", where=where, fix="add tasks"))
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise MultipleInputErrors(errors)
    return tasks
