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


def test_an_oversized_contract_file_is_not_kept_and_its_usage_is_refused(tmp_path: Path) -> None:
    """Issue 58: a 50 MB usage.json was copied whole into the run root (51 MB an attempt) and
    read as known usage of $0. Now it is replaced by a note before anything reads it, the
    attempt's usage is refused (unknown cost, invalid), and a good one is kept as it was."""
    from ray_bench.cells.contract_files import bound_contract_files
    from ray_bench.cells.runner import _open_model, _read_json_obj
    from ray_bench.models.attempt import Usage

    logs = tmp_path / "logs"
    (logs / "agent").mkdir(parents=True)
    (logs / "verifier").mkdir()
    big = '{"output_tokens": 5, "cost_usd": 0.01, "pad": "' + "x" * (50 << 20) + '"}'
    (logs / "agent" / "usage.json").write_text(big)
    (logs / "agent" / "error.json").write_text('{"type": "agent", "message": "m"}')
    (logs / "verifier" / "reward.txt").write_text("1" + " " * (1 << 20))
    freed = bound_contract_files(logs)
    assert freed > 50 << 20
    assert (logs / "agent" / "usage.json").stat().st_size < 200
    assert (logs / "agent" / "error.json").read_text() == '{"type": "agent", "message": "m"}'
    assert read_reward(logs / "verifier") == (None, "reward.txt unreadable")
    usage = _open_model(Usage, _read_json_obj(logs / "agent" / "usage.json"))
    assert usage is not None and not usage.known and usage.invalid is not None
    assert usage.invalid.startswith("unreadable (larger than 1048576 bytes (")
