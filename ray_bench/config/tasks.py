"""Harbor / Terminal-Bench task directories."""

from __future__ import annotations

import hashlib
import os
import tomllib
from pathlib import Path

from pydantic import ValidationError

from ray_bench.config.bounded import read_text_bounded
from ray_bench.errors import MultipleInputErrors, TaskDirError, UserInputError
from ray_bench.models.task import TaskRef, TaskToml

_SKIP = {"__pycache__", ".git", ".DS_Store", ".pytest_cache"}


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


def load_task(task_dir: Path) -> TaskRef:
    errors: list[UserInputError] = []
    toml_path = task_dir / "task.toml"
    config = TaskToml()
    if not toml_path.is_file():
        errors.append(TaskDirError("task.toml is missing", where=str(task_dir), fix="add task.toml"))
    else:
        try:
            data = tomllib.loads(read_text_bounded(toml_path, TaskDirError))
            config = TaskToml.model_validate(data)
        except UserInputError as exc:
            errors.append(exc)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            errors.append(TaskDirError(f"invalid TOML: {exc}", where=str(toml_path), fix="fix the syntax"))
        except ValidationError as exc:
            for item in exc.errors():
                field = ".".join(str(p) for p in item["loc"])
                errors.append(TaskDirError(f"{field}: {item['msg']}", where=str(toml_path),
                                           fix="see the Harbor task.toml reference"))
    instruction = task_dir / "instruction.md"
    if not instruction.is_file() or not instruction.read_text(encoding="utf-8", errors="replace").strip():
        errors.append(TaskDirError("instruction.md is missing or empty", where=str(task_dir),
                                   fix="write the task's prompt in instruction.md"))
    if not (task_dir / "tests" / "test.sh").is_file():
        errors.append(TaskDirError("tests/test.sh is missing", where=str(task_dir),
                                   fix="add the verifier tests/test.sh"))
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise MultipleInputErrors(errors)
    return TaskRef(
        id=task_dir.name,
        path=str(task_dir.resolve()),
        checksum=task_checksum(task_dir),
        config=config,
        has_dockerfile=(task_dir / "environment" / "Dockerfile").is_file(),
        has_solution=(task_dir / "solution" / "solve.sh").is_file(),
    )


def load_tasks(tasks_dir: Path, only: list[str] | None = None) -> list[TaskRef]:
    """Every task directory below ``tasks_dir`` (or the ones named), each problem on its line."""
    if not tasks_dir.is_dir():
        raise TaskDirError("tasks directory not found", where=str(tasks_dir),
                           fix="set tasks_dir relative to the suite file")
    present = sorted(p.name for p in tasks_dir.iterdir() if p.is_dir() and p.name not in _SKIP)
    errors: list[UserInputError] = []
    names = present if only is None else only
    tasks: list[TaskRef] = []
    for name in names:
        if name not in present:
            errors.append(TaskDirError(f"task {name!r} not found", where=str(tasks_dir),
                                       fix="check the task id"))
            continue
        try:
            tasks.append(load_task(tasks_dir / name))
        except MultipleInputErrors as exc:
            errors.extend(exc.errors)
        except UserInputError as exc:
            errors.append(exc)
    if not names:
        errors.append(TaskDirError("no task directories", where=str(tasks_dir), fix="add tasks"))
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise MultipleInputErrors(errors)
    return tasks
