"""What an agent or verifier writes is read within bounds: a huge or deeply nested
reward.json or usage.json is unparseable, not an out-of-memory runner."""

from __future__ import annotations

from pathlib import Path

from ray_bench.cells.runner import AGENT_JSON_BYTES, read_reward


def test_a_huge_reward_json_is_not_read(tmp_path: Path) -> None:
    with (tmp_path / "reward.json").open("wb") as handle:
        handle.truncate(AGENT_JSON_BYTES * 50)  # sparse
    assert read_reward(tmp_path) == (None, "reward.json unreadable")


def test_a_deeply_nested_reward_json_is_unparseable(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text("[" * 200_000 + "]" * 200_000)
    assert read_reward(tmp_path) == (None, "reward.json unreadable")


def test_a_huge_reward_txt_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("1" * 100_000)
    assert read_reward(tmp_path) == (None, "reward.txt unreadable")


def test_an_ordinary_reward_is_read(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text('{"reward": 0.5}')
    assert read_reward(tmp_path) == (0.5, "reward.json")
