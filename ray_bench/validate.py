"""`ray-bench validate`: recognise each file and check it without planning."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ray_bench.config.loader import load_accounts, load_suite, read_yaml
from ray_bench.config.selection import load_selection
from ray_bench.config.tasks import index_tasks, is_task_dir, load_task
from ray_bench.errors import ConfigError, UserInputError
from ray_bench.textsafe import is_utf8, shown_name


@dataclass(frozen=True)
class Checked:
    """One file or task directory checked: its error (None when valid) and its warnings.
    A directory of tasks ends with a ``tally`` line."""

    path: Path
    kind: str
    error: UserInputError | None
    warnings: tuple[str, ...] = ()
    tally: str | None = None


def _kind(path: Path) -> str:
    if path.is_dir():
        return "task" if is_task_dir(path) else "tasks"
    if path.suffix in {".yaml", ".yml"}:
        try:
            data = read_yaml(path)[0]
        except UserInputError:
            return "suite"  # let the loader report the problem with its line
        if isinstance(data, dict) and "accounts" in data:
            return "accounts"
        if isinstance(data, dict) and "arms" in data:
            return "suite"
        return "selection"
    return "selection"


def _task(path: Path) -> Checked:
    try:
        return Checked(path, "task", None, load_task(path).warnings)
    except UserInputError as exc:
        return Checked(path, "task", exc)


def _task_root(path: Path) -> Iterator[Checked]:
    """Each task below ``path`` (task directories, or benchmark directories of them), then one
    tally line."""
    try:
        index = index_tasks([path], depth=8)
    except UserInputError as exc:
        yield Checked(path, "tasks", exc)
        return
    if not index:
        yield Checked(path, "tasks", ConfigError("no task directories (no */task.toml or */*/task.toml)",
                                                 where=str(path), fix="name a task or a directory of tasks"))
        return
    results = [_task(task) for _, task in sorted(index.items())]
    yield from results
    valid = [r for r in results if r.error is None]
    warned = sum(1 for r in valid if r.warnings)
    yield Checked(path, "tasks", None, tally=f"{path}: {len(valid)} of {len(results)} tasks valid"
                  f" ({warned} with warnings, {len(results) - len(valid)} with errors)")


def validate_paths(paths: list[Path]) -> Iterator[Checked]:
    for path in paths:
        if not is_utf8(str(path)):  # as plan refuses it (ray_bench.api.refuse_undecodable_path)
            yield Checked(path, "path", ConfigError(f"the path {shown_name(str(path))} is not valid UTF-8",
                                                    fix="rename it, or copy it to a path whose name is UTF-8 text"))
            continue
        if not path.exists():
            yield Checked(path, "missing", ConfigError("file not found", where=str(path), fix="check the path"))
            continue
        kind = _kind(path)
        if kind == "task":
            yield _task(path)
            continue
        if kind == "tasks":
            yield from _task_root(path)
            continue
        try:
            if kind == "accounts":
                load_accounts(path)
            elif kind == "suite":
                load_suite(path)
            else:
                load_selection(path)
            yield Checked(path, kind, None)
        except UserInputError as exc:
            yield Checked(path, kind, exc)
