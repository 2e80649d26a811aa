"""Task trees read within bounds, and task identity (issue 28 items 3, 9, 11): what the walk
accepts (links kept inside the task), what a checksum is made of, which names collide and
which are warned."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.suites import make_suite

from ray_bench.config.tasks import index_tasks, load_task, task_checksum, task_files, task_identity
from ray_bench.errors import MultipleInputErrors, TaskDirError, UserInputError


def _task(tmp_path: Path, name: str = "sum-list") -> Path:
    make_suite(tmp_path / "s", tasks=[name])
    return tmp_path / "s" / "tasks" / name


def test_a_link_inside_the_task_is_hashed_by_content(tmp_path: Path) -> None:
    task = _task(tmp_path)
    before = task_checksum(task)
    (task / "tests" / "again.sh").symlink_to(task / "tests" / "test.sh")
    linked = task_checksum(task)
    (task / "tests" / "again.sh").unlink()
    shutil.copy(task / "tests" / "test.sh", task / "tests" / "again.sh")
    assert linked != before and linked == task_checksum(task)  # a link inside reads as its file


def test_a_linked_directory_inside_the_task_is_listed_not_descended(tmp_path: Path) -> None:
    task = _task(tmp_path)
    (task / "more").symlink_to(task / "tests")
    entries = {f.rel: f for f in task_files(task)}
    assert entries["more"].link == "tests" and "more/test.sh" not in entries


def test_the_walk_refuses_before_reading(tmp_path: Path) -> None:
    task = _task(tmp_path)
    with (task / "huge.bin").open("wb") as handle:
        handle.truncate(600 << 20)  # sparse: only its size is known, and that is enough
    with pytest.raises(TaskDirError, match=r"huge\.bin takes the task over 512 MiB"):
        load_task(task)


def test_identity_folds_case_and_unicode_form() -> None:
    assert task_identity("HELLO-World") == task_identity("hello-world") == task_identity("\uff48ello-world")
    assert task_identity("hello-world") != task_identity("hello_world")


def test_twins_are_refused_naming_both(tmp_path: Path) -> None:
    task = _task(tmp_path, "hello-world")
    shutil.copytree(task, task.parent / "Hello-World")
    with pytest.raises(UserInputError) as refused:
        index_tasks([task.parent])
    assert "'Hello-World'" in str(refused.value) and "'hello-world'" in str(refused.value)


@pytest.mark.parametrize(("name", "said"), [("hello\u200bworld", "U+200B"), ("h\u0435llo", "non-ASCII")])
def test_invisible_and_confusable_names_are_warned(tmp_path: Path, name: str, said: str) -> None:
    task = _task(tmp_path, "hello-world")
    renamed = task.rename(task.parent / name)
    warnings = load_task(renamed).warnings
    assert any(said in w for w in warnings)
    assert all(name not in w for w in warnings)  # shown escaped, never as it looks


def test_a_key_named_task_is_refused_without_its_name(tmp_path: Path) -> None:
    key = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    task = _task(tmp_path, "hello-world").rename(tmp_path / "s" / "tasks" / key)
    for call in (lambda: load_task(task), lambda: index_tasks([task.parent])):
        with pytest.raises((TaskDirError, MultipleInputErrors)) as refused:
            call()
        assert key[4:] not in str(refused.value)


def test_a_task_named_directly_whose_name_is_not_utf8_is_refused_in_one_line(tmp_path: Path) -> None:
    """Issue 58: its id could be neither hashed into a cell id nor printed."""
    import os

    from ray_bench.cli.quickstart import example_dir

    task = tmp_path / os.fsdecode(b"caf\xff")
    shutil.copytree(example_dir() / "tasks" / "hello-world", task)
    with pytest.raises(TaskDirError, match=r"task directory caf\\xff has a name that is not valid UTF-8") as refused:
        load_task(task)
    refused.value.line().encode("utf-8")  # printable as it is
