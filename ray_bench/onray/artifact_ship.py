"""The driver's side: which nodes see the driver's files, and the routes it gives attempts.

``auto`` writes a token file into the run root; each node's first runner is asked whether it
reads that token (one call per runner, answered while the fan-out starts). Until a node has
answered, and for any node that does not see the token, attempts go with the task's and the
agent's trees through Ray and come back the same way: being wrong about a node costs speed,
never files. ``ray`` treats every node so (for benchmarks, and for nodes that must not write
into the run root); a store URI sends every attempt's directory to the store.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError

from ray_bench.artifacts.bundle import pack
from ray_bench.artifacts.route import ArtifactRoute, TreeRef
from ray_bench.artifacts.store import RAY
from ray_bench.cells.spec import AttemptSpec
from ray_bench.files import write_whole

#: In the run root: a random token per execution, which a node sharing the run root reads back.
PROBE_FILE = ".node-probe"


class Shipper:
    def __init__(self, run_root: Path, setting: str = "auto", store: str | None = None) -> None:
        self.store = store
        self.always_ray = setting == RAY
        self.token = secrets.token_hex(16)
        self.probe = str(run_root / PROBE_FILE)
        if not self.always_ray:
            write_whole(Path(self.probe), self.token)
        self._trees: dict[str, TreeRef] = {}
        self._routes: dict[tuple[bool, str, str], ArtifactRoute] = {}

    def ask(self, runner: Any) -> Any:
        """Ask a runner whether its node sees the run root (a ref to its answer; None: ``ray``)."""
        return None if self.always_ray else runner.sees.remote(self.probe, self.token)

    @staticmethod
    def answer(asked: Any) -> Any:
        """The answer once it has come (True/False), else the pending ref (taken as False)."""
        if asked is None or isinstance(asked, bool):
            return asked
        done, _ = ray.wait([asked], timeout=0)
        if not done:
            return asked
        try:
            return bool(ray.get(asked))
        except RayError:
            return False

    def route(self, spec: AttemptSpec, local_files: bool) -> AttemptSpec:
        """``spec`` with its route, for a runner whose node does (not) see the driver's files."""
        local_files = local_files and not self.always_ray
        task_key, agent_key = spec.stage_key.partition(":")[::2]
        key = (local_files, task_key, agent_key if spec.agent_dir else "")
        route = self._routes.get(key)
        if route is None:
            route = ArtifactRoute(
                local_files=local_files, store=self.store,
                task=None if local_files else self._tree(f"task:{task_key}", spec.task_path),
                agent=None if local_files or not spec.agent_dir else self._tree(f"agent:{agent_key}",
                                                                                 spec.agent_dir))
            self._routes[key] = route
        return replace(spec, artifacts=route)

    def _tree(self, key: str, path: str) -> TreeRef:
        tree = self._trees.get(key)
        if tree is None:  # packed and put once per run and content; the object lives as long as the run
            tree = TreeRef(key, ray.put(pack(Path(path))))
            self._trees[key] = tree
        return tree
