"""A launch round's drift check (issue #30 step 7): every input checked, each task once."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ray_bench.config.tasks import task_checksum
from ray_bench.models.plan import InputFile
from ray_bench.plan.drift import DriftGuard


def _inputs(tmp_path: Path) -> list[InputFile]:
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: s\n")
    items = [InputFile(kind="suite", name="suite", path=str(suite),
                       sha256=hashlib.sha256(suite.read_bytes()).hexdigest())]
    for name in ("a", "b"):
        task = tmp_path / name
        (task / "tests").mkdir(parents=True)
        (task / "tests" / "test.sh").write_text("echo 1\n")
        items.append(InputFile(kind="task", name=name, path=str(task), sha256=task_checksum(task)))
    return items


def test_a_round_walks_each_task_once_and_names_the_first_drifted_cell(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    guard = DriftGuard(_inputs(tmp_path))
    walks: list[Path] = []
    real = os.walk
    monkeypatch.setattr(os, "walk", lambda top, *a, **k: (walks.append(Path(top)), real(top, *a, **k))[1])

    assert guard.check_launch(["a", "a", "b", "a"]) is None
    assert sorted(p.name for p in walks) == ["a", "b"]  # each hashed as walked: one walk a task
    assert guard.check_launch([]) is None

    (tmp_path / "b" / "tests" / "test.sh").write_text("echo 0\n")
    found = guard.check_launch(["a", "b", "b"])
    assert found is not None and found[0] == 1 and found[1].what == "task b", found

    (tmp_path / "suite.yaml").write_text("name: changed\n")
    found = guard.check_launch(["a"])
    assert found is not None and found[0] == 0 and found[1].kind == "suite", found
