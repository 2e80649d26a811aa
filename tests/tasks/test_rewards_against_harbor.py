"""Every reward-file case of ``test_rewards.py`` through Harbor 0.26's own verifier parser and
``VerifierResult``: ray-bench reads a reward exactly when Harbor's trial would have a valid one,
and the same keys and values. Runs in .venv-harbor (Python 3.12)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from test_rewards import CASES

from ray_bench.tasks.rewards import read_rewards

pytestmark = pytest.mark.harbor
#: Harbor reads a reward file whole; ray-bench reads at most 64 KiB of what a verifier wrote (a
#: reward.txt of "1" and a MiB of blanks is 1.0 to Harbor, no reward here): the one difference.
BOUNDED = {"txt-oversized"}


def _harbor_rewards(verifier_dir: Path) -> dict[str, float] | None:
    """What ``Verifier.verify`` ends with (its reward-file branch), then ``TrialResult.reward_valid``'s
    test of the rewards; any exception is a trial without a valid reward."""
    from harbor.models.verifier.result import VerifierResult
    from harbor.verifier.verifier import Verifier

    paths = SimpleNamespace(reward_json_path=verifier_dir / "reward.json",
                            reward_text_path=verifier_dir / "reward.txt")
    me = SimpleNamespace(trial_paths=paths)
    try:
        if paths.reward_json_path.exists():
            raw = Verifier._parse_reward_json(me)  # type: ignore[arg-type]
        elif paths.reward_text_path.exists():
            raw = Verifier._parse_reward_text(me)  # type: ignore[arg-type]
        else:
            return None
        result = VerifierResult(rewards=raw)
    except Exception:  # Harbor's trial records whatever its verifier raised: no valid reward
        return None
    return {k: float(v) for k, v in result.rewards.items()} if result.rewards else None


@pytest.mark.parametrize("case", list(CASES))
def test_ray_bench_reads_what_harbor_reads(tmp_path: Path, case: str) -> None:
    files, _, _ = CASES[case]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    if case in BOUNDED:
        assert read_rewards(tmp_path)[0] is None and _harbor_rewards(tmp_path) is not None
    else:
        assert read_rewards(tmp_path)[0] == _harbor_rewards(tmp_path)
