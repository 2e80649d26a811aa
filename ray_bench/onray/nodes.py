"""The node check of :mod:`ray_bench.cells.nodes` asked of every node over Ray, and the nodes Ray
lists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_bench.cells.nodes import CheckInputs, NodeCheck, problems_here

#: How long one node may take to answer its check once the process that runs it is up.
CHECK_TIMEOUT_SEC = 120.0
#: How long a node may take to start that process (its supervisor actor's worker): a cold worker
#: start, 22-60 s measured on this 2-core host beside two busy loops; at load 45 the supervisors of
#: two CI runs were not up within the check's 120 s, and those runs stopped on a healthy node.
START_TIMEOUT_SEC = 300.0


def ray_nodes() -> list[dict[str, Any]]:
    """Every node Ray lists (``ray.nodes()``), alive or not."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return nodes


@ray.remote(num_cpus=0)
def _check(inputs: CheckInputs) -> list[str]:
    return problems_here(inputs)


def check_nodes(inputs: CheckInputs, nodes: list[dict[str, Any]],
                timeout: float = CHECK_TIMEOUT_SEC, on: Mapping[str, Any] | None = None,
                start_timeout: float = START_TIMEOUT_SEC) -> list[NodeCheck]:
    """Run :func:`problems_here` on each of ``nodes`` (entries of ``ray.nodes()``), in parallel:
    in the actor ``on`` names for the node (one with a ``problems`` method: the node's resource
    supervisor, which the run needs anyway), else in a task of its own (a worker process more).
    An actor has ``start_timeout`` to come up before its check's ``timeout`` begins."""
    actors = on or {}
    refs = [
        actors[n["NodeID"]].problems.remote(inputs) if n["NodeID"] in actors else _check.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(inputs)
        for n in nodes
    ]
    # The supervisors' start first (a slow start is not a node that does not answer), then the checks.
    starting = {n["NodeID"]: actors[n["NodeID"]].__ray_ready__.remote() for n in nodes if n["NodeID"] in actors}
    if starting:
        ray.wait(list(starting.values()), num_returns=len(starting), timeout=start_timeout)
    ray.wait(refs, num_returns=len(refs), timeout=timeout)
    out = []
    for node, ref in zip(nodes, refs, strict=True):
        address = str(node.get("NodeManagerAddress", ""))
        try:
            problems = ray.get(ref, timeout=0)
        except GetTimeoutError:
            if node["NodeID"] not in actors:  # an actor's call cannot be forced; its owner lets it go
                ray.cancel(ref, force=True)
            up = node["NodeID"] not in starting or ray.wait([starting[node["NodeID"]]], timeout=0)[0]
            problems = [f"the node did not answer its check within {timeout:g}s" if up else
                        f"the node did not start its check's process within {start_timeout:g}s"]
        except RayError as exc:
            problems = [f"the check failed on the node: {type(exc).__name__}"]
        out.append(NodeCheck(node["NodeID"], address, tuple(problems)))
    return out
