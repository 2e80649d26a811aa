"""Selection files: CodeScaleBench JSON, a YAML list, one task id per line, a Harbor
``dataset.toml`` or a Harbor job config (:mod:`ray_bench.config.harbor_selection`). Each is a
reader yielding the one selection model (:mod:`ray_bench.models.selection`).

Entries may name the repetitions to run (``reps: [3, 4]``), which is what ``ray-bench gaps``
writes so that a gap-fill runs exactly the missing repetitions, or a count (``reps: 3``:
repetitions 1 to 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray_bench.config.bounded import MAX_SELECTION_BYTES, parse_json, parse_yaml, read_text_bounded
from ray_bench.config.harbor_selection import (
    is_job_config,
    is_manifest,
    package_names,
    read_job_config,
    read_manifest,
)
from ray_bench.config.secrets import find_secrets
from ray_bench.errors import MultipleInputErrors, SelectionError, UserInputError
from ray_bench.models.selection import SHAPES, Selection, SelectionEntry

__all__ = ["Selection", "SelectionEntry", "load_selection", "resolve_selection", "select_in_suite"]


def load_selection(path: Path) -> Selection:
    text = read_text_bounded(path, SelectionError, MAX_SELECTION_BYTES)
    lineage: tuple[str, ...] = ()
    stripped = text.lstrip()
    if not stripped:
        raise SelectionError("selection is empty", where=str(path), fix="list at least one task")
    if is_manifest(path, text):
        _refuse_too_many(text.count("[[tasks]]"), path)  # counted before the parser spends seconds on them
        return _selection(path, read_manifest(text, path))
    if path.suffix == ".json" or stripped.startswith("{"):
        data: Any = parse_json(text, path, SelectionError)
        if is_job_config(data):
            return _selection(path, _job(data, path))
        if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
            raise SelectionError(_not_a_selection(data), where=str(path),
                                 fix=f"name the selection file, not a report or manifest made from one: {SHAPES}")
        items = data["tasks"]
        lineage = _lineage(data, path)
    elif path.suffix in {".yaml", ".yml"} or stripped.startswith("-"):
        _refuse_too_many(sum(1 for line in text.splitlines() if line.lstrip().startswith("- ")), path)
        _refuse_too_long(text, path)
        items = parse_yaml(text, path, SelectionError)[0]
        if is_job_config(items):
            return _selection(path, _job(items, path))
        if isinstance(items, dict) and isinstance(items.get("tasks"), list):
            items = items["tasks"]
        if not isinstance(items, list):
            raise SelectionError("expected a YAML list of task ids", where=str(path), fix=f"a selection is {SHAPES}")
    else:
        items = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if any(c.isspace() for c in line) or line.startswith(("{", "[")):
                raise SelectionError(f"not a task id: {line!r}", where=f"{path}:{number}",
                                     fix=f"a selection is {SHAPES}")
            items.append(line)
    _refuse_too_many(len(items), path)
    _refuse_secrets(items, path)
    selection = _selection(path, [_entry(item, path, index) for index, item in enumerate(items)])
    return selection.model_copy(update={"tops_up": lineage}) if lineage else selection


#: Run roots a gap-fill selection may name as its lineage.
_MAX_LINEAGE = 10_000


def _lineage(data: dict[str, Any], path: Path) -> tuple[str, ...]:
    """The run roots a ``ray-bench gaps`` selection tops up (``tops_up``), as written."""
    found = data.get("tops_up")
    if found is None:
        return ()
    if not isinstance(found, list) or len(found) > _MAX_LINEAGE or \
            not all(isinstance(r, str) and r and "\0" not in r for r in found):
        raise SelectionError("tops_up is not a list of run roots", where=str(path),
                             fix="`ray-bench gaps` writes it: write the selection again with `ray-bench gaps`")
    for _, kind, shown in find_secrets(found)[:1]:  # the plan and its receipt name these paths
        raise SelectionError(f"tops_up holds what looks like {kind} ({shown})", where=str(path),
                             fix="name run roots there; remove the secret")
    return tuple(found)


def _job(data: dict[str, Any], path: Path) -> list[SelectionEntry]:
    """A job config's entries; only its task and dataset parts are read (an agent's env there is
    the job's business, not the selection's)."""
    _refuse_secrets([data.get("tasks"), data.get("datasets")], path)
    return read_job_config(data, path)


def _refuse_secrets(items: list[Any], path: Path) -> None:
    for loc, kind, shown in find_secrets(items)[:1]:
        raise SelectionError(f"entry {loc[0] + 1 if loc and isinstance(loc[0], int) else 1} holds what looks like "
                             f"{kind} ({shown})", where=str(path), fix="a selection names tasks; remove the secret")


def _selection(path: Path, entries: list[SelectionEntry]) -> Selection:
    _refuse_too_many(len(entries), path)
    if not entries:
        raise SelectionError("selection is empty", where=str(path), fix="list at least one task")
    # Task ids resolve case-insensitively (`_resolve_entry`'s folded index), so two spellings of
    # one id would plan its cells twice (issue 56: hello-world and HELLO-WORLD).
    seen: dict[str, str] = {}
    for entry in entries:
        first = seen.get(entry.task_id.casefold())
        seen.setdefault(entry.task_id.casefold(), entry.task_id)
        if first == entry.task_id:
            raise SelectionError(f"task {entry.task_id!r} listed twice", where=str(path),
                                 fix="list each task once")
        if first is not None:
            raise SelectionError(f"tasks {first!r} and {entry.task_id!r} are one task (task ids are matched "
                                 "without regard to case)", where=str(path), fix="list each task once, in one spelling")
    return Selection(path=str(path), entries=tuple(entries))


def _keys(item: dict[Any, Any]) -> str:
    names = sorted(str(k) for k in item)
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _not_a_selection(data: Any) -> str:
    """What a JSON file that is not a selection holds, in a few words: CodeScaleBench's
    ``configs/`` keeps reports, plan summaries, run receipts and mirror manifests beside its
    selections."""
    if isinstance(data, dict):
        if "tasks" in data:
            return f'not a selection: its "tasks" is {type(data["tasks"]).__name__}, not a list of entries'
        return f'not a selection: a JSON object with keys {_keys(data)} and no "tasks" list (a report or manifest?)'
    if isinstance(data, list):
        objects = [item for item in data if isinstance(item, dict)]
        shape = f" of objects with keys {_keys(objects[0])}" if objects and len(objects) == len(data) else ""
        return f'not a selection: a JSON list of {len(data)} items{shape}, not {{"tasks": [...]}}'
    return f'not a selection: a JSON {type(data).__name__}, not {{"tasks": [...]}}'


#: Entries one selection may list: more tasks than any benchmark has (SWE-bench: 2,294).
#: YAML entries are counted from the text, before the parser spends a minute on them.
MAX_SELECTION_ENTRIES = 100_000


def _refuse_too_many(count: int, path: Path) -> None:
    if count > MAX_SELECTION_ENTRIES:
        raise SelectionError(f"selection lists {count:,} entries, over {MAX_SELECTION_ENTRIES:,}", where=str(path),
                             fix="select fewer tasks per plan")


#: Lines a YAML selection may have: the entry bound with four lines an entry. The parser spends
#: seconds per 100,000 lines of anything, entries or not (800,000 comment lines and one entry:
#: 3.9 CPU seconds, 15 s at load 5; issue 56's hostile file, over 30), so lines are counted first.
MAX_SELECTION_LINES = 4 * MAX_SELECTION_ENTRIES


def _refuse_too_long(text: str, path: Path) -> None:
    lines = text.count("\n") + (not text.endswith("\n"))
    if lines > MAX_SELECTION_LINES:
        raise SelectionError(f"selection has {lines:,} lines, over {MAX_SELECTION_LINES:,} (4 per entry, "
                             f"{MAX_SELECTION_ENTRIES:,} entries)", where=str(path), fix="select fewer tasks per plan")


def _entry(item: Any, path: Path, index: int) -> SelectionEntry:
    where = f"{path}: entry {index + 1}"
    if isinstance(item, str) and item.strip():
        return SelectionEntry(task_id=item.strip())
    if isinstance(item, dict):
        task_id = item.get("task_id") or item.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise SelectionError("entry has no task_id", where=where, fix='add "task_id"')
        reps = item.get("reps")
        if type(reps) is int and reps >= 1:
            reps = list(range(1, reps + 1))  # `reps: 3` is repetitions 1 to 3, as a suite's `reps`
        if reps is not None and (not isinstance(reps, list) or
                                 not all(type(r) is int and r >= 1 for r in reps)):
            raise SelectionError("reps must be a positive count or a list of positive repetition numbers",
                                 where=where, fix="e.g. reps: 3 (repetitions 1-3) or reps: [3, 4]")
        arms = item.get("arms")
        if arms is not None and (not isinstance(arms, list) or not all(isinstance(a, str) for a in arms)):
            raise SelectionError("arms must be a list of arm names", where=where, fix="e.g. arms: [mcp]")
        # An empty list would read as "all" and a repeated one plans a cell twice (which
        # execute refuses): neither is what the file says.
        for key, values in (("reps", reps), ("arms", arms)):
            if values is not None and not values:
                raise SelectionError(f"{key} is an empty list", where=where,
                                     fix=f"leave {key} out for all, or name at least one")
            if values is not None and len(set(values)) != len(values):
                twice = next(v for v in values if values.count(v) > 1)
                raise SelectionError(f"{key} names {str(twice)[:40]!r} twice", where=where,
                                     fix=f"list each of the {key} once")
        # CSB's MCP-unique selections name the benchmark directory `mcp_suite` (its runner
        # takes `benchmark or mcp_suite`)
        bench_key = "benchmark" if item.get("benchmark") is not None or "mcp_suite" not in item else "mcp_suite"
        task_dir, benchmark = item.get("task_dir"), item.get(bench_key)
        for key, value in (("task_dir", task_dir), (bench_key, benchmark)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise SelectionError(f"{key} must be a non-empty path", where=where,
                                     fix=f'e.g. "{key}": "csb_org_onboarding/{task_id.lower()}"')
            if value is not None and "\0" in value:
                raise SelectionError(f"{key} holds a NUL byte, which no path can hold", where=where,
                                     fix=f"write {key} as the directory's path")
        if task_dir is not None and (Path(task_dir).is_absolute() or ".." in Path(task_dir).parts):
            # known without any root: `validate` of the file alone says so too
            raise SelectionError(f"task_dir {task_dir!r} escapes the task roots", where=where,
                                 fix="give task_dir relative to a task root, without '..'")
        return SelectionEntry(task_id=task_id, reps=tuple(reps) if reps else None,
                              arms=tuple(arms) if arms else None, task_dir=task_dir, benchmark=benchmark)
    raise SelectionError(f"cannot read an entry of type {type(item).__name__}", where=where,
                         fix="use a task id or a mapping")


def select_in_suite(path: Path, suite_name: str, suite_tasks: list[str] | None, roots: list[Path],
                    index: dict[str, Path]) -> Selection:
    """A selection file of any shape, read and resolved against the suite's roots, each task one
    the suite has: what ``plan --selection-file`` and ``gaps --selection-file`` select."""
    selection = resolve_selection(load_selection(path), roots, index)
    missing = [t for t in selection.task_ids if suite_tasks is not None and t not in suite_tasks]
    if missing:
        raise SelectionError(f"tasks not in suite {suite_name}: {', '.join(missing[:5])}",
                             where=selection.path, fix="select tasks of this suite")
    return selection


def resolve_selection(selection: Selection, roots: list[Path], index: dict[str, Path]) -> Selection:
    """Each entry's task, as the id the roots know it by. A CodeScaleBench ``task_dir`` is
    read under each root (also with the root's own name as its first part, so
    ``benchmarks/x/t`` resolves under a root named ``benchmarks``, and under the root's
    ``benchmarks/``, CSB's layout: ``<bench>/<task>`` or ``<bench>/tasks/<task>``); it must stay
    inside the root and be a task directory. The ``task_dir`` is authoritative, as CSB's own
    runner takes it: an entry whose ``task_id`` names another directory (CSB's
    ``instance_nodebb__nodebb-…`` for ``instance_nodebb-nodebb-…``) is warned naming both.
    Every entry's problem is listed in one pass."""
    by_folded = {name.casefold(): name for name in index}
    packages = package_names(index) if any(e.package for e in selection.entries) else {}
    entries: list[SelectionEntry] = []
    warnings: list[str] = []
    errors: list[UserInputError] = []
    for number, entry in enumerate(selection.entries, 1):
        where = f"{selection.path}: entry {number} ({entry.task_id})"
        try:
            if entry.package is not None:
                resolved = _resolve_package(entry, roots, index, packages, where)
            elif entry.path is not None:
                resolved = _resolve_path(entry, index, where)
            else:
                resolved = _resolve_entry(entry, roots, index, by_folded, where)
        except SelectionError as exc:
            errors.append(exc)
            continue
        if entry.task_dir is not None and resolved.task_id.casefold() != entry.task_id.casefold():
            warnings.append(f"{where}: task_id {entry.task_id!r} is not its task_dir's task "
                            f"{resolved.task_id!r}; the task_dir's is planned")
        entries.append(resolved)
    if errors:
        raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)
    return selection.model_copy(update={"entries": tuple(entries), "warnings": tuple(warnings)})


