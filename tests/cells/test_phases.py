"""Reading the verifier's reward files (Harbor: reward.txt or reward.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_bench.cells.phases import read_rewards


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("reward.txt", "1\n", ({"reward": 1.0}, "reward.txt")),
    ("reward.json", '{"reward": 0.5, "note": "x"}', ({"reward": 0.5}, "reward.json")),
    ("reward.txt", "one", (None, "reward.txt unreadable")),
    ("reward.json", "[" * 50_000, (None, "reward.json unreadable")),
    ("reward.txt", "1" + " " * (1 << 20), (None, "reward.txt unreadable")),
    ("reward.json", '{"reward": 1, "pad": "' + "x" * (1 << 20) + '"}', (None, "reward.json unreadable")),
], ids=["txt", "json", "txt-not-a-number", "json-too-deep", "txt-oversized", "json-oversized"])
def test_reward_files_are_read_within_bounds(tmp_path: Path, name: str, content: str,
                                             expected: tuple[object, str]) -> None:
    (tmp_path / name).write_text(content)
    assert read_rewards(tmp_path) == expected
