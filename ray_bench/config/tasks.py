"""Harbor task directories: one task, a root of tasks, or a root of benchmark directories."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tomllib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ray_bench.config.bounded import read_bounded, read_text_bounded
from ray_bench.config.compose import compose_warnings, read_compose
from ray_bench.config.secrets import looks_like_secret, shown_path
from ray_bench.errors import MultipleInputErrors, TaskDirError, UserInputError
from ray_bench.models.task import TaskConfig, TaskRef, unknown_keys
from ray_bench.textsafe import is_utf8, shown_name

_SKIP = {"__pycache__", ".git", ".DS_Store", ".pytest_cache"}
_FIX = "see `ray-bench validate --explain KEY` (Harbor's task.toml schema)"


#: What one task directory may hold: Harbor tasks are a few files and a few MiB (the largest
#: real ones, with fixtures, stay under 100 MiB); a tree above this is not a task.
MAX_TASK_FILES = 10_000
MAX_TASK_BYTES = 512 * 1024 * 1024
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class TreeLimits:
    files: int
    bytes: int
    what: str


TASK_LIMITS = TreeLimits(MAX_TASK_FILES, MAX_TASK_BYTES, "task")
#: An arm's agent_dir may ship a program with its dependencies (a node_modules tree): the
#: same walk, with room for that.
AGENT_LIMITS = TreeLimits(100_000, 2 * 1024 * 1024 * 1024, "agent directory")


@dataclass(frozen=True)
class TaskFile:
    """One entry of a task tree: a regular file (``link`` None) or a link kept inside the
    task, to a file (hashed by content) or to a directory (hashed by where it points)."""

    rel: str
    path: Path
    size: int
    executable: bool
    link: str | None = None
    #: The modification time of what it names (a link: its target), from the walk's own stat:
    #: with ``size``, the drift guard's signature of the file (no second stat).
    mtime_ns: int = -1


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a regular file"


def link_problem(path: Path) -> str | None:
    """Why the link at ``path`` (or on the way to it) cannot be followed: "is a symlink loop"
    or "is a dangling symlink"; None when it can, or when nothing is there at all (the caller's
    "not found")."""
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 reports a loop so; 3.13 as OSError ELOOP
        return "is a symlink loop"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop"
        return "is a dangling symlink" if path.is_symlink() else None
    return None


def _refuse(task_dir: Path, rel: str, what: str, fix: str) -> TaskDirError:
    return TaskDirError(f"{rel} {what}", where=shown_path(str(task_dir)), fix=fix)


def _entry(task_dir: Path, path: Path) -> TaskFile:
    rel = path.relative_to(task_dir).as_posix()
    if not is_utf8(rel):  # its name could be neither hashed into the checksum nor shown
        raise _refuse(task_dir, shown_name(rel), "has a name that is not valid UTF-8",
                      "rename it: a task's file names are UTF-8 text")
    try:
        st = path.lstat()
    except OSError as exc:
        raise _refuse(task_dir, rel, f"cannot be read: {exc.strerror or exc}", "check the file") from None
    if stat.S_ISLNK(st.st_mode):
        problem = link_problem(path)
        if problem is not None:
            raise _refuse(task_dir, rel, problem, "remove the link or restore its target")
        target = path.resolve(strict=True)
        real_root = task_dir.resolve()  # only where a link is met (one resolve a task was 5,000 at 100,000 cells)
        if not target.is_relative_to(real_root):
            raise _refuse(task_dir, rel, "links outside the task directory",
                          "copy the file into the task instead of linking to it")
        st = target.stat()
        if stat.S_ISDIR(st.st_mode):
            return TaskFile(rel, path, 0, False, link=target.relative_to(real_root).as_posix(),
                            mtime_ns=st.st_mtime_ns)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(task_dir, rel, f"is {_kind(st.st_mode)}", "a task holds regular files only; remove it")
    return TaskFile(rel, path, st.st_size, os.access(path, os.X_OK), mtime_ns=st.st_mtime_ns)


def task_files(task_dir: Path, limits: TreeLimits = TASK_LIMITS) -> list[TaskFile]:
    """Every file of a task tree, checked before any byte is read: regular files only (a
    FIFO would block a read forever, ``/dev/zero`` never ends), links resolved and kept
    inside the task, at most :data:`MAX_TASK_FILES` files and :data:`MAX_TASK_BYTES` bytes
    (sizes from ``lstat``/``stat``, so a sparse 2 GB file costs nothing to refuse)."""
    files: list[TaskFile] = []
    total = 0
    for root, dirs, names in os.walk(task_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        linked = [d for d in dirs if (Path(root) / d).is_symlink()]  # os.walk does not descend
        for name in sorted([*(n for n in names if n not in _SKIP), *linked]):
            entry = _entry(task_dir, Path(root) / name)
            files.append(entry)
            total += entry.size
            if len(files) > limits.files:
                raise _refuse(task_dir, ".", f"holds more than {limits.files:,} files (the bound of a {limits.what})",
                              "keep large trees out of it: build them in the Dockerfile or fetch them at run time")
            if total > limits.bytes:
                raise _refuse(task_dir, entry.rel, f"takes the {limits.what} over {limits.bytes // (1 << 20)} MiB "
                              f"({entry.size:,} bytes)", "fetch large files in the Dockerfile or at run time")
    return files


def iter_task_files(task_dir: Path, limits: TreeLimits = TASK_LIMITS) -> list[Path]:
    return [f.path for f in task_files(task_dir, limits)]


@dataclass(frozen=True)
class TaskTree:
    """A task tree as one walk found it (:func:`task_files`) and the checksum of those files:
    what the drift check before ``execute``'s re-derivation has just walked and hashed, handed
    to :func:`load_task` so that each task directory is walked and read once."""

    files: list[TaskFile]
    checksum: str


def _file_digest(path: Path) -> bytes:
    """sha256 of a regular file, streamed; opened without blocking and checked again after
    opening, so a file swapped for a FIFO since the walk cannot hang the read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise TaskDirError(f"{path.name} is not a regular file", where=shown_path(str(path.parent)),
                               fix="a task holds regular files only; remove it")
        digest = hashlib.sha256()
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.digest()