def _resolve_package(entry: SelectionEntry, roots: list[Path], index: dict[str, Path], packages: dict[str, str],
                     where: str) -> SelectionEntry:
    """A Harbor package task: the task whose ``[task] name`` it is, else a directory of its short
    name (``harbor download``'s export layout) that names no other package."""
    name = entry.package or ""
    found = packages.get(name)
    short = name.rsplit("/", 1)[-1]
    if found is None and short in index and short not in packages.values():
        found = short
    if found is None:
        ref = entry.ref or "latest"
        raise SelectionError(f"task {name!r} is not on disk under the suite's task roots", where=where,
                             fix=f"fetch it with `harbor download {name}@{ref} -o {roots[0] if roots else 'ROOT'}`")
    return entry.model_copy(update={"task_id": found})


def _resolve_path(entry: SelectionEntry, index: dict[str, Path], where: str) -> SelectionEntry:
    path = Path(entry.path or "")
    known = index.get(path.name)
    if known is None or known.resolve() != path.resolve():
        raise SelectionError(f"task directory {path} is not under the suite's task roots", where=where,
                             fix="add the directory that holds it to the suite's task_roots")
    return entry.model_copy(update={"task_id": path.name})


def _resolve_entry(entry: SelectionEntry, roots: list[Path], index: dict[str, Path], by_folded: dict[str, str],
                   where: str) -> SelectionEntry:
    if entry.task_dir is None:
        name = entry.task_id if entry.task_id in index else by_folded.get(entry.task_id.casefold())
        if name is None:
            raise SelectionError(f"task {entry.task_id!r} is not under the suite's task roots",
                                 where=where, fix="select tasks of this suite")
        return entry.model_copy(update={"task_id": name})
    path = _under_roots(entry.task_dir, roots, index, where)
    # CSB: benchmarks/<bench>/<task> or benchmarks/<bench>/tasks/<task>
    bench = path.parent.parent.name if path.parent.name == "tasks" else path.parent.name
    if entry.benchmark is not None and entry.benchmark not in (bench, path.parent.name):
        raise SelectionError(f"task_dir {entry.task_dir!r} is not in benchmark {entry.benchmark!r}",
                             where=where, fix="make benchmark and task_dir agree")
    known = index.get(path.name)
    if known is None or known.resolve() != path:
        raise SelectionError(f"task_dir {entry.task_dir!r} is not a task the suite's roots index",
                             where=where, fix="put the task under a root named by the suite")
    return entry.model_copy(update={"task_id": path.name})


