"""The run root's layout, its one lock, and the rule that it only grows.

A run root (``runs/<run_id>/``) holds the frozen plan and receipt, the ledger and one directory
per attempt. Those are evidence: no command writes over them, and no ``--out`` points into a
run root. Everything that names a file of the layout asks :class:`RunPaths`, so that a rename
is one edit.

The lock (``.execute.lock``) says which driver holds the run. It is taken with ``flock``, which
the kernel releases when its holder dies, and the file is opened without truncation: a second
``execute`` that is refused must not empty the pid the running driver wrote (``status`` reads
it to tell a live driver from a dead one).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ray_bench.errors import UserInputError
from ray_bench.textsafe import escape_controls

PLAN_FILE = "launch-plan.json"
RECEIPT_FILE = "receipt.md"
PLAN_BRIEF_FILE = "plan-brief.json"
LEDGER_FILE = "ledger.sqlite"
LOCK_FILE = ".execute.lock"
PAUSE_FILE = "pause.json"
SUMMARY_FILE = "run-summary.json"
ATTEMPTS_DIR = "attempts"
RESULT_FILE = "result.json"
HALT_FILE = "resource-halt.json"
HALTS_DIR = "halts"
PAUSES_DIR = "pauses"


class AttemptRef(Protocol):
    """What names an attempt's directory (a ledger's ``AttemptRow`` has it)."""

    @property
    def cell_id(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def arm(self) -> str: ...
    @property
    def rep(self) -> int: ...
    @property
    def seq(self) -> int: ...


#: How much of the task id and the arm name a directory name keeps (the name stays far below
#: the 255 bytes a filesystem allows a name: 60 + 40 + reps, seqs, the hash and separators).
TASK_NAME_CHARS = 60
ARM_NAME_CHARS = 40
#: The cell id's first characters that end every name: two names that differ only in case, or
#: in what was cut or replaced, are two cells with two ids (a collision of 8 hex digits between
#: two cells of the same task, arm and rep is 1 in 4 billion).
CELL_HASH_CHARS = 8
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAMED = re.compile(rf"^(?P<key>.+)__a(?P<seq>[1-9][0-9]{{0,8}})__(?P<hash>[0-9a-f]{{{CELL_HASH_CHARS}}})$")
_LEGACY = re.compile(r"^(?P<key>.+)-a(?P<seq>[1-9][0-9]{0,8})$")


def _safe(text: str, most: int) -> str:
    """``text`` in the characters every filesystem takes (runs of others become one ``-``), cut
    to ``most``, never empty nor a dot name."""
    return _UNSAFE.sub("-", text)[:most].strip(".-") or "x"


def attempt_id_of(cell_id: str, seq: int) -> str:
    """The ledger's id of attempt ``seq`` of a cell (and its directory's name before issue 56)."""
    return f"{cell_id}-a{seq}"


def attempt_dir_name(task: str, arm: str, rep: int, seq: int, cell_id: str) -> str:
    """``<task>__<arm>__r<rep>__a<seq>__<cell id[:8]>``: a person finds an attempt by task, arm,
    rep and attempt (issue 56: they were named by hash alone); the hash keeps it unique on a
    case-insensitive filesystem and when ids are cut or hold odd characters."""
    return f"{_stem(task, arm, rep)}__a{seq}__{cell_id[:CELL_HASH_CHARS]}"


def attempt_dir_key(task: str, arm: str, rep: int, cell_id: str) -> str:
    """What a directory name says of its cell (all but the attempt's number): the key that
    :func:`parse_attempt_dir` gives back."""
    return f"{_stem(task, arm, rep)}__{cell_id[:CELL_HASH_CHARS]}"


def _stem(task: str, arm: str, rep: int) -> str:
    return f"{_safe(task, TASK_NAME_CHARS)}__{_safe(arm, ARM_NAME_CHARS)}__r{rep}"


def parse_attempt_dir(name: str) -> tuple[str, int] | None:
    """(key, seq) of an attempt directory's name: the key is :func:`attempt_dir_key` of its
    cell, or, for a directory named before issue 56, the cell id itself; ``None``: no attempt's."""
    named = _NAMED.match(name)
    if named is not None:
        return f"{named['key']}__{named['hash']}", int(named["seq"])
    legacy = _LEGACY.match(name)
    return None if legacy is None else (legacy["key"], int(legacy["seq"]))


@dataclass(frozen=True)
class RunPaths:
    """Where each file of one run root lives."""

    root: Path

    @property
    def plan(self) -> Path:
        return self.root / PLAN_FILE

    @property
    def receipt(self) -> Path:
        return self.root / RECEIPT_FILE

    @property
    def plan_brief(self) -> Path:
        """What ``status`` and ``pause`` read of the plan (:mod:`ray_bench.plan.brief`)."""
        return self.root / PLAN_BRIEF_FILE

    @property
    def ledger(self) -> Path:
        return self.root / LEDGER_FILE

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def pause(self) -> Path:
        return self.root / PAUSE_FILE

    @property
    def pauses(self) -> Path:
        """Where a pause request the driver has honoured is archived (``<stamp>[-n]-pause.json``)."""
        return self.root / PAUSES_DIR

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY_FILE

    @property
    def halt(self) -> Path:
        """The resource supervisor's hard stop (:mod:`ray_bench.sandboxes.supervisor`)."""
        return self.root / HALT_FILE

    @property
    def halts(self) -> Path:
        """Where a cleared halt is archived, with its clearance reason."""
        return self.root / HALTS_DIR

    @property
    def attempts(self) -> Path:
        return self.root / ATTEMPTS_DIR

    def attempt(self, row: AttemptRef) -> Path:
        """Attempt ``row``'s directory (:func:`attempt_dir_name`)."""
        return self.attempt_of(row.task, row.arm, row.rep, row.seq, row.cell_id)

    def attempt_of(self, task: str, arm: str, rep: int, seq: int, cell_id: str) -> Path:
        """The directory of attempt ``seq`` of a cell: by name, or, in a run made before
        issue 56, by its attempt id (``<cell id>-a<seq>``) when that one exists and the named
        one does not (the ledger records no directory: every reader comes here)."""
        named = self.attempts / attempt_dir_name(task, arm, rep, seq, cell_id)
        legacy = self.attempts / attempt_id_of(cell_id, seq)
        return legacy if not named.exists() and legacy.is_dir() else named

    def attempt_dirs(self) -> list[Path]:
        """Every attempt directory, sorted by name (none when there is no ``attempts/``)."""
        try:
            return sorted(p for p in self.attempts.iterdir() if p.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def ledger_files(self) -> list[Path]:
        """The ledger and the files SQLite keeps beside it."""
        return [self.ledger, Path(f"{self.ledger}-wal"), Path(f"{self.ledger}-shm")]

    def refuse_orphaned_attempts(self) -> None:
        """Attempt directories without a ledger are evidence whose record was lost: running
        the plan again would start every cell at attempt 1, into those directories."""
        if self.ledger.exists():
            return
        found = self.attempt_dirs()
        if found:
            raise UserInputError(
                f"{len(found)} attempt directories but no ledger ({LEDGER_FILE} is missing)",
                where=str(self.root),
                fix=f"recover the ledger with `ray-bench ledger rebuild {self.root}`, then execute again")


def run_root_of(path: Path) -> Path | None:
    """The run root that ``path`` is in (or is), found by its plan or ledger; None outside one."""
    resolved = path.resolve()
    for candidate in (resolved, *resolved.parents):
        if (candidate / PLAN_FILE).is_file() or (candidate / LEDGER_FILE).is_file():
            return candidate
    return None


def refuse_output_in_run_root(path: Path, where: str, *, runs: Iterable[Path] = ()) -> None:
    """An ``--out`` target (a file or a directory) may not be in a run root: the plan, receipt,
    ledger and attempts there are evidence, and a report or selection beside them is mistaken
    for one of them. With ``runs`` (``--runs`` as given: run roots, or directories of them), nor
    anywhere under the directory holding them: ``runs/NEW/launch-plan.json`` names a run root
    that ``plan`` has not made yet (issue 56)."""
    fix = "write it outside runs/, e.g. reports/NAME or selections/NAME.json"
    root = run_root_of(path)
    if root is not None:
        raise UserInputError(f"{path} is inside run root {root}, whose files are never written over",
                             where=where, fix=fix)
    resolved = path.resolve()
    for given in runs:
        runs_dir = given.resolve()
        runs_dir = runs_dir.parent if run_root_of(runs_dir) == runs_dir else runs_dir
        if resolved.is_relative_to(runs_dir):
            raise UserInputError(f"{path} is under the runs directory {runs_dir}, where only run roots belong",
                                 where=where, fix=fix)


def refuse_existing(path: Path, where: str, fix: str) -> None:
    """A writer that creates a file of a run root refuses one that exists, naming it."""
    if path.exists() or path.is_symlink():
        raise UserInputError(f"{path} exists and is never written over", where=where, fix=fix)


#: The ledger event the driver appends while it runs.
HEARTBEAT_EVENT = "heartbeat"
#: How often the driver appends it (seconds).
HEARTBEAT_SEC = 30.0
#: A heartbeat older than this says the driver stopped making progress: three missed beats.
HEARTBEAT_STALE_SEC = 3 * HEARTBEAT_SEC


@dataclass(frozen=True)
class LockHolder:
    """What the run's lock says: ``held`` by a live process (probed), the pid it wrote, and
    ``since`` when (the file's mtime: :func:`hold_lock` writes the pid once it holds the lock)."""

    held: bool
    pid: int | None
    since: float | None = None


def lock_holder(run_root: Path) -> LockHolder:
    """Probe the run's lock without taking it for longer than the probe (read-only open)."""
    path = RunPaths(run_root).lock
    if not path.exists():
        return LockHolder(False, None)
    try:
        text = path.read_text().strip()
        since: float | None = path.stat().st_mtime
    except OSError:
        text, since = "", None
    pid = int(text) if text.isdigit() else None
    try:
        handle = path.open("r")
    except OSError:
        return LockHolder(False, pid)
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return LockHolder(True, pid, since)
        fcntl.flock(handle, fcntl.LOCK_UN)
    return LockHolder(False, pid)


def pid_suspended(pid: int) -> bool:
    """The process is stopped by a signal (SIGSTOP, Ctrl-Z's SIGTSTP) or a tracer: it lives and
    holds its locks, and does nothing until SIGCONT. Read from ``/proc/PID/stat``'s state field
    (``T`` or ``t``, proc(5)); False where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) state ...": comm may hold spaces and parentheses, so the state follows the last ")"
    return stat.rpartition(")")[2].split()[:1] in (["T"], ["t"])


def pid_alive(pid: int) -> bool:
    """A process with this pid exists on this host (it may be another program)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


#: The attempt error a runner reports when the disk it writes the attempt's files to is full.
DISK_FULL_ERROR = "DiskFull"


#: SQLite's names for a full disk: SQLITE_FULL ("database or disk is full"), and the "disk I/O
#: error" of a WAL database whose -shm file cannot grow, which "may indicate that the underlying
#: filesystem volume is out of space" (sqlite.org/rescode.html#ioerr_shmsize): what a state root
#: that filled between runs answers the next one's first write (measured on a full tmpfs).
_SQLITE_FULL = frozenset({"SQLITE_FULL", "SQLITE_IOERR_SHMSIZE"})


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC (or a quota) from a write, or SQLite's "database or disk is full", raised here or
    behind ``exc`` (:func:`disk_full_cause`)."""
    return disk_full_cause(exc) is not None


def disk_full_cause(exc: BaseException) -> BaseException | None:
    """The full-disk error behind ``exc``: itself, what it was raised from, or what a Ray actor
    or task raised. Ray's ``RayTaskError(OperationalError)`` is both classes at once, and its
    text is a coloured traceback: the error it carries (``cause``) is what is read (issue 58: a
    state root that filled under the admission actor came out as "unexpected RayTaskError")."""
    todo, seen = [exc], set()
    while todo:
        err = todo.pop()
        if id(err) in seen:
            continue
        seen.add(id(err))
        carried = getattr(err, "cause", None)
        if isinstance(carried, BaseException) and carried is not err:
            todo.append(carried)
            continue
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return err
        if isinstance(err, sqlite3.OperationalError) and (
                "full" in str(err).lower() or getattr(err, "sqlite_errorname", "") in _SQLITE_FULL):
            return err
        todo.extend(e for e in (err.__cause__, err.__context__) if e is not None)
    return None


def disk_full_detail(run_root: Path, exc: BaseException | str, *, state_root: Path | None = None) -> str:
    """The stop's words: what was full, how much is free now (in the run root, and in the state
    root when it is elsewhere), and how to go on."""
    what = exc if isinstance(exc, str) else str(disk_full_cause(exc) or exc)
    places = [run_root] + ([state_root] if state_root is not None and state_root != run_root else [])
    frees = []
    for place in places:
        try:
            frees.append(f"{shutil.disk_usage(place).free / (1 << 20):.0f} MiB free now at {place}")
        except OSError:
            frees.append(f"free space unknown at {place}")
    return (f"the disk is full ({escape_controls(what.strip().splitlines()[0] if what.strip() else what)[:160]}; "
            f"{', '.join(frees)}); nothing finished is lost: free space, then execute the plan again to resume")


def unwritable(run_root: Path, exc: OSError) -> UserInputError:
    """One line for a run root the filesystem will not let us write (read-only, permissions)."""
    why = "is on a read-only filesystem" if exc.errno == errno.EROFS else f"is not writable ({exc.strerror or exc})"
    return UserInputError(f"the run root {why}", where=str(run_root),
                          fix="make it writable (or copy the run root to a writable place) and execute again")


def held_elsewhere(run_root: Path) -> UserInputError:
    """The refusal of a second driver of one run."""
    return UserInputError("another `ray-bench execute` is running this plan", where=str(run_root),
                          fix="wait for it, or `ray-bench pause` it")


def refuse_unlockable(run_root: Path) -> None:
    """Refuse now, writing nothing, what :func:`hold_lock` would refuse: a run another driver
    holds (:func:`lock_holder`), a run root (or its lock) this process cannot write. ``execute``
    asks before it starts Ray; :func:`hold_lock` stays the rule that counts."""
    if lock_holder(run_root).held:
        raise held_elsewhere(run_root)
    lock = RunPaths(run_root).lock
    target = lock if lock.exists() else run_root
    if target.exists() and not os.access(target, os.W_OK):
        read_only = bool(os.statvfs(target).f_flag & os.ST_RDONLY)
        code = errno.EROFS if read_only else errno.EACCES
        raise unwritable(run_root, OSError(code, os.strerror(code)))


@contextlib.contextmanager
def hold_lock(run_root: Path) -> Iterator[None]:
    """One driver per run root: a second `execute` of the same run is refused, so no cell can
    be started by two drivers. The file is truncated and given our pid only once we hold it."""
    try:
        run_root.mkdir(parents=True, exist_ok=True)
        fd = os.open(RunPaths(run_root).lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise unwritable(run_root, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise held_elsewhere(run_root) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)
