"""Every node checked before the fan-out: credential routes by name and the backends, on the
node itself; a node that fails gets no cells and ``status`` says which and why."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run, run_status
from ray_bench.cells.nodes import CheckInputs, NodeCheck, problems_here, summary_line
from ray_bench.onray.nodes import check_nodes
from ray_bench.plan.store import confirm_plan


def test_problems_name_the_missing_route_and_the_unreachable_backend(tmp_path: Path) -> None:
    inputs = CheckInputs(
        routes=(("acct-a", {"API_KEY": "RB_NODE_KEY_A"}, None),
                ("acct-b", {}, str(tmp_path / "no-such-home"))),
        backends=(("local", {}), ("docker", {"base_url": "unix:///nonexistent/docker.sock"})),
    )
    problems = problems_here(inputs, environ={"RB_NODE_KEY_A": "a-secret-value"})
    assert problems[0] == f"account acct-b: home directory {tmp_path / 'no-such-home'} does not exist on this node"
    assert problems[1].startswith("backend docker: ")
    assert len(problems) == 2
    assert not any("a-secret-value" in p for p in problems)
    assert problems_here(inputs, environ={})[0] == "account acct-a: env var RB_NODE_KEY_A is not set on this node"
    line = summary_line([NodeCheck("n1" * 8, "10.0.0.1"), NodeCheck("n2" * 8, "10.0.0.2", ("x is not set",))])
    assert line == "1 of 2 nodes passed their check; node 10.0.0.2 (n2n2n2n2): x is not set"


@pytest.mark.ray
def test_a_run_with_no_node_holding_a_route_stops_before_any_cell(tmp_path: Path) -> None:
    import ray
    from support.ray_local import ensure_ray
    from support.runs import execute

    ensure_ray()
    accounts = [{"name": "acct-x", "route": {"env": {"DEMO_API_KEY": "RB_NODE_CHECK_ABSENT"}},
                 "limits": {"max_concurrent": 2}}]
    suite, accounts_file = make_suite(tmp_path / "s", tasks=["hello-world"], accounts=accounts)
    # `plan` checks routes by name where it runs: give it the name, the Ray node has not got it.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RB_NODE_CHECK_ABSENT", "x")
        planned = plan_run(suite=suite, accounts=accounts_file, runs_dir=tmp_path / "runs", run_id="nc")
    plan, _ = confirm_plan(planned.run_root / "launch-plan.json", planned.identity)
    checks = check_nodes(CheckInputs.of(plan), [n for n in ray.nodes() if n["Alive"]])
    assert checks and not any(c.ok for c in checks)
    outcome = execute(planned.run_root, planned.identity, node_checks=checks)
    assert (outcome.exit_code, outcome.stopped, outcome.attempts_run) == (1, "nodes", 0)
    assert "RB_NODE_CHECK_ABSENT is not set on this node" in outcome.detail
    status = run_status(planned.run_root)
    assert status["nodes"][0]["ok"] is False
    assert status["nodes"][0]["problems"] == ["account acct-x: env var RB_NODE_CHECK_ABSENT is not set on this node"]


@pytest.mark.ray
def test_the_check_run_by_each_nodes_supervisor_is_the_tasks_and_a_failed_node_is_let_go(tmp_path: Path) -> None:
    """``execute`` runs the node check in each node's resource supervisor (one worker process
    fewer per node than a task of its own), with the runners already made on every alive node:
    same verdicts; the supervisor and the runners of a node that failed are let go, so that node
    gets neither cells nor readings."""
    import ray
    from support.ray_local import ensure_ray

    from ray_bench.onray.pool import RayPool
    from ray_bench.onray.supervisors import RaySupervision
    from ray_bench.sandboxes.supervisor import Reserve

    ensure_ray()
    alive = [n for n in ray.nodes() if n["Alive"]]
    pool = RayPool(2, nodes={n["NodeID"] for n in alive})
    inputs = CheckInputs(routes=(("acct-x", {"K": "RB_NODE_CHECK_ABSENT"}, None),
                                 ("acct-a", {"K": "RB_TEST_KEY_A"}, None)), backends=(("local", {}),))
    supervision = RaySupervision([(n["NodeID"], str(n["NodeManagerAddress"])) for n in alive], Reserve(0), "nc")
    try:
        checks = check_nodes(inputs, alive, on=supervision.checkers())
        assert checks == check_nodes(inputs, alive)
        assert [c.problems for c in checks] == [
            ("account acct-x: env var RB_NODE_CHECK_ABSENT is not set on this node",)] * len(alive)
        assert supervision.node_count == len(alive)
        supervision.keep({c.node_id for c in checks if c.ok})
        assert supervision.node_count == 0 and supervision.check() == []
        assert len(pool._runners) == 2 * len(alive)
        pool.keep({checks[0].node_id})  # as if the first node had passed
        assert len(pool._runners) == 2 and pool._nodes == [checks[0].node_id] * 2
        assert pool.answered(120.0) == 2  # the two kept runners are up
        pool.keep(set())
        assert pool._runners == [] and pool.answered(0.1) == 0
    finally:
        supervision.close()