def task_checksum(task_dir: Path, files: list[TaskFile] | None = None, limits: TreeLimits = TASK_LIMITS) -> str:
    """sha256 over each file's relative path, executable bit and bytes. Paths above the task
    directory never enter it, so moving a suite changes no checksum."""
    outer = hashlib.sha256(b"ray-bench/task/v1\0")
    for entry in task_files(task_dir, limits) if files is None else files:
        if entry.link is not None:
            outer.update(entry.rel.encode() + b"\0l" + entry.link.encode())
            continue
        executable = b"x" if entry.executable else b"-"
        outer.update(entry.rel.encode() + b"\0" + executable + _file_digest(entry.path))
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


def _config(toml_path: Path, errors: list[UserInputError], warned: list[str]) -> TaskConfig:
    try:
        data = tomllib.loads(read_text_bounded(toml_path, TaskDirError))
        warned.extend(docker_network_spellings(data))
        warned.extend(numeric_size_spellings(data))
        return TaskConfig.model_validate(data)
    except UserInputError as exc:
        errors.append(exc)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        errors.append(TaskDirError(f"invalid TOML: {exc}", where=shown_path(str(toml_path)), fix="fix the syntax"))
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
                fix = _FIX if key == "task.toml" else f"see `ray-bench validate --explain {key}`"
                errors.append(TaskDirError(line, where=shown_path(str(toml_path)), fix=fix))
    return TaskConfig()


