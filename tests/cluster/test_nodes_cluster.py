"""Runs on a local multi-node Ray cluster whose nodes differ, as real clusters' nodes do:

- ``short``: a worker whose own disk reserve (``RAY_BENCH_HOST_RESERVE_DISK_MB``) is more than
  its disk has, so its resource supervisor halts it: it takes no more cells, the ledger and
  ``status`` say which node and why, and the run finishes on the others;
- ``bare``: a worker started without the account's route variable: its check before the
  fan-out fails, it gets no runners, ``status --json`` says why;
- the head, healthy, with the Ray dashboard (the Jobs API): an ``execute`` submitted with the
  real ``ray job submit`` finishes there with every row valid.

One cluster for the module (starting it costs ~20-40 s on two loaded cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.driver_process import BIN, DriverProcess, cli_env, run_cli
from support.multinode import MultiNode, start_cluster, stop_cluster, wait_for_nodes
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.ledger import Ledger
from ray_bench.ledger.store import AttemptRow, Event
from ray_bench.models.attempt import AttemptSummary
from ray_bench.sandboxes.supervisor import RESERVE_DISK_MB_ENV

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROUTE = "RB_NODES_KEY"
ROUTE_VALUE = "nodes-test-value-7f3a"
#: More MiB than any disk here has: the ``short`` node is under its reserve from the start.
HUGE_MB = str(1 << 40)


@pytest.fixture(scope="module")
def cluster() -> Iterator[MultiNode]:
    os.environ[ROUTE] = ROUTE_VALUE  # the head (and ``short``) get the route variable
    try:
        nodes = start_cluster(workers=0, dashboard=True)
    finally:
        os.environ.pop(ROUTE, None)
    try:
        nodes.add_worker("short", {ROUTE: ROUTE_VALUE, RESERVE_DISK_MB_ENV: HUGE_MB})
        nodes.add_worker("bare", {}, unset=(ROUTE,))
        wait_for_nodes(nodes, 3)
        yield nodes
    finally:
        stop_cluster(nodes.state)
        subprocess.run(["rm", "-rf", str(nodes.state)], check=False)


def _node_ids(cluster: MultiNode) -> dict[str, str]:
    """``head``/``short``/``bare`` -> Ray node id (told apart by their temp directories)."""
    out = {}
    for node in cluster.nodes():
        if not node["Alive"]:
            continue
        socket = str(node["RayletSocketName"])
        name = next((n for n in ("short", "bare") if f"/{n}/" in socket), "head")
        out[name] = str(node["NodeID"])
    return out


def _suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reps: int) -> tuple[Path, Path]:
    monkeypatch.setenv(ROUTE, ROUTE_VALUE)  # `plan` checks the route by name where it runs
    arm = {"command": 'sleep 1; sh "$SOLUTION_DIR/solve.sh"', "agent_dir": "agents", "expose_solution": True}
    return make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"], reps=reps, max_attempts=2,
        backends={"local": {"max_sandboxes": 6, "options": {"root": str(tmp_path / "sbx")}}},
        arms=[{"name": "baseline", "role": "baseline", **arm}, {"name": "mcp", "role": "variant", **arm}],
        accounts=[{"name": "acct-n", "route": {"env": {"DEMO_API_KEY": ROUTE}}, "limits": {"max_concurrent": 6}}])


def _ledger(root: Path) -> tuple[list[AttemptRow], dict[str, AttemptSummary], list[Event]]:
    with Ledger.reading(root) as ledger:
        return ledger.attempts(), dict(ledger.summaries()), ledger.events()


def test_short_and_unready_nodes_get_no_cells_and_the_run_finishes(
        tmp_path: Path, cluster: MultiNode, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _node_ids(cluster)
    assert set(ids) == {"head", "short", "bare"}
    suite, accounts = _suite(tmp_path, monkeypatch, reps=2)
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="mixed")
    root = planned.run_root
    driver = DriverProcess(root / "launch-plan.json", planned.identity, tmp_path / "logs",
                           env=cli_env({**cluster.env, ROUTE: ROUTE_VALUE}),
                           extra_args=("--address", cluster.address, "--no-metrics"))
    try:
        driver.start()
        rc = driver.wait(timeout=600)
        assert rc == 0, driver.stderr[-3000:]
    finally:
        driver.reap()

    attempts, summaries, events = _ledger(root)
    assert len(attempts) == 12 and all(a.valid for a in attempts)
    # the node check before the fan-out: ``bare`` failed (by name, no value), the others passed
    checks = {n["node_id"]: n for e in events if e.kind == "node_check"
              for n in e.data["nodes"]}
    assert checks[ids["bare"]]["problems"] == [f"account acct-n: env var {ROUTE} is not set on this node"]
    assert checks[ids["head"]]["ok"] and checks[ids["short"]]["ok"]
    # ``short`` halted on its own reserve, once, and said why
    halts = [e for e in events if e.kind == "node_halt"]
    assert [h.data["node"] for h in halts] == [ids["short"]]
    assert "free disk" in halts[0].data["reason"] and HUGE_MB in halts[0].data["reason"]
    halted_at = halts[0].ts
    where = {a.attempt_id: summaries[a.attempt_id].ray_node for a in attempts}
    assert ids["bare"] not in where.values()
    assert all(a.started_at <= halted_at for a in attempts
               if where[a.attempt_id] == ids["short"])
    assert list(where.values()).count(ids["head"]) >= 1
    assert not any(e.kind == "stop" for e in events)
    assert not (root / "resource-halt.json").exists()

    status = run_cli("status", str(root), "--json", env=cli_env())
    assert status.returncode == 0, status.stderr
    nodes = {n["node_id"]: n for n in json.loads(status.stdout)["nodes"]}
    assert nodes[ids["bare"]]["ok"] is False and ROUTE in nodes[ids["bare"]]["problems"][0]
    assert "free disk" in nodes[ids["short"]]["halted"]
    assert "halted" not in nodes[ids["head"]]
    assert ROUTE_VALUE not in status.stdout + driver.stderr + driver.stdout


def test_ray_job_submit_of_execute(tmp_path: Path, cluster: MultiNode, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cluster.dashboard is not None
    suite, accounts = _suite(tmp_path, monkeypatch, reps=1)
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="job")
    root = planned.run_root
    job_id = f"rb-job-{os.getpid()}-{int(time.time())}"
    ray_bin = str(Path(sys.executable).parent / "ray")
    # The entrypoint runs on the head, with the head's environment (it has the route).
    entrypoint = ["env", f"RAY_BENCH_STATE_ROOT={tmp_path / 'state'}", str(BIN), "execute", "--plan",
                  str(root / "launch-plan.json"), "--confirm", planned.identity, "--address", "auto",
                  "--no-metrics"]
    env = cli_env(cluster.env)
    deadline = time.monotonic() + 180
    while True:  # the head's agent registers with the dashboard some seconds after the cluster is up
        submitted = subprocess.run(
            [ray_bin, "job", "submit", "--address", cluster.dashboard, "--submission-id", job_id, "--", *entrypoint],
            env=env, capture_output=True, text=True, timeout=900, check=False)
        if "No available agent" not in submitted.stderr or time.monotonic() > deadline:
            break
        time.sleep(3)
    status = subprocess.run([ray_bin, "job", "status", "--address", cluster.dashboard, job_id],
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert submitted.returncode == 0, submitted.stdout[-5000:] + submitted.stderr[-2000:]
    assert f"Job '{job_id}' succeeded" in status.stdout, status.stdout + status.stderr
    attempts, _, events = _ledger(root)
    assert len(attempts) == 6 and all(a.valid for a in attempts)
    finished = [e for e in events if e.kind == "run_finished"]
    assert finished and finished[-1].data["exit_code"] == 0
    assert ROUTE_VALUE not in submitted.stdout + submitted.stderr
