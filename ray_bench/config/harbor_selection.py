"""Harbor's own selection files, read into the selection model (:mod:`ray_bench.config.selection`).

- A **dataset manifest** (``dataset.toml``): ``[dataset] name`` and ``[[tasks]]`` of ``name``
  (``org/name``) and ``digest`` (``sha256:<64 hex>``), checked as Harbor 0.26's
  ``DatasetManifest`` checks them (``harbor/models/dataset/manifest.py``); a repeated
  (name, digest) counts once (``get_unique_tasks``). A task is found on disk by the package name
  its ``task.toml`` gives in ``[task] name``, as ``harbor sync`` finds a dataset's local tasks
  (``harbor/cli/sync.py``), or by a directory of its short name (``harbor download``'s layout).
- A **job config** (YAML or JSON, Harbor's ``JobConfig``, ``harbor/models/job/config.py``):
  ``tasks[]`` (a ``path``, or a package ``name`` with ``ref``) and ``datasets[]`` (a local
  ``path`` whose task directories are taken, filtered by the ``task_names`` /
  ``exclude_task_names`` globs on the directory name and cut to ``n_tasks``, as
  ``DatasetConfig._filter_task_ids`` does); ``n_attempts`` becomes every entry's repetitions
  1..n. Relative paths are read against the config's own directory (Harbor reads them against
  the directory ``harbor run`` runs in), so that ``execute`` finds the same tasks from anywhere.
  A registry or package dataset is not on disk: one line names it and the ``harbor download``
  line that fetches it (``harbor/cli/download.py``).
"""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from ray_bench.config.bounded import MAX_CONFIG_BYTES, read_capped
from ray_bench.config.tasks import is_task_dir
from ray_bench.errors import SelectionError
from ray_bench.models.selection import SelectionEntry

#: Harbor's ``ORG_NAME_PATTERN`` (harbor/constants.py) and its digest format.
_ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
#: ``JobConfig`` fields that no other selection shape has (a CSB JSON has ``tasks`` and
#: ``metadata``): one of them, or ``datasets``, makes a mapping a job config.
_JOB_KEYS = frozenset({"datasets", "n_attempts", "agents", "job_name", "jobs_dir", "n_concurrent_trials",
                       "orchestrator", "timeout_multiplier", "environment", "verifier", "retry"})
MANIFEST_FIX = ('a dataset.toml is [dataset] name = "org/name" and [[tasks]] of name = "org/task" and '
                'digest = "sha256:<64 hex>" (Harbor\'s DatasetManifest)')
JOB_FIX = ("a Harbor job config lists datasets: [{path: DIR, task_names: [GLOB]}] and/or "
           "tasks: [{path: DIR}] (Harbor's JobConfig)")


def is_manifest(path: Path, text: str) -> bool:
    return path.suffix == ".toml" or bool(re.match(r"\s*(#[^\n]*\n\s*)*\[\[?(dataset|tasks)\b", text))