def _layout(task_dir: Path, config: TaskConfig, errors: list[UserInputError]) -> None:
    def need(path: Path, what: str, fix: str) -> None:
        if not path.is_file() or (path.suffix == ".md" and not _text(path).strip()):
            errors.append(TaskDirError(f"{what} is missing or empty", where=shown_path(str(task_dir)), fix=fix))

    # Harbor's verifier for a Windows task is tests/test.bat (TaskPaths.test_path_for), and Harbor
    # refuses a Windows task without one; the task is refused by every backend here later anyway,
    # but the error should be the one Harbor gives.
    verifier = "test.bat" if config.environment.os == "windows" else "test.sh"
    if not config.steps:
        need(task_dir / "instruction.md", "instruction.md", "write the task's prompt in instruction.md")
        need(task_dir / "tests" / verifier, f"tests/{verifier}", f"add the verifier tests/{verifier}")
        return
    present = sorted(p.name for p in (task_dir / "steps").iterdir() if p.is_dir()) \
        if (task_dir / "steps").is_dir() else []
    for step in config.steps:
        step_dir = task_dir / "steps" / step.name
        if not step_dir.is_dir():  # a misnamed directory: say which, not "instruction.md is missing"
            strays = [p for p in present if p not in {s.name for s in config.steps}]
            errors.append(TaskDirError(
                f"step {step.name}: steps/{step.name}/ does not exist"
                + (f" (steps/ holds {', '.join(strays[:5])}, which no [[steps]] names)" if strays else ""),
                where=shown_path(str(task_dir)), fix=f"name the directory steps/{step.name}/ as [[steps]] does"))
            continue
        need(step_dir / "instruction.md", f"steps/{step.name}/instruction.md", "write the step's prompt")
        if not (step_dir / "tests" / "test.sh").is_file() and not (task_dir / "tests" / "test.sh").is_file():
            errors.append(TaskDirError(f"step {step.name}: no tests/test.sh in the step or the task",
                                       where=shown_path(str(task_dir)), fix=f"add steps/{step.name}/tests/test.sh"))


def _text(path: Path) -> str:
    """A task file's text, within the task-file bound (4 MiB), never blocking on a FIFO."""
    return read_bounded(path, TaskDirError).decode("utf-8", errors="replace")


#: The task files that reach an agent, a verifier or an image build: scanned for known key
#: shapes line by line (not for entropy: scripts and Dockerfiles carry digests and base64).
_SCANNED = ("instruction.md", "tests/test.sh", "environment/Dockerfile", "solution/solve.sh")


def _scan_files(task_dir: Path, config: TaskConfig, errors: list[UserInputError],
                values: Sequence[str] = ()) -> None:
    """Known key shapes, and the live ``values`` of the accounts' routes (a key of no known
    shape is still a key: issue 58, a ``tests/test.sh`` holding one planned)."""
    prefixes = ["", *(f"steps/{step.name}/" for step in config.steps or [])]
    for rel in (f"{prefix}{name}" for prefix in prefixes for name in _SCANNED):
        path = task_dir / rel
        if not path.is_file():
            continue
        for number, line in enumerate(_text(path).splitlines(), 1):
            hit = looks_like_secret(line, values, entropy=False)
            if hit is not None:
                errors.append(TaskDirError(f"{rel}:{number} holds what looks like {hit[0]} ({hit[1]})",
                                           where=shown_path(str(task_dir)),
                                           fix="never write a secret into a task file: pass it through an "
                                               "account's route"))
                break


def refuse_secret_name(task_dir: Path) -> None:
    """A task directory named like a key is refused without printing the name."""
    hit = looks_like_secret(task_dir.name, entropy=False)
    if hit is not None:
        raise TaskDirError(f"the task directory's name holds what looks like {hit[0]} ({hit[1]})",
                           where=shown_path(str(task_dir)), fix="rename the directory")


def task_warnings(config: TaskConfig) -> list[str]:
    """What Harbor accepts but ray-bench reports: keys its schema does not define."""
    unknown = unknown_keys(config)
    warned = [f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
              "(not in Harbor's task.toml schema; ignored)"] if unknown else []
    if config.task is not None and config.task.name is None:
        warned.append("[task] has no name (Harbor wants 'org/name'); the directory name is the task id")
    elif config.task is not None and config.task.name is not None and "/" not in config.task.name:
        warned.append(f"[task] name {config.task.name!r} has no org (Harbor refuses it: it wants 'org/name'); "
                      "it changes nothing here")
    return warned


#: Where a phase's network_mode may be written: the environment, the agent, the verifier, and
#: each step's agent and verifier.
_PHASES = (("environment",), ("agent",), ("verifier",))


