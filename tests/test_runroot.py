"""The full-disk rule (ray_bench.runroot.is_disk_full / disk_full_detail) on what Ray hands back."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from ray_bench.runroot import disk_full_cause, disk_full_detail, is_disk_full


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