def is_job_config(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if not _JOB_KEYS.isdisjoint(data):
        return True
    tasks = data.get("tasks")  # Harbor's TaskConfig entries, not CodeScaleBench's
    return isinstance(tasks, list) and bool(tasks) and all(
        isinstance(t, dict) and ("path" in t or "name" in t) and not ("task_id" in t or "id" in t) for t in tasks)


def read_manifest(text: str, path: Path) -> list[SelectionEntry]:
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        why = "nested too deep" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise SelectionError(f"not a dataset manifest: {why}", where=str(path), fix=MANIFEST_FIX) from None
    dataset = data.get("dataset")
    if not isinstance(dataset, dict) or not isinstance(dataset.get("name"), str):
        raise SelectionError("dataset manifest has no [dataset] name", where=str(path), fix=MANIFEST_FIX)
    if not _ORG_NAME.match(dataset["name"]) or ".." in dataset["name"]:
        raise SelectionError(f"dataset name {dataset['name']!r} is not 'org/name'", where=f"{path}: [dataset]",
                             fix=MANIFEST_FIX)
    tasks = data.get("tasks", [])
    if not isinstance(tasks, list):
        raise SelectionError("tasks is not a list of [[tasks]] tables", where=str(path), fix=MANIFEST_FIX)
    digests: dict[str, str] = {}
    for number, task in enumerate(tasks, 1):
        where = f"{path}: [[tasks]] {number}"
        name = task.get("name") if isinstance(task, dict) else None
        digest = task.get("digest") if isinstance(task, dict) else None
        if not isinstance(name, str) or not _ORG_NAME.match(name) or ".." in name:
            raise SelectionError(f"task name {name!r} is not 'org/name'", where=where, fix=MANIFEST_FIX)
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            raise SelectionError(f"task {name!r} has digest {digest!r}, not 'sha256:<64 hex>'", where=where,
                                 fix=MANIFEST_FIX)
        if digests.setdefault(name, digest) != digest:
            raise SelectionError(f"task {name!r} is listed with two digests", where=where,
                                 fix="keep one version of each task (harbor sync -u rewrites the digests)")
    return [SelectionEntry(task_id=name, package=name, ref=digest) for name, digest in digests.items()]


def read_job_config(data: dict[str, Any], path: Path) -> list[SelectionEntry]:
    base = path.resolve().parent
    attempts = data.get("n_attempts", 1)
    if type(attempts) is not int or attempts < 1:
        raise SelectionError(f"n_attempts is {attempts!r}, not a positive count", where=f"{path}: n_attempts",
                             fix="e.g. n_attempts: 3")
    reps = tuple(range(1, attempts + 1)) if "n_attempts" in data else None
    entries: list[SelectionEntry] = []
    for key, read in (("tasks", _job_task), ("datasets", _job_dataset)):
        items = data.get(key) or []
        if not isinstance(items, list):
            raise SelectionError(f"{key} is not a list", where=f"{path}: {key}", fix=JOB_FIX)
        for number, item in enumerate(items, 1):
            where = f"{path}: {key}[{number}]"
            if not isinstance(item, dict):
                raise SelectionError(f"{key}[{number}] is not a mapping", where=where, fix=JOB_FIX)
            entries += read(item, base, where)
    if not entries:
        raise SelectionError("job config names no tasks (no datasets or tasks)", where=str(path), fix=JOB_FIX)
    return [e.model_copy(update={"reps": reps}) for e in entries] if reps else entries


def _job_task(item: dict[str, Any], base: Path, where: str) -> list[SelectionEntry]:
    """One ``TaskConfig``: exactly one of ``path`` and ``name`` (``validate_task_source``)."""
    task_path, name = item.get("path"), item.get("name")
    if (task_path is None) == (name is None):
        raise SelectionError("a task names exactly one of path and name", where=where, fix=JOB_FIX)
    if item.get("git_url") is not None:
        raise SelectionError(f"task {task_path or name!r} is in git repository {item['git_url']} and not on disk",
                             where=where, fix=f"clone it under a task root and give its path: git clone "
                                              f"{item['git_url']}")
    if name is not None:
        if not isinstance(name, str) or "/" not in name:
            raise SelectionError(f"task name {name!r} is not 'org/name'", where=where, fix=JOB_FIX)
        ref = item.get("ref")
        return [SelectionEntry(task_id=name, package=name, ref=ref if isinstance(ref, str) else None)]
    directory = _local(task_path, base, where)
    if not is_task_dir(directory):
        raise SelectionError(f"task path {task_path!r} is not a task directory ({directory})", where=where,
                             fix="give the path of a directory holding task.toml")
    return [SelectionEntry(task_id=directory.name, path=str(directory))]


def _job_dataset(item: dict[str, Any], base: Path, where: str) -> list[SelectionEntry]:
    """One ``DatasetConfig``: a local ``path`` read here; a registry, package or repo dataset
    named with the line that downloads it."""
    if item.get("version") is not None and item.get("ref") is not None:
        raise SelectionError("a dataset sets both version and ref", where=where, fix="keep one of them")
    name, repo = item.get("name"), item.get("repo")
    if repo is not None or (name is not None and item.get("path") is None):
        version = item.get("version") or item.get("ref")
        ask = f"{name}@{version}" if name and version else str(name or "")
        options = "".join(f" --{flag} {item[key]}" for flag, key in (("repo", "repo"), ("registry-url", "registry_url"))
                          if item.get(key) is not None)
        what = f"dataset {ask!r}" + (f" of repository {repo}" if repo is not None else "")
        raise SelectionError(f"{what} is a registry dataset, not on disk", where=where,
                             fix=f"fetch it with `harbor download {ask}{options} -o DIR` (it lands in "
                                 f"DIR/{str(name or '').split('/')[-1] or '<dataset>'}/) and give that as the "
                                 f"dataset's path, under a task root of the suite")
    if name is not None:
        raise SelectionError("a dataset sets both path and name", where=where, fix="keep one of them")
    directory = _local(item.get("path"), base, where)
    if not directory.is_dir():
        raise SelectionError(f"dataset path {item.get('path')!r} is not a directory ({directory})", where=where,
                             fix="give the directory that holds the dataset's task directories")
    found = sorted(p for p in directory.iterdir() if is_task_dir(p))
    chosen = found
    include, exclude = _globs(item, "task_names", where), _globs(item, "exclude_task_names", where)
    if include:
        chosen = [p for p in chosen if any(fnmatch(p.name, g) for g in include)]
        if not chosen:
            raise SelectionError(f"no tasks matched the filter(s) {include}: {len(found)} tasks in {directory}"
                                 + (f", e.g. {', '.join(p.name for p in found[:3])}" if found else ""),
                                 where=where, fix="fix task_names (globs on the task directories' names)")
    chosen = [p for p in chosen if not any(fnmatch(p.name, g) for g in exclude)]
    limit = item.get("n_tasks")
    if limit is not None:
        if type(limit) is not int or limit < 0:
            raise SelectionError(f"n_tasks is {limit!r}, not a count", where=where, fix="e.g. n_tasks: 10")
        chosen = chosen[:limit]
    return [SelectionEntry(task_id=p.name, path=str(p)) for p in chosen]


def _globs(item: dict[str, Any], key: str, where: str) -> list[str]:
    value = item.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SelectionError(f"{key} is not a list of names or globs", where=where, fix=f"e.g. {key}: ['fix-*']")
    return value


def _local(value: Any, base: Path, where: str) -> Path:
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise SelectionError(f"path {value!r} is not a path", where=where, fix=JOB_FIX)
    return (base / Path(value).expanduser()).resolve()


def package_names(index: dict[str, Path]) -> dict[str, str]:
    """``[task] name`` -> task id, over the indexed tasks that have one (read from task.toml
    alone; a task.toml that does not parse is left to the task loader to report)."""
    out: dict[str, str] = {}
    for task_id, directory in index.items():
        try:
            raw = read_capped(directory / "task.toml", MAX_CONFIG_BYTES)
            section = tomllib.loads(raw.decode()).get("task") if raw is not None else None
        except (OSError, ValueError, RecursionError):  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
            continue
        name = section.get("name") if isinstance(section, dict) else None
        if isinstance(name, str):
            out.setdefault(name, task_id)
    return out
