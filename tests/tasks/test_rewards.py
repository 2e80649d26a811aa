"""The one reader of a verifier's reward files (Harbor 0.26's rules, ``harbor/verifier/verifier.py``)
and the row's headline; ``test_rewards_against_harbor.py`` runs the same table through Harbor's
own parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_bench.tasks.rewards import headline, read_rewards

#: (files written, the rewards read, where from). ``None`` rewards: no valid reward.
CASES: dict[str, tuple[dict[str, str], dict[str, float] | None, str | None]] = {
    "txt": ({"reward.txt": "1\n"}, {"reward": 1.0}, "reward.txt"),
    "txt-float": ({"reward.txt": " 0.25 "}, {"reward": 0.25}, "reward.txt"),
    "json": ({"reward.json": '{"reward": 0.5}'}, {"reward": 0.5}, "reward.json"),
    # Harbor's cookbook multi-reward task: every key is kept
    "json-multi-key": ({"reward.json": '{"correctness": 0, "performance": 0}'},
                       {"correctness": 0.0, "performance": 0.0}, "reward.json"),
    "json-bool": ({"reward.json": '{"passed": true}'}, {"passed": 1.0}, "reward.json"),
    "json-wins-over-txt": ({"reward.txt": "0", "reward.json": '{"reward": 1}'}, {"reward": 1.0}, "reward.json"),
    "json-non-numeric-value": ({"reward.json": '{"reward": 0.5, "note": "x"}'}, None,
                               "reward.json unreadable: 'note' is not a number"),
    "json-bare-number": ({"reward.json": "0.5"}, None, "reward.json unreadable: not a JSON object of rewards"),
    "json-empty-object": ({"reward.json": "{}"}, None, "reward.json unreadable: no keys"),
    "json-nan": ({"reward.json": '{"reward": NaN}'}, None, "reward.json unreadable: 'reward' is not finite"),
    "json-overflow": ({"reward.json": '{"reward": 1e309}'}, None, "reward.json unreadable: 'reward' is not finite"),
    "json-empty-file": ({"reward.json": ""}, None, "reward.json unreadable: empty"),
    "json-too-deep": ({"reward.json": "[" * 50_000}, None, "reward.json unreadable: not JSON"),
    "json-oversized": ({"reward.json": '{"reward": 1, "pad": "' + "x" * (1 << 20) + '"}'}, None,
                       "reward.json unreadable: larger than 65536 bytes"),
    "txt-not-a-number": ({"reward.txt": "one"}, None, "reward.txt unreadable: not a number"),
    "txt-inf": ({"reward.txt": "inf"}, None, "reward.txt unreadable: not finite"),
    "txt-empty": ({"reward.txt": ""}, None, "reward.txt unreadable: empty"),
    "txt-oversized": ({"reward.txt": "1" + " " * (1 << 20)}, None, "reward.txt unreadable: larger than 65536 bytes"),
    "none": ({}, None, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reward_files_are_read_as_harbor_reads_them(tmp_path: Path, case: str) -> None:
    files, rewards, source = CASES[case]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert read_rewards(tmp_path) == (rewards, source)


def test_a_sparse_huge_reward_json_is_not_read(tmp_path: Path) -> None:
    with (tmp_path / "reward.json").open("wb") as handle:
        handle.truncate(1 << 30)
    assert read_rewards(tmp_path) == (None, "reward.json unreadable: larger than 65536 bytes")


@pytest.mark.parametrize(("rewards", "expected"), [
    (None, None), ({}, None), ({"reward": 0.5}, 0.5), ({"score": 0.25}, 0.25),
    ({"reward": 0.0, "aux": 1.0}, 0.0),
    # no ``reward`` key: the first key by name, as Harbor's hub shows a trial's one number
    ({"performance": 1.0, "correctness": 0.0}, 0.0),
])
def test_the_headline_is_reward_else_the_first_key_by_name(rewards: dict[str, float] | None,
                                                           expected: float | None) -> None:
    assert headline(rewards) == expected