def docker_network_spellings(data: dict[str, Any]) -> list[str]:
    """Docker's spelling ``network_mode = "none"`` read as ``no-network`` (what it means), with
    a warning that Harbor refuses it; rewrites ``data`` in place."""
    warned: list[str] = []
    tables: list[tuple[str, Any]] = [(".".join(p), data.get(p[0])) for p in _PHASES]
    for n, step in enumerate(data.get("steps") or []):
        if isinstance(step, dict):
            tables += [(f"steps[{n}].{k}", step.get(k)) for k in ("agent", "verifier")]
    for where, table in tables:
        if isinstance(table, dict) and table.get("network_mode") == "none":
            table["network_mode"] = "no-network"
            warned.append(f"{where}.network_mode = \"none\" is Docker's spelling: read as \"no-network\" "
                          "(Harbor refuses it)")
    return warned


def numeric_size_spellings(data: dict[str, Any]) -> list[str]:
    """The legacy ``memory`` / ``storage`` keys written as a number (``memory = 2048``): Harbor
    drops them (its converter reads only text such as "2G"), so the task runs without that limit
    there and here; said, since the author meant a limit."""
    tables: list[tuple[str, Any]] = [("environment", data.get("environment"))]
    verifier = data.get("verifier")
    if isinstance(verifier, dict):
        tables.append(("verifier.environment", verifier.get("environment")))
    warned: list[str] = []
    for where, table in tables:
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            value = table.get(old) if isinstance(table, dict) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                warned.append(f"{where}.{old} = {value!r} is a number: ignored, as Harbor ignores it (no limit); "
                              f"write {new} = N (MiB) or {old} = \"4G\"")
    return warned


def load_task(task_dir: Path, route_values: Sequence[str] = (), tree: TaskTree | None = None) -> TaskRef:
    """The task in ``task_dir``; ``tree``: its files and checksum as a check has just walked and
    hashed them (the same :func:`task_files`, so the same refusals), instead of walking again."""
    if not is_utf8(task_dir.name):  # named directly (validate), not found below a root
        raise TaskDirError(f"task directory {shown_name(task_dir.name)} has a name that is not valid UTF-8",
                           where=shown_name(str(task_dir.parent)), fix="rename it: task ids are UTF-8 text")
    refuse_secret_name(task_dir)
    # every entry checked before any byte of the task is read
    files = task_files(task_dir) if tree is None else tree.files
    errors: list[UserInputError] = []
    toml_path = task_dir / "task.toml"
    config = TaskConfig()
    spelled: list[str] = []
    if not toml_path.is_file():
        errors.append(TaskDirError("task.toml is missing", where=shown_path(str(task_dir)), fix="add task.toml"))
    else:
        config = _config(toml_path, errors, spelled)
    _layout(task_dir, config, errors)
    _scan_files(task_dir, config, errors, route_values)
    compose = None
    try:
        compose = read_compose(task_dir, config.environment.docker_image)
    except TaskDirError as exc:
        errors.append(exc)
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise MultipleInputErrors(errors)
    env_dir = task_dir / "environment"
    return TaskRef(
        id=task_dir.name,
        path=str(task_dir.resolve()),
        checksum=task_checksum(task_dir, files) if tree is None else tree.checksum,
        config=config,
        has_dockerfile=(env_dir / "Dockerfile").is_file(),
        has_compose=compose is not None,
        compose=compose,
        has_solution=(task_dir / "solution" / "solve.sh").is_file(),
        warnings=tuple([*name_warnings(task_dir.name), *spelled, *task_warnings(config), *compose_warnings(task_dir)]),
    )


def task_identity(name: str) -> str:
    """What makes two task ids the same: NFKC and case folded (``hello-world`` is
    ``HELLO-WORLD``, and fullwidth ``hello`` is ``hello``); on a case-insensitive filesystem, in a
    ledger keyed by folded ids or to a reader they are one task."""
    return unicodedata.normalize("NFKC", name).casefold()


_INVISIBLE = frozenset({"Cf", "Cc", "Zs", "Zl", "Zp"})


