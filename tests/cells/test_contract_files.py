"""An agent's or verifier's contract file over its reader's bound is not kept in the run root
(issue 58: a 50 MB usage.json was copied whole, 51 MB an attempt)."""

from __future__ import annotations

from pathlib import Path

from ray_bench.cells.contract_files import bound_contract_files
from ray_bench.cells.runner import _open_model, _read_json_obj
from ray_bench.models.attempt import Usage
from ray_bench.tasks.rewards import MAX_REWARD_BYTES, read_rewards


def test_an_oversized_contract_file_is_not_kept_and_its_usage_is_refused(tmp_path: Path) -> None:
    """It is replaced by a note before anything reads it, the attempt's usage is refused
    (unknown cost, invalid), and a good one is kept as it was."""
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
    assert (logs / "verifier" / "reward.txt").stat().st_size <= MAX_REWARD_BYTES
    assert (logs / "agent" / "error.json").read_text() == '{"type": "agent", "message": "m"}'
    rewards, source = read_rewards(logs / "verifier")
    assert rewards is None and source is not None and source.startswith("reward.txt unreadable"), source
    usage = _open_model(Usage, _read_json_obj(logs / "agent" / "usage.json"))
    assert usage is not None and not usage.known and usage.invalid is not None
    assert usage.invalid.startswith("unreadable (larger than 1048576 bytes (")
