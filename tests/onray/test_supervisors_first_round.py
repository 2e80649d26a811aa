"""RaySupervision's first round waits for every node's first reading (issue 29 item 10): a node
already under its reserve is halted at the driver's first ask, before any cell can start."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray]


def test_the_first_check_returns_a_node_already_under_its_reserve() -> None:
    import ray
    from support.ray_local import ensure_ray

    from ray_bench.onray.supervisors import RaySupervision
    from ray_bench.sandboxes.supervisor import Reserve

    ensure_ray()
    # a lambda travels by value (the workers cannot import this test module); 100 MiB available
    # is under the 512 MiB reserve
    nodes = [(n["NodeID"], str(n["NodeManagerAddress"])) for n in ray.nodes() if n["Alive"]]
    supervision = RaySupervision(nodes, Reserve(512), "first-round", read_available=lambda: 100)
    try:
        halts = supervision.check()  # before the fix: [] (the readings were only asked for)
        assert {h.node for h in halts} == {node for node, _ in nodes}
        assert all("512" in h.reason for h in halts)
        assert supervision.check() == halts  # later rounds keep them and do not wait
    finally:
        supervision.close()
