"""The full-disk rule (ray_bench.runroot.is_disk_full / disk_full_detail) on what Ray hands back;
the attempt directories' names (ray_bench.runroot.attempt_dir_name)."""

from __future__ import annotations

import errno
import re
import sqlite3
from pathlib import Path

from ray_bench.plan.identity import cell_id
from ray_bench.runroot import (
    RunPaths,
    attempt_dir_key,
    attempt_dir_name,
    disk_full_cause,
    disk_full_detail,
    is_disk_full,
    parse_attempt_dir,
)


def _ray_wrapped(cause: BaseException) -> BaseException:
    """What ``ray.get`` raises when an actor method raised ``cause``: RayTaskError(cause's class),
    whose text is Ray's coloured traceback (ray.exceptions.RayTaskError.as_instanceof_cause)."""
    from ray.exceptions import RayTaskError

    try:
        raise cause
    except BaseException as exc:  # a real traceback, as Ray formats it
        import traceback

        text = "".join(traceback.format_exception(exc))
    return RayTaskError("AdmissionActor.call", text, cause, proctitle="ray::AdmissionActor.call()",
                        pid=1, ip="127.0.0.1").as_instanceof_cause()


def test_a_full_disk_behind_a_ray_actor_error_is_found_and_said_in_one_clean_line(tmp_path: Path) -> None:
    """Issue 58: a state root that filled under the admission actor came out as "unexpected
    RayTaskError(OperationalError): \\x1b[36mray::AdmissionActor.call()..."."""
    full = sqlite3.OperationalError("database or disk is full")
    wrapped = _ray_wrapped(full)
    assert disk_full_cause(wrapped) is full and is_disk_full(wrapped)
    detail = disk_full_detail(tmp_path, wrapped, state_root=tmp_path / "state")
    assert detail.startswith("the disk is full (database or disk is full; ")
    assert "\x1b" not in detail and "ray::" not in detail and "\n" not in detail
    assert f"at {tmp_path}," in detail and "free space unknown at" in detail  # the state root is not there


def test_a_wal_database_that_cannot_grow_its_shm_file_is_a_full_disk(tmp_path: Path) -> None:
    """SQLite's answer when a full disk stops a WAL database from growing its -shm file is
    "disk I/O error" (SQLITE_IOERR_SHMSIZE), not "database or disk is full"."""
    io = sqlite3.OperationalError("disk I/O error")
    io.sqlite_errorname = "SQLITE_IOERR_SHMSIZE"  # type: ignore[attr-defined]
    assert is_disk_full(_ray_wrapped(io))
    other = sqlite3.OperationalError("disk I/O error")
    other.sqlite_errorname = "SQLITE_IOERR_READ"  # type: ignore[attr-defined]
    assert not is_disk_full(other)


def test_a_full_disk_raised_from_or_during_another_error_is_found() -> None:
    enospc = OSError(errno.ENOSPC, "No space left on device")
    outer = RuntimeError("while closing")
    outer.__cause__ = enospc
    during = RuntimeError("closing")
    during.__context__ = outer
    assert disk_full_cause(outer) is enospc and disk_full_cause(during) is enospc
    assert not is_disk_full(_ray_wrapped(sqlite3.OperationalError("database is locked")))
    assert not is_disk_full(OSError(errno.EACCES, "denied"))


def test_an_attempt_directory_says_its_task_arm_rep_and_attempt() -> None:
    """Issue 56: attempt directories were named by hash alone."""
    cell = cell_id("hello-world", "sha", b"{}", 2)
    assert attempt_dir_name("hello-world", "mcp", 2, 1, cell) == f"hello-world__mcp__r2__a1__{cell[:8]}"
    assert parse_attempt_dir(attempt_dir_name("hello-world", "mcp", 2, 13, cell)) == (
        attempt_dir_key("hello-world", "mcp", 2, cell), 13)
    # a directory named before: its cell id and number
    assert parse_attempt_dir(f"{cell}-a3") == (cell, 3)
    assert parse_attempt_dir("notes") is None and parse_attempt_dir(f"x__a0__{cell[:8]}") is None


def test_odd_task_ids_give_safe_bounded_names() -> None:
    odd = ["../../etc/passwd", "a/b\\c", "tâche: ünïcode ☃", "..", "-", " spaced  out ", "x" * 400,
           "dots...", "new\nline", "semi;colon|pipe*star?", ".hidden"]
    for task in odd:
        for arm in ("baseline", "../arm", "a" * 300):
            name = attempt_dir_name(task, arm, 99, 123456789, cell_id(task, "s", arm.encode(), 99))
            assert re.fullmatch(r"[A-Za-z0-9._-]+", name), name
            assert not name.startswith((".", "-"))  # never a dot name, never an option
            assert len(name.encode()) <= 160, (task, len(name))
            assert parse_attempt_dir(name) is not None


def test_names_stay_unique_when_cut_replaced_or_case_folded() -> None:
    """Tasks that differ only in case (on a case-insensitive filesystem one directory), only
    past the cut, or only in the characters replaced: every cell's directory is its own."""
    tasks = ["hello-world", "HELLO-WORLD", "Hello-World", "a/b", "a:b", "a b", "y" * 100 + "1", "y" * 100 + "2"]
    names = [attempt_dir_name(t, arm, rep, seq, cell_id(t, "s", arm.encode(), rep))
             for t in tasks for arm in ("baseline", "BASELINE") for rep in (1, 2) for seq in (1, 2)]
    assert len({n.casefold() for n in names}) == len(names)


def test_a_run_made_before_keeps_its_directories_and_new_attempts_take_the_new_names(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    cell = cell_id("hello-world", "s", b"{}", 1)
    old = paths.attempts / f"{cell}-a1"
    old.mkdir(parents=True)
    assert paths.attempt_of("hello-world", "baseline", 1, 1, cell) == old  # a reader finds it
    assert paths.attempt_of("hello-world", "baseline", 1, 2, cell) == (
        paths.attempts / f"hello-world__baseline__r1__a2__{cell[:8]}")
