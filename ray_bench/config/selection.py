"""Selection files: CodeScaleBench JSON, a YAML list, or one task id per line.

Entries may name the repetitions to run (``reps: [3, 4]``), which is what ``ray-bench gaps``
writes so that a gap-fill runs exactly the missing repetitions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from ray_bench.config.bounded import MAX_SELECTION_BYTES, parse_json, parse_yaml, read_text_bounded
from ray_bench.config.secrets import find_secrets
from ray_bench.errors import SelectionError
from ray_bench.models._base import FrozenModel


class SelectionEntry(FrozenModel):
    task_id: str
    reps: tuple[int, ...] | None = Field(default=None, description="Only these repetitions.")
    arms: tuple[str, ...] | None = Field(default=None, description="Only these arms.")


class Selection(FrozenModel):
    path: str
    entries: tuple[SelectionEntry, ...]

    @property
    def task_ids(self) -> list[str]:
        return [e.task_id for e in self.entries]


def load_selection(path: Path) -> Selection:
    text = read_text_bounded(path, SelectionError, MAX_SELECTION_BYTES)
    stripped = text.lstrip()
    if not stripped:
        raise SelectionError("selection is empty", where=str(path), fix="list at least one task")
    if path.suffix == ".json" or stripped.startswith("{"):
        data: Any = parse_json(text, path, SelectionError)
        if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
            raise SelectionError('expected {"tasks": [...]}', where=str(path),
                                 fix="use the CodeScaleBench selection format")
        items = data["tasks"]
    elif path.suffix in {".yaml", ".yml"} or stripped.startswith("-"):
        items = parse_yaml(text, path, SelectionError)[0]
        if isinstance(items, dict) and isinstance(items.get("tasks"), list):
            items = items["tasks"]
        if not isinstance(items, list):
            raise SelectionError("expected a YAML list of task ids", where=str(path),
                                 fix="write one '- task-id' per line")
    else:
        items = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if any(c.isspace() for c in line) or line.startswith(("{", "[")):
                raise SelectionError(f"not a task id: {line!r}", where=f"{path}:{number}",
                                     fix="one task id per line")
            items.append(line)
    for loc, kind, shown in find_secrets(items)[:1]:
        raise SelectionError(f"entry {loc[0] + 1 if loc and isinstance(loc[0], int) else 1} holds what looks like "
                             f"{kind} ({shown})", where=str(path), fix="a selection names tasks; remove the secret")
    entries = [_entry(item, path, index) for index, item in enumerate(items)]
    if not entries:
        raise SelectionError("selection is empty", where=str(path), fix="list at least one task")
    seen: set[str] = set()
    for entry in entries:
        if entry.task_id in seen:
            raise SelectionError(f"task {entry.task_id!r} listed twice", where=str(path),
                                 fix="list each task once")
        seen.add(entry.task_id)
    return Selection(path=str(path), entries=tuple(entries))


def _entry(item: Any, path: Path, index: int) -> SelectionEntry:
    where = f"{path}: entry {index + 1}"
    if isinstance(item, str) and item.strip():
        return SelectionEntry(task_id=item.strip())
    if isinstance(item, dict):
        task_id = item.get("task_id") or item.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise SelectionError("entry has no task_id", where=where, fix='add "task_id"')
        reps = item.get("reps")
        if reps is not None and (not isinstance(reps, list) or
                                 not all(type(r) is int and r >= 1 for r in reps)):
            raise SelectionError("reps must be a list of positive integers", where=where,
                                 fix="e.g. reps: [3, 4]")
        arms = item.get("arms")
        if arms is not None and (not isinstance(arms, list) or not all(isinstance(a, str) for a in arms)):
            raise SelectionError("arms must be a list of arm names", where=where, fix="e.g. arms: [mcp]")
        return SelectionEntry(task_id=task_id, reps=tuple(reps) if reps else None,
                              arms=tuple(arms) if arms else None)
    raise SelectionError(f"cannot read an entry of type {type(item).__name__}", where=where,
                         fix="use a task id or a mapping")
