"""``ray-bench validate --explain KEY``: what a task.toml key means, from the schema itself (the
descriptions of Harbor's task.toml model), so an error's hint points at installed help rather
than at a file of this repository."""

from __future__ import annotations

import enum
import re
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ray_bench.errors import UserInputError
from ray_bench.models.task.harbor import TaskConfig


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's annotation holds (``X | None``, ``list[X]``, ``dict[str, X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    return re.sub(r"\b(typing|ray_bench\.[\w.]+)\.", "", str(annotation))


def _line(key: str, info: FieldInfo) -> str:
    value = None if info.is_required() else info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        default = ", a table (its keys' defaults below)"
    elif isinstance(value, enum.Enum):
        default = f", default {value.value!r}"
    else:
        default = "" if info.is_required() else f", default {value!r}"
    return f"{key}: {info.description or '(no description)'} [{_type_name(info.annotation)}{default}]"


def explain_key(key: str) -> list[str]:
    """The key's line, then one per key below it; an unknown key is one clear error."""
    model: type[BaseModel] = TaskConfig
    info: FieldInfo | None = None
    parts = [p for p in re.sub(r"\[\d*\]", "", key.strip()).split(".") if p]
    if not parts:
        raise UserInputError("--explain needs a task.toml key", where="--explain",
                             fix=f"one of {', '.join(TaskConfig.model_fields)}")
    for depth, part in enumerate(parts):
        if depth and info is not None:
            nested = _models_in(info.annotation)
            if not nested:
                raise UserInputError(f"{'.'.join(parts[:depth])} has no keys below it", where="--explain",
                                     fix=f"ray-bench validate --explain {'.'.join(parts[:depth])}")
            model = nested[0]
        info = model.model_fields.get(part)
        if info is None:
            known = ", ".join(model.model_fields)
            raise UserInputError(f"task.toml has no key {'.'.join(parts[:depth + 1])!r}", where="--explain",
                                 fix=f"keys here: {known}")
    assert info is not None
    dotted = ".".join(parts)
    lines = [_line(dotted, info)]
    for sub in _models_in(info.annotation)[:1]:
        lines += ["  " + _line(f"{dotted}.{name}", field) for name, field in sub.model_fields.items()]
    return lines