def _under_roots(task_dir: str, roots: list[Path], index: dict[str, Path], where: str) -> Path:
    rel = Path(task_dir)
    if rel.is_absolute() or ".." in rel.parts:
        raise SelectionError(f"task_dir {task_dir!r} escapes the task roots", where=where,
                             fix="give task_dir relative to a task root, without '..'")
    for given in roots:
        root = given.resolve()
        candidates = [root / rel, root / "benchmarks" / rel]  # a CSB checkout as the root
        if len(rel.parts) > 1 and rel.parts[0] == root.name:
            candidates.append(root.joinpath(*rel.parts[1:]))
        for candidate in candidates:
            resolved = candidate.resolve()
            if not resolved.is_relative_to(root):
                raise SelectionError(f"task_dir {task_dir!r} escapes the task roots (a link to {resolved})",
                                     where=where, fix="keep tasks inside the suite's task roots")
            if (resolved / "task.toml").is_file():
                return resolved
    # A root above the selection's base (a CSB checkout, whose selections are relative to its
    # benchmarks/): the indexed task whose path ends with task_dir.
    known = index.get(rel.name)
    if known is not None and known.parts[-len(rel.parts):] == rel.parts:
        resolved = known.resolve()
        if any(resolved.is_relative_to(root.resolve()) for root in roots):
            return resolved
        raise SelectionError(f"task_dir {task_dir!r} escapes the task roots (a link to {resolved})",
                             where=where, fix="keep tasks inside the suite's task roots")
    raise SelectionError(f"task_dir {task_dir!r} is not a task directory under {', '.join(map(str, roots))}",
                         where=where, fix="check task_dir, or add its root to the suite's task_roots")