def name_warnings(name: str) -> list[str]:
    """An id with invisible or non-ASCII characters reads as another id: warned, not refused
    (real benchmarks may name tasks in other scripts)."""
    hidden = sorted({f"U+{ord(c):04X}" for c in name if unicodedata.category(c) in _INVISIBLE})
    if hidden:
        return [f"task id {name!a} holds invisible characters ({', '.join(hidden[:5])}): "
                "it reads as another id; rename the directory"]
    if not name.isascii():
        return [f"task id {name!a} holds non-ASCII characters: it may read as another id "
                "(confusable letters)"]
    return []


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


def index_tasks(roots: list[Path], depth: int = 4) -> dict[str, Path]:
    """Every task id below the roots -> its directory. A root holds task directories, or
    benchmark directories that hold them, up to ``<root>/benchmarks/<benchmark>/tasks/<task>``
    (CodeScaleBench's checkout as the root);
    ``validate`` looks deeper. An id found twice is an error naming both places."""
    index: dict[str, Path] = {}
    folded: dict[str, Path] = {}
    errors: list[UserInputError] = []
    for root in roots:
        if not root.is_dir():
            errors.append(TaskDirError("task root not found", where=str(root),
                                       fix="fix tasks_dir / task_roots (relative to the suite file)"))
            continue
        real_root = root.resolve()
        for task in _below(root, depth):
            below = task.relative_to(root).as_posix()
            if not is_utf8(below):  # the id, cell ids and every message are UTF-8 text
                errors.append(TaskDirError(f"task directory {shown_name(below)} has a name that is not valid UTF-8",
                                           where=str(root), fix="rename it: task ids are UTF-8 text"))
                continue
            try:
                refuse_secret_name(task)
            except TaskDirError as exc:
                errors.append(exc)
                continue
            if not task.resolve().is_relative_to(real_root):
                # the rule a selection's task_dir follows, and the task tree's own links
                errors.append(TaskDirError(f"task {task.name!r} escapes the task roots (a link to {task.resolve()})",
                                           where=str(task), fix="copy the task into the root, or name its real "
                                           "location in task_roots"))
                continue
            other = folded.get(task_identity(task.name))
            if other is not None and other.resolve() != task.resolve():
                what = "is held twice" if other.name == task.name else \
                    f"and {other.name!r} are one id (they differ only in case or Unicode form)"
                errors.append(TaskDirError(f"task id {task.name!r} {what}: {other} and {task}",
                                           where=str(root), fix="remove one copy or name only one of the roots"
                                           if other.name == task.name else "rename or remove one of them"))
                continue
            folded[task_identity(task.name)] = task
            index[task.name] = task
    if errors:
        raise errors[0] if len(errors) == 1 else MultipleInputErrors(errors)
    return index


def load_tasks(roots: Path | list[Path], only: list[str] | None = None,
               index: dict[str, Path] | None = None) -> list[TaskRef]:
    """Every task below the roots (or the ones named), each problem on its own line."""
    errors: list[UserInputError] = []
    tasks = collect_tasks(roots, only, index, errors)
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise MultipleInputErrors(errors)
    return tasks


def collect_tasks(roots: Path | list[Path], only: list[str] | None, index: dict[str, Path] | None,
                  errors: list[UserInputError], route_values: Sequence[str] = ()) -> list[TaskRef]:
    """The tasks that load; every problem of the others appended to ``errors`` (so a caller
    can list them with its own checks' in one pass)."""
    roots = [roots] if isinstance(roots, Path) else roots
    index = index_tasks(roots) if index is None else index
    where = ", ".join(str(r) for r in roots)
    names = sorted(index) if only is None else only
    tasks: list[TaskRef] = []
    for name in names:
        if name not in index:
            errors.append(TaskDirError(f"task {name!r} not found", where=where, fix="check the task id"))
            continue
        try:
            tasks.append(load_task(index[name], route_values))
        except MultipleInputErrors as exc:
            errors.extend(exc.errors)
        except UserInputError as exc:
            errors.append(exc)
    if not names:
        errors.append(TaskDirError("no task directories", where=where, fix="add tasks"))
    return tasks
