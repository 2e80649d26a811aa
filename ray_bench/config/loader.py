"""YAML/JSON files into pydantic models; every problem becomes one line with file, field, line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ray_bench.errors import ConfigError, MultipleInputErrors, UserInputError
from ray_bench.models.accounts import AccountsFile
from ray_bench.models.suite import Suite

M = TypeVar("M", bound=BaseModel)

Loc = tuple[str | int, ...]


def read_yaml(path: Path, error: type[UserInputError] = ConfigError) -> tuple[Any, dict[Loc, int]]:
    """Parse ``path`` as YAML (JSON is YAML) and return the data and the line of every key."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error("file not found", where=str(path), fix="check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read: {exc}", where=str(path)) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"invalid YAML: {problem}", where=where, fix="fix the syntax") from None
    lines: dict[Loc, int] = {}
    if node is not None:
        _index(node, (), lines)
    return data, lines


def _index(node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> None:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            lines[(*loc, key)] = key_node.start_mark.line + 1
            _index(value_node, (*loc, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, (*loc, i), lines)


def _line_for(loc: Loc, lines: dict[Loc, int]) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def validation_errors(
    exc: ValidationError, path: Path, lines: dict[Loc, int], error: type[UserInputError]
) -> Iterator[UserInputError]:
    for item in exc.errors():
        loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        field = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_for(loc, lines)
        where = f"{path}:{line}" if line else str(path)
        message = item["msg"].removeprefix("Value error, ")
        fix = _fix_for(item["type"])
        yield error(f"{field}: {message}", where=where, fix=fix)


def _fix_for(kind: str) -> str:
    return {
        "extra_forbidden": "remove the key or check its spelling",
        "missing": "add the field",
    }.get(kind, "see the field's description in the docs")


def load_model_file(path: Path, model: type[M], error: type[UserInputError] = ConfigError) -> M:
    data, lines = read_yaml(path, error)
    if data is None:
        raise error("file is empty", where=str(path), fix=f"write a {model.__name__} document")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = list(validation_errors(exc, path, lines, error))
        if len(errors) == 1:
            raise errors[0] from None
        raise MultipleInputErrors(errors) from None


def load_suite(path: Path) -> Suite:
    return load_model_file(path, Suite)


def load_accounts(path: Path) -> AccountsFile:
    return load_model_file(path, AccountsFile)
