"""A worker node's raylet killed while it holds no attempt (issue 29 item 9, node half): a node
event, not residue. The run completes with exit 0, the end-of-run audit counts what the
backends report (0), and the ledger records the node as lost while idle."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.driver_process import DriverProcess, cli_env, ledger_query, wait_for
from support.multinode import MultiNode
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.ledger import Ledger

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _alive(multinode: MultiNode, node: dict[str, object]) -> bool:
    return any(n["NodeID"] == node["NodeID"] and n["Alive"] for n in multinode.nodes())


def test_an_idle_worker_lost_mid_run_keeps_exit_0_and_a_clean_audit(tmp_path: Path, multinode: MultiNode) -> None:
    nodes = [n for n in multinode.nodes() if n["Alive"]]
    # Attempts go to the least loaded runner, the first listed on ties: with two cells at a time
    # they all run on the first node listed, so a later worker holds none (checked below).
    victim = next(n for n in nodes[1:] if "docker" in str(n["Resources"]))
    # The agents wait for ``release`` where they slept 20 s (preflight, then two rounds of two:
    # 60 s of sleeping). It is touched once Ray lists the victim as dead: the kill falls in the
    # first attempt, and the run outlasts the node's death as with the sleeps. (Released at the
    # kill, the victim's runner still answered the end-of-run audit and no loss was recorded:
    # a runner outlives its raylet for a while.)
    release = tmp_path / "release"
    agent = f'until [ -e {release} ]; do sleep 0.05; done; sh "$SOLUTION_DIR/solve.sh"'
    arm = {"command": agent, "agent_dir": "agents", "expose_solution": True}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world"], reps=2, max_attempts=2, preflight_cells=1,
        backends={"local": {"max_sandboxes": 2, "options": {"root": str(tmp_path / "sbx")}}},
        arms=[{"name": "baseline", "role": "baseline", **arm}, {"name": "mcp", "role": "variant", **arm}])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="idle-loss")
    root = planned.run_root
    driver = DriverProcess(root / "launch-plan.json", planned.identity, tmp_path / "logs",
                           env=cli_env(multinode.env), extra_args=("--address", multinode.address))
    try:
        driver.start()
        wait_for(lambda: bool(ledger_query(root, "SELECT 1 FROM attempts")), 240, "a first attempt", alive=driver)
        multinode.kill_raylet(victim)
        wait_for(lambda: not _alive(multinode, victim), 240, "Ray to list the victim as dead", interval=0.5,
                 alive=driver)
        release.touch()
        rc = driver.wait(timeout=400)
        assert rc == 0, driver.stderr[-3000:]
    finally:
        driver.reap()

    ledger = Ledger.open_readonly(root)
    try:
        attempts = ledger.attempts()
        summaries = dict(ledger.summaries())
        audits = [e.data for e in ledger.events("audit")]
        lost = [e.data for e in ledger.events("node_lost")]
        stops = [e.data for e in ledger.events("stop")]
    finally:
        ledger.close()
    assert len(attempts) == 4 and all(a.valid for a in attempts)  # nothing was lost with the node
    assert all(summaries[a.attempt_id].ray_node != victim["NodeID"] for a in attempts)  # it was idle
    assert audits == [{"removed": 0, "residue": 0}]
    assert lost == [{"node": victim["NodeID"], "while": "idle"}]
    assert stops == []
    # What the operator reads: the node event in one line, not Ray's error for each runner the
    # node took with it (7 lines each, "cleanup through a runner failed: The actor died ...").
    assert "node lost while idle" in driver.stderr
    assert "cleanup through" not in driver.stderr and "actor died" not in driver.stderr.lower(), driver.stderr
    assert [n for n in multinode.nodes() if n["NodeID"] == victim["NodeID"] and not n["Alive"]]
