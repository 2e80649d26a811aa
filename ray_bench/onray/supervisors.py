"""The resource supervisor on every node: one :class:`NodeSupervisor` actor per node that hosts
runners, pinned there, wrapping the one :class:`~ray_bench.sandboxes.supervisor.ResourceSupervisor`.
It reads that node's memory and disk (and lists that node's containers for the halt record)
with that node's reserve overrides (``RAY_BENCH_HOST_RESERVE_MB`` / ``_DISK_MB`` in the
environment its raylet was started with). :class:`RaySupervision` is what the driver asks. Its
first round waits (up to ``first_reading_sec``) for every node's first reading, so that no cell
starts before one: without it a pair started ~30 ms into ``execute``, before any node had been
read (issue 29 item 10). After that it never waits on a slow node: each round collects the answers
that came and asks again.

The same actor checks its node before the fan-out (:meth:`NodeSupervisor.problems`, the node
check of :mod:`ray_bench.cells.nodes`): supervisors are made on every alive node first, and those
on nodes that fail are let go (:meth:`RaySupervision.keep`). Every actor is a Ray worker process
of the driver's job (Ray lends no worker to another job, nor a task's worker to an actor), and
on a loaded 2-core host each took 2-4 s to start; the check's own task was one more process per
node, started before any actor (tests/perf/bench_actor_start.py, tests/perf/README.md)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_bench.cells.nodes import CheckInputs, problems_here
from ray_bench.errors import UserInputError
from ray_bench.sandboxes.supervisor import Reserve, ResourceHalt, ResourceSupervisor, docker_container_lister


@ray.remote(num_cpus=0)
class NodeSupervisor:
    def __init__(self, reserve: Reserve, run_id: str, node: str, address: str, docker_url: str | None,
                 uses_docker: bool, read_available: Callable[[], int] | None) -> None:
        kwargs: dict[str, Any] = {}
        if read_available is not None:  # tests inject a reading; production reads /proc/meminfo
            kwargs["read_available"] = read_available
        try:
            mine = reserve.on_node(os.environ)
        except UserInputError:  # the node check refuses such a node; here it would be unguarded
            mine = replace(reserve, memory_mb=1 << 40)  # so it halts at once, saying so
        self.core = ResourceSupervisor(
            mine, run_id, node=node, address=address,
            list_containers=docker_container_lister(run_id, base_url=docker_url) if uses_docker else None,
            **kwargs)

    def check(self) -> ResourceHalt | None:
        return self.core.check()

    def problems(self, inputs: CheckInputs) -> list[str]:
        """This node's check (:func:`~ray_bench.cells.nodes.problems_here`)."""
        return problems_here(inputs)


#: How long the first round waits for every node's first reading. A supervisor actor starts in
#: ~1-2 s on an idle node; a node still silent after this is asked again every round, as later.
FIRST_READING_SEC = 60.0


class RaySupervision:
    """A :class:`NodeSupervisor` on each of ``nodes`` ((node id, address) pairs)."""

    def __init__(self, nodes: Sequence[tuple[str, str]], reserve: Reserve, run_id: str, *,
                 docker_url: str | None = None, uses_docker: bool = False,
                 read_available: Callable[[], int] | None = None,
                 first_reading_sec: float = FIRST_READING_SEC) -> None:
        self._first_reading_sec: float | None = first_reading_sec
        self._actors: dict[str, Any] = {
            node: NodeSupervisor.options(  # type: ignore[attr-defined]
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            ).remote(reserve, run_id, node, address, docker_url, uses_docker, read_available)
            for node, address in nodes
        }
        self._pending: dict[str, Any] = {}
        self._halts: dict[str, ResourceHalt] = {}
        #: Nodes whose supervisor is gone (the node died: the pool deals with that).
        self._lost: set[str] = set()

    def checkers(self) -> dict[str, Any]:
        """Each node's supervisor, to run its node check (``check_nodes(..., on=...)``)."""
        return dict(self._actors)

    def keep(self, nodes: set[str]) -> None:
        """Supervise only ``nodes`` (those that passed their check); the others' actors go."""
        for node in [n for n in self._actors if n not in nodes]:
            with contextlib.suppress(RayError):
                ray.kill(self._actors.pop(node))

    @property
    def node_count(self) -> int:
        return len(self._actors) - len(self._lost)

    def check(self) -> list[ResourceHalt]:
        if self._first_reading_sec is not None:
            self._ask()
            if self._pending:
                ray.wait(list(self._pending.values()), num_returns=len(self._pending),
                         timeout=self._first_reading_sec)
            self._first_reading_sec = None
        self._collect()
        self._ask()
        return list(self._halts.values())

    def _collect(self) -> None:
        for node, ref in list(self._pending.items()):
            done, _ = ray.wait([ref], timeout=0)
            if not done:
                continue
            del self._pending[node]
            try:
                halt: ResourceHalt | None = ray.get(ref)
            except RayError:
                self._lost.add(node)
                continue
            if halt is not None:
                self._halts[node] = halt

    def _ask(self) -> None:
        for node, actor in self._actors.items():
            if node not in self._pending and node not in self._halts and node not in self._lost:
                self._pending[node] = actor.check.remote()

    def close(self) -> None:
        for actor in self._actors.values():
            with contextlib.suppress(RayError):
                ray.kill(actor)
