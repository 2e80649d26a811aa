"""`ray-bench validate`: recognise each file and check it without planning."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ray_bench.config.loader import load_accounts, load_suite, read_yaml
from ray_bench.config.selection import load_selection
from ray_bench.config.tasks import load_task
from ray_bench.errors import ConfigError, UserInputError


def _kind(path: Path) -> str:
    if path.is_dir():
        return "task"
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


def validate_paths(paths: list[Path]) -> Iterator[tuple[Path, str, UserInputError | None]]:
    for path in paths:
        if not path.exists():
            yield path, "missing", ConfigError("file not found", where=str(path), fix="check the path")
            continue
        kind = _kind(path)
        try:
            if kind == "task":
                load_task(path)
            elif kind == "accounts":
                load_accounts(path)
            elif kind == "suite":
                load_suite(path)
            else:
                load_selection(path)
            yield path, kind, None
        except UserInputError as exc:
            yield path, kind, exc
