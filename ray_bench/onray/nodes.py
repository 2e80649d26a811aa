"""The node check of :mod:`ray_bench.cells.nodes` asked of every node over Ray, and the nodes Ray
lists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_bench.cells.nodes import CheckInputs, NodeCheck, problems_here

#: How long one node may take to answer its check (a cold worker start on a busy node ~10 s).
CHECK_TIMEOUT_SEC = 120.0


def ray_nodes() -> list[dict[str, Any]]:
    """Every node Ray lists (``ray.nodes()``), alive or not."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return nodes


@ray.remote(num_cpus=0)
def _check(inputs: CheckInputs) -> list[str]:
    return problems_here(inputs)


def check_nodes(inputs: CheckInputs, nodes: list[dict[str, Any]],
                timeout: float = CHECK_TIMEOUT_SEC, on: Mapping[str, Any] | None = None) -> list[NodeCheck]:
    """Run :func:`problems_here` on each of ``nodes`` (entries of ``ray.nodes()``), in parallel:
    in the actor ``on`` names for the node (one with a ``problems`` method: the node's resource
    supervisor, which the run needs anyway), else in a task of its own (a worker process more)."""
    actors = on or {}
    refs = [
        actors[n["NodeID"]].problems.remote(inputs) if n["NodeID"] in actors else _check.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(inputs)
        for n in nodes
    ]
    ray.wait(refs, num_returns=len(refs), timeout=timeout)
    out = []
    for node, ref in zip(nodes, refs, strict=True):
        address = str(node.get("NodeManagerAddress", ""))
        try:
            problems = ray.get(ref, timeout=0)
        except GetTimeoutError:
            if node["NodeID"] not in actors:  # an actor's call cannot be forced; its owner lets it go
                ray.cancel(ref, force=True)
            problems = [f"the node did not answer its check within {timeout:g}s"]
        except RayError as exc:
            problems = [f"the check failed on the node: {type(exc).__name__}"]
        out.append(NodeCheck(node["NodeID"], address, tuple(problems)))
    return out
