"""A separate verifier (``environment_mode = "separate"``): ``harbor run -a oracle`` and ray-bench's
``agent: harbor`` oracle arm on docker give each task the same reward, a solution that leaves an
artifact out included, and leave no container behind."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.harbor_run import harbor_oracle_rewards
from support.ray_local import set_test_routes
from support.runs import ledger_rows
from support.runs import plan_and_run_here as plan_and_run
from support.separate_verifier import SOLVE, write_separate_verifier_task

from ray_bench.sandboxes.base import LABEL_RUN

pytestmark = [pytest.mark.harbor, pytest.mark.docker, pytest.mark.slow]


def test_harbor_and_ray_bench_agree_on_a_separate_verifier(tmp_path: Path, docker_client: Any,
                                                          base_image: str) -> None:
    set_test_routes()
    tasks = tmp_path / "tasks"
    # No exclude pattern, and so no file for one to leave out: busybox's tar has no --exclude
    write_separate_verifier_task(tasks / "sep", base_image, exclude=False)
    solve = SOLVE.replace("echo drop > /app/notes/drop.tmp\n", "")
    (tasks / "sep" / "solution" / "solve.sh").write_text(solve)
    shutil.copytree(tasks / "sep", tasks / "sep-no-notes")
    no_notes = solve.replace("echo keep > /app/notes/keep.txt\n", "")
    (tasks / "sep-no-notes" / "solution" / "solve.sh").write_text(no_notes)
    for name in ("sep", "sep-no-notes"):  # Harbor names the trials after [task] name
        toml = tasks / name / "task.toml"
        toml.write_text(toml.read_text().replace('"ray-bench/separate-verifier"', f'"ray-bench/{name}"'))

    harbor = harbor_oracle_rewards(tasks, tmp_path / "jobs")
    assert harbor == {"ray-bench/sep": {"reward": 1.0}, "ray-bench/sep-no-notes": {"reward": 0.0}}

    suite = {"name": "sep", "tasks_dir": str(tasks), "backend": "docker", "preflight_cells": 0, "max_attempts": 1,
             "backends": {"docker": {"max_sandboxes": 2}},
             "arms": [{"name": "oracle", "role": "baseline", "agent": "harbor", "harbor_agent": "oracle"}]}
    accounts = {"accounts": [{"name": "a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                              "limits": {"max_concurrent": 2}}]}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    (tmp_path / "accounts.yaml").write_text(yaml.safe_dump(accounts))
    _, root = plan_and_run(tmp_path / "suite.yaml", tmp_path / "accounts.yaml", tmp_path / "runs",
                           run_id="sep-agree")
    attempts, rows = ledger_rows(root)
    ours = {f"ray-bench/{r.task}": {"reward": r.reward} for r in rows.values() if r.valid}
    assert ours == harbor, [(a.task, a.failure_class) for a in attempts]
    from support.harbor_docker_env import RUN_LABEL  # imports Harbor

    for run in ("sep-agree", RUN_LABEL):
        assert docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run}"}) == []
