"""A reward that is not a finite number is no reward (issue 58): ``nan``, ``inf`` or ``1e400``
in reward.txt and ``NaN`` in reward.json were read as valid rows (``inf`` counted as solved).
Both readers are checked (they are being merged into one)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ray_bench.cells.phases import read_rewards
from ray_bench.cells.runner import read_reward


def _headline(verifier_dir: Path) -> tuple[object, str | None]:
    rewards, source = read_rewards(verifier_dir)
    return (None if rewards is None else rewards.get("reward")), source


READERS: list[Callable[[Path], tuple[object, str | None]]] = [read_reward, _headline]


@pytest.mark.parametrize("reader", READERS, ids=["runner", "phases"])
@pytest.mark.parametrize(("name", "content"), [
    ("reward.txt", "nan\n"), ("reward.txt", "inf"), ("reward.txt", "1e400"), ("reward.txt", "-Infinity"),
    ("reward.json", '{"reward": NaN}'), ("reward.json", '{"reward": Infinity}'), ("reward.json", '{"reward": 1e400}'),
    ("reward.json", "Infinity"),
])
def test_a_reward_that_is_not_finite_is_refused(tmp_path: Path, reader: Callable[[Path], tuple[object, str | None]],
                                                name: str, content: str) -> None:
    (tmp_path / name).write_text(content)
    value, source = reader(tmp_path)
    assert value is None
    assert source == f"{name} refused: " + source.split(": ", 1)[1] and "finite" in source


@pytest.mark.parametrize("reader", READERS, ids=["runner", "phases"])
def test_a_finite_reward_still_reads(tmp_path: Path, reader: Callable[[Path], tuple[object, str | None]]) -> None:
    (tmp_path / "reward.txt").write_text("0.25\n")
    assert reader(tmp_path) == (0.25, "reward.txt")


def test_one_key_not_finite_refuses_the_whole_map(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text('{"reward": 1, "style": NaN}')
    assert read_rewards(tmp_path)[0] is None
