"""``harbor run -a oracle`` on a directory of tasks, on ray-bench docker containers
(:class:`support.harbor_docker_env.RayBenchDockerEnvironment`: Harbor's own docker environment
needs ``docker compose``), and the reward of each trial: what ray-bench's runs are compared with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_TESTS = Path(__file__).parents[1]


def harbor_oracle_rewards(tasks: Path, jobs: Path, *, concurrency: int = 2) -> dict[str, dict[str, float]]:
    """Task name -> every reward key Harbor's verifier gave (asserts no trial raised)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_TESTS), str(_TESTS.parent)])}
    harbor = Path(sys.executable).parent / "harbor"
    done = subprocess.run([str(harbor), "run", "-p", str(tasks), "-a", "oracle", "-n", str(concurrency),
                           "-o", str(jobs), "--env", "support.harbor_docker_env:RayBenchDockerEnvironment"],
                          check=False, env=env, cwd=jobs.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rewards: dict[str, dict[str, float]] = {}
    for result in jobs.glob("*/*/result.json"):
        trial = json.loads(result.read_text())
        assert trial.get("exception_info") is None, trial["exception_info"]
        got = (trial.get("verifier_result") or {}).get("rewards") or {}
        rewards[trial["task_name"]] = {k: float(v) for k, v in got.items()}
    return rewards
