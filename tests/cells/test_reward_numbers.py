"""A reward that is not a finite number is no reward (issue 58): ``nan``, ``inf`` or ``1e400``
in reward.txt and ``NaN`` in reward.json were read as valid rows (``inf`` counted as solved).
The one reader (:func:`ray_bench.tasks.rewards.read_rewards`) is what every path scores with."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_bench.tasks.rewards import headline, read_rewards


@pytest.mark.parametrize(("name", "content"), [
    ("reward.txt", "nan\n"), ("reward.txt", "inf"), ("reward.txt", "1e400"), ("reward.txt", "-Infinity"),
    ("reward.json", '{"reward": NaN}'), ("reward.json", '{"reward": Infinity}'), ("reward.json", '{"reward": 1e400}'),
    ("reward.json", '{"reward": 1' + "0" * 400 + "}"),
])
def test_a_reward_that_is_not_finite_is_refused(tmp_path: Path, name: str, content: str) -> None:
    (tmp_path / name).write_text(content)
    rewards, source = read_rewards(tmp_path)
    assert rewards is None and headline(rewards) is None
    assert source is not None and source.startswith(f"{name} unreadable: ") and "finite" in source, source


def test_a_bare_infinity_in_reward_json_is_no_reward(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text("Infinity")
    assert read_rewards(tmp_path)[0] is None


def test_a_finite_reward_still_reads(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("0.25\n")
    assert read_rewards(tmp_path) == ({"reward": 0.25}, "reward.txt")


def test_one_key_not_finite_refuses_the_whole_map(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text('{"reward": 1, "style": NaN}')
    assert read_rewards(tmp_path)[0] is None
