"""Harbor tasks end to end with the oracle agent (``solution/solve.sh``), through the driver and
runner in this process (no Ray: the subject is the tasks' features), on the docker backend (real
dockerd) and on daytona (the local fixture): a CodeScaleBench selection spanning two benchmark
directories, holding a multi-step task, a task whose memory limit is exceeded, a healthcheck with
artifacts and a collect hook, verifier.env with a host template, and (docker only: daytona refuses
it at plan time) users and per-phase networks."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.ray_local import set_test_routes
from support.runs import ledger_rows
from support.runs import plan_and_run_here as plan_and_run

from ray_bench.errors import TaskDirError

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).parent / "e2e" / "benchmarks"
#: A Daytona credential route for the in-process run (the fixture accepts only this value).
KEY_ENV = "RAY_BENCH_TEST_TASKS_DAYTONA_KEY"
os.environ.setdefault(KEY_ENV, "fake-daytona-tasks-key")
set_test_routes()  # the routes the accounts name
ALL = {
    "e2e-multi-step": "csb_e2e_alpha", "e2e-memory-limit": "csb_e2e_alpha",
    "e2e-healthcheck-artifacts": "csb_e2e_beta", "e2e-verifier-env": "csb_e2e_beta",
    "e2e-users-network": "csb_e2e_beta",
}


def _write(tmp: Path, backend: str, options: dict[str, Any], tasks: list[str]) -> tuple[Path, Path, Path]:
    suite = {"name": "e2e", "task_roots": [str(ROOT)], "backend": backend, "preflight_cells": 0,
             "max_attempts": 1,
             "backends": {backend: {"max_sandboxes": 3, "options": options}},
             "arms": [{"name": "oracle", "role": "baseline", "command": 'sh "$SOLUTION_DIR/solve.sh"',
                       "expose_solution": True}]}
    route = {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}
    accounts = {"accounts": [{"name": "a", "route": route, "limits": {"max_concurrent": 3}}]}
    selection = {"metadata": {"purpose": "oracle e2e", "task_count": len(tasks)},
                 "tasks": [{"task_id": t.upper() if t == "e2e-multi-step" else t, "benchmark": ALL[t],
                            "task_dir": f"benchmarks/{ALL[t]}/{t}"} for t in tasks]}
    tmp.mkdir(parents=True, exist_ok=True)
    for name, doc in (("suite.yaml", suite), ("accounts.yaml", accounts)):
        (tmp / name).write_text(yaml.safe_dump(doc))
    (tmp / "selection.json").write_text(json.dumps(selection))
    return tmp / "suite.yaml", tmp / "accounts.yaml", tmp / "selection.json"


def _summaries(root: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for result in (root / "attempts").glob("*/result.json"):
        data = json.loads(result.read_text())
        out[data["task"]] = {**data, "_dir": result.parent}
    return out


def _why(run: dict[str, Any]) -> dict[str, Any]:
    """What an attempt's summary says of its failure. (Its verifier's facts alone said ``None``
    of an attempt that failed before its verifier ran: an exec report lost under load.)"""
    return {k: run.get(k) for k in ("error", "reward", "agent", "verifier", "healthcheck")}


def _check(root: Path, tasks: list[str]) -> dict[str, dict[str, Any]]:
    attempts, rows = ledger_rows(root)
    by_task = {a.task: a for a in attempts}
    assert set(by_task) == set(tasks)
    runs = _summaries(root)

    steps = runs["e2e-multi-step"]
    assert by_task["e2e-multi-step"].valid and by_task["e2e-multi-step"].reward == 1.0, _why(steps)
    assert [s["name"] for s in steps["steps"]] == ["first", "second"]
    assert [s["reward"] for s in steps["steps"]] == [1.0, 1.0]
    assert steps["steps"][1]["setup_exit"] == 0 and steps["steps"][1]["healthcheck"]["healthy"]
    assert (steps["_dir"] / "steps" / "second" / "verifier" / "reward.txt").is_file()

    oom = by_task["e2e-memory-limit"]
    assert not oom.valid and oom.failure_class == "capacity", _why(runs["e2e-memory-limit"])
    assert all(r.task != "e2e-memory-limit" for r in rows.values())  # not a row

    art = runs["e2e-healthcheck-artifacts"]
    assert by_task["e2e-healthcheck-artifacts"].valid and by_task["e2e-healthcheck-artifacts"].reward == 1.0, _why(art)
    assert art["healthcheck"]["healthy"] is True
    assert art["collect"][0]["exit_code"] == 0
    outputs = art["_dir"] / "logs" / "artifacts" / "outputs"
    assert (outputs / "report.md").read_text() == "report\n"
    assert not (outputs / "cache.tmp").exists()  # excluded
    assert (outputs / "listing.txt").is_file()  # written by the collect hook before the copy
    assert (art["_dir"] / "logs" / "artifacts" / "notes.txt").is_file()

    env = runs["e2e-verifier-env"]
    assert by_task["e2e-verifier-env"].valid and by_task["e2e-verifier-env"].reward == 1.0, _why(env)
    return runs


@pytest.fixture(scope="module")
def daytona_server(docker_client: Any, base_image: str) -> Iterator[Any]:
    pytest.importorskip("daytona", reason="the daytona extra is not installed")
    from support.daytona_server import DaytonaServer

    server = DaytonaServer(docker_client=docker_client, default_image=base_image,
                           api_key=os.environ[KEY_ENV]).start()
    yield server
    server.stop()


def test_oracle_on_docker(tmp_path: Path, base_image: str) -> None:
    tasks = list(ALL)
    suite, accounts, selection = _write(tmp_path / "s", "docker", {}, tasks)
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs", run_id="tasks-docker", selection=selection)
    runs = _check(root, tasks)
    users = runs["e2e-users-network"]
    assert users["reward"] == 1.0, users["verifier"]
    # the workdir was unset: the agent ran in the image's WORKDIR (the busybox base sets none)
    assert (runs["e2e-verifier-env"]["_dir"] / "logs" / "agent" / "pwd.txt").read_text().strip() == "/"
    assert outcome.exit_code == 1  # the memory-limit task failed, as it should


def test_oracle_on_daytona(tmp_path: Path, base_image: str, daytona_server: Any) -> None:
    options = {"api_url": daytona_server.api_url, "api_key_env": KEY_ENV}
    tasks = [t for t in ALL if t != "e2e-users-network"]
    suite, accounts, selection = _write(tmp_path / "s", "daytona", options, tasks)
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs", run_id="tasks-daytona", selection=selection)
    _check(root, tasks)
    assert outcome.exit_code == 1
    assert daytona_server.containers() == []


def test_daytona_refuses_users_not_phase_networks_at_plan(tmp_path: Path) -> None:
    from ray_bench.api import plan_run

    suite, accounts, selection = _write(tmp_path / "s", "daytona", {"api_url": "http://127.0.0.1:9"},
                                        ["e2e-users-network"])
    with pytest.raises(TaskDirError) as info:  # one reason: its phases' networks change (network-settings)
        plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="x", selection=selection)
    assert "task e2e-users-network: agent.user = 65534; backend daytona cannot run" in str(info.value)
    assert "phases differ" not in str(info.value)
    assert not (tmp_path / "runs").exists()
